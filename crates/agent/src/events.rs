//! What the agent reports while it runs. The worker persists and publishes; the CLI prints.

use async_trait::async_trait;
use browserd_views::{ActionResult, Screenshot};
use serde::{Deserialize, Serialize};

use crate::views::{ActionCall, AgentHistory, AgentOutput};
use browserd_llm::TokenUsage;

/// One event. Every text in it has the task's secrets replaced by placeholders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The run began.
    TaskStarted {
        /// The task (redacted).
        task: String,
    },
    /// A step began (0 = initial navigation).
    StepStarted {
        /// Step number.
        step: u32,
        /// Page URL at the start.
        url: String,
    },
    /// The model answered.
    ModelOutput {
        /// Step number.
        step: u32,
        /// The parsed answer.
        output: AgentOutput,
        /// Tokens of the call(s).
        usage: TokenUsage,
    },
    /// An action finished.
    ActionResult {
        /// Step number.
        step: u32,
        /// Position in the step's action list.
        index: usize,
        /// The action as the model wrote it.
        action: ActionCall,
        /// What happened.
        result: ActionResult,
    },
    /// A step finished and its record is final.
    StepFinished {
        /// The record the store persists.
        record: Box<AgentHistory>,
    },
    /// The run is paused between steps.
    Paused,
    /// The run goes on.
    Resumed,
    /// The run ended.
    Finished {
        /// Ended with `done`.
        is_done: bool,
        /// The agent's verdict.
        success: Option<bool>,
        /// Final text or JSON.
        final_result: Option<String>,
        /// Why it ended without `done` (stopped, max steps, failures).
        error: Option<String>,
    },
}

/// Receives events in order. Implementations must not block for long (they run inline).
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Handles one event.
    async fn emit(&self, event: AgentEvent);

    /// Stores a step's screenshot and returns a reference for the history (path, artifact id).
    async fn store_screenshot(&self, _step: u32, _screenshot: &Screenshot) -> Option<String> {
        None
    }
}

/// Drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopSink;

#[async_trait]
impl EventSink for NoopSink {
    async fn emit(&self, _event: AgentEvent) {}
}
