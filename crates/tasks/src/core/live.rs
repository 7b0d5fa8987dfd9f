//! The live view and take-over inputs (`/v1/tasks/{id}/live`).

use std::time::Duration;

use browserd_store::{LiveFrame, LiveViewerId, StoreError};
use browserd_types::takeover::PersonInput;
use browserd_types::{ApiKeyId, TaskId};

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// Registers a viewer of `task_id` for `ttl` (the worker starts the screencast).
    pub async fn add_live_viewer(
        &self,
        task_id: TaskId,
        ttl: Duration,
    ) -> Result<LiveViewerId, TaskError> {
        Ok(self.store.add_live_viewer(task_id, ttl).await?)
    }
    /// Extends a viewer's registration; false when it is gone (expired and purged, or the
    /// task deleted).
    pub async fn refresh_live_viewer(
        &self,
        viewer: LiveViewerId,
        ttl: Duration,
    ) -> Result<bool, TaskError> {
        Ok(self.store.refresh_live_viewer(viewer, ttl).await?)
    }
    /// Removes a viewer (the worker stops the screencast after the last one).
    pub async fn remove_live_viewer(&self, viewer: LiveViewerId) -> Result<(), TaskError> {
        Ok(self.store.remove_live_viewer(viewer).await?)
    }
    /// The newest frame of `task_id`, if one was stored.
    pub async fn live_frame(&self, task_id: TaskId) -> Result<Option<LiveFrame>, TaskError> {
        Ok(self.store.live_frame(task_id).await?)
    }
    /// Records a person's take-over `input` for task `id` of `key` (taken only while the task
    /// is paused on a worker, which holds its browser; a secret text needs the secrets key).
    /// Answers the event's seq, or why the input was refused in words for the person who sent
    /// it (the task is not paused on a worker, has ended, or is gone).
    pub async fn record_person_input(
        &self,
        key: ApiKeyId,
        id: TaskId,
        input: &PersonInput,
    ) -> Result<Result<i64, String>, TaskError> {
        match self.store.record_person_input(key, id, input).await {
            Ok(event) => Ok(Ok(event.seq)),
            Err(
                err @ (StoreError::TakeOverRefused(_)
                | StoreError::TaskEnded { .. }
                | StoreError::LeaseLost(_)),
            ) => Ok(Err(err.to_string())),
            Err(StoreError::TaskNotFound(_)) => Ok(Err("the task is gone".to_owned())),
            Err(err) => Err(err.into()),
        }
    }
}
