-- Schedules (issue 43): a task, or a skill's execution, created on a cron schedule. Exactly
-- once per tick across every process: a process firing a schedule locks its row
-- (`for update skip locked`), inserts the task and moves `next_run_at` to the first tick after
-- now in one transaction, so a tick missed while everything was down fires once.

create table schedules (
    id           uuid primary key,
    api_key_id   uuid not null references api_keys (id) on delete cascade,
    name         text not null check (length(name) between 1 and 200),
    -- A 5-field cron expression (or 6 with seconds first), checked by the task core.
    cron         text not null check (length(cron) between 1 and 200),
    -- An IANA time zone name the expression is read in (`UTC`, `Europe/Paris`).
    time_zone    text not null check (length(time_zone) between 1 and 64),
    -- `{"task": <CreateTaskRequest>}` or `{"skill": {"skill_id": …, "parameters": {…}}}`.
    target       jsonb not null,
    enabled      boolean not null default true,
    -- The next tick to fire (kept while disabled; recomputed from now when enabled again).
    next_run_at  timestamptz not null,
    last_run_at  timestamptz,
    last_task_id uuid references tasks (id) on delete set null,
    -- Why the last tick created no task (a quota, a refused target); cleared by a success.
    last_error   text,
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now()
);

create index schedules_due_idx on schedules (next_run_at) where enabled;
create index schedules_key_idx on schedules (api_key_id, created_at desc, id desc);

-- The schedule that created a task, and the tick it was created for: at most one task per
-- tick of a schedule. No foreign key: deleting a schedule must not lock its tasks' rows (a
-- cascade would deadlock with a worker writing one of them), and schedule ids are never
-- reused, so a deleted schedule's tasks keep naming it harmlessly.
alter table tasks
    add column schedule_id   uuid,
    add column scheduled_for timestamptz;

create unique index tasks_schedule_tick_idx on tasks (schedule_id, scheduled_for)
    where schedule_id is not null;

-- Wakes every process's scheduler when a schedule is added, changed or fired (its next tick
-- may now be the earliest).
create function browserd_schedules_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('schedules', '');
    return null;
end $$;

create trigger schedules_changed
    after insert or update of cron, time_zone, enabled, next_run_at on schedules
    for each statement execute function browserd_schedules_notify();
