//! Runs tasks: one task lifecycle ([`TaskRunner`]) used by `browserd run` and by the service's
//! workers ([`Worker`]: claim, lease, heartbeat, control, persistence through [`StoreSink`],
//! reaping, hand-back on shutdown; `browserd mcp` on stdio starts one in its process), and the
//! adapter from the browser crate to the agent's `AgentBrowser` trait.
//!
//! [`SessionBrowser`] wraps one leased [`browserd_browser::BrowserSession`]: `capture` turns a
//! `PageState` into the agent's `BrowserState` (both made of `browserd_views` values, passed
//! through), `action_specs` come from the browser crate's `Action` JSON schema (browser-use's
//! names, our descriptions, `browserd_views::terminates_sequence`), and `execute` deserializes
//! the model's parameters into an `Action` and runs it. [`TaskWorkspace`] is the one per-task directory shared by the agent
//! (todo.md, its file actions) and the browser session (downloads, uploads, PDFs, screenshots).
//!
//! Invariants: the agent owns `done`, `extract` and the file actions (the adapter never offers
//! them); every call is bounded in time (the browser crate's CDP and action timeouts, plus an
//! overall cap here); a dead browser is reported as a fatal `BrowserFailure`.

mod adapter;
pub mod admission;
mod browser_state;
mod human;
mod live;
mod output_files;
mod profile;
mod runner;
mod service;
mod sink;
mod specs;
mod takeover;
mod telemetry;
mod webhooks;
mod workspace;

pub use adapter::{SessionBrowser, SessionBrowserOptions};
pub use browser_state::BrowserState;
pub use human::{AskHumanSettings, StoreHuman};
pub use output_files::{collect_output_files, content_type_of};
pub use profile::{
    FileProfileSaver, MAX_PROFILE_BYTES, ProfileKeeper, ProfileLink, ProfileSaver, SaveResult,
    StoreProfileSaver, load_store_profile, merge as merge_profile_states, state_from_json,
    state_json,
};
pub use runner::{
    HEAL_MAX_MODEL_CALLS, LiveViewLink, ReplayOutcome, ReplayRequest, RunEnd, RunError, RunOutcome,
    RunRequest, RunnerSettings, SkillEnd, SkillRun, TaskRunner, TaskSpec, browser_viewport, failed,
    parse_viewport, secret_values,
};
pub use service::{TraceParent, Worker, WorkerConfig, sensitive_data, task_spec};
pub use sink::StoreSink;
pub use specs::browser_action_specs;
pub use takeover::{PersonInputRequest, TakeOverLink, apply_person_inputs};
pub use telemetry::describe_metrics;
pub use webhooks::{WebhookSettings, python_json, run_webhook_dispatcher, sign};
pub use workspace::TaskWorkspace;
