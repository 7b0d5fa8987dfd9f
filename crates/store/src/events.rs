//! The per-task event log. `seq` is assigned by bumping `tasks.last_event_seq` with
//! `UPDATE ... RETURNING` inside the inserting transaction: the row lock serializes concurrent
//! writers from any process, so seqs are gap-free and unique. The same transaction sends
//! `pg_notify('task_events', '<task_id>:<seq>')`, which Postgres delivers only on commit.

use browserd_types::{EventBody, TaskEvent, TaskId};
use sqlx::PgConnection;

use crate::tasks::parse_status;
use crate::{Store, StoreError};

/// The LISTEN/NOTIFY channel carrying `<task_id>:<seq>` (or `<task_id>:deleted`).
pub const NOTIFY_CHANNEL: &str = "task_events";

/// Whether an append must be refused once the task has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventGuard<'a> {
    /// Status transitions: the guarded UPDATE already decided.
    Any,
    /// Everything else: nothing may follow the final event.
    #[cfg(feature = "test-util")]
    Live,
    /// A worker's progress: as `Live`, and only while `owner` holds the task's lease.
    Owner(&'a str),
}

/// [`append_event_in`] of a typed event: how every production writer appends.
pub(crate) async fn append_body_in(
    conn: &mut PgConnection,
    task_id: TaskId,
    body: &EventBody,
    guard: EventGuard<'_>,
) -> Result<TaskEvent, StoreError> {
    let (kind, payload) = body.to_parts();
    append_event_in(conn, task_id, kind, payload, guard).await
}

pub(crate) async fn append_event_in(
    conn: &mut PgConnection,
    task_id: TaskId,
    kind: &str,
    payload: serde_json::Value,
    guard: EventGuard<'_>,
) -> Result<TaskEvent, StoreError> {
    let owner = match guard {
        EventGuard::Owner(owner) => Some(owner),
        _ => None,
    };
    let seq = sqlx::query_scalar!(
        "update tasks set last_event_seq = last_event_seq + 1
         where id = $1 and ($2 or status not in ('finished', 'failed', 'stopped'))
           and ($3::text is null or lease_owner = $3)
         returning last_event_seq",
        task_id.0,
        guard == EventGuard::Any,
        owner,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(seq) = seq else {
        let current = sqlx::query!(
            "select status, lease_owner from tasks where id = $1",
            task_id.0
        )
        .fetch_optional(&mut *conn)
        .await?;
        return Err(match current {
            None => StoreError::TaskNotFound(task_id),
            Some(row) if owner.is_some() && row.lease_owner.as_deref() != owner => {
                StoreError::LeaseLost(task_id)
            }
            Some(row) => StoreError::TaskEnded {
                id: task_id,
                status: parse_status(&row.status)?,
            },
        });
    };
    let created_at = sqlx::query_scalar!(
        "insert into task_events (task_id, seq, kind, payload) values ($1, $2, $3, $4)
         returning created_at",
        task_id.0,
        seq,
        kind,
        payload,
    )
    .fetch_one(&mut *conn)
    .await?;
    let message = format!("{task_id}:{seq}");
    sqlx::query!("select pg_notify($1, $2)", NOTIFY_CHANNEL, message)
        .execute(&mut *conn)
        .await?;
    Ok(TaskEvent {
        task_id,
        seq,
        kind: kind.to_owned(),
        payload,
        created_at,
    })
}

pub(crate) async fn notify_deleted(conn: &mut PgConnection, id: TaskId) -> Result<(), StoreError> {
    let message = format!("{id}:deleted");
    sqlx::query!("select pg_notify($1, $2)", NOTIFY_CHANNEL, message)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Store {
    /// Events of task `id` with `seq > after_seq`, in order, at most `limit`.
    pub async fn events_after(
        &self,
        task_id: TaskId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        let rows = sqlx::query!(
            "select seq, kind, payload, created_at from task_events
             where task_id = $1 and seq > $2 order by seq limit $3",
            task_id.0,
            after_seq,
            limit,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| TaskEvent {
                task_id,
                seq: row.seq,
                kind: row.kind,
                payload: row.payload,
                created_at: row.created_at,
            })
            .collect())
    }
}
