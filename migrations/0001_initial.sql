-- browserd initial schema.
--
-- Postgres is the single source of truth: task state, the queue, the event log and control
-- signals all live here. Status values are text with a check constraint (not a Postgres enum) so
-- adding a status later is a plain migration that does not need `alter type`.

-- API keys. Only a SHA-256 hash of the key is stored; `prefix` is the first characters of the
-- key (after `bd_`) so an operator can tell keys apart without ever seeing a full key again.
create table api_keys (
    id           uuid primary key,
    name         text not null check (length(name) between 1 and 200),
    prefix       text not null,
    key_hash     bytea not null unique check (length(key_hash) = 32),
    created_at   timestamptz not null default now(),
    revoked_at   timestamptz
);

create table tasks (
    id                   uuid primary key,
    -- Tenant: a key sees only its own tasks.
    api_key_id           uuid not null references api_keys (id) on delete cascade,
    status               text not null default 'queued'
        check (status in ('queued', 'running', 'paused', 'finished', 'failed', 'stopped')),

    -- The request, as validated by the api.
    task                 text not null,
    start_url            text,
    max_steps            integer not null check (max_steps between 1 and 500),
    model                text,
    allowed_domains      text[] not null default '{}',
    prohibited_domains   text[] not null default '{}',
    output_schema        jsonb,
    use_vision           boolean not null default true,
    max_actions_per_step integer not null check (max_actions_per_step >= 1),
    max_failures         integer not null check (max_failures >= 0),
    timeout_s            integer check (timeout_s >= 1),
    metadata             jsonb not null default '{}'::jsonb,

    -- Write-only secrets (name -> value). Never part of any read model; set to NULL as soon as
    -- the task reaches a terminal status.
    secrets              jsonb,

    -- Outcome.
    output               text,
    is_success           boolean,
    error                text,

    -- Queue and lease (used by workers): a worker claims a queued task with
    -- `for update skip locked`, sets lease_owner/lease_expires_at and renews them with a
    -- heartbeat; an expired lease is reaped.
    lease_owner          text,
    lease_expires_at     timestamptz,
    heartbeat_at         timestamptz,
    attempts             integer not null default 0,

    -- Highest event seq written for this task. Bumped with UPDATE ... RETURNING inside the
    -- event insert transaction, so concurrent writers (any process) serialize on the row lock
    -- and never reuse a seq.
    last_event_seq       bigint not null default 0,

    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    started_at           timestamptz,
    finished_at          timestamptz,

    -- Secrets must be gone once a task is terminal.
    constraint tasks_terminal_without_secrets
        check (status not in ('finished', 'failed', 'stopped') or secrets is null)
);

-- Listing: newest first per key, keyset pagination on (created_at, id).
create index tasks_key_created_idx on tasks (api_key_id, created_at desc, id desc);
create index tasks_key_status_created_idx on tasks (api_key_id, status, created_at desc, id desc);
-- Queue claim: oldest queued first.
create index tasks_queued_idx on tasks (created_at, id) where status = 'queued';
-- Lease reaper.
create index tasks_lease_idx on tasks (lease_expires_at) where lease_owner is not null;

-- Stored bytes (screenshots, output files): inline `content` or a filesystem `path`, never both.
create table artifacts (
    id           uuid primary key,
    task_id      uuid not null references tasks (id) on delete cascade,
    kind         text not null check (kind in ('screenshot', 'file')),
    name         text,
    content_type text not null,
    content      bytea,
    path         text,
    size_bytes   bigint not null check (size_bytes >= 0),
    created_at   timestamptz not null default now(),
    constraint artifacts_content_or_path check ((content is null) <> (path is null))
);
create index artifacts_task_idx on artifacts (task_id);

-- One row per agent step (a browser-use AgentHistory item).
create table task_steps (
    task_id                uuid not null references tasks (id) on delete cascade,
    number                 integer not null check (number >= 1),
    url                    text,
    title                  text,
    model_output           jsonb,
    results                jsonb not null default '[]'::jsonb,
    usage                  jsonb,
    screenshot_artifact_id uuid references artifacts (id) on delete set null,
    started_at             timestamptz not null,
    finished_at            timestamptz not null,
    created_at             timestamptz not null default now(),
    primary key (task_id, number)
);

-- Per-task append-only event log, seq starting at 1 without gaps. Live delivery is
-- `pg_notify('task_events', '<task_id>:<seq>')` sent in the inserting transaction.
create table task_events (
    task_id    uuid not null references tasks (id) on delete cascade,
    seq        bigint not null check (seq >= 1),
    kind       text not null,
    payload    jsonb not null,
    created_at timestamptz not null default now(),
    primary key (task_id, seq)
);
