//! API keys: `bd_` + 43 characters of base64url (256 random bits). Only the SHA-256 hash is
//! stored, plus a short prefix that lets operators tell keys apart. Revoking (or deleting) a key
//! sends `NOTIFY api_keys '<id>'` (a trigger, migration 0006), which every process's
//! [`EventHub`](crate::EventHub) relays. Also the event WebSocket tickets: `bdt_` + 256 random
//! bits, single use, stored hashed.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use browserd_types::ApiKeyId;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::sync::atomic::Ordering;
use std::time::Duration;

use browserd_types::TaskId;
use browserd_types::dto::TicketScope;
use time::OffsetDateTime;

use crate::quotas::{QuotaOverrides, QuotaUpdate, column};
use crate::{Store, StoreError};

/// Channel of the key revocation notifications (payload: the key id).
pub const API_KEYS_CHANNEL: &str = "api_keys";
/// Every event WebSocket ticket starts with this.
pub const TICKET_PREFIX: &str = "bdt_";

/// Every key starts with this, so leaked keys are easy to recognise (e.g. by secret scanners).
pub const KEY_PREFIX: &str = "bd_";
/// Characters of the key (including `bd_`) kept in clear as its display prefix.
const DISPLAY_PREFIX_CHARS: usize = 11;

/// A stored API key (never the key itself).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiKeyRecord {
    pub id: ApiKeyId,
    pub name: String,
    /// The first characters of the key, e.g. `bd_AbC12xYz`.
    pub prefix: String,
    pub created_at: OffsetDateTime,
    /// When it was revoked; a revoked key no longer authenticates.
    pub revoked_at: Option<OffsetDateTime>,
    /// Its own quotas, where it overrides the configured defaults.
    pub quotas: QuotaOverrides,
}

/// A freshly created key. `key` is shown once and not stored anywhere.
#[derive(Debug)]
pub struct CreatedApiKey {
    pub record: ApiKeyRecord,
    pub key: SecretString,
}

/// SHA-256 of the presented key. A fast hash is right here: keys carry 256 bits of entropy, so
/// there is nothing to brute-force, and lookups stay cheap.
pub fn hash_api_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn generate_key() -> Result<String, StoreError> {
    random_token(KEY_PREFIX)
}

fn random_token(prefix: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|err| StoreError::Corrupt(format!("no randomness available: {err}")))?;
    Ok(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// A freshly issued event WebSocket ticket. `ticket` is shown once; only its hash is stored.
#[derive(Debug)]
pub struct WsTicket {
    pub ticket: SecretString,
    pub expires_at: OffsetDateTime,
}

impl Store {
    /// Creates a key named `name` and returns it in clear text, once.
    pub async fn create_api_key(&self, name: &str) -> Result<CreatedApiKey, StoreError> {
        self.create_api_key_with_quotas(name, QuotaOverrides::default())
            .await
    }

    /// Creates a key named `name` with its own `quotas` and returns it in clear text, once.
    pub async fn create_api_key_with_quotas(
        &self,
        name: &str,
        quotas: QuotaOverrides,
    ) -> Result<CreatedApiKey, StoreError> {
        let key = generate_key()?;
        let hash = hash_api_key(&key);
        let prefix: String = key.chars().take(DISPLAY_PREFIX_CHARS).collect();
        let id = ApiKeyId::new();
        let created_at = sqlx::query_scalar!(
            "insert into api_keys (id, name, prefix, key_hash, max_running, max_queued,
                 max_websockets, daily_steps, daily_cost_usd)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             returning created_at",
            id.0,
            name,
            prefix,
            &hash[..],
            column(quotas.max_running),
            column(quotas.max_queued),
            column(quotas.max_websockets),
            column(quotas.daily_steps),
            quotas.daily_cost_usd.map(|usd| usd.max(0.0)),
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(CreatedApiKey {
            record: ApiKeyRecord {
                id,
                name: name.to_owned(),
                prefix,
                created_at,
                revoked_at: None,
                quotas,
            },
            key: SecretString::from(key),
        })
    }

    /// The active key matching `presented`, if any.
    pub async fn authenticate_api_key(
        &self,
        presented: &SecretString,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let key = presented.expose_secret();
        if !key.starts_with(KEY_PREFIX) {
            return Ok(None);
        }
        let hash = hash_api_key(key);
        self.key_lookups.fetch_add(1, Ordering::Relaxed);
        let row = sqlx::query!(
            "select id, name, prefix, created_at, max_running, max_queued, max_websockets,
                 daily_steps, daily_cost_usd
             from api_keys
             where key_hash = $1 and revoked_at is null",
            &hash[..],
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| ApiKeyRecord {
            id: ApiKeyId(row.id),
            name: row.name,
            prefix: row.prefix,
            created_at: row.created_at,
            revoked_at: None,
            quotas: QuotaOverrides {
                max_running: row.max_running.map(i64::from),
                max_queued: row.max_queued.map(i64::from),
                max_websockets: row.max_websockets.map(i64::from),
                daily_steps: row.daily_steps.map(i64::from),
                daily_cost_usd: row.daily_cost_usd,
            },
        }))
    }

    /// How many times this handle looked a presented key up in the database (the api's
    /// pre-auth rate limit keeps floods of invalid keys from reaching it; tests count).
    pub fn api_key_lookups(&self) -> u64 {
        self.key_lookups.load(Ordering::Relaxed)
    }

    /// Whether key `id` exists and is not revoked.
    pub async fn api_key_active(&self, id: ApiKeyId) -> Result<bool, StoreError> {
        let active = sqlx::query_scalar!(
            r#"select exists(select 1 from api_keys where id = $1 and revoked_at is null) as "active!""#,
            id.0
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(active)
    }

    /// Every key, oldest first (revoked ones included).
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = sqlx::query!(
            "select id, name, prefix, created_at, revoked_at, max_running, max_queued,
                 max_websockets, daily_steps, daily_cost_usd
             from api_keys
             order by created_at, id"
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| ApiKeyRecord {
                id: ApiKeyId(row.id),
                name: row.name,
                prefix: row.prefix,
                created_at: row.created_at,
                revoked_at: row.revoked_at,
                quotas: QuotaOverrides {
                    max_running: row.max_running.map(i64::from),
                    max_queued: row.max_queued.map(i64::from),
                    max_websockets: row.max_websockets.map(i64::from),
                    daily_steps: row.daily_steps.map(i64::from),
                    daily_cost_usd: row.daily_cost_usd,
                },
            })
            .collect())
    }

    /// Revokes a key; its tasks stay but it can no longer authenticate.
    pub async fn revoke_api_key(&self, id: ApiKeyId) -> Result<bool, StoreError> {
        let result = sqlx::query!(
            "update api_keys set revoked_at = now() where id = $1 and revoked_at is null",
            id.0
        )
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Revokes the one active key whose id is `selector`, or whose display prefix starts with
    /// `selector` (at least `bd_` and 4 more characters). Fails when nothing or more than one
    /// active key matches.
    pub async fn revoke_api_key_matching(
        &self,
        selector: &str,
    ) -> Result<ApiKeyRecord, StoreError> {
        let mut key = self.active_key_matching(selector).await?;
        self.revoke_api_key(key.id).await?;
        key.revoked_at = Some(OffsetDateTime::now_utc());
        Ok(key)
    }

    /// Changes the quotas of the one active key `selector` designates (as for
    /// [`Store::revoke_api_key_matching`]) and returns the key as it is now. Takes effect at
    /// the key's next task creation, claim or WebSocket.
    pub async fn update_api_key_quotas(
        &self,
        selector: &str,
        update: &QuotaUpdate,
    ) -> Result<ApiKeyRecord, StoreError> {
        let key = self.active_key_matching(selector).await?;
        let cost = update.daily_cost_usd.map(|usd| usd.map(|usd| usd.max(0.0)));
        sqlx::query!(
            "update api_keys set
                 max_running = case when $2 then $3 else max_running end,
                 max_queued = case when $4 then $5 else max_queued end,
                 max_websockets = case when $6 then $7 else max_websockets end,
                 daily_steps = case when $8 then $9 else daily_steps end,
                 daily_cost_usd = case when $10 then $11 else daily_cost_usd end
             where id = $1",
            key.id.0,
            update.max_running.is_some(),
            update.max_running.and_then(column),
            update.max_queued.is_some(),
            update.max_queued.and_then(column),
            update.max_websockets.is_some(),
            update.max_websockets.and_then(column),
            update.daily_steps.is_some(),
            update.daily_steps.and_then(column),
            cost.is_some(),
            cost.flatten(),
        )
        .execute(&self.pool)
        .await?;
        self.list_api_keys()
            .await?
            .into_iter()
            .find(|k| k.id == key.id)
            .ok_or_else(|| StoreError::KeySelector(format!("key {} was deleted", key.id)))
    }

    /// The one active key whose id is `selector`, or whose display prefix starts with
    /// `selector` (at least `bd_` and 4 more characters).
    async fn active_key_matching(&self, selector: &str) -> Result<ApiKeyRecord, StoreError> {
        let selector = selector.trim();
        let matches: Vec<ApiKeyRecord> = if let Ok(id) = selector.parse::<uuid::Uuid>() {
            self.list_api_keys()
                .await?
                .into_iter()
                .filter(|key| key.id.0 == id)
                .collect()
        } else {
            if !selector.starts_with(KEY_PREFIX) || selector.len() < KEY_PREFIX.len() + 4 {
                return Err(StoreError::KeySelector(format!(
                    "`{selector}` is neither a key id (UUID) nor a key prefix (`bd_` and at least 4 more characters)"
                )));
            }
            self.list_api_keys()
                .await?
                .into_iter()
                .filter(|key| {
                    key.prefix.starts_with(selector) || selector.starts_with(key.prefix.as_str())
                })
                .collect()
        };
        let active: Vec<ApiKeyRecord> = matches
            .iter()
            .filter(|key| key.revoked_at.is_none())
            .cloned()
            .collect();
        match active.as_slice() {
            [key] => Ok(key.clone()),
            [] if matches.is_empty() => Err(StoreError::KeySelector(format!(
                "no key matches `{selector}`"
            ))),
            [] => Err(StoreError::KeySelector(format!(
                "the key matching `{selector}` is already revoked"
            ))),
            many => Err(StoreError::KeySelector(format!(
                "{} active keys match `{selector}`; give the key id instead",
                many.len()
            ))),
        }
    }

    /// Issues a single-use `view` ticket that opens task `task_id`'s WebSockets as key
    /// `key_id` within `ttl` ([`Store::create_scoped_ws_ticket`] with [`TicketScope::View`]).
    pub async fn create_ws_ticket(
        &self,
        key_id: ApiKeyId,
        task_id: TaskId,
        ttl: Duration,
    ) -> Result<WsTicket, StoreError> {
        self.create_scoped_ws_ticket(key_id, task_id, TicketScope::View, ttl)
            .await
    }

    /// Issues a single-use ticket of `scope` that opens task `task_id`'s WebSockets as key
    /// `key_id` within `ttl`. Expired tickets are swept on the way.
    pub async fn create_scoped_ws_ticket(
        &self,
        key_id: ApiKeyId,
        task_id: TaskId,
        scope: TicketScope,
        ttl: Duration,
    ) -> Result<WsTicket, StoreError> {
        let ticket = random_token(TICKET_PREFIX)?;
        let hash = hash_api_key(&ticket);
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await?;
        sqlx::query!("delete from ws_tickets where expires_at < now() - interval '1 minute'")
            .execute(&mut *tx)
            .await?;
        let expires_at = sqlx::query_scalar!(
            "insert into ws_tickets (ticket_hash, api_key_id, task_id, expires_at, scope)
             values ($1, $2, $3, now() + $4::bigint * interval '1 millisecond', $5)
             returning expires_at",
            &hash[..],
            key_id.0,
            task_id.0,
            ttl_ms,
            scope.as_str(),
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(WsTicket {
            ticket: SecretString::from(ticket),
            expires_at,
        })
    }

    /// Redeems `presented` for task `task_id`: the key it was issued to and the ticket's scope
    /// when the ticket exists, has not expired, was issued for this task and its key is still
    /// active. A ticket works once: it is deleted whatever the outcome.
    pub async fn redeem_ws_ticket(
        &self,
        presented: &SecretString,
        task_id: TaskId,
    ) -> Result<Option<(ApiKeyId, TicketScope)>, StoreError> {
        let ticket = presented.expose_secret();
        if !ticket.starts_with(TICKET_PREFIX) {
            return Ok(None);
        }
        let hash = hash_api_key(ticket);
        self.key_lookups.fetch_add(1, Ordering::Relaxed);
        let row = sqlx::query!(
            r#"with redeemed as (
                   delete from ws_tickets where ticket_hash = $1
                   returning api_key_id, task_id, expires_at, scope
               )
               select r.api_key_id, r.task_id, r.scope, (r.expires_at > now()) as "fresh!",
                      (k.revoked_at is null) as "active!"
               from redeemed r join api_keys k on k.id = r.api_key_id"#,
            &hash[..],
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row
            .filter(|row| row.fresh && row.active && row.task_id == task_id.0)
            .map(|row| {
                // The column's check admits only the two names; anything else is the weaker.
                let scope = TicketScope::parse(&row.scope).unwrap_or(TicketScope::View);
                (ApiKeyId(row.api_key_id), scope)
            }))
    }
}
