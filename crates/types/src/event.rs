//! Task events: the per-task, append-only log streamed to WebSocket clients.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::TaskId;

/// Well-known event kinds. Other kinds may be added by the worker; clients should ignore kinds
/// they do not know.
pub mod event_kind {
    /// A status transition; payload `{"status": ..., "previous_status": ..., ...}`. A status event
    /// with a terminal status is the task's final event.
    pub const STATUS: &str = "status";
    /// A persisted agent step (written in the transaction that stores it); payload
    /// `{"number", "url", "title", "has_screenshot", "screenshot_url", "record"}` where `record` is
    /// the step's AgentHistory item.
    pub const STEP: &str = "step";
    /// A step began; payload `{"number", "url"}` (step 0 is the initial navigation).
    pub const STEP_STARTED: &str = "step_started";
    /// The model answered; payload `{"number", "output", "usage"}`.
    pub const MODEL_OUTPUT: &str = "model_output";
    /// An action finished; payload `{"number", "index", "action", "result"}`.
    pub const ACTION_RESULT: &str = "action_result";
    /// The run's outcome, just before the terminal status; payload `{"is_done", "success",
    /// "final_result", "error", "usage"}`.
    pub const RESULT: &str = "result";
    /// A free-form log line from the worker; payload `{"level": ..., "message": ...}`.
    pub const LOG: &str = "log";
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
    /// True when this event ends the task's stream (a status event with a terminal status).
    pub fn is_final(&self) -> bool {
        self.kind == event_kind::STATUS
            && self
                .payload
                .get("status")
                .and_then(|s| s.as_str())
                .and_then(|s| s.parse::<crate::TaskStatus>().ok())
                .is_some_and(|s| s.is_terminal())
    }
}
