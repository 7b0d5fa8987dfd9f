//! Errors of the browser crate.

use std::time::Duration;

/// Everything that can go wrong while driving Chrome.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// Chrome could not be started or reached.
    #[error("failed to launch chrome: {0}")]
    Launch(String),
    /// The DevTools websocket could not be opened.
    #[error("failed to connect to {endpoint}: {reason}")]
    Connect { endpoint: String, reason: String },
    /// A CDP command did not answer in time.
    #[error("CDP command {method} timed out after {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    /// Chrome answered a CDP command with an error object.
    #[error("CDP command {method} failed: {message} (code {code})")]
    Protocol {
        method: String,
        code: i64,
        message: String,
    },
    /// The page's renderer died (crashed, or killed for its memory) while or before the command
    /// ran on it; the next capture replaces the tab.
    #[error("the page's renderer died; CDP command {method} was not run")]
    TargetCrashed { method: String },
    /// The websocket to Chrome is gone (Chrome died or closed the connection).
    #[error("connection to chrome closed")]
    ConnectionClosed,
    /// A CDP answer did not have the expected shape.
    #[error("unexpected CDP answer to {method}: {reason}")]
    Decode { method: String, reason: String },
    /// An error reported by chromiumoxide.
    #[error("chromiumoxide: {0}")]
    Chromiumoxide(String),
    /// The pool was shut down.
    #[error("browser pool is shut down")]
    PoolShutDown,
    /// No tab with this id is open in the session.
    #[error("no tab {0} in this session")]
    TabNotFound(String),
    /// A caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The egress guard could not be installed or the policy is invalid.
    #[error("egress: {0}")]
    Egress(String),
    /// Filesystem / process errors (user-data-dir etc).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl From<chromiumoxide::error::CdpError> for BrowserError {
    fn from(err: chromiumoxide::error::CdpError) -> Self {
        BrowserError::Chromiumoxide(err.to_string())
    }
}

impl BrowserError {
    /// The browser is gone (died, disconnected, never started, pool shut down): nothing more
    /// can be done with this session.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            BrowserError::ConnectionClosed
                | BrowserError::PoolShutDown
                | BrowserError::Launch(_)
                | BrowserError::Connect { .. }
        )
    }
}

/// The error as the agent sees it; a fatal one ends the task.
impl From<BrowserError> for browserd_views::BrowserFailure {
    fn from(err: BrowserError) -> Self {
        if err.is_fatal() {
            Self::fatal(format!("the browser is gone: {err}"))
        } else {
            Self::new(err.to_string())
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = BrowserError> = std::result::Result<T, E>;
