//! What one task asks for and the knobs of the loop (browser-use's defaults).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// When a screenshot goes to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VisionMode {
    /// Every step.
    #[default]
    Always,
    /// Never.
    Never,
    /// Only on the step after the `screenshot` action asked for one.
    Auto,
}

/// A task secret: one value everywhere, or values per domain pattern.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum SecretEntry {
    /// `name -> value`, usable on every page.
    Value(String),
    /// `domain pattern -> {name -> value}`, usable only on matching pages.
    Scoped(BTreeMap<String, String>),
}

impl std::fmt::Debug for SecretEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(_) => f.write_str("<redacted>"),
            Self::Scoped(map) => f.debug_list().entries(map.keys()).finish(),
        }
    }
}

/// One task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskConfig {
    /// What the user wants, in plain words.
    pub task: String,
    /// Opened before the first step.
    pub start_url: Option<String>,
    /// Open the only URL of the task first (when there is no start_url).
    pub directly_open_url: bool,
    /// JSON Schema the `done` data must satisfy.
    pub output_schema: Option<Value>,
    /// Secrets: `{name: value}` or `{domain_pattern: {name: value}}`. Names ending in `2fa_code`
    /// hold a base32 TOTP secret and produce the current 6-digit code.
    #[serde(skip_serializing)]
    pub sensitive_data: SensitiveData,
    /// Step budget.
    pub max_steps: u32,
    /// Consecutive failures before the done-only attempt.
    pub max_failures: u32,
    /// Make one done-only call after `max_failures`.
    pub final_response_after_failure: bool,
    /// Actions run per step at most.
    pub max_actions_per_step: usize,
    /// Offer the `thinking` field.
    pub use_thinking: bool,
    /// Reduced output (memory + action) and the short prompt.
    pub flash_mode: bool,
    /// Offer `plan_update` / `current_plan_item` and the planning nudges.
    pub enable_planning: bool,
    /// Consecutive failures before the replan nudge (0 = off).
    pub planning_replan_on_stall: u32,
    /// Steps without a plan before the planning nudge (0 = off).
    pub planning_exploration_limit: u32,
    /// Screenshot policy.
    pub use_vision: VisionMode,
    /// History items kept in the prompt (None = all; else > 5).
    pub max_history_items: Option<usize>,
    /// DOM text cap in characters.
    pub max_clickable_elements_length: usize,
    /// Compact history every N steps…
    pub compact_every_n_steps: u32,
    /// …once the rendered history is at least this long (chars).
    pub compaction_trigger_chars: usize,
    /// History items kept after compaction (besides the first).
    pub compaction_keep_last: usize,
    /// Summary length cap.
    pub compaction_summary_max_chars: usize,
    /// Queries+fragments longer than this are shortened in prompts (0 = off).
    pub url_shortening_limit: usize,
    /// The loop detector is on.
    pub loop_detection_enabled: bool,
    /// Actions the loop detector looks back over.
    pub loop_detection_window: usize,
    /// One model call at most this long.
    #[serde(with = "secs")]
    pub llm_timeout: Duration,
    /// One step at most this long.
    #[serde(with = "secs")]
    pub step_timeout: Duration,
    /// Files the agent may read besides its workspace (absolute paths).
    pub available_file_paths: Vec<String>,
    /// Workspace directory (todo.md, written files); a fresh temp dir when None.
    pub workspace_dir: Option<PathBuf>,
    /// Inline the contents of `files_to_display` in the done text.
    pub display_files_in_done_text: bool,
    /// Appended to the system prompt.
    pub extend_system_message: Option<String>,
    /// Replaces the system prompt.
    pub override_system_message: Option<String>,
    /// Keep the rendered state message in each history item.
    pub record_state_message: bool,
}

/// A default from the one table of task defaults (`browserd_types::dto::limits`).
fn limit(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

impl Default for TaskConfig {
    fn default() -> Self {
        use browserd_types::dto::limits;
        Self {
            task: String::new(),
            start_url: None,
            directly_open_url: true,
            output_schema: None,
            sensitive_data: SensitiveData::default(),
            max_steps: limit(limits::MAX_STEPS_DEFAULT),
            max_failures: limit(limits::MAX_FAILURES_DEFAULT),
            final_response_after_failure: true,
            max_actions_per_step: limit(limits::MAX_ACTIONS_PER_STEP_DEFAULT) as usize,
            use_thinking: true,
            flash_mode: false,
            enable_planning: true,
            planning_replan_on_stall: 3,
            planning_exploration_limit: 5,
            use_vision: if limits::USE_VISION_DEFAULT {
                VisionMode::Always
            } else {
                VisionMode::Never
            },
            max_history_items: None,
            max_clickable_elements_length: 40_000,
            compact_every_n_steps: 25,
            compaction_trigger_chars: 40_000,
            compaction_keep_last: 6,
            compaction_summary_max_chars: 6_000,
            url_shortening_limit: 25,
            loop_detection_enabled: true,
            loop_detection_window: 20,
            llm_timeout: Duration::from_secs(90),
            step_timeout: Duration::from_secs(180),
            available_file_paths: Vec::new(),
            workspace_dir: None,
            display_files_in_done_text: true,
            extend_system_message: None,
            override_system_message: None,
            record_state_message: true,
        }
    }
}

impl TaskConfig {
    /// A task with default settings.
    pub fn new(task: impl Into<String>) -> Self {
        Self {
            task: task.into(),
            ..Self::default()
        }
    }

    /// Checks values that would make the loop misbehave.
    pub fn validate(&self) -> Result<(), String> {
        if self.task.trim().is_empty() {
            return Err("the task is empty".to_owned());
        }
        if self.max_steps == 0 {
            return Err("max_steps must be at least 1".to_owned());
        }
        if self.max_actions_per_step == 0 {
            return Err("max_actions_per_step must be at least 1".to_owned());
        }
        if self.max_history_items.is_some_and(|n| n <= 5) {
            return Err("max_history_items must be greater than 5".to_owned());
        }
        if let Some(schema) = &self.output_schema {
            if !schema.is_object() {
                return Err("output_schema must be a JSON object".to_owned());
            }
            jsonschema::validator_for(schema)
                .map_err(|e| format!("output_schema is not a valid JSON Schema: {e}"))?;
        }
        if self.llm_timeout.is_zero() || self.step_timeout.is_zero() {
            return Err("timeouts must be positive".to_owned());
        }
        Ok(())
    }
}

/// Task secrets; `Debug` shows only their names.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SensitiveData(pub BTreeMap<String, SecretEntry>);

impl std::fmt::Debug for SensitiveData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names = Vec::new();
        for (key, entry) in &self.0 {
            match entry {
                SecretEntry::Value(_) => names.push(key.clone()),
                SecretEntry::Scoped(map) => {
                    names.extend(map.keys().map(|name| format!("{key}:{name}")));
                }
            }
        }
        f.debug_list().entries(names).finish()
    }
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}
