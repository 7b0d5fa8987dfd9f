//! Skills: a recorded run made reusable. A [`SkillScript`] is the run's steps with a `{{name}}`
//! slot wherever the run used a parameter's value (typed text, a selected option, a URL, the
//! final result, and the element chosen because its row, card or option showed the value), the
//! parameters it takes, and how its result is read from the final page without a model
//! ([`ResultReader`]). [`bind`] fills the slots for one execution; the replay
//! ([`crate::replay`]) runs it, asking a [`StepHealer`] for a step whose element or expected
//! effect is gone; [`healed_script`] turns an execution that healed into the next version.
//!
//! Secrets never enter a skill: the history already holds `<secret>name</secret>`
//! placeholders, never values, and a value inside a placeholder is never made a parameter.
//!
//! Layout: [`params`] (declarations, slots, whole-value matching), `script` ([`make_script`],
//! [`healed_script`], proposed parameters), `bind` ([`bind`]), `result` ([`read_result`],
//! [`learn_result`]), `heal` ([`ModelHealer`]), [`expect`] (the page a step must reach).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub mod expect;
pub mod params;

mod bind;
mod heal;
mod result;
mod script;

pub use bind::{check_values, fill_history};

use crate::browser::AgentBrowser;
use crate::replay::ReplayReport;
use crate::views::{AgentHistory, AgentHistoryList};

/// Why a skill could not be made, bound or read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SkillError {
    /// The prompt's `{{…}}` declarations are malformed (the message says where).
    #[error("{0}")]
    Prompt(String),
    /// The values given for an execution do not fit the parameters (missing, unknown, wrong
    /// type); the message names the parameter.
    #[error("{0}")]
    Parameters(String),
    /// The result could not be read from the final page, or did not validate against the
    /// output schema.
    #[error("{0}")]
    Result(String),
    /// The stored script cannot be used.
    #[error("{0}")]
    Script(String),
}

/// The type of a parameter's value (the cloud's `ParameterType`, without objects, arrays and
/// cookies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ParameterKind {
    #[default]
    String,
    Number,
    Boolean,
}

/// One input of a skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillParameter {
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: ParameterKind,
    /// Declared in the prompt: required unless it has a default. Proposed (a typed value the
    /// prompt did not declare): optional, the recorded value as default.
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A prompt's parameters: `{{name}}` (required, no example) or `{{name=example}}` (the
/// generating run uses the example).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SkillPrompt {
    /// In order of first appearance, each once.
    pub parameters: Vec<SkillParameter>,
    /// The example of each parameter that has one.
    pub examples: BTreeMap<String, String>,
}

/// Reads the `{{name}}` / `{{name=example}}` declarations of `prompt`. Names are
/// `[A-Za-z_][A-Za-z0-9_]*`; a name declared twice with different examples, an empty name or
/// an unclosed `{{` is a [`SkillError::Prompt`].
pub fn parse_prompt(prompt: &str) -> Result<SkillPrompt, SkillError> {
    params::parse_prompt(prompt)
}

/// `prompt` with each declaration replaced by `values[name]`, else its example; a parameter
/// with neither is a [`SkillError::Parameters`].
pub fn fill_prompt(prompt: &str, values: &BTreeMap<String, String>) -> Result<String, SkillError> {
    params::fill_prompt(prompt, values)
}

/// How an execution's result is read from its final page, with no model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultReader {
    /// The body of a JavaScript function run on the final page (the model wrote it once,
    /// during generation, and it was checked against the generating run's result); it
    /// returns the result (a string, or JSON matching the skill's output schema). `{{name}}`
    /// slots in it are filled like the steps'.
    Script { function: String },
    /// The recorded final text with `{{name}}` slots (a result that reads nothing from the
    /// page, e.g. "Order placed").
    Text { template: String },
}

/// One version of a skill: what an execution replays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillScript {
    /// The recorded steps (those with a model output), values replaced by `{{name}}` slots;
    /// an element chosen by the row that showed a value has `InteractedElement::near` set to
    /// the slot.
    pub steps: AgentHistoryList,
    /// Declared parameters first, then proposed ones.
    pub parameters: Vec<SkillParameter>,
    pub result: ResultReader,
}

/// The script of a finished run: every place the run used a value of `values` (the generating
/// run's value of each parameter) becomes that parameter's slot; typed values the prompt did
/// not declare are proposed as optional parameters with the recorded value as default. The
/// result is the recorded final text as a [`ResultReader::Text`] until [`learn_result`]
/// replaces it.
pub fn make_script(
    history: &AgentHistoryList,
    declared: &[SkillParameter],
    values: &BTreeMap<String, String>,
) -> SkillScript {
    script::make_script(history, declared, values)
}

/// The values of one execution, checked against `script.parameters` (unknown names, missing
/// required ones and wrong types are [`SkillError::Parameters`]; defaults fill the rest), as
/// text, and the steps with every slot filled.
pub fn bind(
    script: &SkillScript,
    values: &Map<String, Value>,
) -> Result<(BTreeMap<String, String>, AgentHistoryList), SkillError> {
    bind::bind(script, values)
}

/// Reads the result of an execution from the page `browser` shows now, and checks it against
/// `output_schema` (a string result must not be empty). A result that does not validate is an
/// error, never a silent wrong answer.
pub async fn read_result(
    browser: &dyn AgentBrowser,
    reader: &ResultReader,
    values: &BTreeMap<String, String>,
    output_schema: Option<&Value>,
) -> Result<Value, SkillError> {
    result::read_result(browser, reader, values, output_schema).await
}

/// What [`learn_result`] settled on.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedResult {
    pub reader: ResultReader,
    /// Model calls it made (usage is reported through the model's own accounting).
    pub model_calls: u32,
    /// Why the script was not used, when it fell back to the text.
    pub note: Option<String>,
}

/// Asks `model` once (and once more with the error, if the first script does not reproduce
/// `final_result` on the page `browser` shows now) for a [`ResultReader::Script`] reading the
/// generating run's result; falls back to the recorded text when no script reproduces it.
pub async fn learn_result(
    model: &dyn browserd_llm::ChatModel,
    browser: &dyn AgentBrowser,
    goal: &str,
    final_result: &str,
    output_schema: Option<&Value>,
    values: &BTreeMap<String, String>,
) -> LearnedResult {
    result::learn_result(model, browser, goal, final_result, output_schema, values).await
}

/// A recorded step the replay could not carry out as recorded.
#[derive(Debug, Clone)]
pub struct HealRequest<'a> {
    /// The recorded step.
    pub recorded: &'a AgentHistory,
    /// Why: the element not found (named), or the expected page not reached.
    pub reason: String,
    /// The URL the recorded run was on after this step, when the step went somewhere.
    pub expected_url: Option<String>,
    /// Number the first step the healer records should carry.
    pub next_step_number: u32,
    /// The execution's control: a stop ends the healer's model call too.
    pub control: crate::control::AgentControl,
}

/// What healing one step did.
#[derive(Debug, Clone, Default)]
pub struct HealOutcome {
    /// The steps the model took (each recorded and emitted through the run's sink like an
    /// agent step); they take the failed step's place in the next version.
    pub records: Vec<AgentHistory>,
    pub model_calls: u32,
    /// The step's purpose was reached; otherwise `error` says why not.
    pub healed: bool,
    pub error: Option<String>,
}

/// Heals one step by asking a model for that step alone.
#[async_trait]
pub trait StepHealer: Send + Sync {
    async fn heal(&self, request: HealRequest<'_>) -> HealOutcome;
}

/// A step healed during an execution, for its report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealedStep {
    /// The recorded step's number.
    pub step: u32,
    pub reason: String,
    pub model_calls: u32,
}

/// The next version of `previous` after an execution that healed: the execution's steps
/// (healed ones in place of the recorded ones that failed) with the execution's `values` made
/// slots again; the parameters and the result reader stay.
pub fn healed_script(
    previous: &SkillScript,
    execution: &AgentHistoryList,
    report: &ReplayReport,
    values: &BTreeMap<String, String>,
) -> SkillScript {
    script::healed_script(previous, execution, report, values)
}

/// The healer the worker gives a skill execution: the task's model asked for one step at a
/// time, with the skill's goal, the parameters' values and the recorded step as context, at
/// most `max_model_calls` per failed step.
pub struct ModelHealer {
    pub model: Arc<dyn browserd_llm::ChatModel>,
    pub browser: Arc<dyn AgentBrowser>,
    pub sink: Arc<dyn crate::events::EventSink>,
    pub goal: String,
    pub values: BTreeMap<String, String>,
    pub max_model_calls: u32,
}

#[async_trait]
impl StepHealer for ModelHealer {
    async fn heal(&self, request: HealRequest<'_>) -> HealOutcome {
        heal::heal(self, request).await
    }
}
