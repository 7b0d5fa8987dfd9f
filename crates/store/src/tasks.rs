//! Tasks: creation, reads scoped to their API key, keyset pagination, the guarded status
//! transitions and deletion.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use browserd_types::dto::TaskView;
use browserd_types::{
    ApiKeyId, EventBody, StatusEvent, StatusOutcome, TaskId, TaskOptions, TaskSecrets, TaskStatus,
    Transition,
};
use sqlx::types::Json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::events::{EventGuard, append_body_in, notify_deleted};
use crate::{Store, StoreError};

/// A validated task to insert.
pub struct NewTask {
    pub task: String,
    pub options: TaskOptions,
    /// Domain-bound (and, by an explicit opt-in, unbound) secrets, as the api validated them.
    pub secrets: TaskSecrets,
    /// W3C `traceparent` of the creating request (observability; the worker's spans join it).
    pub trace_context: Option<String>,
    /// Set for a replay task: the worker replays the source's recorded actions instead of
    /// running the agent.
    pub replay: Option<crate::replays::NewReplay>,
}

impl fmt::Debug for NewTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewTask")
            .field("task", &self.task)
            .field("options", &self.options)
            .field("secrets", &self.secrets)
            .field("replay", &self.replay)
            .finish_non_exhaustive()
    }
}

/// A task row without its secrets (they are never read back through this type).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRecord {
    pub id: TaskId,
    pub api_key_id: ApiKeyId,
    pub status: TaskStatus,
    pub task: String,
    pub options: TaskOptions,
    pub output: Option<String>,
    pub is_success: Option<bool>,
    pub error: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<OffsetDateTime>,
    pub attempts: i32,
    pub last_event_seq: i64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    /// browser-use's `UsageSummary` of the run so far.
    pub usage: Option<serde_json::Value>,
    /// URL at the start of the latest step (where a resumed run goes back to).
    pub last_url: Option<String>,
}

impl From<TaskRecord> for TaskView {
    fn from(t: TaskRecord) -> Self {
        TaskView {
            id: t.id,
            status: t.status,
            task: t.task,
            options: t.options,
            usage: t.usage,
            queue_position: None,
            attempts: t.attempts,
            output: t.output,
            is_success: t.is_success,
            error: t.error,
            last_event_seq: t.last_event_seq,
            created_at: t.created_at,
            updated_at: t.updated_at,
            started_at: t.started_at,
            finished_at: t.finished_at,
            question: None,
        }
    }
}

pub(crate) struct TaskRow {
    pub(crate) id: Uuid,
    pub(crate) api_key_id: Uuid,
    pub(crate) status: String,
    pub(crate) task: String,
    pub(crate) options: Json<TaskOptions>,
    pub(crate) output: Option<String>,
    pub(crate) is_success: Option<bool>,
    pub(crate) error: Option<String>,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_expires_at: Option<OffsetDateTime>,
    pub(crate) attempts: i32,
    pub(crate) last_event_seq: i64,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
    pub(crate) started_at: Option<OffsetDateTime>,
    pub(crate) finished_at: Option<OffsetDateTime>,
    pub(crate) usage: Option<serde_json::Value>,
    pub(crate) last_url: Option<String>,
}

impl TryFrom<TaskRow> for TaskRecord {
    type Error = StoreError;
    fn try_from(row: TaskRow) -> Result<Self, StoreError> {
        Ok(TaskRecord {
            id: TaskId(row.id),
            api_key_id: ApiKeyId(row.api_key_id),
            status: parse_status(&row.status)?,
            task: row.task,
            options: row.options.0,
            output: row.output,
            is_success: row.is_success,
            error: row.error,
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            attempts: row.attempts,
            last_event_seq: row.last_event_seq,
            created_at: row.created_at,
            updated_at: row.updated_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            usage: row.usage,
            last_url: row.last_url,
        })
    }
}

pub(crate) fn parse_status(status: &str) -> Result<TaskStatus, StoreError> {
    status
        .parse()
        .map_err(|err| StoreError::Corrupt(format!("{err}")))
}

/// Position in the newest-first task listing: the last task of the previous page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskCursor {
    pub created_at: OffsetDateTime,
    pub id: TaskId,
}

impl TaskCursor {
    /// Opaque text form (base64url of `<unix micros>:<uuid>`).
    pub fn encode(&self) -> String {
        let micros = self.created_at.unix_timestamp_nanos() / 1_000;
        URL_SAFE_NO_PAD.encode(format!("{micros}:{}", self.id))
    }

    pub fn decode(text: &str) -> Result<Self, StoreError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| StoreError::InvalidCursor)?;
        let text = String::from_utf8(bytes).map_err(|_| StoreError::InvalidCursor)?;
        let (micros, id) = text.split_once(':').ok_or(StoreError::InvalidCursor)?;
        let micros: i128 = micros.parse().map_err(|_| StoreError::InvalidCursor)?;
        let created_at = OffsetDateTime::from_unix_timestamp_nanos(micros * 1_000)
            .map_err(|_| StoreError::InvalidCursor)?;
        let id = id.parse().map_err(|_| StoreError::InvalidCursor)?;
        Ok(Self { created_at, id })
    }
}

/// One page of a listing.
#[derive(Clone, Debug)]
pub struct TaskPage {
    pub items: Vec<TaskRecord>,
    pub next_cursor: Option<TaskCursor>,
}

/// Outcome data written together with a transition (for `finish` / `fail`).
#[derive(Clone, Debug, Default)]
pub struct TransitionDetails {
    pub output: Option<String>,
    pub is_success: Option<bool>,
    pub error: Option<String>,
}

/// What a deletion removed outside the database: artifact files to delete from disk.
#[derive(Clone, Debug, Default)]
pub struct DeletedTask {
    pub artifact_paths: Vec<String>,
}

impl Store {
    /// Inserts a task in status `queued` owned by `owner` and writes its first event
    /// (`status: queued`, seq 1) in the same transaction.
    pub async fn create_task(
        &self,
        owner: ApiKeyId,
        new: NewTask,
    ) -> Result<TaskRecord, StoreError> {
        self.create_task_with(owner, new, None, None)
            .await
            .map(|(record, _)| record)
    }

    /// [`Store::create_task`], putting the task into a session (`/api/v2`) in the same
    /// transaction; also returns the session's id.
    pub(crate) async fn create_task_with(
        &self,
        owner: ApiKeyId,
        new: NewTask,
        session: Option<(&crate::sessions::SessionChoice, &serde_json::Value)>,
        skill: Option<&crate::skills::SkillAttach>,
    ) -> Result<(TaskRecord, Option<Uuid>), StoreError> {
        let mut tx = self.pool.begin().await?;
        let created = self
            .insert_task_in(&mut tx, owner, new, session, skill)
            .await?;
        tx.commit().await?;
        Ok(created)
    }

    /// [`Store::create_task_with`] inside the caller's transaction `tx` (a schedule's firing
    /// inserts its task in the transaction that advances the schedule).
    pub(crate) async fn insert_task_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        owner: ApiKeyId,
        new: NewTask,
        session: Option<(&crate::sessions::SessionChoice, &serde_json::Value)>,
        skill: Option<&crate::skills::SkillAttach>,
    ) -> Result<(TaskRecord, Option<Uuid>), StoreError> {
        let id = TaskId::new();
        let secrets = if new.secrets.is_empty() {
            None
        } else {
            let keyring = self.keyring.as_ref().ok_or(StoreError::NoSecretsKey)?;
            Some(keyring.seal_task_secrets(crate::SealedFor::task(id, owner), &new.secrets))
        };
        let row = sqlx::query_as!(
            TaskRow,
            "insert into tasks (id, api_key_id, task, options, secrets_sealed)
             values ($1, $2, $3, $4, $5)
             returning id, api_key_id, status, task, options as \"options: Json<TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url",
            id.0,
            owner.0,
            new.task,
            Json(&new.options) as _,
            secrets,
        )
        .fetch_one(&mut **tx)
        .await?;
        if let Some(context) = &new.trace_context {
            sqlx::query!(
                "update tasks set trace_context = $2 where id = $1",
                id.0,
                context
            )
            .execute(&mut **tx)
            .await?;
        }
        if let Some(replay) = &new.replay {
            crate::replays::attach_in(tx, id, replay).await?;
        }
        if let Some(skill) = skill {
            crate::skills::attach_in(tx, owner, id, skill).await?;
        }
        let session_id = match session {
            Some((choice, options)) => {
                Some(crate::sessions::attach_in(tx, owner, id, choice, options).await?)
            }
            None => None,
        };
        let created = EventBody::Status(StatusEvent::created());
        let event = append_body_in(tx, id, &created, EventGuard::Any).await?;
        let mut record = TaskRecord::try_from(row)?;
        record.last_event_seq = event.seq;
        Ok((record, session_id))
    }

    /// The task `id` if it exists and (when `owner` is given) belongs to `owner`.
    pub async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let row = sqlx::query_as!(
            TaskRow,
            "select id, api_key_id, status, task, options as \"options: Json<TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url
             from tasks where id = $1 and ($2::uuid is null or api_key_id = $2)",
            id.0,
            owner.map(|o| o.0),
        )
        .fetch_optional(&self.pool)
        .await?;
        row.map(TaskRecord::try_from).transpose()
    }

    /// `owner`'s tasks, newest first, optionally only those in `status`. `limit` is clamped
    /// to 1..=100 by the caller.
    pub async fn list_tasks(
        &self,
        owner: ApiKeyId,
        status: Option<TaskStatus>,
        limit: i64,
        after: Option<TaskCursor>,
    ) -> Result<TaskPage, StoreError> {
        let rows = sqlx::query_as!(
            TaskRow,
            "select id, api_key_id, status, task, options as \"options: Json<TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url
             from tasks
             where api_key_id = $1
               and ($2::text is null or status = $2)
               and ($3::timestamptz is null or (created_at, id) < ($3, $4::uuid))
             order by created_at desc, id desc
             limit $5",
            owner.0,
            status.map(|s| s.as_str()),
            after.map(|c| c.created_at),
            after.map(|c| c.id.0),
            limit + 1,
        )
        .fetch_all(&self.pool)
        .await?;
        let mut items = rows
            .into_iter()
            .map(TaskRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let has_more = items.len() as i64 > limit;
        items.truncate(limit.max(0) as usize);
        let next_cursor = if has_more {
            items.last().map(|t| TaskCursor {
                created_at: t.created_at,
                id: t.id,
            })
        } else {
            None
        };
        Ok(TaskPage { items, next_cursor })
    }

    /// Applies `transition` to task `id` with one guarded `UPDATE` and writes the matching
    /// `status` event in the same transaction. Reaching a terminal status wipes the task's
    /// secrets and lease, and that status event is the task's final event.
    ///
    /// Errors: [`StoreError::TaskNotFound`] (absent or not `owner`'s) and
    /// [`StoreError::IllegalTransition`] carrying the current status.
    pub async fn transition_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        self.transition(owner, None, id, transition, details, None)
            .await
    }

    /// As [`Store::transition_task`], for the worker holding task `id`'s lease: refused with
    /// [`StoreError::LeaseLost`] when `lease_owner` no longer holds it.
    pub async fn transition_claimed_task(
        &self,
        lease_owner: &str,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        self.transition(None, Some(lease_owner), id, transition, details, None)
            .await
    }

    /// [`Store::create_task`] linking the task to a skill in the same transaction
    /// ([`crate::SkillAttach`]: a new skill it generates, another generation, an execution).
    pub async fn create_skill_task(
        &self,
        owner: ApiKeyId,
        new: NewTask,
        skill: &crate::skills::SkillAttach,
    ) -> Result<TaskRecord, StoreError> {
        self.create_task_with(owner, new, None, Some(skill))
            .await
            .map(|(record, _)| record)
    }

    /// [`Store::transition_claimed_task`] saving a skill version in the same transaction
    /// (a generation's first version, an execution's healed one); answers the version saved
    /// (`None` when the skill is gone or no longer waits for this generation).
    pub async fn transition_claimed_task_with_version(
        &self,
        lease_owner: &str,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
        version: &crate::skills::NewSkillVersion,
    ) -> Result<(TaskRecord, Option<i32>), StoreError> {
        let mut saved = None;
        let record = self
            .transition(
                None,
                Some(lease_owner),
                id,
                transition,
                details,
                Some((version, &mut saved)),
            )
            .await?;
        Ok((record, saved))
    }

    async fn transition(
        &self,
        owner: Option<ApiKeyId>,
        lease_owner: Option<&str>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
        version: Option<(&crate::skills::NewSkillVersion, &mut Option<i32>)>,
    ) -> Result<TaskRecord, StoreError> {
        let allowed: Vec<String> = transition
            .allowed_from()
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        let target_if_new = transition.target(false);
        let target_if_started = transition.target(true);
        let terminal = target_if_new.is_terminal();
        let clear_lease = terminal || transition == Transition::Requeue;

        let mut tx = self.pool.begin().await?;
        let row = sqlx::query_as!(
            TaskRow,
            "update tasks set
                 status = case when started_at is null or ($11 and lease_owner is null)
                               then $3 else $4 end,
                 started_at = case when started_at is null and $3 = 'running'
                                   then now() else started_at end,
                 finished_at = case when $5 then now() else finished_at end,
                 secrets_sealed = case when $5 then null else secrets_sealed end,
                 lease_owner = case when $6 then null else lease_owner end,
                 lease_expires_at = case when $6 then null else lease_expires_at end,
                 output = coalesce($7, output),
                 is_success = coalesce($8, is_success),
                 error = coalesce($9, error),
                 updated_at = now()
             where id = $1 and ($2::uuid is null or api_key_id = $2) and status = any($10)
               and ($12::text is null or lease_owner = $12)
             returning id, api_key_id, status, task, options as \"options: Json<TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url",
            id.0,
            owner.map(|o| o.0),
            target_if_new.as_str(),
            target_if_started.as_str(),
            terminal,
            clear_lease,
            details.output,
            details.is_success,
            details.error,
            &allowed,
            transition == Transition::Resume,
            lease_owner,
        )
        .fetch_optional(&mut *tx)
        .await?;

        let Some(row) = row else {
            drop(tx);
            let current = sqlx::query!(
                "select status, lease_owner from tasks
                 where id = $1 and ($2::uuid is null or api_key_id = $2)",
                id.0,
                owner.map(|o| o.0),
            )
            .fetch_optional(&self.pool)
            .await?;
            return match current {
                None => Err(StoreError::TaskNotFound(id)),
                Some(row) if lease_owner.is_some() && row.lease_owner.as_deref() != lease_owner => {
                    Err(StoreError::LeaseLost(id))
                }
                Some(row) => Err(StoreError::IllegalTransition {
                    transition: transition.name(),
                    current: parse_status(&row.status)?,
                }),
            };
        };
        let mut record = TaskRecord::try_from(row)?;
        let status = transition_event(&record, transition);
        let event =
            append_body_in(&mut tx, id, &EventBody::Status(status), EventGuard::Any).await?;
        if let Some((version, saved)) = version {
            *saved = crate::skills::save_version_in(&mut tx, id, version).await?;
        }
        tx.commit().await?;
        record.last_event_seq = event.seq;
        Ok(record)
    }

    /// Deletes `owner`'s task `id` with its steps, events and artifacts. Refused while a
    /// worker holds the task (running, or paused on a worker).
    pub async fn delete_task(
        &self,
        owner: ApiKeyId,
        id: TaskId,
    ) -> Result<DeletedTask, StoreError> {
        let mut tx = self.pool.begin().await?;
        let current = sqlx::query!(
            "select status, lease_owner from tasks where id = $1 and api_key_id = $2 for update",
            id.0,
            owner.0,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::TaskNotFound(id))?;
        let status = parse_status(&current.status)?;
        // A paused task is on a worker while that worker holds its lease (and its browser).
        let on_worker = status == TaskStatus::Running
            || (status.holds_browser_for_person() && current.lease_owner.is_some());
        if on_worker {
            return Err(StoreError::TaskActive { id, status });
        }
        let artifact_paths = sqlx::query_scalar!(
            "delete from artifacts where task_id = $1 returning path",
            id.0
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .flatten()
        .collect();
        sqlx::query!("delete from tasks where id = $1", id.0)
            .execute(&mut *tx)
            .await?;
        notify_deleted(&mut tx, id).await?;
        tx.commit().await?;
        Ok(DeletedTask { artifact_paths })
    }
}

/// The `status` event of `transition` once applied to `record`: a terminal one carries the
/// task's outcome. Both stores write it.
pub(crate) fn transition_event(record: &TaskRecord, transition: Transition) -> StatusEvent {
    if record.status.is_terminal() {
        let outcome = StatusOutcome {
            output: record.output.clone(),
            is_success: record.is_success,
            error: record.error.clone(),
        };
        StatusEvent::ended(record.status, transition.name(), outcome)
    } else {
        StatusEvent::new(record.status, transition.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let cursor = TaskCursor {
            created_at: OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_000)
                .unwrap(),
            id: TaskId::new(),
        };
        assert_eq!(TaskCursor::decode(&cursor.encode()).unwrap(), cursor);
        for bad in [
            "",
            "!!!",
            "bm9wZQ",
            &URL_SAFE_NO_PAD.encode("12:not-a-uuid"),
        ] {
            assert!(TaskCursor::decode(bad).is_err(), "{bad}");
        }
    }
}
