-- Take-over (issue 31): a person drives a paused task's browser through the live view. Each
-- input is a `person_input` event in the task's log; the text of a secret `type` input is not
-- in the event but here, sealed with the secrets key (the task id as associated data), until
-- the worker holding the browser types it and deletes the row. A task that ends keeps none.
create table task_secret_inputs (
    task_id    uuid not null references tasks (id) on delete cascade,
    event_seq  bigint not null,
    sealed     bytea not null,
    created_at timestamptz not null default now(),
    primary key (task_id, event_seq)
);

create function drop_secret_inputs_of_ended_task() returns trigger language plpgsql as $$
begin
    delete from task_secret_inputs where task_id = new.id;
    return null;
end
$$;

create trigger task_secret_inputs_end
    after update of status on tasks
    for each row
    when (new.status in ('finished', 'failed', 'stopped'))
    execute function drop_secret_inputs_of_ended_task();
