//! The tools' arguments. Their JSON Schemas are generated (schemars) from these types; the
//! task fields have the Rust types of the REST API's `CreateTaskRequest` and become one, so
//! both go through the same validation.

use browserd_types::TaskStatus;
use browserd_types::dto::CreateTaskRequest;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Arguments of `run_task`: a subset of `POST /v1/tasks` (the task, where it may go, its
/// budgets, the result's schema) plus how long to wait.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTaskParams {
    /// What the agent should do, in plain words (1–20 000 characters).
    pub task: String,
    /// An http(s) URL the browser opens before the first step.
    #[serde(default)]
    pub start_url: Option<String>,
    /// Name of a configured model; the server's default model when omitted.
    #[serde(default)]
    pub model: Option<String>,
    /// Step budget, 1–10 000 (default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub max_steps: Option<i64>,
    /// Only these domains may be visited (patterns like `example.com`, `*.example.com`).
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    /// A JSON Schema the final output must satisfy; the result is then structured JSON.
    #[serde(default)]
    pub output_schema: Option<serde_json::Map<String, Value>>,
    /// Wall-clock budget in seconds, 1–86 400: the task fails once it runs longer.
    #[serde(default)]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_s: Option<i64>,
    /// Token budget (input + output of every model call), 1–10⁹: the task fails once it used
    /// more.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub max_tokens: Option<i64>,
    /// Cost budget in USD (from the model's price table), above 0 and at most 10 000: the
    /// task fails once its model calls cost more.
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// A browser profile of the caller's (`/v1/profiles`, a UUID): the task starts with its
    /// saved cookies and localStorage (a login) and saves what it changes back at every step.
    #[serde(default)]
    pub profile_id: Option<uuid::Uuid>,
    /// Seconds to wait for the task to end before returning its id and status (0–600,
    /// default 120). A task still running can be followed with `get_task`; one that asks a
    /// question (status `waiting`) returns at once with it: answer with `answer_task`.
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    pub wait_s: Option<u64>,
}

/// Arguments of `answer_task`: the answer to the question a `waiting` task asks.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerTaskParams {
    /// The task's id.
    pub id: String,
    /// A free-text answer.
    #[serde(default)]
    pub answer: Option<String>,
    /// One of the question's choices, exactly.
    #[serde(default)]
    pub choice: Option<String>,
    /// The answer is a secret (a code, a password): sealed, and the agent types it without
    /// ever seeing it.
    #[serde(default)]
    pub secret: Option<bool>,
    /// Seconds to wait afterwards for the task to end or ask again (0–600, default 120).
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    pub wait_s: Option<u64>,
}

impl AnswerTaskParams {
    /// The REST API's request.
    pub fn to_request(&self) -> browserd_types::dto::AnswerRequest {
        browserd_types::dto::AnswerRequest {
            answer: self.answer.clone(),
            choice: self.choice.clone(),
            secret: self.secret,
        }
    }
}

impl RunTaskParams {
    /// The REST API's request for this task (every other field at its default).
    pub fn to_request(&self) -> CreateTaskRequest {
        CreateTaskRequest {
            task: Some(self.task.clone()),
            start_url: self.start_url.clone(),
            max_steps: self.max_steps,
            model: self.model.clone(),
            allowed_domains: self.allowed_domains.clone(),
            output_schema: self.output_schema.clone().map(Value::Object),
            timeout_s: self.timeout_s,
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_usd,
            profile_id: self.profile_id,
            ..CreateTaskRequest::default()
        }
    }
}

/// A task, by id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskIdParams {
    /// The task's id (a UUID, as `run_task` returned it).
    pub id: String,
}

/// Arguments of `list_tasks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksParams {
    /// Only tasks in this status.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// How many tasks, newest first: 1–100 (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<i64>,
}

/// Arguments of `get_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotParams {
    /// The task's id.
    pub id: String,
    /// Step number (from 1); the latest step with a screenshot when omitted.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub step: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `run_task` task field is a `CreateTaskRequest` field of the same name: the request
    /// built from the arguments, serialized back, holds exactly the arguments given.
    #[test]
    fn run_task_fields_are_create_task_request_fields() {
        let args = serde_json::json!({
            "task": "t",
            "start_url": "https://example.com/",
            "model": "m",
            "max_steps": 3,
            "allowed_domains": ["example.com"],
            "output_schema": {"type": "object"},
            "timeout_s": 60,
            "max_tokens": 5000,
            "max_cost_usd": 0.5,
            "profile_id": "0190e1a0-0000-7000-8000-000000000001",
        });
        let params: RunTaskParams = serde_json::from_value(args.clone()).unwrap();
        let request = params.to_request();
        let back = serde_json::json!({
            "task": request.task,
            "start_url": request.start_url,
            "model": request.model,
            "max_steps": request.max_steps,
            "allowed_domains": request.allowed_domains,
            "output_schema": request.output_schema,
            "timeout_s": request.timeout_s,
            "max_tokens": request.max_tokens,
            "max_cost_usd": request.max_cost_usd,
            "profile_id": request.profile_id,
        });
        assert_eq!(back, args);
        // The request type accepts these field names as they are.
        let parsed: Result<CreateTaskRequest, _> = serde_json::from_value(args);
        assert!(parsed.is_ok());
        let schema = serde_json::to_value(schemars::schema_for!(RunTaskParams)).unwrap();
        let properties = schema["properties"].as_object().unwrap();
        assert!(properties.contains_key("wait_s"));
        assert_eq!(schema["required"], serde_json::json!(["task"]));
    }
}

/// Arguments of `list_skills`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSkillsParams {
    /// Only skills whose title, goal or description contains this.
    #[serde(default)]
    pub query: Option<String>,
    /// How many skills, newest first: 1–100 (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<i64>,
}

/// Arguments of `run_skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSkillParams {
    /// The skill's id (a UUID, as `list_skills` shows it).
    pub id: String,
    /// A value for each of the skill's parameters (those with a default may be left out).
    #[serde(default)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// Seconds to wait for the execution to end before returning its task id and status
    /// (0–600, default 120).
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    pub wait_s: Option<u64>,
}
