//! Enforcement of an [`EgressPolicy`] on every request of a browser context, through CDP Fetch
//! interception on every target: pages, popups and new tabs, cross-origin iframes (OOPIFs),
//! workers.
//!
//! How: the guards of one Chrome's contexts share one CDP connection of their own (a hub,
//! [`super::link`]), which sends a browser-level `Target.setAutoAttach {autoAttach,
//! waitForDebuggerOnStart, flatten}` once. Every new target is then attached to the hub
//! *paused*; the hub hands it to the guard of its browser context (or of its parent target),
//! which enables `Fetch` (all URLs, request stage) and the same auto-attach on the target's
//! session (so its OOPIFs and workers arrive paused too), and only then resumes it with
//! `Runtime.runIfWaitingForDebugger`. Targets of contexts without a guard are resumed and
//! detached at once. One connection per Chrome rather than one per guard: Chrome holds a new
//! target until every auto-attached client has resumed it, so with a connection per context
//! each tab waited for every other task's guard, and each guard attached to every target of
//! the browser (docs/src/benchmarks.md). A [`EgressScope::WholeBrowser`] guard keeps a
//! connection of its own.
//!
//! Each `Fetch.requestPaused` (redirect hops arrive as new pauses) is checked with
//! [`EgressPolicy::check_url_resolved`] in its own task and answered with `Fetch.continueRequest`
//! or `Fetch.failRequest {errorReason: BlockedByClient}`. Invariants:
//! - every paused request is answered; a check that errs, panics or times out fails closed;
//! - a target whose interception could not be enabled is never resumed (pages are closed);
//! - every CDP call has a timeout; every block is recorded for [`EgressGuard::drain_blocked`].

mod hub;
mod requests;
mod targets;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cdp::CdpConnection;

use super::link::LinkError;
use super::policy::{DenyReason, EgressPolicy, PolicySlot};

use hub::{Endpoint, Hub};

/// Which targets a guard is responsible for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressScope {
    /// Every target of the browser (a browser dedicated to one task, tests).
    WholeBrowser,
    /// The targets of one browser context (`Target.createBrowserContext` id).
    Context(String),
}

impl EgressScope {
    fn covers(&self, browser_context_id: Option<&str>) -> bool {
        match self {
            EgressScope::WholeBrowser => true,
            EgressScope::Context(id) => browser_context_id == Some(id.as_str()),
        }
    }
}

/// Tunables of a guard.
#[derive(Debug, Clone)]
pub struct EgressGuardOptions {
    /// Timeout of each CDP command the guard sends.
    pub command_timeout: Duration,
    /// Timeout of the whole check of one request (DNS included); on expiry the request fails.
    pub check_timeout: Duration,
    /// Blocked requests kept for [`EgressGuard::drain_blocked`]; older ones are dropped.
    pub blocked_log_capacity: usize,
    /// How long [`EgressGuard::attach`] waits for the context's existing targets to be armed.
    pub attach_timeout: Duration,
}

impl Default for EgressGuardOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(5),
            check_timeout: Duration::from_secs(8),
            blocked_log_capacity: 512,
            attach_timeout: Duration::from_secs(10),
        }
    }
}

/// The guard could not be installed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EgressGuardError {
    /// A CDP call failed.
    #[error("egress guard: {0}")]
    Cdp(#[from] LinkError),
    /// Existing targets of the context could not be armed in time.
    #[error(
        "egress guard: {pending} existing target(s) of the context could not be intercepted in time"
    )]
    ArmTimeout {
        /// How many were still unarmed.
        pending: usize,
    },
}

/// One request the guard refused (or a target it could not intercept).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockedRequest {
    /// The URL (shortened to a few hundred characters).
    pub url: String,
    /// Why it was refused.
    pub reason: DenyReason,
    /// When, in milliseconds since the Unix epoch.
    pub blocked_at_ms: u64,
    /// CDP resource type (`Document`, `XHR`, `Fetch`, `Image`, …) when known.
    pub resource_type: Option<String>,
    /// Whether it was the navigation of a frame (`Document`).
    pub is_navigation: bool,
    /// The CDP target the request came from (empty for the egress proxy).
    pub target_id: String,
    /// That target's type (`page`, `iframe`, `worker`, …), or `proxy` for a connection or
    /// request the egress proxy refused (`resource_type` `CONNECT` or `HTTP`).
    pub target_type: String,
}

impl BlockedRequest {
    /// A sentence for the model, e.g. `Request blocked: https://x/ (the host x is not in
    /// allowed_domains)`.
    pub fn message(&self) -> String {
        if self.target_type == "proxy" && self.resource_type.as_deref() == Some("CONNECT") {
            return format!(
                "Connection blocked by the egress policy: {} ({})",
                self.url, self.reason
            );
        }
        let what = if self.is_navigation {
            "Navigation blocked"
        } else {
            "Request blocked"
        };
        format!(
            "{what} by the egress policy: {} ({})",
            self.url, self.reason
        )
    }
}

/// Counters of a guard (for tests, metrics and health checks).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EgressGuardStats {
    /// Armed targets by type (`page`, `iframe`, `worker`, …), cumulative.
    pub armed_targets: HashMap<String, u64>,
    /// Targets whose interception could not be enabled (held paused or closed).
    pub unarmed_targets: u64,
    /// Requests let through.
    pub requests_allowed: u64,
    /// Requests refused.
    pub requests_blocked: u64,
    /// Blocked entries dropped because the log was full.
    pub blocked_log_dropped: u64,
}

#[derive(Debug, Clone)]
struct SessionInfo {
    target_id: String,
    target_type: String,
}

#[derive(Debug, Default)]
struct State {
    /// Sessions on which Fetch is enabled, by session id.
    armed: HashMap<String, SessionInfo>,
    /// Target ids armed at least once and still attached.
    armed_targets: HashSet<String>,
    /// Sessions of the guarded scope (armed or being armed), with their targets: a request
    /// can pause between `Fetch.enable` and the session's entry in `armed`.
    in_scope: HashMap<String, SessionInfo>,
    blocked: VecDeque<BlockedRequest>,
    stats: EgressGuardStats,
}

struct Shared {
    policy: PolicySlot,
    scope: EgressScope,
    options: EgressGuardOptions,
    state: Mutex<State>,
    armed_notify: Notify,
    allowed: AtomicU64,
    blocked: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, entry: BlockedRequest) {
        self.blocked.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        if st.blocked.len() >= self.options.blocked_log_capacity.max(1) {
            st.blocked.pop_front();
            st.stats.blocked_log_dropped += 1;
        }
        st.blocked.push_back(entry);
    }
}

/// Enforces an [`EgressPolicy`] on every request of a browser context; see the module docs.
///
/// Dropping the guard (or [`close`](Self::close)) ends enforcement: install it on a fresh
/// context before the first navigation and keep it for the context's life. If
/// [`is_active`](Self::is_active) turns false the context is unguarded and must be disposed.
pub struct EgressGuard {
    shared: Arc<Shared>,
    hub: Arc<Hub>,
}

impl std::fmt::Debug for EgressGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressGuard")
            .field("scope", &self.shared.scope)
            .field("active", &self.is_active())
            .finish()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn auto_attach_params() -> Value {
    json!({
        "autoAttach": true,
        "waitForDebuggerOnStart": true,
        "flatten": true,
        "filter": [
            {"type": "browser", "exclude": true},
            {"type": "tab", "exclude": true},
            {}
        ]
    })
}

impl EgressGuard {
    /// Installs the guard through the chromiumoxide [`Browser`](chromiumoxide::Browser)'s
    /// websocket endpoint.
    pub async fn attach_to_browser(
        browser: &chromiumoxide::Browser,
        scope: EgressScope,
        policy: Arc<EgressPolicy>,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        Self::attach(browser.websocket_address(), scope, policy, options).await
    }

    /// Connects to the browser-level CDP websocket `ws_url`, starts intercepting every target
    /// in `scope` and returns once the scope's existing targets are intercepted too.
    pub async fn attach(
        ws_url: &str,
        scope: EgressScope,
        policy: Arc<EgressPolicy>,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        Self::attach_slot(
            Endpoint::Url(ws_url),
            scope,
            PolicySlot::bound(policy),
            options,
        )
        .await
    }

    /// [`EgressGuard::attach`] over `conn`, the Chrome's own connection (a launched Chrome's
    /// pipe): the guards of one Chrome share one browser session on it.
    pub async fn attach_on(
        conn: &CdpConnection,
        scope: EgressScope,
        policy: Arc<EgressPolicy>,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        Self::attach_slot(
            Endpoint::Connection(conn),
            scope,
            PolicySlot::bound(policy),
            options,
        )
        .await
    }

    /// [`EgressGuard::attach_unbound`] over `conn` ([`EgressGuard::attach_on`]).
    pub async fn attach_unbound_on(
        conn: &CdpConnection,
        scope: EgressScope,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        Self::attach_slot(
            Endpoint::Connection(conn),
            scope,
            PolicySlot::unbound(),
            options,
        )
        .await
    }

    /// [`EgressGuard::attach`] for a context opened ahead of its task: every request of the
    /// scope is refused until [`EgressGuard::bind`] gives it the task's policy.
    pub async fn attach_unbound(
        ws_url: &str,
        scope: EgressScope,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        Self::attach_slot(Endpoint::Url(ws_url), scope, PolicySlot::unbound(), options).await
    }

    /// Binds the task's policy to a guard attached unbound; false (and nothing changes) if it
    /// already has one.
    pub fn bind(&self, policy: Arc<EgressPolicy>) -> bool {
        self.shared.policy.bind(policy)
    }

    async fn attach_slot(
        endpoint: Endpoint<'_>,
        scope: EgressScope,
        policy: PolicySlot,
        options: EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        let hub = match &scope {
            EgressScope::Context(_) => Hub::shared(endpoint, &options).await?,
            EgressScope::WholeBrowser => Arc::new(Hub::connect(endpoint, &options).await?),
        };
        let shared = Arc::new(Shared {
            policy,
            scope,
            options,
            state: Mutex::new(State::default()),
            armed_notify: Notify::new(),
            allowed: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
        });
        {
            let mut routes = hub.routes.lock();
            match &shared.scope {
                EgressScope::Context(id) => {
                    routes.contexts.insert(id.clone(), shared.clone());
                }
                EgressScope::WholeBrowser => routes.whole = Some(shared.clone()),
            }
        }
        let guard = Self { shared, hub };
        guard.start().await?;
        Ok(guard)
    }

    /// Arms the scope's existing targets and waits until they are: attached by the hub's
    /// auto-attach when this guard started it, else attached here.
    async fn start(&self) -> Result<(), EgressGuardError> {
        let timeout = self.shared.options.command_timeout;
        let link = &self.hub.link;
        let started = self.hub.start_auto_attach(timeout).await?;
        let targets = link
            .call("Target.getTargets", None, json!({}), timeout)
            .await?;
        let expected: Vec<String> = targets
            .get("targetInfos")
            .and_then(Value::as_array)
            .map(|infos| {
                infos
                    .iter()
                    .filter(|t| {
                        matches!(
                            t.get("type").and_then(Value::as_str),
                            Some("page" | "iframe")
                        ) && self
                            .shared
                            .scope
                            .covers(t.get("browserContextId").and_then(Value::as_str))
                    })
                    .filter_map(|t| t.get("targetId").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if !started {
            for target in &expected {
                let attached = self
                    .shared
                    .lock()
                    .in_scope
                    .values()
                    .any(|info| &info.target_id == target);
                if !attached {
                    link.call(
                        "Target.attachToTarget",
                        None,
                        json!({"targetId": target, "flatten": true}),
                        timeout,
                    )
                    .await?;
                }
            }
        }
        let deadline = tokio::time::Instant::now() + self.shared.options.attach_timeout;
        loop {
            let notified = self.shared.armed_notify.notified();
            let pending = {
                let st = self.shared.lock();
                expected
                    .iter()
                    .filter(|id| !st.armed_targets.contains(*id))
                    .count()
            };
            if pending == 0 {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(EgressGuardError::ArmTimeout { pending });
            }
        }
    }

    /// Takes the requests blocked since the last call, oldest first.
    pub fn drain_blocked(&self) -> Vec<BlockedRequest> {
        self.shared.lock().blocked.drain(..).collect()
    }

    /// Whether the guard's connection is up. When false, nothing is intercepted any more.
    pub fn is_active(&self) -> bool {
        self.hub.is_alive()
    }

    /// Current counters.
    pub fn stats(&self) -> EgressGuardStats {
        let mut stats = self.shared.lock().stats.clone();
        stats.requests_allowed = self.shared.allowed.load(Ordering::Relaxed);
        stats.requests_blocked = self.shared.blocked.load(Ordering::Relaxed);
        stats
    }

    /// Whether `other` enforces over the same CDP connection (guards of one Chrome's contexts
    /// do).
    pub fn shares_connection_with(&self, other: &EgressGuard) -> bool {
        Arc::ptr_eq(&self.hub, &other.hub)
    }

    /// The policy being enforced (empty while an unbound guard waits for its task).
    pub fn policy(&self) -> &PolicySlot {
        &self.shared.policy
    }

    /// Stops enforcement for new targets of the scope (those attached keep being judged by
    /// this guard's policy until they go) and closes the connection if no other guard of the
    /// Chrome uses it.
    pub async fn close(self) {
        drop(self);
    }
}

impl Drop for EgressGuard {
    fn drop(&mut self) {
        let mut routes = self.hub.routes.lock();
        match &self.shared.scope {
            EgressScope::Context(id) => {
                if routes
                    .contexts
                    .get(id)
                    .is_some_and(|g| Arc::ptr_eq(g, &self.shared))
                {
                    routes.contexts.remove(id);
                }
            }
            EgressScope::WholeBrowser => routes.whole = None,
        }
    }
}
