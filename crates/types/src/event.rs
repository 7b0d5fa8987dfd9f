//! Task events: the per-task, append-only log streamed to WebSocket clients.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::{TaskId, TaskStatus};

/// The event kinds' names, as `kind` on the wire (the names of [`EventBody`]'s variants).
/// Clients should ignore kinds they do not know.
pub mod event_kind {
    pub const STATUS: &str = "status";
    pub const STEP: &str = "step";
    pub const STEP_STARTED: &str = "step_started";
    pub const MODEL_OUTPUT: &str = "model_output";
    pub const ACTION_RESULT: &str = "action_result";
    pub const RESULT: &str = "result";
    pub const LOG: &str = "log";
    pub const PERSON_INPUT: &str = "person_input";
    pub const QUESTION: &str = "question";
    pub const ANSWERED: &str = "answered";
}

/// What a task event says: its kind and typed payload, the one contract between the writers
/// (the store's transitions, the worker's sink) and the readers (the api, the CLI, MCP). On
/// the wire and in `task_events` it is `kind` + `payload` ([`EventBody::to_parts`],
/// [`TaskEvent::body`]). Its JSON Schema (`schemars`) is the contract of readers that are not
/// Rust: a test checks every payload field the dashboard's JavaScript reads against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
pub enum EventBody {
    /// A status transition. A status event with a terminal status is the task's final event.
    Status(StatusEvent),
    /// A persisted agent step (written in the transaction that stores it).
    Step(StepEvent),
    /// A step began (step 0 is the initial navigation).
    StepStarted(StepStartedEvent),
    /// The model answered.
    ModelOutput(ModelOutputEvent),
    /// An action finished.
    ActionResult(ActionResultEvent),
    /// The run's outcome, just before the terminal status.
    Result(ResultEvent),
    /// A free-form log line from the worker.
    Log(LogEvent),
    /// A person's input to the browser through the live view while the task was paused
    /// (take-over), recorded by the api before the worker applies it.
    PersonInput(crate::takeover::PersonInputEvent),
    /// The agent asks a person (`ask_human`); written with the `waiting` status event.
    Question(QuestionEvent),
    /// A person answered a question (a secret answer is never in it).
    Answered(AnsweredEvent),
}

/// `question`: `{"question_id", "question", "choices", "secret", "timeout_s"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
pub struct QuestionEvent {
    /// Where it was asked: `s{step}a{action index}` (a resumed run asks it again under the
    /// same id and gets the answer given meanwhile).
    pub question_id: String,
    /// What the agent asks.
    pub question: String,
    /// The answers offered; empty: free text.
    #[serde(default)]
    pub choices: Vec<String>,
    /// The agent asks for a secret (a code, a password): answer with `secret: true`.
    #[serde(default)]
    pub secret: bool,
    /// Seconds the agent waits at most before the task fails.
    pub timeout_s: u64,
}

/// `answered`: `{"question_id", "secret", "answer"}` (`answer` is `null` for a secret one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnsweredEvent {
    pub question_id: String,
    pub secret: bool,
    /// The answer given; `null` when it is secret.
    #[serde(default)]
    pub answer: Option<String>,
}

/// `status`: `{"status", "transition", …}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatusEvent {
    pub status: TaskStatus,
    /// What moved it: a [`Transition`](crate::Transition)'s name, `start` (a worker claimed
    /// it) or `requeue` (its worker went away); absent on the first event (`queued`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    /// `start`: the claim's number (1 for the first worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// `requeue`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A terminal status: the task's outcome.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<StatusOutcome>,
}

impl StatusEvent {
    /// The first event of every task: `{"status": "queued"}`.
    pub fn created() -> Self {
        Self {
            status: TaskStatus::Queued,
            transition: None,
            attempt: None,
            reason: None,
            outcome: None,
        }
    }

    /// A terminal transition with the task's outcome.
    pub fn ended(
        status: TaskStatus,
        transition: impl Into<String>,
        outcome: StatusOutcome,
    ) -> Self {
        Self {
            outcome: Some(outcome),
            ..Self::new(status, transition)
        }
    }

    /// A transition without more to say.
    pub fn new(status: TaskStatus, transition: impl Into<String>) -> Self {
        Self {
            status,
            transition: Some(transition.into()),
            attempt: None,
            reason: None,
            outcome: None,
        }
    }
}

/// The outcome a terminal `status` event carries (each `null` when unknown).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatusOutcome {
    pub output: Option<String>,
    pub is_success: Option<bool>,
    pub error: Option<String>,
}

/// `step`: `{"number", "url", "title", "has_screenshot", "screenshot_url", "record"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepEvent {
    pub number: i32,
    pub url: Option<String>,
    pub title: Option<String>,
    pub has_screenshot: bool,
    #[serde(default)]
    pub screenshot_url: Option<String>,
    /// The step's AgentHistory item (without its rendered state message).
    #[serde(default)]
    pub record: serde_json::Value,
}

/// `step_started`: `{"number", "url"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepStartedEvent {
    pub number: i32,
    pub url: String,
}

/// `model_output`: `{"number", "output", "usage"}` (`output`: browser-use's `AgentOutput`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelOutputEvent {
    pub number: u32,
    pub output: serde_json::Value,
    #[serde(default)]
    pub usage: serde_json::Value,
}

impl ModelOutputEvent {
    /// The model's `next_goal`, if it gave one.
    pub fn next_goal(&self) -> Option<&str> {
        self.output.get("next_goal").and_then(|g| g.as_str())
    }
}

/// `action_result`: `{"number", "index", "action", "result"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActionResultEvent {
    pub number: u32,
    pub index: usize,
    pub action: serde_json::Value,
    pub result: serde_json::Value,
}

/// `result`: `{"is_done", "success", "final_result", "error", "usage"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResultEvent {
    pub is_done: bool,
    pub success: Option<bool>,
    pub final_result: Option<String>,
    pub error: Option<String>,
    #[serde(default)]
    pub usage: serde_json::Value,
}

/// `log`: `{"level", "message"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEvent {
    pub level: String,
    pub message: String,
}

impl EventBody {
    /// The `kind` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::Status(_) => event_kind::STATUS,
            EventBody::Step(_) => event_kind::STEP,
            EventBody::StepStarted(_) => event_kind::STEP_STARTED,
            EventBody::ModelOutput(_) => event_kind::MODEL_OUTPUT,
            EventBody::ActionResult(_) => event_kind::ACTION_RESULT,
            EventBody::Result(_) => event_kind::RESULT,
            EventBody::Log(_) => event_kind::LOG,
            EventBody::PersonInput(_) => event_kind::PERSON_INPUT,
            EventBody::Question(_) => event_kind::QUESTION,
            EventBody::Answered(_) => event_kind::ANSWERED,
        }
    }

    /// `(kind, payload)` as stored and sent.
    pub fn to_parts(&self) -> (&'static str, serde_json::Value) {
        let payload = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut tagged)) => {
                tagged.remove("payload").unwrap_or(serde_json::Value::Null)
            }
            _ => serde_json::Value::Null,
        };
        (self.kind(), payload)
    }

    /// The body of a stored `(kind, payload)`; `None` for a kind this version does not know
    /// or a payload that does not fit its kind.
    pub fn from_parts(kind: &str, payload: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(serde_json::json!({ "kind": kind, "payload": payload })).ok()
    }
}

/// One row of `task_events`, exactly as sent on the WebSocket:
/// `{"task_id","seq","kind","payload","created_at"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskEvent {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: TaskId,
    /// Monotonic per task, starting at 1, without gaps.
    pub seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
}

impl TaskEvent {
    /// What the event says; `None` for a kind this version does not know.
    pub fn body(&self) -> Option<EventBody> {
        EventBody::from_parts(&self.kind, &self.payload)
    }

    /// True when this event ends the task's stream (a status event with a terminal status).
    pub fn is_final(&self) -> bool {
        matches!(self.body(), Some(EventBody::Status(status)) if status.status.is_terminal())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bodies_keep_the_wire_shape_of_each_kind() {
        let terminal = EventBody::Status(StatusEvent {
            outcome: Some(StatusOutcome {
                output: Some("42".to_owned()),
                is_success: Some(true),
                error: None,
            }),
            ..StatusEvent::new(TaskStatus::Finished, "finish")
        });
        assert_eq!(
            terminal.to_parts(),
            (
                "status",
                json!({"status": "finished", "transition": "finish", "output": "42",
                       "is_success": true, "error": null})
            )
        );
        let start = EventBody::Status(StatusEvent {
            attempt: Some(2),
            ..StatusEvent::new(TaskStatus::Running, "start")
        });
        assert_eq!(
            start.to_parts().1,
            json!({"status": "running", "transition": "start", "attempt": 2})
        );
        let started = EventBody::StepStarted(StepStartedEvent {
            number: 3,
            url: "https://example.com/".to_owned(),
        });
        let (kind, payload) = started.to_parts();
        assert_eq!(kind, "step_started");
        assert_eq!(EventBody::from_parts(kind, &payload), Some(started));
        assert_eq!(EventBody::from_parts("later_kind", &json!({})), None);
    }

    #[test]
    fn only_a_terminal_status_is_final() {
        let event = |kind: &str, payload: serde_json::Value| TaskEvent {
            task_id: TaskId::new(),
            seq: 1,
            kind: kind.to_owned(),
            payload,
            created_at: OffsetDateTime::UNIX_EPOCH,
        };
        assert!(event("status", json!({"status": "stopped", "transition": "stop"})).is_final());
        assert!(!event("status", json!({"status": "paused", "transition": "pause"})).is_final());
        assert!(!event("log", json!({"status": "failed"})).is_final());
    }
}
