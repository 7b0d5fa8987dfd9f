-- A replay task (POST /v1/tasks with `replay_of`): the worker re-runs the recorded actions of
-- task `replay_of` without a model instead of running the agent. No foreign key: the source
-- may be deleted while the replay waits (the worker then fails it with a clear error), and
-- the replay must stay recognisable as one. `replay_options` holds
-- `{skip_failures, max_retries, retry_delay_ms}` as validated by the api.
alter table tasks
    add column replay_of uuid,
    add column replay_options jsonb,
    add constraint tasks_replay_options_with_source
        check ((replay_of is null) = (replay_options is null));
create index tasks_replay_of on tasks (replay_of) where replay_of is not null;
