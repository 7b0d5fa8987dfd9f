//! browserd as a Model Context Protocol server: the task tools (`run_task`, `get_task`,
//! `list_tasks`, `stop_task`, `pause_task`, `resume_task`, `answer_task`, `get_screenshot`) built on the
//! official Rust SDK (`rmcp`), over a [`Backend`] that does the work. The api's backend is its
//! task service (same keys, tenants, validation and status machine as `/v1`): served over
//! streamable HTTP at `/mcp`, and by `browserd mcp` over stdio with a local key, both on the
//! Postgres store. [`RemoteBackend`] proxies the tools to a browserd server's REST API and
//! event WebSocket instead.
//!
//! Tool errors are MCP tool results with `isError: true` whose content is the REST API's error
//! body, `{"error":{"code","message"[,"field"]}}`, with the same codes and messages.

mod core;
mod params;
mod remote;
mod server;

use async_trait::async_trait;
use browserd_types::dto::{
    AnswerRequest, CreateTaskRequest, ErrorBody, ErrorDetail, StepView, TaskView,
};
use browserd_types::skills::SkillView;
use browserd_types::{EventBody, TaskEvent, TaskId, TaskStatus, Transition};

pub use core::{CallerOf, TaskBackend};
pub use params::{
    AnswerTaskParams, ListTasksParams, RunTaskParams, ScreenshotParams, TaskIdParams,
};
pub use remote::RemoteBackend;
pub use rmcp;
pub use server::{BrowserdMcp, DEFAULT_WAIT_S, MAX_WAIT_S};

/// A failed operation, as the REST API reports it: a stable code, a message, the offending
/// field for validation errors. Never carries secrets or internal details.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The REST API's error code (`task_not_found`, `validation_failed`, …).
    pub code: String,
    pub message: String,
    /// The request field at fault, for `validation_failed`.
    pub field: Option<String>,
    /// The task's status, for an illegal transition.
    pub current_status: Option<TaskStatus>,
}

impl ToolError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            field: None,
            current_status: None,
        }
    }

    /// A `validation_failed` error naming `field`.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new("validation_failed", message)
        }
    }

    /// The REST API's error body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.clone(),
                message: self.message.clone(),
                field: self.field.clone(),
                current_status: self.current_status,
            },
        }
    }
}

impl From<ErrorBody> for ToolError {
    fn from(body: ErrorBody) -> Self {
        Self {
            code: body.error.code,
            message: body.error.message,
            field: body.error.field,
            current_status: body.error.current_status,
        }
    }
}

/// Parses a task id the way the REST API's path does.
pub fn parse_task_id(raw: &str) -> Result<TaskId, ToolError> {
    raw.trim().parse::<TaskId>().map_err(|_| {
        ToolError::new(
            "invalid_task_id",
            format!("`{raw}` is not a valid task id (expected a UUID)"),
        )
    })
}

/// A step's screenshot.
#[derive(Clone, Debug)]
pub struct Screenshot {
    pub step: i32,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// What a running task reports to a waiting `run_task`.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskUpdate {
    /// The model chose its next goal at step `step`.
    NextGoal { step: i64, goal: String },
    /// The agent asks a person (`ask_human`); the task waits for `answer_task`.
    Question,
    /// The task reached a final status.
    Ended,
}

impl TaskUpdate {
    /// What a task event means to a waiting `run_task`: a model output's next goal, or the
    /// end (the final event); `None` for everything else. Every backend's `watch` maps the
    /// task's event stream with it.
    pub fn of_event(event: &TaskEvent) -> Option<TaskUpdate> {
        if event.is_final() {
            return Some(TaskUpdate::Ended);
        }
        match event.body()? {
            EventBody::ModelOutput(model) => Some(TaskUpdate::NextGoal {
                step: i64::from(model.number),
                goal: model.next_goal()?.to_owned(),
            }),
            EventBody::Question(_) => Some(TaskUpdate::Question),
            _ => None,
        }
    }
}

/// Who is calling: the HTTP request's parts (with the api's authenticated key in their
/// extensions) for the streamable HTTP transport; empty over stdio.
pub type CallContext = rmcp::model::Extensions;

/// Where the tools' work is done. Every method acts for the caller found in `cx` (a task of
/// another tenant is `task_not_found`), and reports failures as the REST API would.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Validates and submits a task; it starts `queued` (or `running`).
    async fn create_task(
        &self,
        cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError>;

    async fn get_task(&self, cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError>;

    /// The caller's tasks, newest first. `limit` is the REST API's (1–100, default 20).
    async fn list_tasks(
        &self,
        cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError>;

    /// The task's steps, in order.
    async fn steps(&self, cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError>;

    /// Stop, pause or resume.
    async fn control(
        &self,
        cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError>;

    /// Answers the question the task asks (`POST /v1/tasks/{id}/input`).
    async fn answer(
        &self,
        cx: &CallContext,
        id: TaskId,
        answer: AnswerRequest,
    ) -> Result<TaskView, ToolError>;

    /// The screenshot of step `step` (the latest step that has one when `None`).
    async fn screenshot(
        &self,
        cx: &CallContext,
        id: TaskId,
        step: Option<i32>,
    ) -> Result<Screenshot, ToolError>;

    /// The task's updates from now on (and its next goals so far), ending with
    /// [`TaskUpdate::Ended`] once it reaches a final status. The sender side stops when the
    /// receiver is dropped.
    async fn watch(
        &self,
        cx: &CallContext,
        id: TaskId,
    ) -> Result<tokio::sync::mpsc::Receiver<TaskUpdate>, ToolError>;

    /// The caller's skills, newest first (`query`: a substring of the title, goal or
    /// description; `limit` 1–100, default 20).
    async fn list_skills(
        &self,
        cx: &CallContext,
        query: Option<String>,
        limit: Option<i64>,
    ) -> Result<Vec<SkillView>, ToolError>;

    /// Queues an execution of skill `id` with `parameters` (`POST /v1/skills/{id}/runs`): a
    /// task, `queued`.
    async fn run_skill(
        &self,
        cx: &CallContext,
        id: uuid::Uuid,
        parameters: serde_json::Map<String, serde_json::Value>,
    ) -> Result<TaskView, ToolError>;
}

/// The step (with a screenshot) a `get_screenshot` without `step` returns: the latest.
pub fn latest_screenshot_step(steps: &[StepView]) -> Option<i32> {
    steps
        .iter()
        .rev()
        .find(|s| s.screenshot_url.is_some())
        .map(|s| s.number)
}

/// The error of a step number that has no screenshot (as the REST API words it).
pub fn screenshot_not_found(step: Option<i32>) -> ToolError {
    match step {
        Some(number) => ToolError::new(
            "screenshot_not_found",
            format!("step {number} has no screenshot"),
        ),
        None => ToolError::new(
            "screenshot_not_found",
            "the task has no step with a screenshot yet",
        ),
    }
}
