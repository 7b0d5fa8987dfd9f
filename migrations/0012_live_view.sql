-- Live view of a running task's page (the dashboard): Chrome's screencast frames, produced only
-- while someone watches.
--
-- An api process that serves a viewer keeps a row in `live_viewers` (refreshed well before
-- `expires_at`, deleted when the viewer leaves; a crashed api's rows simply expire). Inserts
-- and deletes notify channel `live` with '<task>:viewers', so the task's worker starts the
-- screencast on the first viewer and stops it after the last.
--
-- The worker keeps only the newest frame of a task in `live_frames` and notifies
-- '<task>:frame:<seq>'; the api processes with viewers read it from there. Both tables are
-- unlogged: a frame or a viewer is worthless after a crash, and not writing them to the WAL
-- keeps a watched task cheap.
create unlogged table live_viewers (
    id         uuid primary key,
    task_id    uuid not null references tasks (id) on delete cascade,
    expires_at timestamptz not null,
    created_at timestamptz not null default now()
);
create index live_viewers_task_idx on live_viewers (task_id, expires_at);

create unlogged table live_frames (
    task_id     uuid primary key references tasks (id) on delete cascade,
    seq         bigint not null,
    jpeg        bytea not null,
    width       integer not null,
    height      integer not null,
    captured_at timestamptz not null default now()
);

create function notify_live_viewers() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('live', old.task_id::text || ':viewers');
    else
        perform pg_notify('live', new.task_id::text || ':viewers');
    end if;
    return null;
end
$$;

create trigger live_viewers_changed
    after insert or delete on live_viewers
    for each row execute function notify_live_viewers();
