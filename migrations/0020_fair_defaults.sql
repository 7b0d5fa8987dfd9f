-- Fair defaults for a shared install (issue 45).

-- When a task was paused: a task paused for longer than the workers' `--max-pause-s` is
-- stopped (by any worker's maintenance loop, from Postgres time, so also after the worker that
-- held it died). Kept by a trigger on every status change, whatever path makes it.
alter table tasks add column paused_at timestamptz;
update tasks set paused_at = updated_at where status = 'paused';

create function browserd_task_paused_at() returns trigger language plpgsql as $$
begin
    if new.status = 'paused' and old.status is distinct from 'paused' then
        new.paused_at := now();
    elsif new.status <> 'paused' then
        new.paused_at := null;
    end if;
    return new;
end $$;

create trigger tasks_paused_at
    before update of status on tasks
    for each row execute function browserd_task_paused_at();

create index tasks_paused_at_idx on tasks (paused_at) where status = 'paused';

-- The task slots of the live workers: each worker registers its `--concurrency` at start and
-- refreshes the row with its maintenance loop; a worker that died stops counting when its row
-- expires. A key without a `max_running` of its own (and no `--max-running-per-key`) may hold at
-- most half of their sum (at least one).
create table worker_slots (
    worker     text primary key,
    slots      integer not null check (slots >= 1),
    expires_at timestamptz not null
);
