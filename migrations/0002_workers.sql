-- Workers run the tasks: queue wake-ups, leases, resumable step records, budgets, and task
-- secrets encrypted at rest.

-- Secrets are sealed with an AEAD (XChaCha20-Poly1305) under the operator's key before they
-- reach the database; the plaintext jsonb column goes away. No task has ever run before this
-- migration (there was no worker), so a live task that still holds plaintext secrets is failed
-- with a message asking to submit it again rather than run without them.
with failed as (
    update tasks set
        status = 'failed',
        error = 'browserd now encrypts task secrets at rest; submit this task again',
        secrets = null,
        lease_owner = null,
        lease_expires_at = null,
        finished_at = now(),
        updated_at = now(),
        last_event_seq = last_event_seq + 1
    where secrets is not null and status in ('queued', 'running', 'paused')
    returning id, last_event_seq, error
)
insert into task_events (task_id, seq, kind, payload)
select id, last_event_seq, 'status',
       jsonb_build_object('status', 'failed', 'transition', 'fail', 'output', null,
                          'is_success', null, 'error', error)
from failed;

alter table tasks drop constraint tasks_terminal_without_secrets;
alter table tasks drop column secrets;
alter table tasks add column secrets_sealed bytea;
alter table tasks add constraint tasks_terminal_without_secrets
    check (status not in ('finished', 'failed', 'stopped') or secrets_sealed is null);

-- Budgets beyond max_steps / timeout_s, and what the task has used so far.
alter table tasks add column max_tokens bigint check (max_tokens >= 1);
alter table tasks add column max_cost_usd double precision check (max_cost_usd > 0);
-- browser-use's UsageSummary of the run so far ({"total": TokenUsage, "total_cost_usd",
-- "invocations"}), updated with every persisted step.
alter table tasks add column usage jsonb;
-- URL of the focused tab at the start of the latest step: where a resumed run goes back to.
alter table tasks add column last_url text;

-- Step 0 is the initial navigation (browser-use records its initial actions as step 0); model
-- steps are 1..N. `record` is the whole AgentHistory item, exactly as `browserd run
-- --history-out` writes it.
alter table task_steps drop constraint task_steps_number_check;
alter table task_steps add constraint task_steps_number_check check (number >= 0);
alter table task_steps add column record jsonb;

-- Workers wake up when a task becomes claimable (created, requeued after a lost lease or a
-- graceful shutdown, resumed before it ever ran). Delivered on commit; workers also poll.
create function browserd_notify_task_queue() returns trigger language plpgsql as $$
begin
    perform pg_notify('task_queue', new.id::text);
    return null;
end $$;

create trigger tasks_queued_notify
    after insert or update of status on tasks
    for each row when (new.status = 'queued')
    execute function browserd_notify_task_queue();
