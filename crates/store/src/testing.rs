//! Writes only tests make (feature `test-util`): an event, an artifact or a step without a
//! lease. The worker writes through its lease-guarded calls (`append_worker_event`,
//! `write_step`), so none of these is part of the store's API otherwise.

use browserd_types::{ArtifactId, EventBody, StepEvent, TaskEvent, TaskId, event_kind};

use crate::events::{EventGuard, append_body_in, append_event_in};
use crate::steps::{ArtifactContent, NewArtifact, NewStep, StepRecord};
use crate::{Store, StoreError};

impl Store {
    /// Appends an event of `kind` to task `id` and notifies listeners on commit, without a
    /// lease (tests; workers publish through `append_worker_event`). Status events are
    /// reserved for [`Store::transition_task`]; after the task's final event every append
    /// fails with [`StoreError::TaskEnded`].
    pub async fn append_event(
        &self,
        task_id: TaskId,
        kind: &str,
        payload: serde_json::Value,
    ) -> Result<TaskEvent, StoreError> {
        if kind == event_kind::STATUS {
            return Err(StoreError::ReservedEventKind(kind.to_owned()));
        }
        let mut tx = self.pool.begin().await?;
        let event = append_event_in(&mut tx, task_id, kind, payload, EventGuard::Live).await?;
        tx.commit().await?;
        Ok(event)
    }

    /// Stores an artifact of task `task_id` without a lease (tests; the worker's screenshots go
    /// with their step through `write_step`).
    pub async fn insert_artifact(
        &self,
        task_id: TaskId,
        artifact: NewArtifact,
    ) -> Result<ArtifactId, StoreError> {
        let id = ArtifactId::new();
        let (content, path) = match artifact.content {
            ArtifactContent::Inline(bytes) => (Some(bytes), None),
            ArtifactContent::Path(path) => (None, Some(path)),
        };
        let result = sqlx::query!(
            "insert into artifacts (id, task_id, kind, name, content_type, content, path, size_bytes)
             values ($1, $2, $3, $4, $5, $6, $7, $8)",
            id.0,
            task_id.0,
            artifact.kind,
            artifact.name,
            artifact.content_type,
            content,
            path,
            artifact.size_bytes,
        )
        .execute(&self.pool)
        .await;
        match result {
            Ok(_) => Ok(id),
            Err(sqlx::Error::Database(err)) if err.is_foreign_key_violation() => {
                Err(StoreError::TaskNotFound(task_id))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Persists a step and announces it with a `step` event (`{"number", "url", "title",
    /// "has_screenshot"}`) in the same transaction, so a client that sees the event can read
    /// the step. Fails once the task has ended. Without a lease (tests; the worker writes steps
    /// through `write_step`).
    pub async fn insert_step(
        &self,
        task_id: TaskId,
        step: NewStep,
    ) -> Result<StepRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let event = EventBody::Step(StepEvent {
            number: step.number,
            url: step.url.clone(),
            title: step.title.clone(),
            has_screenshot: step.screenshot.is_some(),
            screenshot_url: None,
            record: serde_json::Value::Null,
        });
        // The event first: it locks the task row and refuses ended tasks.
        append_body_in(&mut tx, task_id, &event, EventGuard::Live).await?;
        let inserted = sqlx::query!(
            "insert into task_steps (task_id, number, url, title, model_output, results, usage,
                 screenshot_artifact_id, started_at, finished_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             on conflict (task_id, number) do nothing",
            task_id.0,
            step.number,
            step.url,
            step.title,
            step.model_output,
            step.results,
            step.usage,
            step.screenshot.map(|a| a.0),
            step.started_at,
            step.finished_at,
        )
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::StepExists {
                id: task_id,
                number: step.number,
            });
        }
        tx.commit().await?;
        Ok(StepRecord {
            task_id,
            number: step.number,
            url: step.url,
            title: step.title,
            model_output: step.model_output,
            results: step.results,
            usage: step.usage,
            screenshot: step.screenshot,
            started_at: step.started_at,
            finished_at: step.finished_at,
        })
    }
}
