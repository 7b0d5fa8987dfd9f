-- Event WebSocket tickets: browsers cannot set an Authorization header on a WebSocket, so a
-- client with a key asks for a short-lived, single-use ticket (POST /v1/tasks/{id}/events/ticket)
-- and opens `/v1/tasks/{id}/events?ticket=…`. Only the SHA-256 of a ticket is stored; any api
-- replica can redeem it (a `delete … returning`, so it works once).
create table ws_tickets (
    ticket_hash bytea primary key check (length(ticket_hash) = 32),
    api_key_id  uuid not null references api_keys (id) on delete cascade,
    task_id     uuid not null references tasks (id) on delete cascade,
    expires_at  timestamptz not null,
    created_at  timestamptz not null default now()
);
create index ws_tickets_expires_idx on ws_tickets (expires_at);

-- Key revocation (or deletion) is announced on channel `api_keys` (payload: the key id), so
-- every api process drops the key from its auth cache and closes the key's WebSockets.
create function notify_api_key_revoked() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('api_keys', old.id::text);
    elsif new.revoked_at is not null and old.revoked_at is null then
        perform pg_notify('api_keys', new.id::text);
    end if;
    return null;
end
$$;

create trigger api_keys_revoked
    after update of revoked_at or delete on api_keys
    for each row execute function notify_api_key_revoked();
