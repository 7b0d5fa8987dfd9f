-- A task's options in one jsonb column, exactly as `browserd_types::TaskOptions` serializes
-- (every field present, `null` for an unset optional one). The store reads and writes the
-- struct whole, and a field missing from a row takes its default when read, so a new task
-- option needs no migration. The ranges the old columns' check constraints enforced are
-- checked where tasks come in (`crates/api/src/validation.rs`).

alter table tasks add column options jsonb;

update tasks set options = jsonb_build_object(
    'start_url', start_url,
    'max_steps', max_steps,
    'model', model,
    'allowed_domains', to_jsonb(allowed_domains),
    'prohibited_domains', to_jsonb(prohibited_domains),
    'output_schema', output_schema,
    'use_vision', use_vision,
    'max_actions_per_step', max_actions_per_step,
    'max_failures', max_failures,
    'timeout_s', timeout_s,
    'metadata', metadata,
    'max_tokens', max_tokens,
    'max_cost_usd', max_cost_usd,
    'viewport', case when viewport_width is null or viewport_height is null then null
                     else jsonb_build_object('width', viewport_width, 'height', viewport_height)
                end,
    'settle_timeout_ms', settle_timeout_ms,
    'proxy', proxy,
    'highlight_elements', highlight_elements);

alter table tasks alter column options set not null;
alter table tasks add constraint tasks_options_object check (jsonb_typeof(options) = 'object');

-- The webhook outbox read the task's metadata column; it reads the options now.
create or replace function browserd_webhook_outbox() returns trigger language plpgsql as $$
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
                   'metadata', coalesce(new.options -> 'metadata', '{}'::jsonb)))
    from webhooks w
    where w.api_key_id = new.api_key_id and event = any(w.events);
    return null;
end $$;

alter table tasks drop constraint tasks_viewport_both_or_neither;
alter table tasks
    drop column start_url,
    drop column max_steps,
    drop column model,
    drop column allowed_domains,
    drop column prohibited_domains,
    drop column output_schema,
    drop column use_vision,
    drop column max_actions_per_step,
    drop column max_failures,
    drop column timeout_s,
    drop column metadata,
    drop column max_tokens,
    drop column max_cost_usd,
    drop column viewport_width,
    drop column viewport_height,
    drop column settle_timeout_ms,
    drop column proxy,
    drop column highlight_elements;
