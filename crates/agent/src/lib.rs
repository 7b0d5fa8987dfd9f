//! The agent loop of one task, reproducing browser-use's step: capture the page, render one state
//! message (history as text, workspace, page, one-shot content, nudges), ask the model for an
//! `AgentOutput` under a strict schema, run its actions with the sequence guards, and record an
//! [`AgentHistory`] item per step. Pure logic over two traits — [`AgentBrowser`] and
//! `browserd_llm::ChatModel` — reporting through an [`EventSink`]; no database and no HTTP here.
//!
//! Layout: [`agent`] (the loop, done/extract handling), [`messages`] (state message, history,
//! compaction), [`schema`] (AgentOutput schema from [`ActionSpec`]s), [`prompts`] (system prompt
//! files), [`loop_detector`], [`secrets`] (placeholders, TOTP, redaction), [`urls`] (URL
//! shortening, task URL), [`workspace`] (todo.md and file actions), [`views`] (records),
//! [`control`] (pause/resume/stop), [`events`], [`human`] (`ask_human` and its channel).
//!
//! Invariants: secret values never leave the agent in a message, event or record — they are put
//! into action parameters only when the action runs; the model sees only `[system, state,
//! ...nudges]`; every browser and model call is bounded in time; stop is honoured between steps
//! and during a model call.

pub mod agent;
pub mod browser;
pub mod config;
pub mod control;
pub mod domains;
pub mod error;
pub mod events;
pub mod human;
pub mod loop_detector;
pub mod messages;
pub mod prompts;
pub mod replay;
pub mod schema;
pub mod secrets;
pub mod skill;
pub mod telemetry;
pub mod urls;
pub mod views;
pub mod workspace;

pub use agent::Agent;
pub use browser::{
    ActionSpec, AgentBrowser, BrowserState, FocusInfo, MarkdownOptions, PageMarkdown,
};
pub use browserd_views::{
    ActionResult, BrowserFailure, ContentStats, MarkdownChunk, PageInfo, PageStats, SENT_TO_PAGE,
    Screenshot, ScreenshotFormat, TabInfo,
};
pub use config::{SecretEntry, SensitiveData, TaskConfig, VisionMode};
pub use control::AgentControl;
pub use error::AgentError;
pub use events::{AgentEvent, EventSink, NoopSink};
pub use human::{HumanAnswer, HumanChannel, HumanError, HumanQuestion, HumanSettings};
pub use views::{
    ActionCall, AgentHistory, AgentHistoryList, AgentOutput, BrowserStateHistory,
    InteractedElement, StepMetadata, UsageSummary,
};
