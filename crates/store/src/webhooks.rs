//! Webhooks: endpoints per API key and the outbox of their deliveries. A trigger (migration
//! 0008) queues a delivery in the transaction of each task status change; workers claim due
//! deliveries (`FOR UPDATE SKIP LOCKED`, one at a time per webhook and task, so a task's events
//! arrive in order), and record the outcome with the next attempt's time.
//!
//! Signing secrets are sealed at rest when the store has a secrets key (migration 0014): sealed
//! like task secrets, under the webhook id as associated data, in `secret_sealed`, with
//! `secret` NULL. Without a key they are stored in clear, as before; rows written in clear are
//! sealed by [`Store::seal_webhook_secrets`], which every serving process with a key runs at
//! start-up. A claim opens the secret in memory for the attempt.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use browserd_types::ApiKeyId;
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{SealedFor, Store, StoreError};

/// The one entry of a webhook's sealed signing secret (sealed like task secrets, under the
/// webhook id).
const WEBHOOK_SECRET_ENTRY: &str = "signing_secret";

/// A registered webhook (its secret is only returned by [`Store::create_webhook`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookRecord {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    pub created_at: OffsetDateTime,
}

/// One delivery of one event to one webhook.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryRecord {
    pub id: i64,
    pub task_id: Uuid,
    pub event: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
    pub next_attempt_at: OffsetDateTime,
    pub delivered_at: Option<OffsetDateTime>,
}

/// A delivery a worker is about to attempt.
#[derive(Clone)]
pub struct ClaimedDelivery {
    pub id: i64,
    pub webhook_id: Uuid,
    pub url: String,
    /// The signing key (never logged); empty when it could not be opened.
    pub secret: String,
    /// The sealed signing key could not be opened (no secrets key, another key, damaged):
    /// the delivery cannot be signed.
    pub secret_error: Option<String>,
    pub body: serde_json::Value,
    /// Attempts including this one.
    pub attempts: i32,
    pub created_at: OffsetDateTime,
}

impl std::fmt::Debug for ClaimedDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedDelivery")
            .field("id", &self.id)
            .field("webhook_id", &self.webhook_id)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

/// How an attempt ended.
#[derive(Clone, Debug)]
pub enum DeliveryOutcome {
    /// A 2xx answer.
    Delivered { status_code: i32 },
    /// Try again at `at`.
    Retry {
        status_code: Option<i32>,
        error: String,
        at: OffsetDateTime,
    },
    /// Given up (too old, or the target is not allowed).
    Failed {
        status_code: Option<i32>,
        error: String,
    },
}

impl Store {
    /// Registers a webhook of `owner` with a new random signing secret (`whsec_` + 256 bits,
    /// base64url), returned here only.
    pub async fn create_webhook(
        &self,
        owner: ApiKeyId,
        url: &str,
        events: &[String],
    ) -> Result<(WebhookRecord, String), StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|err| StoreError::Corrupt(format!("no randomness available: {err}")))?;
        let secret = format!("whsec_{}", URL_SAFE_NO_PAD.encode(bytes));
        let id = Uuid::now_v7();
        let (plain, sealed) = match self.seal_webhook_secret(SealedFor::new(id, owner), &secret) {
            Some(sealed) => (None, Some(sealed)),
            None => (Some(secret.as_str()), None),
        };
        let row = sqlx::query!(
            "insert into webhooks (id, api_key_id, url, events, secret, secret_sealed)
             values ($1, $2, $3, $4, $5, $6)
             returning id, url, events, created_at",
            id,
            owner.0,
            url,
            events,
            plain,
            sealed,
        )
        .fetch_one(&self.pool)
        .await?;
        let record = WebhookRecord {
            id: row.id,
            url: row.url,
            events: row.events,
            created_at: row.created_at,
        };
        Ok((record, secret))
    }

    /// `owner`'s webhooks, oldest first.
    pub async fn list_webhooks(&self, owner: ApiKeyId) -> Result<Vec<WebhookRecord>, StoreError> {
        let rows = sqlx::query!(
            "select id, url, events, created_at from webhooks where api_key_id = $1
             order by created_at, id",
            owner.0,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| WebhookRecord {
                id: row.id,
                url: row.url,
                events: row.events,
                created_at: row.created_at,
            })
            .collect())
    }

    /// `owner`'s webhook `id`.
    pub async fn get_webhook(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<WebhookRecord>, StoreError> {
        Ok(self
            .list_webhooks(owner)
            .await?
            .into_iter()
            .find(|w| w.id == id))
    }

    /// Deletes `owner`'s webhook `id` with its deliveries; `false` when there is none.
    pub async fn delete_webhook(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query!(
            "delete from webhooks where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The latest deliveries of webhook `id` (newest first), `limit` at most.
    pub async fn list_deliveries(
        &self,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = sqlx::query_as!(
            DeliveryRecord,
            "select id, task_id, event, status, attempts, last_status_code, last_error,
                 created_at, next_attempt_at, delivered_at
             from webhook_deliveries where webhook_id = $1
             order by id desc limit $2",
            id,
            limit,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Claims up to `limit` due deliveries, each the oldest pending one of its webhook and
    /// task, and pushes their next attempt `lease` ahead (so a worker that dies mid-attempt
    /// only delays it). At most `per_webhook` per endpoint; deliveries to `skip_webhooks`
    /// (endpoints this worker has enough of already) are left for later.
    pub async fn claim_deliveries(
        &self,
        limit: i64,
        lease: std::time::Duration,
        skip_webhooks: &[Uuid],
        per_webhook: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let rows = sqlx::query!(
            "with due as (
                 select d.id from webhook_deliveries d
                 where d.id in (
                     select c.id from (
                         select e.id,
                                row_number() over (partition by e.webhook_id order by e.id)
                                    as rank
                         from webhook_deliveries e
                         where e.status = 'pending' and e.next_attempt_at <= now()
                           and not (e.webhook_id = any($3::uuid[]))
                           and not exists (
                               select 1 from webhook_deliveries f
                               where f.webhook_id = e.webhook_id and f.task_id = e.task_id
                                 and f.status = 'pending' and f.id < e.id)
                     ) c
                     where c.rank <= $4)
                 order by d.id
                 limit $1
                 for update skip locked
             )
             update webhook_deliveries d set
                 attempts = d.attempts + 1,
                 next_attempt_at = now() + make_interval(secs => $2::bigint / 1000.0)
             from due, webhooks w
             where d.id = due.id and w.id = d.webhook_id
             returning d.id, d.webhook_id, w.api_key_id, w.url, w.secret, w.secret_sealed, d.body, d.attempts,
                 d.created_at",
            limit,
            lease_ms,
            skip_webhooks,
            per_webhook,
        )
        .fetch_all(&self.pool)
        .await?;
        let mut claimed: Vec<ClaimedDelivery> = rows
            .into_iter()
            .map(|row| {
                let (secret, secret_error) = match self.webhook_secret(
                    SealedFor::new(row.webhook_id, ApiKeyId(row.api_key_id)),
                    row.secret,
                    row.secret_sealed,
                ) {
                    Ok(secret) => (secret, None),
                    Err(error) => (String::new(), Some(error)),
                };
                ClaimedDelivery {
                    id: row.id,
                    webhook_id: row.webhook_id,
                    url: row.url,
                    secret,
                    secret_error,
                    body: row.body,
                    attempts: row.attempts,
                    created_at: row.created_at,
                }
            })
            .collect();
        claimed.sort_by_key(|d| d.id);
        Ok(claimed)
    }

    /// Seals every signing secret still stored in clear (rows written without a secrets key,
    /// or before migration 0014), and seals again with the current key and format those sealed
    /// with a previous one (after a rotation, so the old key can be dropped) or before the
    /// owning key was bound into the seal (`bds1`); returns how many rows
    /// it rewrote. Nothing without a key. Safe to run from several processes at once: a row is
    /// only rewritten while it still holds the value read.
    pub async fn seal_webhook_secrets(&self) -> Result<u64, StoreError> {
        let Some(keyring) = &self.keyring else {
            return Ok(0);
        };
        let rows = sqlx::query!("select id, api_key_id, secret, secret_sealed from webhooks")
            .fetch_all(&self.pool)
            .await?;
        let mut rewritten = 0;
        for row in rows {
            if row
                .secret_sealed
                .as_deref()
                .is_some_and(|sealed| keyring.sealed_with_current(sealed))
            {
                continue;
            }
            let for_ = SealedFor::new(row.id, ApiKeyId(row.api_key_id));
            let Ok(secret) =
                self.webhook_secret(for_, row.secret.clone(), row.secret_sealed.clone())
            else {
                // Sealed with a key this process does not have: its deliveries say so.
                continue;
            };
            let Some(sealed) = self.seal_webhook_secret(for_, &secret) else {
                break;
            };
            let done = sqlx::query!(
                "update webhooks set secret = null, secret_sealed = $4
                 where id = $1 and secret is not distinct from $2
                   and secret_sealed is not distinct from $3",
                row.id,
                row.secret,
                row.secret_sealed,
                sealed,
            )
            .execute(&self.pool)
            .await?;
            rewritten += done.rows_affected();
        }
        Ok(rewritten)
    }

    /// Webhook `id`'s signing secret sealed with the store's secrets key; `None` without one.
    fn seal_webhook_secret(&self, for_: SealedFor, secret: &str) -> Option<Vec<u8>> {
        let keyring = self.keyring.as_ref()?;
        let plain = BTreeMap::from([(
            WEBHOOK_SECRET_ENTRY.to_owned(),
            SecretString::from(secret.to_owned()),
        )]);
        Some(keyring.seal(for_, &plain))
    }

    /// The signing secret of webhook `id` from its row: in clear, or opened.
    fn webhook_secret(
        &self,
        for_: SealedFor,
        plain: Option<String>,
        sealed: Option<Vec<u8>>,
    ) -> Result<String, String> {
        if let Some(plain) = plain {
            return Ok(plain);
        }
        let sealed = sealed.ok_or("the webhook has no signing secret")?;
        let keyring = self.keyring.as_ref().ok_or(
            "the webhook's signing secret is sealed and this worker has no secrets key \
             (BROWSERD_SECRETS_KEY or --secrets-key-file)",
        )?;
        let mut opened = keyring
            .open(for_, &sealed)
            .map_err(|err| format!("the webhook's signing secret: {err}"))?;
        opened
            .remove(WEBHOOK_SECRET_ENTRY)
            .map(|secret| secret.expose_secret().to_owned())
            .ok_or_else(|| "the webhook's sealed signing secret is damaged".to_owned())
    }

    /// Records how an attempt of delivery `id` ended.
    pub async fn finish_delivery(
        &self,
        id: i64,
        outcome: &DeliveryOutcome,
    ) -> Result<(), StoreError> {
        let (status, code, error, at) = match outcome {
            DeliveryOutcome::Delivered { status_code } => {
                ("delivered", Some(*status_code), None, None)
            }
            DeliveryOutcome::Retry {
                status_code,
                error,
                at,
            } => ("pending", *status_code, Some(error.as_str()), Some(*at)),
            DeliveryOutcome::Failed { status_code, error } => {
                ("failed", *status_code, Some(error.as_str()), None)
            }
        };
        sqlx::query!(
            "update webhook_deliveries set
                 status = $2,
                 last_status_code = coalesce($3, last_status_code),
                 last_error = $4,
                 next_attempt_at = coalesce($5, next_attempt_at),
                 delivered_at = case when $2 = 'delivered' then now() else delivered_at end
             where id = $1",
            id,
            status,
            code,
            error,
            at,
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
