//! Wire shapes of `/v1/schedules`: a task, or a skill's execution, created on a cron schedule
//! (a 5-field cron expression, or 6 with seconds first, read in an IANA time zone), and the
//! tasks each schedule created ("runs").

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::TaskStatus;
use crate::dto::CreateTaskRequest;

/// The longest `name`, in characters.
pub const SCHEDULE_NAME_MAX_CHARS: usize = 200;
/// The longest `cron` expression, in characters.
pub const SCHEDULE_CRON_MAX_CHARS: usize = 200;

/// What a schedule creates at each tick: exactly one of `task` and `skill`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ScheduleTarget {
    /// A task, as `POST /v1/tasks` takes it (checked when the schedule is saved, admitted —
    /// quotas included — at every tick). `secrets` are refused: a schedule stores its target.
    Task(Box<CreateTaskRequest>),
    /// An execution of one of the caller's skills with these parameters.
    Skill(SkillTarget),
}

/// A skill execution a schedule creates.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillTarget {
    pub skill_id: Uuid,
    /// The skill's parameters by name (left out: none).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
}

/// Body of `POST /v1/schedules`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleRequest {
    /// A label for people (at most 200 characters); the cron expression when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub name: Option<String>,
    /// When to run: 5 fields (`minute hour day-of-month month day-of-week`, e.g. `0 9 * * 1-5`),
    /// or 6 with seconds first (`*/10 * * * * *`); `@daily`-style nicknames too.
    #[schema(min_length = 1, max_length = 200, example = "0 9 * * 1-5")]
    pub cron: String,
    /// The IANA time zone the expression is read in (`Europe/Paris`); `UTC` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64, example = "Europe/Paris")]
    pub time_zone: Option<String>,
    pub target: ScheduleTarget,
    /// Fire at its ticks (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Body of `PATCH /v1/schedules/{id}`: the fields to change. A new `cron` or `time_zone`, or
/// enabling, moves the next tick to the first one from now (ticks missed while disabled do not
/// fire).
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateScheduleRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200)]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ScheduleTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    pub id: Uuid,
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    /// `{"task": …}` (as created, without secrets) or `{"skill": {"skill_id", "parameters"}}`.
    #[schema(value_type = Object)]
    pub target: serde_json::Value,
    pub enabled: bool,
    /// The next tick it fires at (`null` while disabled).
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run_at: Option<OffsetDateTime>,
    /// When it last fired (a task created, or `last_error` recorded).
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_run_at: Option<OffsetDateTime>,
    /// The last task it created.
    pub last_task_id: Option<Uuid>,
    /// Why its last tick created no task (a quota of the key, a target no longer valid);
    /// `null` after a tick that did.
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// A page of the caller's schedules, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    pub items: Vec<ScheduleView>,
    /// All the caller's schedules.
    pub total: i64,
}

/// A task a schedule created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleRunView {
    pub task_id: Uuid,
    /// The tick it was created for.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub scheduled_for: OffsetDateTime,
    pub status: TaskStatus,
    pub is_success: Option<bool>,
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
}

/// A page of a schedule's runs, latest tick first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleRunList {
    pub items: Vec<ScheduleRunView>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}
