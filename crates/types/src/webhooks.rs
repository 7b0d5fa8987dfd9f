//! Wire shapes of `/v1/webhooks`: endpoints that receive signed task status events.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

/// Body of `POST /v1/webhooks`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// An http(s) URL (at most 2 048 characters). Deliveries to private, link-local, metadata
    /// or reserved addresses are refused, loopback ones unless the operator allows loopback.
    #[schema(max_length = 2048, pattern = "^[hH][tT][tT][pP][sS]?://[^/?#]")]
    pub url: String,
    /// Task statuses to deliver, of `created`, `started`, `finished`, `failed`, `stopped`
    /// (default: `started`, `finished`, `failed`, `stopped`), and `waiting_for_input`: the agent
    /// asks a person (`ask_human`); its body is `{"type": "task.waiting_for_input", "payload":
    /// {…, "status": "waiting_for_input", "question": {"question_id", "question", "choices",
    /// "secret", "timeout_s"}}}` — answer with `POST /v1/tasks/{id}/input`.
    #[serde(default)]
    pub events: Option<Vec<String>>,
}

/// The webhook event of a task that waits for a person's answer (not a v2 status: the cloud
/// has none). Opt-in: not among the default events.
pub const WAITING_FOR_INPUT: &str = "waiting_for_input";

/// Every event a webhook may ask for: the v2 statuses and [`WAITING_FOR_INPUT`] (migration
/// 0016's `browserd_webhook_event` names a status change with them).
pub fn webhook_events() -> Vec<&'static str> {
    let mut events: Vec<&'static str> = crate::v2::V2TaskStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    events.push(WAITING_FOR_INPUT);
    events
}

/// A webhook.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
}

/// Answer of `POST /v1/webhooks`: the webhook and its signing secret, shown this once.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// HMAC-SHA256 key of `X-Browser-Use-Signature`; not retrievable later.
    pub secret: String,
}

/// The caller's webhooks.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookList {
    pub items: Vec<WebhookView>,
}

/// One event's delivery to a webhook.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    pub id: i64,
    pub task_id: Uuid,
    /// The task status delivered.
    pub event: String,
    /// `pending` (not yet delivered; retried with backoff), `delivered`, or `failed` (given up).
    pub status: String,
    pub attempts: i32,
    /// HTTP status of the latest answer, if any.
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub next_attempt_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivered_at: Option<OffsetDateTime>,
}

/// The latest deliveries of a webhook, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryList {
    pub items: Vec<DeliveryView>,
}
