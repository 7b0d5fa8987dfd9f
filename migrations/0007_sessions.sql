-- browser-use cloud /api/v2 compatibility: sessions and the v2-only task options.
--
-- A session is a browser context that later tasks reuse: its cookies and open tabs are saved
-- here when a task of the session ends and restored into the next task's new context, so any
-- worker can run the next task (no browser is kept alive between tasks).
create table browser_sessions (
    id           uuid primary key,
    api_key_id   uuid not null references api_keys (id) on delete cascade,
    status       text not null default 'active' check (status in ('active', 'stopped')),
    -- keepAlive=false: the session stops when its task ends (the one-off session a task gets
    -- when it names none).
    keep_alive   boolean not null default true,
    persist_memory boolean not null default true,
    start_url    text,
    -- The context's state after the latest task: CDP `Network.Cookie` objects and the URLs of
    -- the open tabs (the focused one is `focused_tab`, an index into `tabs`). Cookies are
    -- credentials: with a secrets key they are sealed like task secrets (`cookies_sealed`,
    -- the session id as associated data) and `cookies` stays empty.
    cookies      jsonb not null default '[]'::jsonb,
    cookies_sealed bytea,
    tabs         text[] not null default '{}',
    focused_tab  integer not null default 0,
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now(),
    finished_at  timestamptz
);

create index browser_sessions_key_created_idx on browser_sessions (api_key_id, created_at desc, id desc);

-- A task's session (null for tasks created on /v1: v2 shows them in a session of their own,
-- with the task's id) and the v2 options the /v1 request has no field for.
alter table tasks add column session_id uuid references browser_sessions (id) on delete set null;
alter table tasks add column v2_options jsonb;
create index tasks_session_idx on tasks (session_id, created_at) where session_id is not null;
