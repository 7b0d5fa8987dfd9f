//! Webhooks and their deliveries (`/v1/webhooks`).

use browserd_store::{DeliveryRecord, WebhookRecord};
use browserd_types::ApiKeyId;
use uuid::Uuid;

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// Registers a webhook of `owner` with a new random signing secret (`whsec_` + 256 bits,
    /// base64url), returned here only.
    pub async fn create_webhook(
        &self,
        owner: ApiKeyId,
        url: &str,
        events: &[String],
    ) -> Result<(WebhookRecord, String), TaskError> {
        Ok(self.store.create_webhook(owner, url, events).await?)
    }
    /// `owner`'s webhooks, oldest first.
    pub async fn list_webhooks(&self, owner: ApiKeyId) -> Result<Vec<WebhookRecord>, TaskError> {
        Ok(self.store.list_webhooks(owner).await?)
    }
    /// `owner`'s webhook `id`.
    pub async fn get_webhook(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<WebhookRecord>, TaskError> {
        Ok(self.store.get_webhook(owner, id).await?)
    }
    /// Deletes `owner`'s webhook `id` with its deliveries; `false` when there is none.
    pub async fn delete_webhook(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_webhook(owner, id).await?)
    }
    /// The latest deliveries of webhook `id` (newest first), `limit` at most.
    pub async fn list_deliveries(
        &self,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<DeliveryRecord>, TaskError> {
        Ok(self.store.list_deliveries(id, limit).await?)
    }
}
