//! Schedules (`/v1/schedules`): a task, or a skill's execution, created on a cron schedule, and
//! the firing that makes each tick fire exactly once across every process on one database.
//!
//! A process fires with [`Store::claim_due_schedule`]: one transaction locks the earliest due
//! schedule of an active key (`for update skip locked`: another process skips it, and a
//! process whose snapshot still saw it due re-checks `next_run_at` once the lock is released),
//! then [`ScheduleFiring::insert_task`] inserts the task (carrying `schedule_id` and
//! `scheduled_for`) and [`ScheduleFiring::finish`] records it, or why there is none, moves
//! `next_run_at` to the first tick after now and commits. A tick missed while every process was down therefore fires
//! once; a unique index on `(schedule_id, scheduled_for)` makes a second task for one tick
//! impossible. The cron arithmetic is the task core's: this file stores the instants it computes.

use std::time::Duration;

use browserd_types::{ApiKeyId, TaskId, TaskStatus};
use sqlx::types::Json;
use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::object_limits::{KeyObject, check_count, lock_key_objects};
use crate::tasks::{NewTask, TaskRecord, parse_status};
use crate::{Store, StoreError};

/// The channel every change of a schedule's timing is notified on (a trigger: insert, and
/// updates of `cron`, `time_zone`, `enabled`, `next_run_at`).
pub const SCHEDULES_CHANNEL: &str = "schedules";

/// A schedule row.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleRecord {
    pub id: Uuid,
    pub api_key_id: ApiKeyId,
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    /// `{"task": …}` or `{"skill": …}`, as the task core validated it.
    pub target: serde_json::Value,
    pub enabled: bool,
    pub next_run_at: OffsetDateTime,
    pub last_run_at: Option<OffsetDateTime>,
    pub last_task_id: Option<TaskId>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

struct ScheduleRow {
    id: Uuid,
    api_key_id: Uuid,
    name: String,
    cron: String,
    time_zone: String,
    target: serde_json::Value,
    enabled: bool,
    next_run_at: OffsetDateTime,
    last_run_at: Option<OffsetDateTime>,
    last_task_id: Option<Uuid>,
    last_error: Option<String>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

impl From<ScheduleRow> for ScheduleRecord {
    fn from(row: ScheduleRow) -> Self {
        Self {
            id: row.id,
            api_key_id: ApiKeyId(row.api_key_id),
            name: row.name,
            cron: row.cron,
            time_zone: row.time_zone,
            target: row.target,
            enabled: row.enabled,
            next_run_at: row.next_run_at,
            last_run_at: row.last_run_at,
            last_task_id: row.last_task_id.map(TaskId),
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A schedule to insert (validated by the task core).
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub target: serde_json::Value,
    pub enabled: bool,
    pub next_run_at: OffsetDateTime,
}

/// A change of a schedule: `None` keeps a field. When the timing changes (or the schedule is
/// enabled), `next_run_at` is the new first tick.
#[derive(Clone, Debug, Default)]
pub struct ScheduleUpdate {
    pub name: Option<String>,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub target: Option<serde_json::Value>,
    pub enabled: Option<bool>,
    pub next_run_at: Option<OffsetDateTime>,
}

/// One task a schedule created.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleRun {
    pub task_id: TaskId,
    /// The tick it was created for.
    pub scheduled_for: OffsetDateTime,
    pub status: TaskStatus,
    pub is_success: Option<bool>,
    pub error: Option<String>,
    pub created_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
}

/// A due schedule, locked by this process's transaction until it fires or refuses.
pub struct ScheduleFiring {
    store: Store,
    tx: Transaction<'static, Postgres>,
    /// The schedule as it was locked.
    pub schedule: ScheduleRecord,
    /// The database's time of the claim (every process reads the same clock).
    pub now: OffsetDateTime,
}

impl Store {
    /// Inserts `new` for `owner`, within the key's `max_schedules_per_key`
    /// ([`StoreError::KeyObjectLimit`]).
    pub async fn create_schedule(
        &self,
        owner: ApiKeyId,
        new: NewSchedule,
    ) -> Result<ScheduleRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let max = self.object_limits.max_schedules_per_key;
        if max > 0 {
            lock_key_objects(&mut tx, owner, KeyObject::Schedules).await?;
            let count = sqlx::query_scalar!(
                "select count(*) as \"n!\" from schedules where api_key_id = $1",
                owner.0,
            )
            .fetch_one(&mut *tx)
            .await?;
            check_count(KeyObject::Schedules, count, max)?;
        }
        let row = sqlx::query_as!(
            ScheduleRow,
            "insert into schedules (id, api_key_id, name, cron, time_zone, target, enabled,
                 next_run_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8)
             returning id, api_key_id, name, cron, time_zone, target, enabled, next_run_at,
                 last_run_at, last_task_id, last_error, created_at, updated_at",
            Uuid::now_v7(),
            owner.0,
            new.name,
            new.cron,
            new.time_zone,
            Json(&new.target) as _,
            new.enabled,
            new.next_run_at,
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    /// `owner`'s schedule `id`.
    pub async fn get_schedule(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<ScheduleRecord>, StoreError> {
        let row = sqlx::query_as!(
            ScheduleRow,
            "select id, api_key_id, name, cron, time_zone, target, enabled, next_run_at,
                 last_run_at, last_task_id, last_error, created_at, updated_at
             from schedules where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// A page of `owner`'s schedules, newest first (`page` is 1-based), and how many there are.
    pub async fn list_schedules(
        &self,
        owner: ApiKeyId,
        limit: i64,
        page: i64,
    ) -> Result<(Vec<ScheduleRecord>, i64), StoreError> {
        let rows = sqlx::query_as!(
            ScheduleRow,
            "select id, api_key_id, name, cron, time_zone, target, enabled, next_run_at,
                 last_run_at, last_task_id, last_error, created_at, updated_at
             from schedules where api_key_id = $1
             order by created_at desc, id desc
             limit $2 offset $3",
            owner.0,
            limit,
            (page - 1).saturating_mul(limit),
        )
        .fetch_all(&self.pool)
        .await?;
        let total = sqlx::query_scalar!(
            "select count(*) as \"n!\" from schedules where api_key_id = $1",
            owner.0
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((rows.into_iter().map(Into::into).collect(), total))
    }

    /// Applies `update` to `owner`'s schedule `id` (waiting for a firing of it to commit).
    pub async fn update_schedule(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        update: ScheduleUpdate,
    ) -> Result<Option<ScheduleRecord>, StoreError> {
        let row = sqlx::query_as!(
            ScheduleRow,
            "update schedules set
                 name = coalesce($3, name),
                 cron = coalesce($4, cron),
                 time_zone = coalesce($5, time_zone),
                 target = coalesce($6, target),
                 enabled = coalesce($7, enabled),
                 next_run_at = coalesce($8, next_run_at),
                 updated_at = now()
             where id = $1 and api_key_id = $2
             returning id, api_key_id, name, cron, time_zone, target, enabled, next_run_at,
                 last_run_at, last_task_id, last_error, created_at, updated_at",
            id,
            owner.0,
            update.name,
            update.cron,
            update.time_zone,
            update.target.map(Json) as _,
            update.enabled,
            update.next_run_at,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// Deletes `owner`'s schedule `id` (its row alone: its tasks stay, untouched). `false` when
    /// there is none.
    pub async fn delete_schedule(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        let deleted = sqlx::query!(
            "delete from schedules where id = $1 and api_key_id = $2",
            id,
            owner.0
        )
        .execute(&self.pool)
        .await?;
        Ok(deleted.rows_affected() > 0)
    }

    /// The tasks schedule `id` created, latest tick first: `limit` of them, before the tick
    /// `before` when given.
    pub async fn list_schedule_runs(
        &self,
        id: Uuid,
        limit: i64,
        before: Option<OffsetDateTime>,
    ) -> Result<Vec<ScheduleRun>, StoreError> {
        let rows = sqlx::query!(
            "select id, scheduled_for as \"scheduled_for!\", status, is_success, error,
                 created_at, finished_at
             from tasks
             where schedule_id = $1 and ($2::timestamptz is null or scheduled_for < $2)
             order by scheduled_for desc
             limit $3",
            id,
            before,
            limit,
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(ScheduleRun {
                    task_id: TaskId(row.id),
                    scheduled_for: row.scheduled_for,
                    status: parse_status(&row.status)?,
                    is_success: row.is_success,
                    error: row.error,
                    created_at: row.created_at,
                    finished_at: row.finished_at,
                })
            })
            .collect()
    }

    /// How long until the earliest enabled schedule of an active key is due, by the database's
    /// clock (zero when one is due now); `None` when there is none.
    pub async fn next_schedule_due_in(&self) -> Result<Option<Duration>, StoreError> {
        let micros = sqlx::query_scalar!(
            "select (extract(epoch from min(s.next_run_at) - now()) * 1000000)::bigint
             from schedules s join api_keys k on k.id = s.api_key_id
             where s.enabled and k.revoked_at is null"
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(micros.map(|m| Duration::from_micros(u64::try_from(m).unwrap_or(0))))
    }

    /// Locks the earliest due schedule that no other process holds (enabled, its key active),
    /// in a transaction that [`ScheduleFiring::finish`] commits;
    /// dropping the firing rolls it back (the schedule stays due). `None`: nothing is due.
    pub async fn claim_due_schedule(&self) -> Result<Option<ScheduleFiring>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query!(
            "select s.id, s.api_key_id, s.name, s.cron, s.time_zone, s.target, s.enabled,
                 s.next_run_at, s.last_run_at, s.last_task_id, s.last_error, s.created_at,
                 s.updated_at, now() as \"now!\"
             from schedules s join api_keys k on k.id = s.api_key_id
             where s.enabled and k.revoked_at is null and s.next_run_at <= now()
             order by s.next_run_at
             limit 1
             for update of s skip locked"
        )
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let schedule = ScheduleRecord::from(ScheduleRow {
            id: row.id,
            api_key_id: row.api_key_id,
            name: row.name,
            cron: row.cron,
            time_zone: row.time_zone,
            target: row.target,
            enabled: row.enabled,
            next_run_at: row.next_run_at,
            last_run_at: row.last_run_at,
            last_task_id: row.last_task_id,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
        });
        Ok(Some(ScheduleFiring {
            store: self.clone(),
            tx,
            schedule,
            now: row.now,
        }))
    }
}

impl ScheduleFiring {
    /// Inserts `new` (status `queued`) for the schedule's key as the task of the locked tick,
    /// in a savepoint: when the insert fails, the firing can still [`ScheduleFiring::finish`]
    /// with the error.
    pub async fn insert_task(
        &mut self,
        new: NewTask,
        skill: Option<&crate::skills::SkillAttach>,
    ) -> Result<TaskRecord, StoreError> {
        let owner = self.schedule.api_key_id;
        let mut savepoint = sqlx::Acquire::begin(&mut *self.tx).await?;
        let (task, _) = self
            .store
            .insert_task_in(&mut savepoint, owner, new, None, skill)
            .await?;
        sqlx::query!(
            "update tasks set schedule_id = $2, scheduled_for = $3 where id = $1",
            task.id.0,
            self.schedule.id,
            self.schedule.next_run_at,
        )
        .execute(&mut *savepoint)
        .await?;
        savepoint.commit().await?;
        Ok(task)
    }

    /// Records the tick's outcome — the task it created, or `error`: why it created none —,
    /// moves the schedule to `next_run_at` (`None`: no tick is left, the schedule is
    /// disabled) and commits.
    pub async fn finish(
        mut self,
        task: Option<TaskId>,
        error: Option<&str>,
        next_run_at: Option<OffsetDateTime>,
    ) -> Result<(), StoreError> {
        sqlx::query!(
            "update schedules set
                 last_run_at = now(),
                 last_task_id = coalesce($2, last_task_id),
                 last_error = $3,
                 next_run_at = coalesce($4, next_run_at),
                 enabled = enabled and $4::timestamptz is not null
             where id = $1",
            self.schedule.id,
            task.map(|t| t.0),
            error,
            next_run_at,
        )
        .execute(&mut *self.tx)
        .await?;
        self.tx.commit().await?;
        Ok(())
    }
}
