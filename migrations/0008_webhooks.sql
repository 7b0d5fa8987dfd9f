-- Signed webhooks: endpoints registered per API key, and an outbox of deliveries filled by a
-- trigger in the same transaction as each task status change (so no change is lost and none
-- waits for a delivery). Workers deliver from the outbox (at least once, oldest first, in
-- order per webhook and task, exponential backoff).
create table webhooks (
    id          uuid primary key,
    api_key_id  uuid not null references api_keys (id) on delete cascade,
    url         text not null check (length(url) between 1 and 2048),
    -- v2 task statuses wanted: created, started, finished, failed, stopped.
    events      text[] not null,
    -- HMAC-SHA256 key; shown once when the webhook is created.
    secret      text not null,
    created_at  timestamptz not null default now()
);
create index webhooks_key_idx on webhooks (api_key_id, created_at);

create table webhook_deliveries (
    -- Order of the outbox: a delivery waits for the earlier ones of its webhook and task.
    id               bigserial primary key,
    webhook_id       uuid not null references webhooks (id) on delete cascade,
    task_id          uuid not null,
    event            text not null,
    -- The event body, sent as compact JSON with sorted keys.
    body             jsonb not null,
    status           text not null default 'pending'
        check (status in ('pending', 'delivered', 'failed')),
    attempts         integer not null default 0,
    next_attempt_at  timestamptz not null default now(),
    last_status_code integer,
    last_error       text,
    created_at       timestamptz not null default now(),
    delivered_at     timestamptz
);
create index webhook_deliveries_due_idx on webhook_deliveries (next_attempt_at, id)
    where status = 'pending';
create index webhook_deliveries_order_idx on webhook_deliveries (webhook_id, task_id, id)
    where status = 'pending';
create index webhook_deliveries_list_idx on webhook_deliveries (webhook_id, id desc);

-- A task's status in v2 words (queued = created; running = started; paused is not an event).
create function browserd_webhook_event(status text) returns text language sql immutable as $$
    select case status
        when 'queued' then 'created'
        when 'running' then 'started'
        when 'finished' then 'finished'
        when 'failed' then 'failed'
        when 'stopped' then 'stopped'
    end
$$;

create function browserd_webhook_outbox() returns trigger language plpgsql as $$
declare
    event text := browserd_webhook_event(new.status);
begin
    if event is null then
        return null;
    end if;
    if tg_op = 'UPDATE' then
        -- `created` only once (a requeued task is not created again), `started` only on the
        -- first start (not on resume or a restart after a lost worker).
        if event = 'created' then
            return null;
        end if;
        if event = 'started' and old.started_at is not null then
            return null;
        end if;
    end if;
    insert into webhook_deliveries (webhook_id, task_id, event, body)
    select w.id, new.id, event,
           jsonb_build_object(
               'type', 'agent.task.status_update',
               'timestamp', to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'payload', jsonb_build_object(
                   'session_id', coalesce(new.session_id, new.id),
                   'task_id', new.id,
                   'status', event,
                   'metadata', new.metadata))
    from webhooks w
    where w.api_key_id = new.api_key_id and event = any(w.events);
    return null;
end $$;

create trigger tasks_webhook_outbox_insert
    after insert on tasks
    for each row execute function browserd_webhook_outbox();
create trigger tasks_webhook_outbox_update
    after update of status on tasks
    for each row when (old.status is distinct from new.status)
    execute function browserd_webhook_outbox();
