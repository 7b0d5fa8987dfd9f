-- Per-key quotas (issue 26): what one key may hold at once and spend per day, so that one
-- tenant cannot starve the others. The operator configures the defaults (flags and
-- `BROWSERD_*` variables); these columns override them for one key. NULL: the configured
-- default; 0: unlimited for this key; N: at most N.
alter table api_keys
    add column max_running    integer check (max_running >= 0),
    add column max_queued     integer check (max_queued >= 0),
    add column max_websockets integer check (max_websockets >= 0),
    add column daily_steps    integer check (daily_steps >= 0),
    add column daily_cost_usd double precision check (daily_cost_usd >= 0);

-- How many tasks a worker holds for each key right now: running, or paused with their browser
-- kept (lease owner set). Kept by a trigger on `tasks` in the transaction of every change, so
-- it is exact at every commit. The claim locks the key's row (`for update`, which in READ
-- COMMITTED reads the row's newest committed version, not the statement's snapshot) and takes
-- a task only while `held` is below the key's `max_running`: two claims of one key serialize
-- on this row, and the second one sees the first one's task.
create table api_key_held_tasks (
    api_key_id uuid primary key references api_keys (id) on delete cascade,
    held       integer not null default 0
);

-- Steps written and their cost per key and UTC day (a trigger on `task_steps`): what the daily
-- budgets are checked against at task creation. Deleting a task does not give its steps back.
create table api_key_daily_usage (
    api_key_id uuid not null references api_keys (id) on delete cascade,
    day        date not null,
    steps      bigint not null default 0,
    cost_usd   double precision not null default 0,
    primary key (api_key_id, day)
);

create function browserd_key_held_row() returns trigger language plpgsql as $$
begin
    insert into api_key_held_tasks (api_key_id) values (new.id) on conflict do nothing;
    return null;
end $$;

create trigger api_keys_held_row
    after insert on api_keys
    for each row execute function browserd_key_held_row();

-- A task is held while a worker has it: running, or paused with its lease kept.
create function browserd_task_held(status text, lease_owner text) returns boolean
language sql immutable as $$
    select lease_owner is not null and status in ('running', 'paused')
$$;

create function browserd_count_held_tasks() returns trigger language plpgsql as $$
declare
    was_held boolean := tg_op <> 'INSERT' and browserd_task_held(old.status, old.lease_owner);
    is_held boolean := tg_op <> 'DELETE' and browserd_task_held(new.status, new.lease_owner);
begin
    if is_held and not was_held then
        insert into api_key_held_tasks (api_key_id, held) values (new.api_key_id, 1)
        on conflict (api_key_id) do update set held = api_key_held_tasks.held + 1;
    elsif was_held and not is_held then
        update api_key_held_tasks set held = greatest(held - 1, 0)
        where api_key_id = old.api_key_id;
        -- A place under the key's `max_running` may have opened for a queued task of the same
        -- key: wake the claim loops (the queue trigger only fires when a task becomes queued).
        if exists (select 1 from tasks q where q.api_key_id = old.api_key_id
                   and q.status = 'queued') then
            perform pg_notify('task_queue', old.id::text);
        end if;
    end if;
    return null;
end $$;

-- No other process may change tasks between the count below and the trigger taking over.
lock table tasks in share row exclusive mode;

insert into api_key_held_tasks (api_key_id, held)
select k.id, count(t.id) filter (where browserd_task_held(t.status, t.lease_owner))
from api_keys k left join tasks t on t.api_key_id = k.id
group by k.id;

create trigger tasks_held_count
    after insert or delete or update of status, lease_owner on tasks
    for each row execute function browserd_count_held_tasks();

create function browserd_count_key_step() returns trigger language plpgsql as $$
begin
    insert into api_key_daily_usage (api_key_id, day, steps, cost_usd)
    select t.api_key_id, (now() at time zone 'utc')::date,
           case when new.number >= 1 then 1 else 0 end,
           case when jsonb_typeof(new.usage -> 'cost_usd') = 'number'
                then (new.usage ->> 'cost_usd')::double precision else 0 end
    from tasks t where t.id = new.task_id
    on conflict (api_key_id, day) do update set
        steps = api_key_daily_usage.steps + excluded.steps,
        cost_usd = api_key_daily_usage.cost_usd + excluded.cost_usd;
    return null;
end $$;

-- Step 0 (the initial navigation) is no model step: it costs no step of the budget.
create trigger task_steps_key_usage
    after insert on task_steps
    for each row execute function browserd_count_key_step();

-- Webhook signing secrets sealed at rest (issue 26, part 5) when the operator configures a
-- secrets key: `secret_sealed` holds the secret sealed like task secrets (XChaCha20-Poly1305,
-- the webhook id as associated data) and `secret` is NULL. Without a key, or for rows written
-- before, `secret` holds it in clear; a process with a key seals those at start-up.
alter table webhooks alter column secret drop not null;
alter table webhooks add column secret_sealed bytea;
alter table webhooks add constraint webhooks_secret_once
    check ((secret is null) <> (secret_sealed is null));
