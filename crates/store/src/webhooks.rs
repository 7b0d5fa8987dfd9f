//! Webhooks: endpoints per API key and the outbox of their deliveries. A trigger (migration
//! 0008) queues a delivery in the transaction of each task status change; workers claim due
//! deliveries (`FOR UPDATE SKIP LOCKED`, one at a time per webhook and task, so a task's events
//! arrive in order), and record the outcome with the next attempt's time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use browserd_types::ApiKeyId;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

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
    /// The signing key (never logged).
    pub secret: String,
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
        let row = sqlx::query!(
            "insert into webhooks (id, api_key_id, url, events, secret) values ($1, $2, $3, $4, $5)
             returning id, url, events, created_at",
            Uuid::now_v7(),
            owner.0,
            url,
            events,
            secret,
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
             returning d.id, d.webhook_id, w.url, w.secret, d.body, d.attempts, d.created_at",
            limit,
            lease_ms,
            skip_webhooks,
            per_webhook,
        )
        .fetch_all(&self.pool)
        .await?;
        let mut claimed: Vec<ClaimedDelivery> = rows
            .into_iter()
            .map(|row| ClaimedDelivery {
                id: row.id,
                webhook_id: row.webhook_id,
                url: row.url,
                secret: row.secret,
                body: row.body,
                attempts: row.attempts,
                created_at: row.created_at,
            })
            .collect();
        claimed.sort_by_key(|d| d.id);
        Ok(claimed)
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
