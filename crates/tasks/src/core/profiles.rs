//! Browser profiles (`/v1/profiles`, `/api/v2/profiles`).

use browserd_store::ProfileRecord;
use browserd_types::ApiKeyId;
use uuid::Uuid;

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// Creates an empty profile owned by `owner`.
    pub async fn create_profile(
        &self,
        owner: ApiKeyId,
        name: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<ProfileRecord, TaskError> {
        Ok(self.store.create_profile(owner, name, user_id).await?)
    }
    /// `owner`'s profile `id` (another key's is `None`, like a missing one).
    pub async fn get_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<ProfileRecord>, TaskError> {
        Ok(self.store.get_profile(owner, id).await?)
    }
    /// A page (1-based `page_number`) of `owner`'s profiles, newest first, with the total
    /// count; `query` keeps those whose name contains it (case-insensitive).
    pub async fn list_profiles(
        &self,
        owner: ApiKeyId,
        query: Option<&str>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<ProfileRecord>, i64), TaskError> {
        Ok(self
            .store
            .list_profiles(owner, query, page_size, page_number)
            .await?)
    }
    /// Renames `owner`'s profile (`Some(None)` clears a field, `None` keeps it); `None` when
    /// it does not exist.
    pub async fn update_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        name: Option<Option<&str>>,
        user_id: Option<Option<&str>>,
    ) -> Result<Option<ProfileRecord>, TaskError> {
        Ok(self.store.update_profile(owner, id, name, user_id).await?)
    }
    /// Deletes `owner`'s profile and its state; `false` when it does not exist. A task
    /// running with it stops saving (its next write finds it gone).
    pub async fn delete_profile(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_profile(owner, id).await?)
    }
}
