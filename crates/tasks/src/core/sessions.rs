//! `/api/v2` sessions and the v2 view of tasks.

use browserd_store::{NewSession, SessionRecord, V2Task, V2TaskFilter};
use browserd_types::{ApiKeyId, TaskId};
use uuid::Uuid;

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// Creates an active session owned by `owner`.
    pub async fn create_session(
        &self,
        owner: ApiKeyId,
        new: NewSession,
    ) -> Result<SessionRecord, TaskError> {
        Ok(self.store.create_session(owner, new).await?)
    }
    /// `owner`'s session `id`.
    pub async fn get_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, TaskError> {
        Ok(self.store.get_session(owner, id).await?)
    }
    /// A page of `owner`'s sessions, newest first, with the total count.
    pub async fn list_sessions(
        &self,
        owner: ApiKeyId,
        active: Option<bool>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<SessionRecord>, i64), TaskError> {
        Ok(self
            .store
            .list_sessions(owner, active, page_size, page_number)
            .await?)
    }
    /// Marks `owner`'s session stopped (idempotent); `None` when it does not exist. The caller
    /// stops the session's unfinished tasks.
    pub async fn stop_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, TaskError> {
        Ok(self.store.stop_session(owner, id).await?)
    }
    /// Deletes `owner`'s session and its saved browser state (its tasks stay, without a
    /// session). `false` when it does not exist.
    pub async fn delete_session(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_session(owner, id).await?)
    }
    /// Ids of the session's unfinished tasks (queued, running, paused, waiting).
    pub async fn session_unfinished_tasks(&self, id: Uuid) -> Result<Vec<TaskId>, TaskError> {
        Ok(self.store.session_unfinished_tasks(id).await?)
    }
    /// The profile of `owner`'s `/api/v2` session `id` (`None`: it has none, or it is not
    /// `owner`'s).
    pub async fn session_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<Uuid>, TaskError> {
        Ok(self.store.session_profile(owner, id).await?)
    }
    /// The session's tasks, oldest first.
    pub async fn session_tasks(
        &self,
        owner: ApiKeyId,
        session: Uuid,
    ) -> Result<Vec<V2Task>, TaskError> {
        Ok(self.store.session_tasks(owner, session).await?)
    }
    /// `owner`'s task `id` with its v2 fields.
    pub async fn get_v2_task(
        &self,
        owner: ApiKeyId,
        id: TaskId,
    ) -> Result<Option<V2Task>, TaskError> {
        Ok(self.store.get_v2_task(owner, id).await?)
    }
    /// A page (1-based `page_number`) of `owner`'s tasks, newest first, with the total count.
    pub async fn list_v2_tasks(
        &self,
        owner: ApiKeyId,
        filter: &V2TaskFilter,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<V2Task>, i64), TaskError> {
        Ok(self
            .store
            .list_v2_tasks(owner, filter, page_size, page_number)
            .await?)
    }
}
