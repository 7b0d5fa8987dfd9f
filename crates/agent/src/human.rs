//! Ask a human: the `ask_human` action (a question, optional choices, optionally asking for a
//! secret) and the [`HumanChannel`] through which an answer comes back — the worker's goes
//! through the store (the task is `waiting` until `POST /v1/tasks/{id}/input`), `browserd run`'s
//! reads the terminal. The agent blocks on the channel (up to its timeout, stop ends the wait
//! at once), and the time spent waiting does not count against the step timeout. The answer is
//! the action's result; a secret answer becomes a task secret the model only sees as the
//! placeholder `<secret>answer_{question id}</secret>`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::browser::ActionSpec;

/// The action's name.
pub const ASK_HUMAN: &str = "ask_human";

/// Limits of the action's parameters (the model's question is cut, not refused).
pub const QUESTION_MAX_CHARS: usize = 2_000;
pub const CHOICES_MAX: usize = 20;
pub const CHOICE_MAX_CHARS: usize = 200;

/// The `ask_human` spec the model gets.
pub fn ask_human_spec() -> ActionSpec {
    ActionSpec {
        name: ASK_HUMAN.into(),
        description: "Ask the user a question and wait for the answer: only for what you \
cannot find or decide yourself (a one-time code sent to the user, a choice only the user can \
make, a confirmation before an irreversible step). Set `secret` when asking for a code or \
password; the answer then comes as a <secret>name</secret> placeholder to type with input."
            .into(),
        params_schema: json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "the question, self-contained"},
                "choices": {
                    "type": "array",
                    "items": {"type": "string"},
                    "default": [],
                    "description": "answers to choose from; empty for free text"
                },
                "secret": {"type": "boolean", "default": false, "description": "the answer is a secret (a code, a password)"}
            },
            "required": ["question"],
            "additionalProperties": false
        }),
        terminates_sequence: false,
        domains: Vec::new(),
    }
}

/// The id of the question asked by action `index` of step `step`: the same when a resumed
/// run asks it again.
pub fn question_id(step: u32, index: usize) -> String {
    format!("s{step}a{index}")
}

/// The secret name a secret answer to `question_id` is filled in under.
pub fn answer_secret_name(question_id: &str) -> String {
    format!("answer_{question_id}")
}

/// One question to a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HumanQuestion {
    /// [`question_id`].
    pub id: String,
    pub question: String,
    pub choices: Vec<String>,
    pub secret: bool,
    /// How long the agent waits at most.
    pub timeout: Duration,
}

/// A person's answer.
#[derive(Clone, PartialEq, Eq)]
pub struct HumanAnswer {
    pub text: String,
    /// Keep it out of everything the model, the events and the history see.
    pub secret: bool,
}

impl std::fmt::Debug for HumanAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = if self.secret {
            "[REDACTED]"
        } else {
            self.text.as_str()
        };
        f.debug_struct("HumanAnswer")
            .field("text", &text)
            .field("secret", &self.secret)
            .finish()
    }
}

/// Why no answer came.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HumanError {
    /// Nobody can answer here (e.g. `browserd run` without a terminal); the action fails and
    /// the agent goes on without the answer.
    #[error("{0}")]
    Unavailable(String),
    /// The question could not be delivered or its answer read; the run ends with this.
    #[error("{0}")]
    Fatal(String),
}

/// Where the agent's questions go and their answers come from.
#[async_trait]
pub trait HumanChannel: Send + Sync {
    /// Delivers `question` and waits for the answer (the agent bounds the wait by
    /// `question.timeout` and by stop).
    async fn ask(&self, question: &HumanQuestion) -> Result<HumanAnswer, HumanError>;
}

/// The ask_human settings of one agent.
#[derive(Clone)]
pub struct HumanSettings {
    pub channel: std::sync::Arc<dyn HumanChannel>,
    /// The longest wait for an answer.
    pub timeout: Duration,
}

impl std::fmt::Debug for HumanSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HumanSettings")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
