//! Schedules of the caller's key (`/v1/schedules`): create, list, get, change, delete, and the
//! tasks each one created. A schedule's timing (cron expression, time zone) and target (a
//! task as `POST /v1/tasks` takes it, or a skill execution) are checked when it is saved, so a
//! bad one is refused at the edge (422 naming the field); admission — the key's quotas — runs
//! at every tick (`scheduler.rs`). Another key's schedule is not found.

use browserd_store::{NewSchedule, ScheduleRecord, ScheduleRun, ScheduleUpdate};
use browserd_types::schedules::{
    CreateScheduleRequest, SCHEDULE_NAME_MAX_CHARS, ScheduleList, ScheduleRunList, ScheduleRunView,
    ScheduleTarget, ScheduleView, UpdateScheduleRequest,
};
use time::OffsetDateTime;
use uuid::Uuid;

use super::TaskCore;
use crate::caller::Caller;
use crate::cron::{CronTiming, DEFAULT_TIME_ZONE};
use crate::error::TaskError;

/// `schedule_not_found`: no such schedule for this key.
pub(crate) fn schedule_not_found() -> TaskError {
    TaskError::NotFound {
        code: "schedule_not_found",
        message: "schedule not found".to_owned(),
    }
}

/// The view of `record`.
fn view(record: ScheduleRecord) -> ScheduleView {
    ScheduleView {
        id: record.id,
        name: record.name,
        cron: record.cron,
        time_zone: record.time_zone,
        target: record.target,
        enabled: record.enabled,
        next_run_at: record.enabled.then_some(record.next_run_at),
        last_run_at: record.last_run_at,
        last_task_id: record.last_task_id.map(|t| t.0),
        last_error: record.last_error,
        created_at: record.created_at,
        updated_at: record.updated_at,
    }
}

fn run_view(run: ScheduleRun) -> ScheduleRunView {
    ScheduleRunView {
        task_id: run.task_id.0,
        scheduled_for: run.scheduled_for,
        status: run.status,
        is_success: run.is_success,
        error: run.error,
        created_at: run.created_at,
        finished_at: run.finished_at,
    }
}

/// A name: 1–200 characters, not only whitespace, no control characters.
fn check_name(name: &str) -> Result<(), TaskError> {
    if name.trim().is_empty() {
        return Err(TaskError::validation("name", "name must not be empty"));
    }
    if name.chars().count() > SCHEDULE_NAME_MAX_CHARS {
        return Err(TaskError::validation(
            "name",
            format!("name must be at most {SCHEDULE_NAME_MAX_CHARS} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(TaskError::validation(
            "name",
            "name must not contain control characters",
        ));
    }
    Ok(())
}

/// A refusal of the target's task, its field named under `target.task`.
fn in_task_target(err: TaskError) -> TaskError {
    match err {
        TaskError::Validation { field, message } => TaskError::Validation {
            field: Some(match field {
                Some(field) => format!("target.task.{field}"),
                None => "target.task".to_owned(),
            }),
            message,
        },
        other => other,
    }
}

/// A runs cursor: the tick of the previous page's last run, in Unix microseconds.
fn decode_runs_cursor(raw: &str) -> Result<OffsetDateTime, TaskError> {
    raw.parse::<i64>()
        .ok()
        .and_then(|micros| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000).ok()
        })
        .ok_or_else(|| TaskError::validation("cursor", "cursor is not valid"))
}

fn encode_runs_cursor(at: OffsetDateTime) -> String {
    (at.unix_timestamp_nanos() / 1_000).to_string()
}

impl TaskCore {
    /// Checks `target` for `caller` and answers it as stored: a task target is checked as
    /// `POST /v1/tasks` checks it (without admission); its `secrets` are refused, since a
    /// schedule stores its target.
    async fn checked_target(
        &self,
        caller: &Caller,
        target: ScheduleTarget,
    ) -> Result<serde_json::Value, TaskError> {
        let stored = serde_json::to_value(&target)
            .map_err(|err| TaskError::Internal(format!("schedule target: {err}")))?;
        match target {
            ScheduleTarget::Task(request) => {
                if request.secrets.is_some() {
                    return Err(TaskError::validation(
                        "target.task.secrets",
                        "a schedule cannot carry secrets (it stores its target): log in with a \
                         profile (`profile_id`) instead",
                    ));
                }
                self.tasks
                    .checked(caller, *request, None)
                    .await
                    .map_err(in_task_target)?;
            }
            ScheduleTarget::Skill(skill) => super::scheduler::check_skill_target(&skill)?,
        }
        Ok(stored)
    }

    /// Saves a new schedule of `caller`'s; its first tick is the first one from now.
    pub async fn create_schedule(
        &self,
        caller: &Caller,
        request: CreateScheduleRequest,
    ) -> Result<ScheduleView, TaskError> {
        let time_zone = request
            .time_zone
            .unwrap_or_else(|| DEFAULT_TIME_ZONE.to_owned());
        let timing = CronTiming::parse(&request.cron, &time_zone)?;
        let cron = request.cron.trim().to_owned();
        let name = request.name.unwrap_or_else(|| cron.clone());
        check_name(&name)?;
        let target = self.checked_target(caller, request.target).await?;
        let next_run_at = timing
            .next_after(OffsetDateTime::now_utc())
            .ok_or_else(|| TaskError::validation("cron", "cron never matches a date"))?;
        let record = self
            .store
            .create_schedule(
                caller.key_id,
                NewSchedule {
                    name,
                    cron,
                    time_zone,
                    target,
                    enabled: request.enabled.unwrap_or(true),
                    next_run_at,
                },
            )
            .await?;
        tracing::info!(schedule_id = %record.id, "schedule created");
        Ok(view(record))
    }

    /// A page of `caller`'s schedules, newest first (`page` 1-based).
    pub async fn list_schedules(
        &self,
        caller: &Caller,
        limit: i64,
        page: i64,
    ) -> Result<ScheduleList, TaskError> {
        let (items, total) = self
            .store
            .list_schedules(caller.key_id, limit, page)
            .await?;
        Ok(ScheduleList {
            items: items.into_iter().map(view).collect(),
            total,
        })
    }

    /// `caller`'s schedule `id`.
    pub async fn get_schedule(&self, caller: &Caller, id: Uuid) -> Result<ScheduleView, TaskError> {
        self.store
            .get_schedule(caller.key_id, id)
            .await?
            .map(view)
            .ok_or_else(schedule_not_found)
    }

    /// Changes `caller`'s schedule `id`. A new timing, or enabling it, moves its next tick to
    /// the first one from now (ticks missed while it was disabled do not fire).
    pub async fn update_schedule(
        &self,
        caller: &Caller,
        id: Uuid,
        request: UpdateScheduleRequest,
    ) -> Result<ScheduleView, TaskError> {
        let current = self
            .store
            .get_schedule(caller.key_id, id)
            .await?
            .ok_or_else(schedule_not_found)?;
        let retimed = request.cron.is_some()
            || request.time_zone.is_some()
            || (request.enabled == Some(true) && !current.enabled);
        let cron = request.cron.as_deref().map(str::trim).map(str::to_owned);
        let next_run_at = if retimed {
            let timing = CronTiming::parse(
                cron.as_deref().unwrap_or(&current.cron),
                request.time_zone.as_deref().unwrap_or(&current.time_zone),
            )?;
            Some(
                timing
                    .next_after(OffsetDateTime::now_utc())
                    .ok_or_else(|| TaskError::validation("cron", "cron never matches a date"))?,
            )
        } else {
            None
        };
        if let Some(name) = &request.name {
            check_name(name)?;
        }
        let target = match request.target {
            Some(target) => Some(self.checked_target(caller, target).await?),
            None => None,
        };
        let update = ScheduleUpdate {
            name: request.name,
            cron,
            time_zone: request.time_zone,
            target,
            enabled: request.enabled,
            next_run_at,
        };
        self.store
            .update_schedule(caller.key_id, id, update)
            .await?
            .map(view)
            .ok_or_else(schedule_not_found)
    }

    /// Deletes `caller`'s schedule `id`; the tasks it created stay.
    pub async fn delete_schedule(&self, caller: &Caller, id: Uuid) -> Result<(), TaskError> {
        if !self.store.delete_schedule(caller.key_id, id).await? {
            return Err(schedule_not_found());
        }
        tracing::info!(schedule_id = %id, "schedule deleted");
        Ok(())
    }

    /// The tasks `caller`'s schedule `id` created, latest tick first, `limit` (1–100) a page.
    pub async fn schedule_runs(
        &self,
        caller: &Caller,
        id: Uuid,
        limit: i64,
        cursor: Option<&str>,
    ) -> Result<ScheduleRunList, TaskError> {
        let before = cursor.map(decode_runs_cursor).transpose()?;
        self.store
            .get_schedule(caller.key_id, id)
            .await?
            .ok_or_else(schedule_not_found)?;
        let limit = limit.clamp(1, 100);
        let mut runs = self.store.list_schedule_runs(id, limit + 1, before).await?;
        let next_cursor = if runs.len() as i64 > limit {
            runs.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            runs.last().map(|run| encode_runs_cursor(run.scheduled_for))
        } else {
            None
        };
        Ok(ScheduleRunList {
            items: runs.into_iter().map(run_view).collect(),
            next_cursor,
        })
    }
}

/// The task target stored in a schedule, read back for a tick.
pub(crate) fn stored_target(target: &serde_json::Value) -> Result<ScheduleTarget, TaskError> {
    serde_json::from_value(target.clone()).map_err(|err| {
        TaskError::Internal(format!(
            "the stored target no longer reads as a target: {err}"
        ))
    })
}
