//! API keys and event tickets: authentication, revocation, quotas, the `keys` commands.

use std::time::Duration;

use browserd_store::{ApiKeyRecord, CreatedApiKey, QuotaOverrides, QuotaUpdate, Quotas, WsTicket};
use browserd_types::dto::TicketScope;
use browserd_types::{ApiKeyId, TaskId};
use secrecy::SecretString;

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// Whether key `id` exists and is not revoked.
    pub async fn api_key_active(&self, id: ApiKeyId) -> Result<bool, TaskError> {
        Ok(self.store.api_key_active(id).await?)
    }
    /// The active key matching `presented`, if any.
    pub async fn authenticate_api_key(
        &self,
        presented: &SecretString,
    ) -> Result<Option<ApiKeyRecord>, TaskError> {
        Ok(self.store.authenticate_api_key(presented).await?)
    }
    /// Issues a single-use ticket of `scope` that opens task `task_id`'s WebSockets as key
    /// `key_id` within `ttl`. Expired tickets are swept on the way.
    pub async fn create_scoped_ws_ticket(
        &self,
        key_id: ApiKeyId,
        task_id: TaskId,
        scope: TicketScope,
        ttl: Duration,
    ) -> Result<WsTicket, TaskError> {
        Ok(self
            .store
            .create_scoped_ws_ticket(key_id, task_id, scope, ttl)
            .await?)
    }
    /// Redeems `presented` for task `task_id`: the key it was issued to and the ticket's scope
    /// when the ticket exists, has not expired, was issued for this task and its key is still
    /// active. A ticket works once: it is deleted whatever the outcome.
    pub async fn redeem_ws_ticket(
        &self,
        presented: &SecretString,
        task_id: TaskId,
    ) -> Result<Option<(ApiKeyId, TicketScope)>, TaskError> {
        Ok(self.store.redeem_ws_ticket(presented, task_id).await?)
    }
    /// The quotas that apply to key `key` (the configured defaults for an unknown key).
    pub async fn key_quotas(&self, key: ApiKeyId) -> Result<Quotas, TaskError> {
        Ok(self.store.key_quotas(key).await?)
    }
    /// Every key, oldest first (revoked ones included).
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, TaskError> {
        Ok(self.store.list_api_keys().await?)
    }
    /// Revokes the one active key whose id is `selector`, or whose display prefix starts with
    /// `selector` (at least `bd_` and 4 more characters). Fails when nothing or more than one
    /// active key matches.
    pub async fn revoke_api_key_matching(&self, selector: &str) -> Result<ApiKeyRecord, TaskError> {
        Ok(self.store.revoke_api_key_matching(selector).await?)
    }
    /// Changes the quotas of the one active key `selector` designates (as for
    /// [`Store::revoke_api_key_matching`]) and returns the key as it is now. Takes effect at
    /// the key's next task creation, claim or WebSocket.
    pub async fn update_api_key_quotas(
        &self,
        selector: &str,
        update: &QuotaUpdate,
    ) -> Result<ApiKeyRecord, TaskError> {
        Ok(self.store.update_api_key_quotas(selector, update).await?)
    }
    /// The key named `name` that this machine's own front end (`browserd mcp` on stdio) owns
    /// its tasks with: the active key of that name, else one created now (its secret is
    /// dropped: nobody authenticates with it). It has no running or queue limit of its own,
    /// so neither the fair share nor the defaults hold its tasks back (the front end bounds
    /// them itself); an existing key is given that again if it had lost it.
    pub async fn local_api_key(&self, name: &str) -> Result<ApiKeyId, TaskError> {
        let unlimited = QuotaOverrides {
            max_running: Some(0),
            max_queued: Some(0),
            ..QuotaOverrides::default()
        };
        let keys = self.store.list_api_keys().await?;
        let Some(key) = keys
            .into_iter()
            .find(|key| key.name == name && key.revoked_at.is_none())
        else {
            let created = self
                .store
                .create_api_key_with_quotas(name, unlimited)
                .await?;
            return Ok(created.record.id);
        };
        if key.quotas.max_running != Some(0) || key.quotas.max_queued != Some(0) {
            let update = QuotaUpdate {
                max_running: Some(Some(0)),
                max_queued: Some(Some(0)),
                ..QuotaUpdate::default()
            };
            self.store
                .update_api_key_quotas(&key.id.0.to_string(), &update)
                .await?;
        }
        Ok(key.id)
    }
    /// Creates a key named `name` and returns it in clear text, once.
    pub async fn create_api_key(&self, name: &str) -> Result<CreatedApiKey, TaskError> {
        Ok(self.store.create_api_key(name).await?)
    }
    /// Creates a key named `name` with its own `quotas` and returns it in clear text, once.
    pub async fn create_api_key_with_quotas(
        &self,
        name: &str,
        quotas: QuotaOverrides,
    ) -> Result<CreatedApiKey, TaskError> {
        Ok(self.store.create_api_key_with_quotas(name, quotas).await?)
    }
}
