//! Agent steps and the artifacts (screenshots, files) they reference.

use browserd_types::{ArtifactId, TaskId};
use time::OffsetDateTime;

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

    /// Up to `limit` steps of task `task_id` numbered above `after_step` (from the first when
    /// `None`), in order: one page of [`Store::list_steps`], read with the primary key.
    pub async fn list_steps_page(
        &self,
        task_id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query!(
            r#"select s.number, s.url, s.title, s.model_output, s.results, s.usage,
                 a.id as "screenshot_artifact_id?", s.started_at, s.finished_at
             from task_steps s
             left join artifacts a on a.id = s.screenshot_artifact_id and a.task_id = s.task_id
             where s.task_id = $1 and s.number > $2 order by s.number limit $3"#,
            task_id.0,
            after_step.unwrap_or(i32::MIN),
            limit,
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

    /// Up to `limit` persisted AgentHistory items of task `id` whose step is numbered above
    /// `after_step` (from the first when `None`), in step order, each with its step number:
    /// one page of [`Store::step_records`].
    pub async fn step_records_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<(i32, serde_json::Value)>, StoreError> {
        let rows = sqlx::query!(
            r#"select number, record as "record!" from task_steps
             where task_id = $1 and number > $2 and record is not null
             order by number limit $3"#,
            id.0,
            after_step.unwrap_or(i32::MIN),
            limit,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.number, row.record))
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
