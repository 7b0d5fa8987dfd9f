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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use url::Url;

use crate::cdp::CdpConnection;

use super::link::{CdpLink, LinkError, RawEvent};
use super::policy::{DenyReason, EgressDenied, EgressPolicy, PolicySlot, shorten_url};

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

/// The CDP connection shared by the guards of one Chrome (see the module docs), and which
/// guard owns which context and session.
struct Hub {
    /// Which Chrome: its websocket URL, or its shared connection's number.
    key: String,
    link: CdpLink,
    link_task: JoinHandle<()>,
    dispatch_task: JoinHandle<()>,
    routes: Arc<Routes>,
    /// Set once the browser-level auto-attach is on.
    auto_attach: tokio::sync::OnceCell<()>,
}

#[derive(Default)]
struct Routes {
    inner: Mutex<RouteTable>,
}

#[derive(Default)]
struct RouteTable {
    /// The guard of a private hub's whole browser.
    whole: Option<Arc<Shared>>,
    /// Guards by browser context id.
    contexts: HashMap<String, Arc<Shared>>,
    /// The guard owning each attached session of the scopes (kept until the session detaches,
    /// so a guard dropped before its context closes still judges its targets' requests).
    sessions: HashMap<String, Arc<Shared>>,
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, RouteTable> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a hub reaches its Chrome.
#[derive(Clone, Copy)]
enum Endpoint<'a> {
    /// A websocket of the hub's own to this browser URL.
    Url(&'a str),
    /// A browser session of the hub's own on the Chrome's connection (the pool's).
    Connection(&'a CdpConnection),
}

impl Endpoint<'_> {
    /// The key of the Chrome's hub in [`HUBS`].
    fn key(self) -> String {
        match self {
            Self::Url(url) => url.to_owned(),
            Self::Connection(conn) => format!("connection #{}", conn.id()),
        }
    }
}

/// Hubs by Chrome ([`Endpoint::key`]): one per Chrome while any of its guards lives.
static HUBS: std::sync::LazyLock<tokio::sync::Mutex<HashMap<String, std::sync::Weak<Hub>>>> =
    std::sync::LazyLock::new(Default::default);

impl Hub {
    async fn connect(
        endpoint: Endpoint<'_>,
        options: &EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        let (link, events, link_task) = match endpoint {
            Endpoint::Url(ws_url) => CdpLink::connect(ws_url, options.command_timeout).await?,
            Endpoint::Connection(conn) => {
                CdpLink::on_connection(conn, options.command_timeout).await?
            }
        };
        let routes = Arc::new(Routes::default());
        let dispatch_task = tokio::spawn(dispatch(
            events,
            link.clone(),
            routes.clone(),
            options.command_timeout,
        ));
        Ok(Self {
            key: endpoint.key(),
            link,
            link_task,
            dispatch_task,
            routes,
            auto_attach: tokio::sync::OnceCell::new(),
        })
    }

    /// The live hub of the Chrome at `endpoint`, connected now if there is none.
    async fn shared(
        endpoint: Endpoint<'_>,
        options: &EgressGuardOptions,
    ) -> Result<Arc<Self>, EgressGuardError> {
        let key = endpoint.key();
        let mut hubs = HUBS.lock().await;
        hubs.retain(|_, hub| hub.strong_count() > 0);
        if let Some(hub) = hubs.get(&key).and_then(std::sync::Weak::upgrade)
            && hub.is_alive()
        {
            return Ok(hub);
        }
        let hub = Arc::new(Self::connect(endpoint, options).await?);
        hubs.insert(key, Arc::downgrade(&hub));
        Ok(hub)
    }

    fn is_alive(&self) -> bool {
        self.link.is_alive() && !self.dispatch_task.is_finished()
    }

    /// Turns the browser-level auto-attach on, once; true when this call did (its existing
    /// targets were then attached to the hub and routed to the guards registered so far).
    async fn start_auto_attach(&self, timeout: Duration) -> Result<bool, EgressGuardError> {
        let mut started = false;
        self.auto_attach
            .get_or_try_init(|| async {
                self.link
                    .call("Target.setAutoAttach", None, auto_attach_params(), timeout)
                    .await
                    .map(|_| {
                        started = true;
                    })
            })
            .await?;
        Ok(started)
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.dispatch_task.abort();
        self.link_task.abort();
        self.link.detach();
        tracing::debug!(chrome = %self.key, "egress: the guards' CDP client is closed");
    }
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

async fn dispatch(
    mut events: mpsc::UnboundedReceiver<RawEvent>,
    link: CdpLink,
    routes: Arc<Routes>,
    timeout: Duration,
) {
    while let Some(event) = events.recv().await {
        match event.method.as_str() {
            "Fetch.requestPaused" => {
                let Some(session) = event.session_id else {
                    continue;
                };
                let owner = routes.lock().sessions.get(&session).cloned();
                match owner {
                    Some(shared) => {
                        tokio::spawn(answer_paused(link.clone(), shared, session, event.params));
                    }
                    // Fetch is enabled only by a guard on a session it owns: a pause nobody
                    // owns is refused.
                    None => {
                        tokio::spawn(refuse_unowned(link.clone(), session, event.params, timeout));
                    }
                }
            }
            "Target.attachedToTarget" => {
                on_attached(
                    &link,
                    &routes,
                    event.session_id.as_deref(),
                    event.params,
                    timeout,
                );
            }
            "Target.detachedFromTarget" => {
                if let Some(session) = event.params.get("sessionId").and_then(Value::as_str) {
                    let owner = routes.lock().sessions.remove(session);
                    if let Some(shared) = owner {
                        let mut st = shared.lock();
                        st.in_scope.remove(session);
                        if let Some(info) = st.armed.remove(session) {
                            st.armed_targets.remove(&info.target_id);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

async fn refuse_unowned(link: CdpLink, session: String, params: Value, timeout: Duration) {
    if let Some(request_id) = params.get("requestId").and_then(Value::as_str) {
        let _ = link
            .call(
                "Fetch.failRequest",
                Some(&session),
                json!({ "requestId": request_id, "errorReason": "BlockedByClient" }),
                timeout,
            )
            .await;
    }
}

fn on_attached(
    link: &CdpLink,
    routes: &Arc<Routes>,
    parent_session: Option<&str>,
    params: Value,
    timeout: Duration,
) {
    let Some(session) = params
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let info = params.get("targetInfo").cloned().unwrap_or(Value::Null);
    let target_id = info
        .get("targetId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let target_type = info
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("other")
        .to_string();
    let context = info.get("browserContextId").and_then(Value::as_str);
    let waiting = params
        .get("waitingForDebugger")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let info = SessionInfo {
        target_id,
        target_type,
    };
    // The guard of the parent target (an OOPIF's, a worker's), else of the whole browser,
    // else of the target's context.
    let owner = {
        let mut routes = routes.lock();
        let owner = parent_session
            .and_then(|p| routes.sessions.get(p).cloned())
            .or_else(|| routes.whole.clone())
            .or_else(|| context.and_then(|c| routes.contexts.get(c).cloned()));
        if let Some(shared) = &owner {
            routes.sessions.insert(session.clone(), shared.clone());
            shared.lock().in_scope.insert(session.clone(), info.clone());
        }
        owner
    };
    let link = link.clone();
    let parent = parent_session.map(str::to_string);
    tokio::spawn(async move {
        match owner {
            Some(shared) => arm(&link, &shared, &session, info, waiting).await,
            None => release(&link, timeout, &session, parent.as_deref(), waiting).await,
        }
    });
}

/// Not ours: let it run and stop listening to it.
async fn release(
    link: &CdpLink,
    timeout: Duration,
    session: &str,
    parent: Option<&str>,
    waiting: bool,
) {
    if waiting
        && let Err(e) = link
            .call(
                "Runtime.runIfWaitingForDebugger",
                Some(session),
                json!({}),
                timeout,
            )
            .await
    {
        tracing::debug!(error = %e, "egress: resuming a foreign target failed");
    }
    let _ = link
        .call(
            "Target.detachFromTarget",
            parent,
            json!({ "sessionId": session }),
            timeout,
        )
        .await;
}

/// Ours: enable interception (and auto-attach for its children), then resume it.
async fn arm(link: &CdpLink, shared: &Shared, session: &str, info: SessionInfo, waiting: bool) {
    let timeout = shared.options.command_timeout;
    // Interception and the children's auto-attach (OOPIFs, dedicated workers must arrive
    // paused as well) are both in place before the target is resumed; Chrome runs a session's
    // commands in order, so they are sent together.
    let (fetch, children) = tokio::join!(
        link.call(
            "Fetch.enable",
            Some(session),
            json!({ "patterns": [{ "urlPattern": "*", "requestStage": "Request" }] }),
            timeout,
        ),
        link.call(
            "Target.setAutoAttach",
            Some(session),
            auto_attach_params(),
            timeout,
        )
    );
    match fetch {
        Ok(_) => {}
        // Dedicated workers have no Fetch domain: their requests are intercepted by the
        // session of the frame that owns them (armed before the worker could exist).
        Err(LinkError::Protocol { code: -32601, .. }) if info.target_type == "worker" => {}
        Err(e) => {
            on_arm_failed(link, shared, &info, &e).await;
            return;
        }
    }
    // Not every target type supports auto-attach (e.g. some workers); their children, if any,
    // are not web content.
    if let Err(e) = children {
        tracing::debug!(error = %e, target_type = %info.target_type, "egress: child auto-attach not available");
    }
    {
        let mut st = shared.lock();
        st.armed.insert(session.to_string(), info.clone());
        st.armed_targets.insert(info.target_id.clone());
        *st.stats
            .armed_targets
            .entry(info.target_type.clone())
            .or_default() += 1;
    }
    shared.armed_notify.notify_waiters();
    if waiting
        && let Err(e) = link
            .call(
                "Runtime.runIfWaitingForDebugger",
                Some(session),
                json!({}),
                timeout,
            )
            .await
    {
        tracing::warn!(error = %e, target_type = %info.target_type, "egress: resuming an armed target failed");
    }
}

async fn on_arm_failed(link: &CdpLink, shared: &Shared, info: &SessionInfo, e: &LinkError) {
    tracing::warn!(error = %e, target_type = %info.target_type, "egress: cannot intercept target; holding it");
    {
        let mut st = shared.lock();
        st.stats.unarmed_targets += 1;
    }
    shared.record(BlockedRequest {
        url: String::new(),
        reason: DenyReason::CheckFailed {
            detail: format!(
                "requests of a new {} could not be intercepted: {e}",
                info.target_type
            ),
        },
        blocked_at_ms: now_ms(),
        resource_type: None,
        is_navigation: false,
        target_id: info.target_id.clone(),
        target_type: info.target_type.clone(),
    });
    if info.target_type == "page" {
        let _ = link
            .call(
                "Target.closeTarget",
                None,
                json!({ "targetId": info.target_id }),
                shared.options.command_timeout,
            )
            .await;
    }
}

/// Checks one paused request and answers it, always.
async fn answer_paused(link: CdpLink, shared: Arc<Shared>, session: String, params: Value) {
    let Some(request_id) = params
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let url_text = params
        .pointer("/request/url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let fragment = params
        .pointer("/request/urlFragment")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let resource_type = params
        .get("resourceType")
        .and_then(Value::as_str)
        .map(str::to_string);

    let verdict = check(&shared, &url_text).await;

    let timeout = shared.options.command_timeout;
    match verdict {
        Ok(()) => {
            shared.allowed.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = link
                .call(
                    "Fetch.continueRequest",
                    Some(&session),
                    json!({ "requestId": request_id }),
                    timeout,
                )
                .await
            {
                tracing::debug!(error = %e, "egress: continueRequest failed (request gone?)");
            }
        }
        Err(denied) => {
            let (target_id, target_type) = {
                let st = shared.lock();
                st.armed
                    .get(&session)
                    .or_else(|| st.in_scope.get(&session))
                    .map(|i| (i.target_id.clone(), i.target_type.clone()))
                    .unwrap_or_default()
            };
            tracing::info!(
                origin = %origin_of(&url_text),
                reason = %denied.reason,
                resource_type = resource_type.as_deref().unwrap_or(""),
                "egress: request blocked"
            );
            let full_url = format!("{url_text}{fragment}");
            shared.record(BlockedRequest {
                url: shorten_url(&full_url),
                reason: denied.reason,
                blocked_at_ms: now_ms(),
                is_navigation: resource_type.as_deref() == Some("Document"),
                resource_type,
                target_id,
                target_type,
            });
            if let Err(e) = link
                .call(
                    "Fetch.failRequest",
                    Some(&session),
                    json!({ "requestId": request_id, "errorReason": "BlockedByClient" }),
                    timeout,
                )
                .await
            {
                tracing::debug!(error = %e, "egress: failRequest failed (request gone?)");
            }
        }
    }
}

/// The policy verdict, failing closed on timeout or panic.
async fn check(shared: &Shared, url_text: &str) -> Result<(), EgressDenied> {
    let url = Url::parse(url_text).map_err(|e| {
        EgressDenied::new(
            url_text,
            DenyReason::InvalidUrl {
                detail: e.to_string(),
            },
        )
    })?;
    let policy = shared.policy.for_url(url_text)?;
    let run = std::panic::AssertUnwindSafe(policy.check_url_resolved(&url)).catch_unwind();
    match tokio::time::timeout(shared.options.check_timeout, run).await {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(_panic)) => Err(EgressDenied::new(
            url_text,
            DenyReason::CheckFailed {
                detail: "internal error".to_string(),
            },
        )),
        Err(_) => Err(EgressDenied::new(
            url_text,
            DenyReason::CheckFailed {
                detail: format!("timed out after {:?}", shared.options.check_timeout),
            },
        )),
    }
}

/// `scheme://host:port` of a URL, for logs (paths and queries may carry secrets).
fn origin_of(url: &str) -> String {
    Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| "<unparsable>".to_string())
}
