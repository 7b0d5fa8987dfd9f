//! Request and response bodies of the native `/v1` API.
//!
//! These are pure wire shapes; the api crate validates requests and the store produces the views.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::{TaskId, TaskOptions, TaskSecrets, TaskStatus};

/// Limits and defaults of `POST /v1/tasks`. The defaults are the one definition used by the
/// api, the agent's `TaskConfig` and `browserd run`.
pub mod limits {
    pub const TASK_MAX_CHARS: usize = 20_000;
    pub const MAX_STEPS_DEFAULT: i64 = 100;
    /// browser-use cloud's `maxSteps` range (1–10 000), on `/v1` and `/api/v2` alike.
    pub const MAX_STEPS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000;
    pub const MAX_ACTIONS_PER_STEP_DEFAULT: i64 = 5;
    pub const MAX_ACTIONS_PER_STEP_RANGE: std::ops::RangeInclusive<i64> = 1..=20;
    pub const MAX_FAILURES_DEFAULT: i64 = 5;
    pub const MAX_FAILURES_RANGE: std::ops::RangeInclusive<i64> = 0..=50;
    /// Screenshots go to the model every step unless the task says otherwise.
    pub const USE_VISION_DEFAULT: bool = true;
    /// Token budget (input + output of every model call): 1 to 1 billion.
    pub const MAX_TOKENS_RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000_000;
    /// Cost budget in USD: above 0, at most 10 000.
    pub const MAX_COST_USD_MAX: f64 = 10_000.0;
    /// Wall-clock budget: one second to one day.
    pub const TIMEOUT_S_RANGE: std::ops::RangeInclusive<i64> = 1..=86_400;
    /// `ask_human_timeout_s`: how long the agent waits for a person's answer at most (the
    /// worker's `--ask-human-timeout` caps it).
    pub const ASK_HUMAN_TIMEOUT_S_RANGE: std::ops::RangeInclusive<i64> = 1..=86_400;
    /// `POST /v1/tasks/{id}/input`: an answer's length.
    pub const ANSWER_MAX_CHARS: usize = 4_096;
    /// `ask_human`: a question's length and its choices.
    pub const QUESTION_MAX_CHARS: usize = 2_000;
    pub const CHOICES_MAX: usize = 20;
    pub const CHOICE_MAX_CHARS: usize = 200;
    pub const METADATA_MAX_PAIRS: usize = 16;
    pub const METADATA_KEY_MAX_CHARS: usize = 64;
    pub const METADATA_VALUE_MAX_CHARS: usize = 512;
    pub const URL_MAX_CHARS: usize = 2_048;
    pub const DOMAINS_MAX: usize = 100;
    pub const DOMAIN_MAX_CHARS: usize = 253;
    pub const SECRETS_MAX: usize = 32;
    pub const SECRET_NAME_MAX_CHARS: usize = 64;
    pub const SECRET_VALUE_MAX_CHARS: usize = 4_096;
    pub const MODEL_MAX_CHARS: usize = 200;
    /// A proxy's name (`--proxies NAME=URL`): 1–64 characters.
    pub const PROXY_NAME_MAX_CHARS: usize = 64;
    /// Viewport width in CSS pixels (browser-use's default 1920 is the worker's default).
    pub const VIEWPORT_WIDTH_RANGE: std::ops::RangeInclusive<i64> = 320..=3840;
    /// Viewport height in CSS pixels (browser-use's default 1080 is the worker's default).
    pub const VIEWPORT_HEIGHT_RANGE: std::ops::RangeInclusive<i64> = 240..=2160;
    /// How long actions wait for the page to settle, in ms (0 = do not wait); the worker's
    /// default is 2 000 (browser-use's network-wait cap).
    pub const SETTLE_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<i64> = 0..=30_000;
    /// Further attempts of a replayed action whose element is not found yet or that fails
    /// (`replay.max_retries`, as `browserd replay --max-retries`).
    pub const REPLAY_MAX_RETRIES_DEFAULT: i64 = 2;
    pub const REPLAY_MAX_RETRIES_RANGE: std::ops::RangeInclusive<i64> = 0..=10;
    /// Pause before a replayed action's first retry in ms, doubled for each further one.
    pub const REPLAY_RETRY_DELAY_MS_DEFAULT: i64 = 500;
    pub const REPLAY_RETRY_DELAY_MS_RANGE: std::ops::RangeInclusive<i64> = 0..=60_000;
    pub const LIST_LIMIT_DEFAULT: i64 = 20;
    pub const LIST_LIMIT_MAX: i64 = 100;
    /// Steps (or history items) in a page of `/v1/tasks/{id}/steps` and `/history` when the
    /// client names no `limit`.
    pub const STEP_PAGE_DEFAULT: i64 = 100;
    /// The largest `limit` of a page of steps or history items.
    pub const STEP_PAGE_MAX: i64 = 500;
}

/// Size of a task's browser viewport in CSS pixels (device scale factor 1, not mobile): what
/// the page lays out in and the screenshot shows, as browser-use's `viewport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ViewportSize {
    /// 320–3840.
    #[schema(minimum = 320, maximum = 3840)]
    pub width: i64,
    /// 240–2160.
    #[schema(minimum = 240, maximum = 2160)]
    pub height: i64,
}

impl ViewportSize {
    /// browser-use's default viewport, 1920×1080: the worker's default for tasks that set none.
    pub const BROWSER_USE: ViewportSize = ViewportSize {
        width: 1920,
        height: 1080,
    };

    /// Why this size is refused, naming the field (`viewport.width` / `viewport.height`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (field, value, range) in [
            ("viewport.width", self.width, limits::VIEWPORT_WIDTH_RANGE),
            (
                "viewport.height",
                self.height,
                limits::VIEWPORT_HEIGHT_RANGE,
            ),
        ] {
            if !range.contains(&value) {
                return Err((
                    field,
                    format!(
                        "{field} must be between {} and {} CSS pixels, got {value}",
                        range.start(),
                        range.end()
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for ViewportSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

impl std::str::FromStr for ViewportSize {
    type Err = String;

    /// `WIDTHxHEIGHT`, e.g. `1920x1080`, within the API's ranges.
    fn from_str(s: &str) -> Result<Self, String> {
        let (width, height) = s
            .trim()
            .split_once(['x', 'X', '×'])
            .ok_or_else(|| format!("expected WIDTHxHEIGHT (e.g. 1920x1080), got `{s}`"))?;
        let number = |part: &str, what: &str| {
            part.trim()
                .parse::<i64>()
                .map_err(|_| format!("{what} of `{s}` is not a whole number"))
        };
        let size = ViewportSize {
            width: number(width, "the width")?,
            height: number(height, "the height")?,
        };
        size.check().map_err(|(_, message)| message)?;
        Ok(size)
    }
}

/// Path of the screenshot of step `number` of task `task` (served by the api).
pub fn screenshot_path(task: TaskId, number: i32) -> String {
    format!("/v1/tasks/{task}/steps/{number}/screenshot")
}

/// Body of `POST /v1/tasks`, the input form of a task's options (`TaskOptions`): every option
/// may be left out. Unknown fields are rejected.
#[derive(Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskRequest {
    /// What the agent should do, in plain words (1–20 000 characters, not only whitespace).
    /// Required unless `replay_of` is given (a replay's default is its source's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 20000, pattern = r"\S")]
    pub task: Option<String>,
    /// Replay this task instead of running the agent: its recorded actions run again in a
    /// fresh browser without any model call, each element found again by its recorded
    /// identity (browser-use's `rerun_history`, `browserd replay`). The source must be one of
    /// the caller's tasks that has ended with recorded steps. A replay takes no `model`,
    /// `start_url`, `output_schema`, `use_vision`, `max_steps`, `max_actions_per_step`,
    /// `max_failures`, `max_tokens` or `max_cost_usd`; its domain lists, viewport, settle
    /// timeout and proxy default to the source's; its `secrets` fill the recorded
    /// `<secret>name</secret>` placeholders (the source's were wiped when it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub replay_of: Option<TaskId>,
    /// How a replay treats failures (only with `replay_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayOptionsRequest>,
    /// An http(s) URL the browser opens before the first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_url: Option<String>,
    /// Step budget, 1–10 000 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000, default = 100)]
    pub max_steps: Option<i64>,
    /// Name of a configured model; the server's default model when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Only these domains may be visited (patterns like `example.com`, `*.example.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    /// These domains may never be visited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prohibited_domains: Option<Vec<String>>,
    /// Write-only secrets the agent can use as `<secret>name</secret>`, in browser-use's
    /// `sensitive_data` shape: bound to domains, `{"https://*.bank.example": {"pw": "…"}}` (the
    /// patterns of `allowed_domains`; a value is used only in actions on a page of those
    /// domains, and in a `navigate` URL only to those domains), or flat, `{"pw": "…"}`, which
    /// needs `allowed_domains` (the secrets are then bound to those domains) or
    /// `allow_secrets_on_any_domain`. Never returned, logged or put in events.
    #[serde(
        default,
        skip_serializing_if = "never_serialized",
        serialize_with = "serialize_nothing"
    )]
    #[schema(value_type = Option<BTreeMap<String, crate::secrets::TaskSecretSchema>>)]
    pub secrets: Option<TaskSecrets>,
    /// Accept flat `secrets` without `allowed_domains`: the agent may then type them on any
    /// site (never into a URL, `evaluate` or `extract`), including one a page's text leads it
    /// to. Default false; prefer binding the secrets to their domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_secrets_on_any_domain: Option<bool>,
    /// A JSON Schema the final output must satisfy: at most 64 KiB, 64 levels of nesting, 256
    /// `$ref`s, 1 000 values per `enum`, and 20 000 nodes once its `$ref`s are inlined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// Send screenshots to the model (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_vision: Option<bool>,
    /// Actions per step, 1–20 (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 20, default = 5)]
    pub max_actions_per_step: Option<i64>,
    /// Consecutive failures tolerated, 0–50 (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 50, default = 5)]
    pub max_failures: Option<i64>,
    /// Wall-clock budget in seconds, 1–86 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_s: Option<i64>,
    /// Free-form string pairs (at most 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Token budget: the task ends (`failed`) once its model calls used more input + output
    /// tokens than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000000000)]
    pub max_tokens: Option<i64>,
    /// Cost budget in USD (from the model's price table): the task ends (`failed`) once its
    /// model calls cost more. Refused for a model without prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, maximum = 10000)]
    pub max_cost_usd: Option<f64>,
    /// Browser viewport, e.g. `{"width": 1920, "height": 1080}`; the worker's default
    /// (browser-use's 1920×1080 unless its operator changed it) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport: Option<ViewportSize>,
    /// Cap, in ms, of the wait after each action until the page has settled from what the
    /// action started (requests, short timers, a navigation, DOM changes); 0–30 000, 0 = do
    /// not wait. The worker's default (2 000) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 30000)]
    pub settle_timeout_ms: Option<i64>,
    /// Name of an upstream proxy configured by the operator (`--proxies`) that carries the
    /// task's browser traffic after the egress checks; unknown names are refused (422).
    /// Clients name a proxy, never send its URL or credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Draw the interactive elements' boxes and index numbers onto each step's screenshot
    /// (the one the model gets and the stored one), as browser-use's `highlight_elements`.
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highlight_elements: Option<bool>,
    /// A browser profile of the caller's (`/v1/profiles`): its cookies and localStorage are
    /// loaded into the task's browser before its first navigation, and what the task changes
    /// is saved back at every step boundary (so a login survives a crash). An unknown id, or
    /// another key's, is refused (422).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<uuid::Uuid>,
    /// Offer the agent the `ask_human` action (default true; the worker's operator may switch
    /// it off for every task): the task then waits (`waiting`) for a person's answer to its
    /// question (`POST /v1/tasks/{id}/input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_human: Option<bool>,
    /// How long, in seconds (1–86 400), the agent waits for an answer before the task fails;
    /// the worker's `--ask-human-timeout` (default 1 800) when omitted, and never more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub ask_human_timeout_s: Option<i64>,
}

/// A `CreateTaskRequest` serializes (for Rust clients such as `browserd tasks run`) with absent
/// fields left out and never its secrets.
fn never_serialized<T>(_: &T) -> bool {
    true
}

fn serialize_nothing<T, S: serde::Serializer>(_: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_none()
}

impl fmt::Debug for CreateTaskRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets are shown by name only.
        f.debug_struct("CreateTaskRequest")
            .field("task", &self.task)
            .field("replay_of", &self.replay_of)
            .field("replay", &self.replay)
            .field("start_url", &self.start_url)
            .field("max_steps", &self.max_steps)
            .field("model", &self.model)
            .field("allowed_domains", &self.allowed_domains)
            .field("prohibited_domains", &self.prohibited_domains)
            .field("secrets", &self.secrets)
            .field(
                "allow_secrets_on_any_domain",
                &self.allow_secrets_on_any_domain,
            )
            .field("output_schema", &self.output_schema)
            .field("use_vision", &self.use_vision)
            .field("max_actions_per_step", &self.max_actions_per_step)
            .field("max_failures", &self.max_failures)
            .field("timeout_s", &self.timeout_s)
            .field("metadata", &self.metadata)
            .field("max_tokens", &self.max_tokens)
            .field("max_cost_usd", &self.max_cost_usd)
            .field("viewport", &self.viewport)
            .field("settle_timeout_ms", &self.settle_timeout_ms)
            .field("proxy", &self.proxy)
            .field("highlight_elements", &self.highlight_elements)
            .field("profile_id", &self.profile_id)
            .field("ask_human", &self.ask_human)
            .field("ask_human_timeout_s", &self.ask_human_timeout_s)
            .finish()
    }
}

/// `replay` of `POST /v1/tasks`: the options of `browserd replay`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayOptionsRequest {
    /// Go on after an action that failed for good (default false: the replay stops there).
    /// The task still ends `failed` when any action failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_failures: Option<bool>,
    /// Further attempts of an action whose element is not found yet or that fails, 0–10
    /// (default 2); each attempt reads the page again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 10, default = 2)]
    pub max_retries: Option<i64>,
    /// Pause before the first retry in ms, doubled for each further one; 0–60 000
    /// (default 500). Each wait is at most 60 s, and one action's waits together at most
    /// 120 s: once they are spent the action fails even with retries left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 60000, default = 500)]
    pub retry_delay_ms: Option<i64>,
}

/// A replay's options as validated and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReplaySettings {
    pub skip_failures: bool,
    pub max_retries: u32,
    pub retry_delay_ms: u64,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        Self {
            skip_failures: false,
            max_retries: limits::REPLAY_MAX_RETRIES_DEFAULT as u32,
            retry_delay_ms: limits::REPLAY_RETRY_DELAY_MS_DEFAULT as u64,
        }
    }
}

/// One recorded action as a replay ran it (`GET /v1/tasks/{id}/replay-report`; the same
/// object is each replayed action result's `metadata.replay`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReplayActionView {
    /// Number of the replay task's step that ran it.
    #[serde(default)]
    pub replay_step: i32,
    /// Number of the source task's step that recorded it.
    pub step: u32,
    /// Action name.
    pub action: String,
    /// The element index the recorded action used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_index: Option<u64>,
    /// The index it used now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// How the element was found again: `index` (unchanged), `hash` (its identity hash),
    /// `x_path` (its place with the same tag and name), `ax_name` (its tag and accessible
    /// name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_by: Option<String>,
    /// Attempts made (0 for a skipped action).
    pub attempts: u32,
    /// `ok`, `failed` or `skipped` (`done` is not re-run; `extract` and the file actions
    /// need the agent's model or workspace).
    pub outcome: String,
    /// The error, or why it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `GET /v1/tasks/{id}/replay-report`: what a replay task did with each recorded action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReplayReportView {
    /// The replayed (source) task.
    #[schema(value_type = uuid::Uuid)]
    pub replay_of: TaskId,
    pub options: ReplaySettings,
    /// The replay task's status.
    pub status: TaskStatus,
    /// Every action that ran worked; `null` until the replay ended.
    pub success: Option<bool>,
    /// Why the replay failed (e.g. `element not found …`).
    pub error: Option<String>,
    /// The recorded run's final result (the replay's `output`).
    pub final_result: Option<String>,
    /// Every action replayed so far, in order.
    pub actions: Vec<ReplayActionView>,
}

/// A task as returned by the API. Secrets are never part of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    #[schema(value_type = uuid::Uuid)]
    pub id: TaskId,
    pub status: TaskStatus,
    pub task: String,
    /// The options the task runs with, defaults filled in.
    #[serde(flatten)]
    pub options: TaskOptions,
    /// Token usage and cost so far (browser-use's `UsageSummary`: `total`, `total_cost_usd`,
    /// `invocations`).
    #[schema(value_type = Option<Object>)]
    pub usage: Option<serde_json::Value>,
    /// While queued: its place by age among all queued tasks (1: the oldest). Claims take turns
    /// across keys, so with other keys' tasks waiting this is an upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i64>,
    /// Times a worker has claimed the task (more than 1 after a worker was lost).
    pub attempts: i32,
    /// Final result (a JSON string when `output_schema` was given).
    pub output: Option<String>,
    pub is_success: Option<bool>,
    pub error: Option<String>,
    /// Seq of the newest event; a WebSocket client can resume from any seq up to this one.
    pub last_event_seq: i64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
    /// The question the agent asks (`ask_human`) and waits for an answer to
    /// (`POST /v1/tasks/{id}/input`); only in a single task's view, and only while one is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<crate::QuestionEvent>,
}

/// Body of `POST /v1/tasks/{id}/input`: the answer to the question the task asks, as free
/// text (`answer`) or one of the question's `choices` (`choice`).
#[derive(Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// A free-text answer (1–4 096 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 4096)]
    pub answer: Option<String>,
    /// One of the question's `choices`, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    /// Treat the answer like a task secret: sealed at rest, never shown in events, history or
    /// to the model (which types it through a `<secret>` placeholder). Always so when the
    /// question asked for a secret. Needs the server's secrets key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<bool>,
}

impl fmt::Debug for AnswerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnswerRequest")
            .field("answer", &self.answer.as_ref().map(|_| "[REDACTED]"))
            .field("choice", &self.choice)
            .field("secret", &self.secret)
            .finish()
    }
}

/// A page of tasks, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskList {
    pub items: Vec<TaskView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// One agent step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepView {
    pub number: i32,
    pub url: Option<String>,
    pub title: Option<String>,
    /// The model's output for this step (browser-use `AgentOutput`).
    #[schema(value_type = Option<Object>)]
    pub model_output: Option<serde_json::Value>,
    /// Results of the executed actions.
    #[schema(value_type = Vec<Object>)]
    pub results: serde_json::Value,
    /// Token usage of the step.
    #[schema(value_type = Option<Object>)]
    pub usage: Option<serde_json::Value>,
    /// Path of the step's screenshot, when one was taken.
    pub screenshot_url: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub finished_at: OffsetDateTime,
}

/// A page of a task's steps, in order.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct StepList {
    pub items: Vec<StepView>,
    /// Pass as `after_step` to get the next page; `null` when no step after this page is
    /// stored yet (a running task may still add some).
    #[serde(default)]
    pub next_after_step: Option<i32>,
}

/// A page of a task's AgentHistory (`GET /v1/tasks/{id}/history`): the items of `browserd run
/// --history-out`'s file, in step order, and the task's usage so far.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryPage {
    /// AgentHistory items (step 0 is the initial navigation).
    #[schema(value_type = Vec<Object>)]
    pub history: Vec<serde_json::Value>,
    /// The task's `UsageSummary` so far.
    #[schema(value_type = Object)]
    pub usage: serde_json::Value,
    /// Pass as `after_step` to get the next page; `null` when no item after this page is
    /// stored yet.
    #[serde(default)]
    pub next_after_step: Option<i32>,
}

/// A file the agent left in its workspace when the task ended (`write_file` / `replace_file`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutputFileView {
    pub id: uuid::Uuid,
    pub file_name: String,
    pub content_type: String,
    /// Bytes (after secret values were replaced by their placeholders).
    pub size: i64,
    /// Why the content was not stored (over the 10 MiB per-file or 50 MiB per-task cap);
    /// `null` when it can be downloaded.
    pub skipped: Option<String>,
    /// Path of the download (`null` when skipped).
    pub download_url: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
}

/// A task's output files, by name.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct OutputFileList {
    pub items: Vec<OutputFileView>,
}

/// Every error response: `{"error":{"code":...,"message":...}}`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `task_not_found`, `validation_failed`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// The offending request field, for validation errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The task's status, for illegal status transitions (409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<TaskStatus>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_create_request_serializes_what_was_given_and_never_its_secrets() {
        let request = CreateTaskRequest {
            task: Some("t".to_owned()),
            max_steps: Some(3),
            secrets: Some(TaskSecrets::unbound([(
                "pw".to_owned(),
                secrecy::SecretString::from("hunter2"),
            )])),
            ..CreateTaskRequest::default()
        };
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(value, json!({"task": "t", "max_steps": 3}));
        // What it serializes reads back as the same request (without the secrets).
        let back: CreateTaskRequest = serde_json::from_value(value).unwrap();
        assert_eq!(back.max_steps, Some(3));
        assert!(back.secrets.is_none());
    }
}

/// What a WebSocket ticket (`POST /v1/tasks/{id}/events/ticket`) lets its bearer do with the
/// task's sockets. A key itself may do everything a `control` ticket may.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TicketScope {
    /// Watch only: the event stream and the live view's frames. A take-over input sent on a
    /// live socket opened with it closes the socket (1008). Safe to hand to anyone who may
    /// watch the task.
    #[default]
    View,
    /// Also drive the browser: take-over inputs on the live view (what the dashboard asks
    /// for when a person presses "Take over").
    Control,
}

impl TicketScope {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::View => "view",
            Self::Control => "control",
        }
    }

    /// The scope named `name` (`view`, `control`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "view" => Some(Self::View),
            "control" => Some(Self::Control),
            _ => None,
        }
    }

    /// Whether a socket opened with this scope may send take-over inputs.
    pub fn allows_input(self) -> bool {
        self == Self::Control
    }
}

/// Body of `POST /v1/tasks/{id}/events/ticket` (optional: no body is `{"scope": "view"}`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TicketRequest {
    /// `view` (default): the event stream and the live view's frames, nothing else.
    /// `control`: also take-over inputs on the live view. Ask for `control` only when a person
    /// takes over; hand out only `view` tickets.
    #[serde(default)]
    pub scope: TicketScope,
}
