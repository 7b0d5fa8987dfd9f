//! What observability reads from the database: the task gauges refreshed on each `/metrics`
//! scrape, and the trace context a task was created under.

use browserd_types::{TaskId, TaskStatus};

use crate::{Store, StoreError};

/// Tasks in one active status.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusCount {
    pub status: TaskStatus,
    pub tasks: i64,
    /// Seconds since the longest-waiting task of this status entered it.
    pub oldest_age_s: f64,
}

impl Store {
    /// Queued, running and paused tasks: how many, and how long the oldest has been in that
    /// status. One query over partial indexes (terminal tasks are not counted: they only grow).
    pub async fn task_gauges(&self) -> Result<Vec<StatusCount>, StoreError> {
        let rows = sqlx::query!(
            r#"select status as "status!", count(*) as "tasks!",
                      coalesce(extract(epoch from now() - min(updated_at))::float8, 0) as "oldest_age_s!"
               from tasks
               where status in ('queued', 'running', 'paused', 'waiting')
               group by status"#
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(StatusCount {
                    status: row
                        .status
                        .parse()
                        .map_err(|_| StoreError::Corrupt(format!("status {}", row.status)))?,
                    tasks: row.tasks,
                    oldest_age_s: row.oldest_age_s.max(0.0),
                })
            })
            .collect()
    }

    /// The W3C `traceparent` of the request that created task `id`, when it had one.
    pub async fn trace_context(&self, id: TaskId) -> Result<Option<String>, StoreError> {
        let context = sqlx::query_scalar!("select trace_context from tasks where id = $1", id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(context.flatten())
    }
}
