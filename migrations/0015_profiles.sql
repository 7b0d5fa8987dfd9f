-- Browser profiles: the browser state a login needs (cookies, localStorage per origin), named
-- per API key, loaded into a task's new context before its first navigation and saved back at
-- every step boundary (only when it changed).
--
-- `state` is `{"cookies": [CDP Network.Cookie…], "origins": [{"origin", "localStorage":
-- [{"name", "value"}]}]}`. It holds credentials: with a secrets key it is sealed like task
-- secrets (`state_sealed`, the profile id as associated data) and `state` stays null.
-- `version` counts the writes of the state: a task writes back only over the version it read
-- (optimistic check); a write based on an older version merges its changes into the newer
-- state (crates/worker/src/profile.rs).
create table profiles (
    id             uuid primary key,
    api_key_id     uuid not null references api_keys (id) on delete cascade,
    name           text,
    -- browser-use cloud's `userId`: the client's own label of whose profile it is.
    user_id        text,
    version        bigint not null default 0,
    state          jsonb,
    state_sealed   bytea,
    -- The cookies' domains (v2's `cookieDomains`), kept in clear for the views.
    cookie_domains text[] not null default '{}',
    last_used_at   timestamptz,
    created_at     timestamptz not null default now(),
    updated_at     timestamptz not null default now(),
    constraint profiles_state_once check (state is null or state_sealed is null),
    constraint profiles_name_length check (name is null or length(name) <= 200),
    constraint profiles_user_id_length check (user_id is null or length(user_id) <= 200)
);

create index profiles_key_created_idx on profiles (api_key_id, created_at desc, id desc);

-- An /api/v2 session created with `profileId`: its tasks use that profile.
alter table browser_sessions
    add column profile_id uuid references profiles (id) on delete set null;
