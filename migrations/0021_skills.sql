-- Skills (issue 43): a recorded run made reusable. A skill belongs to one API key; its versions
-- are the scripts executions replay (`browserd_agent::skill::SkillScript` as jsonb). A skill is
-- made by a generation task (an agent run of its prompt, or a replay of an ended task) and run
-- by execution tasks; both are ordinary tasks linked by `skill_id` / `skill_role`.
--
-- Deleting a skill deletes its versions; its tasks stay (their `skill_id` is set null, their
-- role and version kept), like any ended task of the key.

create table skills (
    id                           uuid primary key,
    api_key_id                   uuid not null references api_keys (id) on delete cascade,
    title                        text not null,
    description                  text not null default '',
    goal                         text not null,
    agent_prompt                 text not null,
    output_schema                jsonb,
    -- The cloud's generation statuses.
    status                       text not null default 'generating'
        check (status in ('recording', 'generating', 'failed', 'finished', 'cancelled', 'timed_out')),
    error                        text,
    -- The parameters of the current version (declared, then proposed), as
    -- `Vec<SkillParameter>`; before the first version, the declared ones.
    parameters                   jsonb not null default '[]'::jsonb
        check (jsonb_typeof(parameters) = 'array'),
    current_version              integer,
    is_enabled                   boolean not null default true,
    generation_task_id           uuid references tasks (id) on delete set null,
    created_at                   timestamptz not null default now(),
    updated_at                   timestamptz not null default now(),
    current_version_started_at   timestamptz,
    current_version_finished_at  timestamptz
);
create index skills_owner_created on skills (api_key_id, created_at desc, id desc);

create table skill_versions (
    skill_id        uuid not null references skills (id) on delete cascade,
    version         integer not null check (version >= 1),
    script          jsonb not null check (jsonb_typeof(script) = 'object'),
    origin          text not null
        check (origin in ('generated', 'from_task', 'healed', 'refined', 'rollback')),
    source_task_id  uuid,
    -- `Vec<HealedStep>` of a healed version.
    healed          jsonb not null default '[]'::jsonb check (jsonb_typeof(healed) = 'array'),
    created_at      timestamptz not null default now(),
    primary key (skill_id, version)
);

alter table tasks
    add column skill_id uuid references skills (id) on delete set null,
    add column skill_version integer,
    add column skill_role text check (skill_role in ('generate', 'execute')),
    add column skill_parameters jsonb,
    add constraint tasks_skill_execute_pins_a_version
        check (skill_role is distinct from 'execute' or skill_version is not null);
create index tasks_skill_runs on tasks (skill_id, created_at desc, id desc)
    where skill_id is not null;

-- A generation task that ends without its worker saving a version (it failed, was stopped,
-- ran out of time, was reaped, or finished without success) leaves its skills row
-- `generating`: checked at commit (deferred), after the worker's own writes of the
-- transaction. A skill that already has a version (a refinement failed) goes back to
-- `finished` with the error; one without becomes `failed`, `cancelled` or `timed_out`.
create function browserd_skill_generation_ended() returns trigger language plpgsql as $$
declare
    why text := coalesce(new.error, case when new.is_success is not true
        then 'the generating run ended without success: ' || coalesce(new.output, '(no result)')
        else 'the generating run saved no version' end);
begin
    update skills s set
        status = case
            when s.current_version is not null then 'finished'
            when new.status = 'stopped' then 'cancelled'
            when new.error like 'timeout_s:%' then 'timed_out'
            else 'failed' end,
        error = why,
        updated_at = now(),
        current_version_finished_at = case when s.current_version is null then now()
            else s.current_version_finished_at end
    where s.generation_task_id = new.id and s.status = 'generating';
    return null;
end $$;

create constraint trigger tasks_skill_generation_ended
    after update of status on tasks deferrable initially deferred
    for each row when (new.skill_role = 'generate' and new.status in ('finished', 'failed', 'stopped'))
    execute function browserd_skill_generation_ended();
