//! The agent's records: model output and the per-step history the store persists. Field names
//! follow browser-use's `AgentOutput` and `AgentHistory`; the `ActionResult`s they hold are
//! `browserd_views::ActionResult`.

use browserd_llm::TokenUsage;
use serde::de::Error as _;
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use browserd_views::{ActionResult, TabInfo};

/// One action the model asked for: serialised as `{"<name>": {params}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionCall {
    /// Action name.
    pub name: String,
    /// Parameters object.
    pub params: Value,
}

impl ActionCall {
    /// An action call.
    pub fn new(name: impl Into<String>, params: Value) -> Self {
        Self {
            name: name.into(),
            params,
        }
    }

    /// The `index` parameter, if any.
    pub fn index(&self) -> Option<u64> {
        self.params.get("index").and_then(Value::as_u64)
    }
}

impl Serialize for ActionCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(&self.name, &self.params)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ActionCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        let mut entries = map.into_iter();
        match (entries.next(), entries.next()) {
            (Some((name, params)), None) => Ok(Self { name, params }),
            _ => Err(D::Error::custom(
                "an action must be an object with exactly one key (the action name)",
            )),
        }
    }
}

/// What the model returns each step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentOutput {
    /// Free reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Did the previous step work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation_previous_goal: Option<String>,
    /// What to remember.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The immediate goal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_goal: Option<String>,
    /// Index of the plan item being worked on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_plan_item: Option<i64>,
    /// A new plan replacing the old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_update: Option<Vec<String>>,
    /// Actions to run in order.
    #[serde(default)]
    pub action: Vec<ActionCall>,
}

/// The element an action touched, as the browser described it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InteractedElement {
    /// Index the model used.
    pub index: u64,
    /// Tag name.
    #[serde(default)]
    pub node_name: String,
    /// Selected attributes.
    #[serde(default)]
    pub attributes: Map<String, Value>,
    /// XPath.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_path: Option<String>,
    /// Accessible name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ax_name: Option<String>,
    /// Stable hash for re-matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element_hash: Option<String>,
    /// Bounding box `{x, y, width, height}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Value>,
    /// The text of the element's own region when it was used: its largest ancestor holding no
    /// other element of the same tag and name (the row, card or option it belongs to), capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// In a skill's script: the element is the one whose region shows this text (a `{{name}}`
    /// slot, filled for each execution), not the recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near: Option<String>,
}

/// The page when the step started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowserStateHistory {
    /// URL.
    pub url: String,
    /// Title.
    pub title: String,
    /// Open tabs.
    pub tabs: Vec<TabInfo>,
    /// One entry per action (`None` when the action has no index).
    pub interacted_element: Vec<Option<InteractedElement>>,
    /// Where the event sink stored the screenshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot_ref: Option<String>,
}

/// Timing and usage of one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMetadata {
    /// Step number (0 = initial actions).
    pub step_number: u32,
    /// Epoch seconds.
    pub step_start_time: f64,
    /// Epoch seconds.
    pub step_end_time: f64,
    /// Time spent capturing the page.
    pub capture_ms: u64,
    /// Time spent waiting for the model (all calls of the step).
    pub model_ms: u64,
    /// Time spent running actions.
    pub actions_ms: u64,
    /// Of `actions_ms`, the time the actions waited for the page to settle (the sum of the
    /// results' `metadata.settle.ms`, reported by the browser).
    #[serde(default)]
    pub settle_ms: u64,
    /// Tokens of every model call of this step (incl. retries, extraction, compaction).
    pub usage: TokenUsage,
    /// Model calls made in this step.
    #[serde(default)]
    pub invocations: u32,
    /// Cost in USD when the model has a price table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One step as recorded: what the model said, what happened, where.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentHistory {
    /// `None` when the model produced nothing usable.
    pub model_output: Option<AgentOutput>,
    /// One per action that ran (or one error).
    pub result: Vec<ActionResult>,
    /// Page state at the start of the step.
    pub state: BrowserStateHistory,
    /// Timings and usage.
    pub metadata: StepMetadata,
    /// The state message the model saw (secrets redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_message: Option<String>,
}

/// Token usage of a whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    /// Sum of all calls.
    pub total: TokenUsage,
    /// Sum of known costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    /// Number of model calls.
    pub invocations: u32,
}

/// The whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentHistoryList {
    /// One item per step, in order.
    pub history: Vec<AgentHistory>,
    /// Token usage.
    pub usage: UsageSummary,
}

impl AgentHistoryList {
    fn last_result(&self) -> Option<&ActionResult> {
        self.history.last().and_then(|h| h.result.last())
    }

    /// The run ended with `done`.
    pub fn is_done(&self) -> bool {
        self.last_result().is_some_and(|r| r.is_done)
    }

    /// The run ended with `done(success=true)`.
    pub fn is_successful(&self) -> Option<bool> {
        self.last_result()
            .filter(|r| r.is_done)
            .and_then(|r| r.success)
    }

    /// Output of the last action (the `done` text or JSON).
    pub fn final_result(&self) -> Option<&str> {
        self.last_result()
            .and_then(|r| r.extracted_content.as_deref())
    }

    /// The final result parsed as JSON (structured output).
    pub fn structured_output(&self) -> Option<Value> {
        self.final_result()
            .and_then(|t| serde_json::from_str(t).ok())
    }

    /// First error of each step.
    pub fn errors(&self) -> Vec<Option<&str>> {
        self.history
            .iter()
            .map(|h| h.result.iter().find_map(|r| r.error.as_deref()))
            .collect()
    }

    /// Page URL of each step.
    pub fn urls(&self) -> Vec<&str> {
        self.history.iter().map(|h| h.state.url.as_str()).collect()
    }

    /// Names of every action that ran, in order.
    pub fn action_names(&self) -> Vec<&str> {
        self.history
            .iter()
            .filter_map(|h| h.model_output.as_ref())
            .flat_map(|o| o.action.iter().map(|a| a.name.as_str()))
            .collect()
    }

    /// Number of steps recorded.
    pub fn number_of_steps(&self) -> usize {
        self.history.len()
    }
}
