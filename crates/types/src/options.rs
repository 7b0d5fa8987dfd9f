//! A task's options as validated and stored: the one definition of what a task runs with.
//!
//! `POST /v1/tasks` (and the `/api/v2` and MCP requests, through it) is the input form, where
//! every option may be left out; validation turns it into a [`TaskOptions`] with the defaults
//! filled in. From there the same struct is the store's row, the API's view (flattened into
//! [`TaskView`](crate::dto::TaskView)), and what the worker runs. The store keeps it whole in
//! one `options jsonb` column, and a field a stored row lacks takes its default when read, so
//! a new task option is: a field here (with its default), its input field and rule, and the
//! code that uses it — no migration, no query to edit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::dto::{ViewportSize, limits};

/// What a task runs with, defaults filled in. Secrets are not part of it (they are write-only
/// and sealed apart).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
// Reading is tolerant of rows stored before a field existed: a missing field takes its value
// from `TaskOptions::default()`. Every field is still written, and the view always shows it
// (`#[schema(required)]` keeps those that are not `Option`s required in the OpenAPI document).
#[serde(default)]
pub struct TaskOptions {
    /// The http(s) URL the browser opens before the first step.
    pub start_url: Option<String>,
    /// Step budget.
    #[schema(required)]
    pub max_steps: i32,
    /// Name of a configured model; `null` for a replay (no model calls).
    pub model: Option<String>,
    /// Only these domains may be visited (empty: any, unless prohibited).
    #[schema(required)]
    pub allowed_domains: Vec<String>,
    /// These domains may never be visited.
    #[schema(required)]
    pub prohibited_domains: Vec<String>,
    /// The JSON Schema the final output must satisfy.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// Screenshots go to the model.
    #[schema(required)]
    pub use_vision: bool,
    /// Actions per step at most.
    #[schema(required)]
    pub max_actions_per_step: i32,
    /// Consecutive failures tolerated.
    #[schema(required)]
    pub max_failures: i32,
    /// Wall-clock budget in seconds, counted from the first start.
    pub timeout_s: Option<i32>,
    /// The client's free-form string pairs (never shown to the model).
    #[schema(required)]
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
    #[schema(required)]
    pub highlight_elements: bool,
    /// The browser profile (`/v1/profiles`) the task starts from and saves back into at every
    /// step boundary; `null` = none.
    pub profile_id: Option<uuid::Uuid>,
    /// The agent may ask a person (`ask_human`), unless the worker's operator switched it off.
    #[schema(required)]
    pub ask_human: bool,
    /// The most the agent waits for an answer, in seconds; `null` = the worker's cap.
    pub ask_human_timeout_s: Option<i32>,
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
            profile_id: None,
            ask_human: true,
            ask_human_timeout_s: None,
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
            profile_id: Some(uuid::Uuid::from_u128(
                0x0190_0000_0000_7000_8000_0000_0000_0001,
            )),
            ask_human: false,
            ask_human_timeout_s: Some(90),
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

    /// The most the agent waits for a person's answer, as the task asked (`None`: the
    /// worker's cap).
    pub fn ask_human_timeout(&self) -> Option<Duration> {
        self.ask_human_timeout_s
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A row stored before an option existed reads back with that option's default, whatever
    /// the option: each field in turn is left out of an otherwise complete JSON.
    #[test]
    fn a_missing_field_takes_its_default() {
        let set = TaskOptions::every_option_set();
        let serde_json::Value::Object(full) = serde_json::to_value(&set).unwrap() else {
            panic!("options serialize to an object");
        };
        let defaults = serde_json::to_value(TaskOptions::default()).unwrap();
        for field in full.keys() {
            let mut lacking = full.clone();
            lacking.remove(field);
            let read: TaskOptions = serde_json::from_value(lacking.into()).unwrap();
            let mut want = full.clone();
            want.insert(field.clone(), defaults[field].clone());
            assert_eq!(
                serde_json::to_value(&read).unwrap(),
                serde_json::Value::Object(want),
                "{field}"
            );
        }
        let read: TaskOptions = serde_json::from_str(r#"{"max_steps": 7}"#).unwrap();
        assert_eq!(
            read,
            TaskOptions {
                max_steps: 7,
                ..TaskOptions::default()
            }
        );
        assert_eq!(
            serde_json::from_str::<TaskOptions>("{}").unwrap(),
            TaskOptions::default()
        );
    }

    #[test]
    fn every_option_round_trips_through_json() {
        let set = TaskOptions::every_option_set();
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(serde_json::from_str::<TaskOptions>(&json).unwrap(), set);
        let defaults = TaskOptions::default();
        let json = serde_json::to_string(&defaults).unwrap();
        assert_eq!(
            serde_json::from_str::<TaskOptions>(&json).unwrap(),
            defaults
        );
    }
}
