//! browser-use's views: the values the browser hands the agent and the agent records. What an
//! action returned ([`ActionResult`]), the page as a capture describes it ([`TabInfo`],
//! [`PageInfo`], [`PageStats`], [`Screenshot`]), a chunk of page markdown for `extract`
//! ([`MarkdownChunk`]), a browser failure as its caller sees it ([`BrowserFailure`]), and the
//! action names both sides must agree on ([`AGENT_OWNED_ACTIONS`], [`terminates_sequence`]).
//!
//! `browserd-browser` produces these and `browserd-agent` consumes them, so the worker's adapter
//! passes them through instead of copying fields; the agent stays free of Chrome.
//!
//! Invariant: plain data and pure functions (no I/O, no async); depends only on serde,
//! serde_json and thiserror.

mod action;
mod page;

pub use action::{
    AGENT_OWNED_ACTIONS, ActionResult, SENT_TO_PAGE, SEQUENCE_TERMINATING_ACTIONS,
    terminates_sequence,
};
pub use page::{
    BrowserFailure, ContentStats, MarkdownChunk, PageInfo, PageStats, Screenshot, ScreenshotFormat,
    TabInfo,
};
