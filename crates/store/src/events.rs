//! The per-task event log. `seq` is assigned by bumping `tasks.last_event_seq` with
//! `UPDATE ... RETURNING` inside the inserting transaction: the row lock serializes concurrent
//! writers from any process, so seqs are gap-free and unique. The same statement sends
//! `pg_notify('task_events', '<task_id>:<seq>[:<event>]')`, which Postgres delivers only on
//! commit, in commit order.

use browserd_types::{EventBody, TaskEvent, TaskId};
use sqlx::PgConnection;

use crate::tasks::parse_status;
use crate::{Store, StoreError};

/// The LISTEN/NOTIFY channel carrying `<task_id>:<seq>`, with the event's JSON after a third
/// `:` when it fits (or `<task_id>:deleted`).
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
    // One statement, one round trip: the seq bump (its row lock orders the task's writers until
    // commit), the row (stamped with the clock, not the transaction's start: what precedes it in
    // the transaction is not its delivery time) and the notification, which carries the event
    // whole when it fits so that subscribers need not read it back.
    let appended = sqlx::query!(
        r#"with bumped as (
             update tasks set last_event_seq = last_event_seq + 1
             where id = $1 and ($2 or status not in ('finished', 'failed', 'stopped'))
               and ($3::text is null or lease_owner = $3)
             returning id, last_event_seq
           ), inserted as (
             insert into task_events (task_id, seq, kind, payload, created_at)
             select id, last_event_seq, $4, $5, clock_timestamp() from bumped
             returning task_id, seq, kind, payload, created_at
           ), message as (
             select seq, created_at,
                    task_id::text || ':' || seq::text as short,
                    json_build_object('task_id', task_id, 'seq', seq, 'kind', kind,
                                      'payload', payload, 'created_at', created_at)::text as event
             from inserted
           )
           select seq as "seq!", created_at as "created_at!"
           from message
           cross join lateral pg_notify($6, case when octet_length(event) + 64 <= $7
                                                 then short || ':' || event else short end)"#,
        task_id.0,
        guard == EventGuard::Any,
        owner,
        kind,
        payload,
        NOTIFY_CHANNEL,
        NOTIFY_EVENT_MAX_BYTES,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(appended) = appended else {
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
    Ok(TaskEvent {
        task_id,
        seq: appended.seq,
        kind: kind.to_owned(),
        payload,
        created_at: appended.created_at,
    })
}

/// The largest notification that carries its event whole (Postgres refuses payloads of 8000
/// bytes or more); a larger event's notification is `<task_id>:<seq>` alone, and its
/// subscribers read it from the table.
const NOTIFY_EVENT_MAX_BYTES: i32 = 7900;

/// A `task_events` notification's payload: `<task_id>:<seq>`, `<task_id>:<seq>:<event JSON>`
/// or `<task_id>:deleted`.
#[derive(Debug, PartialEq)]
pub(crate) enum EventNotice {
    Appended {
        task_id: TaskId,
        seq: i64,
        event: Option<TaskEvent>,
    },
    Deleted(TaskId),
}

impl EventNotice {
    /// Parses a notification; `None` when it is malformed. An event that does not parse (or
    /// does not match its prefix) is left out: the subscriber reads it from the table.
    pub(crate) fn parse(payload: &str) -> Option<Self> {
        let mut parts = payload.splitn(3, ':');
        let task_id = parts.next()?.parse::<TaskId>().ok()?;
        let what = parts.next()?;
        if what == "deleted" {
            return Some(Self::Deleted(task_id));
        }
        let seq = what.parse::<i64>().ok()?;
        let event = parts
            .next()
            .and_then(|json| serde_json::from_str::<TaskEvent>(json).ok())
            .filter(|event| event.task_id == task_id && event.seq == seq)
            .map(|event| TaskEvent {
                // As the table's reads give it (Postgres writes the session's time zone).
                created_at: event.created_at.to_offset(time::UtcOffset::UTC),
                ..event
            });
        Some(Self::Appended {
            task_id,
            seq,
            event,
        })
    }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_notification_gives_its_event_only_when_it_matches_its_prefix() {
        let id = TaskId::new();
        let event = json!({"task_id": id, "seq": 7, "kind": "log",
                           "payload": {"message": "a:b"},
                           "created_at": "2026-12-02T13:22:45.12599+01:00"});
        let Some(EventNotice::Appended {
            task_id,
            seq: 7,
            event: Some(carried),
        }) = EventNotice::parse(&format!("{id}:7:{event}"))
        else {
            panic!("not parsed");
        };
        assert_eq!(task_id, id);
        assert_eq!(carried.payload, json!({"message": "a:b"}));
        assert_eq!(carried.created_at.offset(), time::UtcOffset::UTC);
        assert_eq!(
            carried.created_at,
            time::OffsetDateTime::parse(
                "2026-12-02T12:22:45.12599Z",
                &time::format_description::well_known::Rfc3339
            )
            .unwrap()
        );
        // Another seq than the prefix's, or no JSON: the seq alone.
        for payload in [
            format!("{id}:8:{event}"),
            format!("{id}:7"),
            format!("{id}:7:{{"),
        ] {
            assert!(matches!(
                EventNotice::parse(&payload),
                Some(EventNotice::Appended { event: None, .. })
            ));
        }
        assert_eq!(
            EventNotice::parse(&format!("{id}:deleted")),
            Some(EventNotice::Deleted(id))
        );
        assert_eq!(EventNotice::parse("nonsense:1"), None);
        assert_eq!(EventNotice::parse(&format!("{id}:x")), None);
    }
}
