//! Runs tasks: the adapter from the browser crate to the agent's `AgentBrowser` trait; later the
//! claim/lease loop.
//!
//! [`SessionBrowser`] wraps one leased [`browserd_browser::BrowserSession`]: `capture` turns a
//! `PageState` into the agent's `BrowserState`, `action_specs` come from the browser crate's
//! `Action` JSON schema (browser-use's names, descriptions and `terminates_sequence`), and
//! `execute` deserializes the model's parameters into an `Action` and runs it, mapping the
//! result field by field. [`TaskWorkspace`] is the one per-task directory shared by the agent
//! (todo.md, its file actions) and the browser session (downloads, uploads, PDFs, screenshots).
//!
//! Invariants: the agent owns `done`, `extract` and the file actions (the adapter never offers
//! them); every call is bounded in time (the browser crate's CDP and action timeouts, plus an
//! overall cap here); a dead browser is reported as a fatal `BrowserError`.

mod adapter;
mod specs;
mod workspace;

pub use adapter::{SessionBrowser, SessionBrowserOptions};
pub use specs::{AGENT_OWNED_ACTIONS, browser_action_specs};
pub use workspace::TaskWorkspace;
