//! The wire DTOs of `/v1/skills`: creating a skill (from a prompt with `{{name=example}}`
//! parameter declarations, or from an ended task), its view with its parameters and versions,
//! editing, refining, and running it with parameters. A skill's executions are tasks
//! ([`crate::dto::TaskView`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::TaskId;
use crate::TaskSecrets;
use crate::dto::{TaskView, ViewportSize};

/// `POST /v1/skills`: either `prompt` (the agent runs it once, with each parameter's
/// example) or `from_task` (an ended, successful task of the caller's, replayed once).
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSkillRequest {
    /// The agent prompt, with parameters declared as `{{name}}` or `{{name=example}}` (the
    /// generating run uses the example).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 20000)]
    pub prompt: Option<String>,
    /// What the skill achieves (default: the prompt, or the source task's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 20000)]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    /// JSON Schema of the skill's result (an object schema, as for tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// An ended, successful task of this key to make the skill from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub from_task: Option<TaskId>,
    /// With `from_task`: the parameters, each with the value the task used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
    /// The generating run's options (as for `POST /v1/tasks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub max_steps: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prohibited_domains: Option<Vec<String>>,
    /// Secrets the run may type (stored in the skill only as `<secret>name</secret>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, crate::secrets::TaskSecretSchema>>)]
    pub secrets: Option<TaskSecrets>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_secrets_on_any_domain: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_vision: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport: Option<ViewportSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 30000)]
    pub settle_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}

/// `PATCH /v1/skills/{id}`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSkillRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_enabled: Option<bool>,
}

/// `POST /v1/skills/{id}/refine`.
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefineSkillRequest {
    /// What to do differently; added to the prompt of a new generation.
    #[schema(min_length = 1, max_length = 5000)]
    pub feedback: String,
    /// Secrets the new run may type (those of the first run were not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, crate::secrets::TaskSecretSchema>>)]
    pub secrets: Option<TaskSecrets>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_secrets_on_any_domain: Option<bool>,
}

/// `POST /v1/skills/{id}/runs`.
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSkillRequest {
    /// A value for each parameter (those with a default may be left out).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// The model that heals a step the site broke (default: the generating run's, else the
    /// server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Values of the secrets the skill's steps type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, crate::secrets::TaskSecretSchema>>)]
    pub secrets: Option<TaskSecrets>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_secrets_on_any_domain: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// One parameter of a skill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillParameterView {
    pub name: String,
    /// `string`, `number` or `boolean`.
    #[serde(rename = "type")]
    pub kind: String,
    pub required: bool,
    /// The value used when none is given (a string, number or boolean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A step an execution healed (recorded in the version it saved).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HealedStepView {
    /// The recorded step's number.
    pub step: u32,
    pub reason: String,
    pub model_calls: u32,
}

/// One version of a skill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillVersionView {
    pub version: i32,
    /// `generated`, `from_task`, `healed` or `refined`.
    pub origin: String,
    /// The task that made it (the generating run, the source task, the healing execution).
    #[schema(value_type = Option<uuid::Uuid>)]
    pub source_task_id: Option<TaskId>,
    pub healed: Vec<HealedStepView>,
    /// Recorded steps the version replays.
    pub steps: usize,
    /// The script (steps with `{{name}}` slots, parameters, result reader); secrets appear
    /// only as `<secret>name</secret>`.
    #[schema(value_type = Object)]
    pub script: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
}

/// A skill as returned by the API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillView {
    pub id: uuid::Uuid,
    pub title: String,
    pub description: String,
    pub goal: String,
    pub agent_prompt: String,
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// `recording`, `generating`, `failed`, `finished`, `cancelled` or `timed_out`.
    pub status: String,
    pub error: Option<String>,
    pub parameters: Vec<SkillParameterView>,
    pub current_version: Option<i32>,
    pub is_enabled: bool,
    #[schema(value_type = Option<uuid::Uuid>)]
    pub generation_task_id: Option<TaskId>,
    /// Every version, oldest first (in a listing: empty).
    pub versions: Vec<SkillVersionView>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub current_version_started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub current_version_finished_at: Option<OffsetDateTime>,
}

/// A page of skills, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SkillList {
    pub items: Vec<SkillView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A skill's versions, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SkillVersionList {
    pub items: Vec<SkillVersionView>,
}

/// A page of a skill's executions (tasks), newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SkillRunList {
    pub items: Vec<TaskView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}
