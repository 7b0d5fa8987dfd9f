-- Ask a human (issue 31, part 2): the agent's `ask_human` action puts the task in the new
-- `waiting` status until a person answers (`POST /v1/tasks/{id}/input`). The task keeps its
-- worker (lease) and browser context meanwhile, so it counts as held for its key's quota.

alter table tasks drop constraint tasks_status_check;
alter table tasks add constraint tasks_status_check
    check (status in ('queued', 'running', 'paused', 'waiting', 'finished', 'failed', 'stopped'));

-- The questions asked and their answers, durable: a task whose worker is lost while it waits
-- resumes on another worker, asks again under the same id (`s{step}a{action index}`) and gets
-- the answer given meanwhile. A secret answer is sealed like task secrets (the task id as
-- associated data) and never stored in clear; it is wiped when the task ends.
create table task_questions (
    task_id       uuid not null references tasks (id) on delete cascade,
    question_id   text not null check (length(question_id) between 1 and 64),
    question      text not null,
    choices       jsonb not null default '[]'::jsonb check (jsonb_typeof(choices) = 'array'),
    secret        boolean not null default false,
    timeout_s     integer not null check (timeout_s >= 1),
    asked_at      timestamptz not null default now(),
    -- A plain answer, or a sealed one (a secret answer), never both.
    answer        text,
    answer_sealed bytea,
    answered_at   timestamptz,
    primary key (task_id, question_id),
    constraint task_questions_answer_once check (answer is null or answer_sealed is null),
    constraint task_questions_secret_sealed check (not secret or answer is null)
);

create function browserd_wipe_sealed_answers() returns trigger language plpgsql as $$
begin
    update task_questions set answer_sealed = null
    where task_id = new.id and answer_sealed is not null;
    return null;
end $$;

create trigger tasks_terminal_wipes_answers
    after update of status on tasks
    for each row when (new.status in ('finished', 'failed', 'stopped'))
    execute function browserd_wipe_sealed_answers();

-- A waiting task is held by its worker like a running one.
create or replace function browserd_task_held(status text, lease_owner text) returns boolean
language sql immutable as $$
    select lease_owner is not null and status in ('running', 'paused', 'waiting')
$$;

drop index tasks_active_idx;
create index tasks_active_idx on tasks (status, updated_at)
    where status in ('running', 'paused', 'waiting');

-- Webhooks: `waiting_for_input` is an event a webhook may ask for (not a v2 status: the cloud
-- has none); its body is `{"type": "task.waiting_for_input", "payload": {…, "question"}}`.
create or replace function browserd_webhook_event(status text) returns text language sql immutable as $$
    select case status
        when 'queued' then 'created'
        when 'running' then 'started'
        when 'waiting' then 'waiting_for_input'
        when 'finished' then 'finished'
        when 'failed' then 'failed'
        when 'stopped' then 'stopped'
    end
$$;

create or replace function browserd_webhook_outbox() returns trigger language plpgsql as $$
declare
    event text := browserd_webhook_event(new.status);
    question jsonb;
begin
    if event is null then
        return null;
    end if;
    if tg_op = 'UPDATE' then
        -- `created` only once (a requeued task is not created again), `started` only on the
        -- first start (not on resume, an answer, or a restart after a lost worker).
        if event = 'created' then
            return null;
        end if;
        if event = 'started' and old.started_at is not null then
            return null;
        end if;
    end if;
    if event = 'waiting_for_input' then
        -- The question was inserted before the status changed, in this transaction.
        select jsonb_build_object('question_id', q.question_id, 'question', q.question,
                                  'choices', q.choices, 'secret', q.secret,
                                  'timeout_s', q.timeout_s)
        into question
        from task_questions q
        where q.task_id = new.id and q.answered_at is null
        order by q.asked_at desc limit 1;
    end if;
    insert into webhook_deliveries (webhook_id, task_id, event, body)
    select w.id, new.id, event,
           jsonb_build_object(
               'type', case when event = 'waiting_for_input' then 'task.waiting_for_input'
                            else 'agent.task.status_update' end,
               'timestamp', to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'payload', jsonb_build_object(
                   'session_id', coalesce(new.session_id, new.id),
                   'task_id', new.id,
                   'status', event,
                   'metadata', coalesce(new.options -> 'metadata', '{}'::jsonb))
               || case when question is null then '{}'::jsonb
                       else jsonb_build_object('question', question) end)
    from webhooks w
    where w.api_key_id = new.api_key_id and event = any(w.events);
    return null;
end $$;
