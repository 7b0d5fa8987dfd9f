//! A task's options as validated and stored: the one definition of what a task runs with.
//!
//! `POST /v1/tasks` (and the `/api/v2` and MCP requests, through it) is the input form, where
//! every option may be left out; validation turns it into a [`TaskOptions`] with the defaults
//! filled in. From there the same struct is the store's row, the API's view (flattened into
//! [`TaskView`](crate::dto::TaskView)), and what the worker runs. A new task option is: a
//! field here, its input field and rule, a migration, and the code that uses it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::dto::{ViewportSize, limits};

/// What a task runs with, defaults filled in. Secrets are not part of it (they are write-only
/// and sealed apart).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskOptions {
    /// The http(s) URL the browser opens before the first step.
    pub start_url: Option<String>,
    /// Step budget.
    pub max_steps: i32,
    /// Name of a configured model; `null` for a replay (no model calls).
    pub model: Option<String>,
    /// Only these domains may be visited (empty: any, unless prohibited).
    pub allowed_domains: Vec<String>,
    /// These domains may never be visited.
    pub prohibited_domains: Vec<String>,
    /// The JSON Schema the final output must satisfy.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// Screenshots go to the model.
    pub use_vision: bool,
    /// Actions per step at most.
    pub max_actions_per_step: i32,
    /// Consecutive failures tolerated.
    pub max_failures: i32,
    /// Wall-clock budget in seconds, counted from the first start.
    pub timeout_s: Option<i32>,
    /// The client's free-form string pairs (never shown to the model).
    pub metadata: BTreeMap<String, String>,
    /// Token budget (input + output of every model call).
    pub max_tokens: Option<i64>,
    /// Cost budget in USD.
    pub max_cost_usd: Option<f64>,
    /// The viewport the task asked for; `null` = the worker's default.
    pub viewport: Option<ViewportSize>,
    /// The settle cap the task asked for (ms); `null` = the worker's default.
    pub settle_timeout_ms: Option<i32>,
    /// The upstream proxy the task routes through, by name; `null` = none.
    pub proxy: Option<String>,
    /// Step screenshots carry the elements' boxes and indices.
    pub highlight_elements: bool,
}

impl Default for TaskOptions {
    /// The defaults of `POST /v1/tasks` (no start URL, the registry's default model).
    fn default() -> Self {
        Self {
            start_url: None,
            max_steps: limits::MAX_STEPS_DEFAULT as i32,
            model: None,
            allowed_domains: Vec::new(),
            prohibited_domains: Vec::new(),
            output_schema: None,
            use_vision: limits::USE_VISION_DEFAULT,
            max_actions_per_step: limits::MAX_ACTIONS_PER_STEP_DEFAULT as i32,
            max_failures: limits::MAX_FAILURES_DEFAULT as i32,
            timeout_s: None,
            metadata: BTreeMap::new(),
            max_tokens: None,
            max_cost_usd: None,
            viewport: None,
            settle_timeout_ms: None,
            proxy: None,
            highlight_elements: false,
        }
    }
}

impl TaskOptions {
    /// Options where every field differs from its default, so that a test of a mapping (the
    /// store's columns, the worker's spec) sees any field it forgets.
    #[cfg(any(test, feature = "test-util"))]
    pub fn every_option_set() -> Self {
        Self {
            start_url: Some("https://shop.example.com/".to_owned()),
            max_steps: 42,
            model: Some("gpt".to_owned()),
            allowed_domains: vec!["*.example.com".to_owned()],
            prohibited_domains: vec!["ads.example.com".to_owned()],
            output_schema: Some(serde_json::json!({"type": "object"})),
            use_vision: false,
            max_actions_per_step: 7,
            max_failures: 2,
            timeout_s: Some(600),
            metadata: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            max_tokens: Some(5000),
            max_cost_usd: Some(1.5),
            viewport: Some(ViewportSize {
                width: 1280,
                height: 720,
            }),
            settle_timeout_ms: Some(750),
            proxy: Some("corp".to_owned()),
            highlight_elements: true,
        }
    }

    /// The step budget as a count (at least 1).
    pub fn step_budget(&self) -> u32 {
        u32::try_from(self.max_steps).unwrap_or(1).max(1)
    }

    /// Actions per step as a count (at least 1).
    pub fn actions_per_step(&self) -> usize {
        usize::try_from(self.max_actions_per_step)
            .unwrap_or(1)
            .max(1)
    }

    /// Consecutive failures tolerated as a count.
    pub fn failure_budget(&self) -> u32 {
        u32::try_from(self.max_failures).unwrap_or(0)
    }

    /// The token budget as a count (`None`: none).
    pub fn token_budget(&self) -> Option<u64> {
        self.max_tokens.and_then(|t| u64::try_from(t).ok())
    }

    /// The wall-clock budget of a whole run (`None`: none).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_s
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
    }

    /// The settle cap the task asked for (`None`: the worker's default; zero: do not wait).
    pub fn settle_timeout(&self) -> Option<Duration> {
        self.settle_timeout_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis)
    }
}
