//! Agent steps and the artifacts (screenshots, files) they reference.

use browserd_types::{ArtifactId, TaskId, event_kind};
use serde_json::json;
use time::OffsetDateTime;

use crate::events::{EventGuard, append_event_in};
use crate::{Store, StoreError};

/// Where an artifact's bytes live.
#[derive(Clone, PartialEq, Eq)]
pub enum ArtifactContent {
    /// Stored in the database row.
    Inline(Vec<u8>),
    /// A file on a filesystem shared by the processes that read it.
    Path(String),
}

impl std::fmt::Debug for ArtifactContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArtifactContent::Inline(bytes) => write!(f, "Inline({} bytes)", bytes.len()),
            ArtifactContent::Path(path) => f.debug_tuple("Path").field(path).finish(),
        }
    }
}

/// An artifact to store.
#[derive(Clone, Debug)]
pub struct NewArtifact {
    /// `screenshot` or `file`.
    pub kind: &'static str,
    pub name: Option<String>,
    pub content_type: String,
    pub content: ArtifactContent,
    /// Size in bytes (for `Path` content the caller knows it; for `Inline` it is the length).
    pub size_bytes: i64,
}

/// An artifact's bytes (or path) with its content type.
#[derive(Clone, Debug)]
pub struct ArtifactBody {
    pub content_type: String,
    pub content: ArtifactContent,
}

/// A step to store.
#[derive(Clone, Debug)]
pub struct NewStep {
    /// 1-based step number.
    pub number: i32,
    pub url: Option<String>,
    pub title: Option<String>,
    pub model_output: Option<serde_json::Value>,
    pub results: serde_json::Value,
    pub usage: Option<serde_json::Value>,
    pub screenshot: Option<ArtifactId>,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
}

/// A stored step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    pub task_id: TaskId,
    pub number: i32,
    pub url: Option<String>,
    pub title: Option<String>,
    pub model_output: Option<serde_json::Value>,
    pub results: serde_json::Value,
    pub usage: Option<serde_json::Value>,
    pub screenshot: Option<ArtifactId>,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
}

impl Store {
    /// Stores an artifact of task `task_id`.
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
    /// the step. Fails once the task has ended.
    pub async fn insert_step(
        &self,
        task_id: TaskId,
        step: NewStep,
    ) -> Result<StepRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let payload = json!({
            "number": step.number,
            "url": step.url,
            "title": step.title,
            "has_screenshot": step.screenshot.is_some(),
        });
        // The event first: it locks the task row and refuses ended tasks.
        append_event_in(
            &mut tx,
            task_id,
            event_kind::STEP,
            payload,
            EventGuard::Live,
        )
        .await?;
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

    /// All steps of task `task_id`, in order. A screenshot that is not the task's own
    /// artifact is not reported.
    pub async fn list_steps(&self, task_id: TaskId) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query!(
            r#"select s.number, s.url, s.title, s.model_output, s.results, s.usage,
                 a.id as "screenshot_artifact_id?", s.started_at, s.finished_at
             from task_steps s
             left join artifacts a on a.id = s.screenshot_artifact_id and a.task_id = s.task_id
             where s.task_id = $1 order by s.number"#,
            task_id.0,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| StepRecord {
                task_id,
                number: row.number,
                url: row.url,
                title: row.title,
                model_output: row.model_output,
                results: row.results,
                usage: row.usage,
                screenshot: row.screenshot_artifact_id.map(ArtifactId),
                started_at: row.started_at,
                finished_at: row.finished_at,
            })
            .collect())
    }

    /// The screenshot of step `number` of task `task_id`, if there is one. An artifact of
    /// another task is never served through this task, even if a step row points at it.
    pub async fn step_screenshot(
        &self,
        task_id: TaskId,
        number: i32,
    ) -> Result<Option<ArtifactBody>, StoreError> {
        let row = sqlx::query!(
            "select a.content_type, a.content, a.path
             from task_steps s
             join artifacts a on a.id = s.screenshot_artifact_id and a.task_id = s.task_id
             where s.task_id = $1 and s.number = $2",
            task_id.0,
            number,
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let content = match (row.content, row.path) {
            (Some(bytes), _) => ArtifactContent::Inline(bytes),
            (None, Some(path)) => ArtifactContent::Path(path),
            (None, None) => {
                return Err(StoreError::Corrupt(
                    "artifact without content or path".to_owned(),
                ));
            }
        };
        Ok(Some(ArtifactBody {
            content_type: row.content_type,
            content,
        }))
    }
}
