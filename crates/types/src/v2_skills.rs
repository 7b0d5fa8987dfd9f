//! Wire shapes of browser-use cloud's `/api/v2/skills` (camelCase, the official SDK's
//! `client.skills.*` models): a skill made from a goal and an agent prompt, executed with
//! parameters, refined with feedback, rolled back, and its executions listed.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

/// The longest `title` (the cloud's limit), in characters.
pub const SKILL_TITLE_MAX_CHARS: usize = 100;
/// The longest `description` and `goal` (the cloud's limits), in characters.
pub const SKILL_TEXT_MAX_CHARS: usize = 1000;
/// The shortest `agentPrompt` and refine `feedback` (the cloud's limits), in characters.
pub const SKILL_PROMPT_MIN_CHARS: usize = 10;

/// Body of `POST /api/v2/skills` (the cloud's `CreateSkillRequest`; unknown fields ignored).
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2CreateSkillRequest {
    #[serde(default)]
    #[schema(max_length = 100)]
    pub title: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub description: Option<String>,
    /// What the skill does and what its user should expect from it.
    #[schema(max_length = 1000)]
    pub goal: String,
    /// The prompt of the run that generates the skill; `{{name}}` or `{{name=example}}`
    /// declares a parameter (browserd's).
    #[schema(min_length = 10)]
    pub agent_prompt: String,
    /// browserd's: the JSON Schema of the result (the cloud infers one).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
}

/// Answer of `POST /api/v2/skills` and `POST /api/v2/skills/{id}/refine`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct V2SkillId {
    pub id: Uuid,
}

/// Body of `PATCH /api/v2/skills/{id}`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2UpdateSkillRequest {
    #[serde(default)]
    #[schema(max_length = 100)]
    pub title: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub description: Option<String>,
    #[serde(default)]
    pub categories: Option<Vec<String>>,
    #[serde(default)]
    pub domains: Option<Vec<String>>,
    #[serde(default)]
    pub is_enabled: Option<bool>,
}

/// Body of `POST /api/v2/skills/{id}/execute`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2ExecuteSkillRequest {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    /// Accepted and ignored (the cloud's IP persistence).
    #[serde(default)]
    pub session_id: Option<Uuid>,
}

/// Answer of `POST /api/v2/skills/{id}/execute` (the cloud's `ExecuteSkillResponse`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2ExecuteSkillResponse {
    pub success: bool,
    #[schema(value_type = Object)]
    pub result: Value,
    pub error: Option<String>,
    pub stderr: Option<String>,
    pub latency_ms: Option<i64>,
}

/// Body of `POST /api/v2/skills/{id}/refine`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2RefineSkillRequest {
    #[schema(min_length = 10)]
    pub feedback: String,
    #[serde(default)]
    pub test_output: Option<String>,
    #[serde(default)]
    pub test_logs: Option<String>,
}

/// One input of a skill (the cloud's `ParameterSchema`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2SkillParameter {
    pub name: String,
    /// `string`, `number` or `boolean`.
    #[serde(rename = "type")]
    pub kind: String,
    pub required: bool,
    pub description: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub default: Option<Value>,
    pub cookie_domain: Option<String>,
}

/// A skill (the cloud's `SkillResponse`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2SkillView {
    pub id: Uuid,
    pub slug: Option<String>,
    pub title: String,
    pub description: String,
    pub categories: Vec<String>,
    pub domains: Vec<String>,
    pub goal: Option<String>,
    pub agent_prompt: Option<String>,
    /// `recording`, `generating`, `failed`, `finished`, `cancelled` or `timed_out`.
    pub status: String,
    pub parameters: Vec<V2SkillParameter>,
    #[schema(value_type = Object)]
    pub output_schema: Value,
    pub is_enabled: bool,
    pub is_public: bool,
    pub icon_url: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub first_published_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_published_at: Option<OffsetDateTime>,
    pub current_version: Option<i32>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub current_version_started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub current_version_finished_at: Option<OffsetDateTime>,
    pub code: Option<String>,
    pub cloned_from_skill_id: Option<Uuid>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// One execution of a skill (the cloud's `SkillExecutionView`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2SkillExecutionView {
    /// The execution's task id.
    pub id: Uuid,
    pub skill_id: Uuid,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub success: bool,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
    pub latency_ms: Option<i64>,
    pub has_output: bool,
}

/// Answer of `GET /api/v2/skills/{id}/executions/{execution_id}/output`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2SkillExecutionOutput {
    /// A signed link to the execution's output (its result as JSON), valid for 5 minutes.
    pub download_url: String,
}
