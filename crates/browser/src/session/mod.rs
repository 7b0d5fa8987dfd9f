//! A task's browser session: one isolated context, its tabs, the focused tab, captures,
//! and what happens in it on its own: JavaScript dialogs (closed automatically and reported),
//! downloads (into the task workspace), tabs the page opens, the egress guard and the context's
//! egress proxy listener.
//!
//! This module owns `BrowserSession` itself and `ContextOptions`: opening the context (egress
//! proxy listener, guard, download behaviour, listener, first tab), the accessors, the raw CDP
//! escape hatch and the end of the lease (release, or disposal in the background on drop). The
//! rest is split by concern, each part an `impl BrowserSession` of its own: `tabs` (targets,
//! their CDP sessions, tabs and focus), `navigation` (navigating and waiting for lifecycle
//! events), `observe` (captures and screenshots) and `listener` (dialogs, downloads and tabs
//! the page opens).

mod crash;
mod listener;
mod navigation;
mod observe;
mod storage;
mod tabs;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use self::listener::{DownloadPlace, ListenerCtx, SessionEvents, listen, lock};
pub(crate) use self::navigation::{WaitOutcome, load_cap, wait_for_event};
use self::tabs::Sessions;
use crate::{
    actions::Workspace,
    capture::SessionSource,
    cdp::RawResponse,
    egress::{
        BlockedRequest, ContextProxy, EgressGuard, EgressGuardOptions, EgressPolicy, EgressScope,
        EgressSettings,
    },
    error::{BrowserError, Result},
    pool::{Chrome, EgressNet, Lease},
    settle::SettleSettings,
    types::{DownloadInfo, SelectorMap, Viewport},
};
pub use listener::DownloadCaps;
pub use storage::{
    OriginStorage, StorageItem, StorageState, cookie_param, local_storage_init_script,
};

/// Settings of one task's browser context (a lease): egress, workspace, settle, viewport, proxy.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Egress policy enforced on every request of the task's context (Fetch interception on
    /// every target, installed before the first navigation). `None` = no guard (local tools
    /// and tests only; a service must always pass settings).
    pub egress: Option<EgressSettings>,
    /// The task's workspace directory (created if missing); `None` = a temporary directory
    /// removed with the session.
    pub workspace_dir: Option<PathBuf>,
    /// How long actions wait for the page to settle (see [`crate::settle`]).
    pub settle: SettleSettings,
    /// Viewport of every tab of the session (new tabs and tabs the page opens); `None` = the
    /// pool's [`PoolConfig::viewport`](crate::PoolConfig::viewport).
    pub viewport: Option<Viewport>,
    /// Name of an upstream proxy of the pool's
    /// [`PoolConfig::upstream_proxies`](crate::PoolConfig::upstream_proxies) that carries the
    /// task's traffic after the egress checks; an unknown name fails the lease. Needs `egress`.
    pub proxy: Option<String>,
    /// The most the session's downloads may take (a download past it is cancelled).
    pub download_caps: DownloadCaps,
}

pub(crate) struct SessionState {
    pub(crate) focused: Option<String>,
    /// Selector map of the last capture (what indices refer to).
    pub(crate) selector_map: SelectorMap,
    /// (target id, backend node id) of the previous capture's selector map.
    previous: HashSet<(String, i64)>,
    previous_focus: Option<String>,
    /// Sessions of the cross-origin frames in the last capture of the focused tab.
    pub(crate) frame_sessions: Vec<String>,
}

/// One task's browser: an isolated context (own cookies, storage, tabs) on a pooled Chrome.
///
/// Call [`BrowserSession::release`] when the task ends; dropping the session releases it in
/// the background.
pub struct BrowserSession {
    pub(crate) chrome: Arc<Chrome>,
    context_id: String,
    pub(crate) timeout: Duration,
    pub(crate) settle: SettleSettings,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) state: Mutex<SessionState>,
    pub(crate) events: Arc<SessionEvents>,
    pub(crate) egress: Option<EgressGuard>,
    /// The context's egress proxy listener (dropped after the context is disposed).
    proxy: Option<ContextProxy>,
    pub(crate) workspace: Workspace,
    viewport: Viewport,
    /// Where downloads go and their caps (shared with the listener).
    downloads: Arc<std::sync::Mutex<DownloadPlace>>,
    listener: Option<tokio::task::JoinHandle<()>>,
    lease: Option<Lease>,
    released: bool,
    /// The context was opened ahead of its task (the pool's spare) and bound to it.
    opened_ahead: bool,
    /// The focused tab's target id, for watchers (the live view follows it).
    pub(crate) focus: tokio::sync::watch::Sender<Option<String>>,
}

impl std::fmt::Debug for BrowserSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserSession")
            .field("context_id", &self.context_id)
            .finish()
    }
}

/// Milliseconds since `since`, for the timings of the `browser context opened` debug line.
fn elapsed_ms(since: std::time::Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The task's workspace (a temporary one when it names none), opened so that Chrome — maybe
/// another user — can write its downloads.
fn task_workspace(options: &ContextOptions, chrome: &Chrome) -> Result<Workspace> {
    let workspace = match &options.workspace_dir {
        Some(dir) => Workspace::open(dir)?,
        None => Workspace::temporary()?,
    };
    // Chrome (maybe another user) writes the downloads; it may pass through the root.
    let identity = &chrome.identity;
    identity.allow_through(workspace.root())?;
    identity.hand_over(&workspace.downloads_dir())?;
    Ok(workspace)
}

/// The task's egress policy, validated, on the pool's shared resolver; `None` without egress
/// settings.
fn task_policy(options: &ContextOptions, net: &EgressNet) -> Result<Option<Arc<EgressPolicy>>> {
    options
        .egress
        .as_ref()
        .map(|settings| {
            EgressPolicy::new(settings.clone())
                .map(|policy| Arc::new(policy.with_shared_resolver(net.resolver.clone())))
                .map_err(|e| BrowserError::Egress(e.to_string()))
        })
        .transpose()
}

fn proxy_error(err: crate::egress::ProxyError) -> BrowserError {
    match err {
        crate::egress::ProxyError::UnknownUpstream(_) => {
            BrowserError::InvalidArgument(err.to_string())
        }
        other => BrowserError::Egress(other.to_string()),
    }
}

/// `Browser.setDownloadBehavior`'s parameters: the context's downloads go to the workspace.
fn download_behavior(context_id: &str, workspace: &Workspace) -> serde_json::Value {
    json!({
        "behavior": "allowAndName",
        "browserContextId": context_id,
        "downloadPath": workspace.downloads_dir().to_string_lossy(),
        "eventsEnabled": true,
    })
}

/// Where the opening of a context went (the `browser context opened` debug line).
struct StartTimings {
    guard_ms: f64,
    setup_ms: f64,
    tab_ms: f64,
}

/// The egress a context opens with.
enum OpeningEgress {
    /// No guard and no listener (local tools and tests).
    Off,
    /// The task's policy from the start.
    Task(Arc<EgressPolicy>),
    /// A spare's (a context opened ahead of its task): guard and listener refuse everything
    /// until [`BrowserSession::bind`] gives them the task's policy.
    Unbound,
}

/// What [`BrowserSession::open_context`] opens a context with.
struct Opening {
    workspace: Workspace,
    proxy: Option<ContextProxy>,
    egress: OpeningEgress,
    viewport: Viewport,
    settle: SettleSettings,
    download_caps: DownloadCaps,
}

impl BrowserSession {
    /// `default_viewport` applies when `options` has none.
    pub(crate) async fn open(
        chrome: Arc<Chrome>,
        timeout: Duration,
        options: ContextOptions,
        default_viewport: Viewport,
        net: Arc<EgressNet>,
    ) -> Result<Self> {
        let opening = std::time::Instant::now();
        let workspace = task_workspace(&options, &chrome)?;
        let policy = task_policy(&options, &net)?;
        // The context's own proxy listener: every connection of the context is checked
        // against the task's policy at the network level.
        let proxy = match (&policy, &net.proxy, &options.proxy) {
            (None, _, Some(_)) => {
                return Err(BrowserError::InvalidArgument(
                    "an upstream proxy needs the task's egress settings".into(),
                ));
            }
            (Some(_), None, Some(name)) => {
                return Err(BrowserError::InvalidArgument(format!(
                    "proxy {name:?}: the egress proxy is switched off in this pool"
                )));
            }
            (Some(policy), Some(proxy), upstream) => Some(
                proxy
                    .open(policy.clone(), upstream.as_deref())
                    .await
                    .map_err(proxy_error)?,
            ),
            _ => None,
        };
        let egress = match policy {
            Some(policy) => OpeningEgress::Task(policy),
            None => OpeningEgress::Off,
        };
        Self::open_context(
            chrome,
            timeout,
            Opening {
                workspace,
                proxy,
                egress,
                viewport: options.viewport.unwrap_or(default_viewport),
                settle: options.settle,
                download_caps: options.download_caps,
            },
            opening,
        )
        .await
    }

    /// Opens a context ahead of its task (the pool's spare, see [`BrowserSession::bind`]):
    /// its egress guard and proxy listener attached but refusing everything, its first tab
    /// open at `about:blank` with its renderer started — the part of a lease that waits on
    /// Chrome —, a temporary workspace, the pool's viewport.
    pub(crate) async fn open_spare(
        chrome: Arc<Chrome>,
        timeout: Duration,
        viewport: Viewport,
        net: Arc<EgressNet>,
    ) -> Result<Self> {
        let opening = std::time::Instant::now();
        let workspace = task_workspace(&ContextOptions::default(), &chrome)?;
        let proxy = match &net.proxy {
            Some(proxy) => Some(proxy.open_unbound().await.map_err(proxy_error)?),
            None => None,
        };
        Self::open_context(
            chrome,
            timeout,
            Opening {
                workspace,
                proxy,
                egress: OpeningEgress::Unbound,
                viewport,
                settle: SettleSettings::default(),
                download_caps: DownloadCaps::default(),
            },
            opening,
        )
        .await
    }

    /// Whether a task leasing with `options` can take a spare of a pool whose tabs are
    /// `pool_viewport`: it has egress settings (a spare is always guarded), no upstream proxy
    /// (a spare's listener has none) and the pool's viewport.
    pub(crate) fn spare_fits(options: &ContextOptions, pool_viewport: Viewport) -> bool {
        options.egress.is_some()
            && options.proxy.is_none()
            && options.viewport.is_none_or(|v| v == pool_viewport)
    }

    /// Gives a spare ([`BrowserSession::open_spare`]) to the task leasing with `options`
    /// (which [`BrowserSession::spare_fits`]): the task's workspace and downloads, settle
    /// settings and download caps, and its egress policy, bound to the guard and the listener
    /// once and for good. Fails — and the spare must then be released, not used — if the
    /// spare's browser or tab is gone or its policy could not be bound.
    pub(crate) async fn bind(&mut self, options: &ContextOptions, net: &EgressNet) -> Result<()> {
        let policy = task_policy(options, net)?.ok_or_else(|| {
            BrowserError::InvalidArgument("a spare context needs egress settings".into())
        })?;
        if !self.chrome.is_alive() || !lock(&self.events.crashed).is_empty() {
            return Err(BrowserError::Egress(
                "the spare context's browser or tab is gone".into(),
            ));
        }
        let workspace = task_workspace(options, &self.chrome)?;
        self.chrome
            .conn
            .call_raw(
                None,
                "Browser.setDownloadBehavior",
                download_behavior(&self.context_id, &workspace),
                self.timeout,
            )
            .await?;
        *lock(&self.downloads) = DownloadPlace {
            dir: workspace.downloads_dir(),
            caps: options.download_caps,
        };
        self.workspace = workspace;
        self.settle = options.settle;
        let guard_bound = self.egress.as_ref().is_some_and(|g| g.bind(policy.clone()));
        let proxy_bound = self.proxy.as_ref().is_none_or(|p| p.bind(policy));
        if !guard_bound || !proxy_bound {
            return Err(BrowserError::Egress(
                "the spare context's egress was already bound".into(),
            ));
        }
        self.opened_ahead = true;
        Ok(())
    }

    /// Whether this session's context was opened ahead of its task (the pool's spare, see
    /// [`PoolConfig::spare_contexts`](crate::PoolConfig::spare_contexts)) rather than at
    /// its lease.
    pub fn opened_ahead(&self) -> bool {
        self.opened_ahead
    }

    /// Creates the browser context (with the listener as its proxy), then installs the guard,
    /// the event listener and download behaviour and opens the first tab.
    async fn open_context(
        chrome: Arc<Chrome>,
        timeout: Duration,
        opening: Opening,
        started: std::time::Instant,
    ) -> Result<Self> {
        let Opening {
            workspace,
            proxy,
            egress,
            viewport,
            settle,
            download_caps,
        } = opening;
        let mut context_params = json!({"disposeOnDetach": false});
        if let Some(proxy) = &proxy {
            context_params["proxyServer"] = json!(proxy.proxy_server());
            context_params["proxyBypassList"] = json!(ContextProxy::BYPASS_LIST);
        }
        // Contexts and tabs are made on the crate's own connection: chromiumoxide's handler
        // would attach to each tab and enable Runtime, Network, Performance and Log there, plus
        // an isolated world per document — work Chrome then repeats on every navigation.
        #[derive(Deserialize)]
        struct Created {
            #[serde(rename = "browserContextId")]
            browser_context_id: String,
        }
        let proxy_ms = elapsed_ms(started);
        let context_id = chrome
            .conn
            .call_raw(None, "Target.createBrowserContext", context_params, timeout)
            .await?
            .decode::<Created>()?
            .browser_context_id;
        let sessions = Arc::new(Sessions {
            chrome: chrome.clone(),
            by_target: Mutex::new(HashMap::new()),
            init_scripts: std::sync::Mutex::new(Vec::new()),
        });
        let events = Arc::new(SessionEvents::default());
        let downloads = Arc::new(std::sync::Mutex::new(DownloadPlace {
            dir: workspace.downloads_dir(),
            caps: download_caps,
        }));
        let mut session = Self {
            sessions,
            chrome,
            context_id,
            timeout,
            settle,
            state: Mutex::new(SessionState {
                focused: None,
                selector_map: SelectorMap::new(),
                previous: HashSet::new(),
                previous_focus: None,
                frame_sessions: Vec::new(),
            }),
            events,
            egress: None,
            proxy,
            workspace,
            viewport,
            downloads,
            listener: None,
            lease: None,
            released: false,
            opened_ahead: false,
            focus: tokio::sync::watch::Sender::new(None),
        };
        let context_ms = elapsed_ms(started) - proxy_ms;
        match session.start(egress).await {
            Ok(timings) => {
                tracing::debug!(
                    proxy_ms,
                    context_ms,
                    guard_ms = timings.guard_ms,
                    setup_ms = timings.setup_ms,
                    tab_ms = timings.tab_ms,
                    total_ms = elapsed_ms(started),
                    "browser context opened"
                );
                Ok(session)
            }
            Err(err) => {
                session.dispose_context().await;
                session.released = true;
                Err(err)
            }
        }
    }

    /// Installs the egress guard, the event listener and download behaviour, then opens the
    /// first tab.
    async fn start(&mut self, egress: OpeningEgress) -> Result<StartTimings> {
        let started = std::time::Instant::now();
        let scope = EgressScope::Context(self.context_id.clone());
        let chrome_conn = &self.chrome.conn;
        let options = EgressGuardOptions::default();
        let guard = match egress {
            OpeningEgress::Off => None,
            OpeningEgress::Task(policy) => {
                Some(EgressGuard::attach_on(chrome_conn, scope, policy, options).await)
            }
            OpeningEgress::Unbound => {
                Some(EgressGuard::attach_unbound_on(chrome_conn, scope, options).await)
            }
        };
        if let Some(guard) = guard {
            self.egress = Some(guard.map_err(|e| BrowserError::Egress(e.to_string()))?);
        }
        let guard_ms = elapsed_ms(started);
        let setup = std::time::Instant::now();
        let conn = &self.chrome.conn;
        // Subscribe before anything can happen in the context.
        let rx = conn.events();
        conn.call_raw(
            None,
            "Target.setDiscoverTargets",
            json!({"discover": true}),
            self.timeout,
        )
        .await?;
        conn.call_raw(
            None,
            "Browser.setDownloadBehavior",
            download_behavior(&self.context_id, &self.workspace),
            self.timeout,
        )
        .await?;
        self.listener = Some(tokio::spawn(listen(
            rx,
            ListenerCtx {
                sessions: self.sessions.clone(),
                events: self.events.clone(),
                context_id: self.context_id.clone(),
                downloads: self.downloads.clone(),
                timeout: self.timeout,
                viewport: self.viewport,
            },
        )));
        let setup_ms = elapsed_ms(setup);
        let tab = std::time::Instant::now();
        self.new_tab("about:blank").await?;
        Ok(StartTimings {
            guard_ms,
            setup_ms,
            tab_ms: elapsed_ms(tab),
        })
    }

    pub(crate) fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Whether the Chrome hosting this session is gone (crashed, killed, its connection lost,
    /// or killed by the pool's health check as hung): the session can do nothing more, and its
    /// task may go on in a new one.
    pub fn browser_lost(&self) -> bool {
        !self.chrome.is_alive()
    }

    /// The CDP browser-context id of this session.
    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// The viewport of every tab of this session.
    pub fn emulated_viewport(&self) -> Viewport {
        self.viewport
    }

    /// Timeout used for CDP commands of this session.
    pub fn cdp_timeout(&self) -> Duration {
        self.timeout
    }

    /// The task workspace (file actions, downloads, screenshots, PDFs).
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Downloads of this session so far.
    pub fn downloads(&self) -> Vec<DownloadInfo> {
        lock(&self.events.downloads).clone()
    }

    /// The context's egress proxy listener, when the task has egress settings and the pool's
    /// proxy is on.
    pub fn egress_proxy(&self) -> Option<&ContextProxy> {
        self.proxy.as_ref()
    }

    /// What the guard and the proxy refused since the last call (guard entries first).
    pub fn drain_blocked(&self) -> Vec<BlockedRequest> {
        let mut blocked = self
            .egress
            .as_ref()
            .map(EgressGuard::drain_blocked)
            .unwrap_or_default();
        if let Some(proxy) = &self.proxy {
            blocked.extend(proxy.drain_blocked());
        }
        blocked
    }

    /// The CDP session (on the crate's raw connection) of a target, attaching on first use.
    pub async fn session_for_target(&self, target_id: &str) -> Result<String> {
        self.sessions.session_for(target_id).await
    }

    /// Raw CDP escape hatch: runs `method` on `target_id` (None = browser) with the session
    /// timeout and returns the undecoded answer.
    pub async fn cdp(
        &self,
        target_id: Option<&str>,
        method: &str,
        params: serde_json::Value,
    ) -> Result<RawResponse> {
        self.cdp_with_timeout(target_id, method, params, self.timeout)
            .await
    }

    /// [`BrowserSession::cdp`] with an explicit timeout.
    pub async fn cdp_with_timeout(
        &self,
        target_id: Option<&str>,
        method: &str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> Result<RawResponse> {
        let session = match target_id {
            Some(t) => Some(self.sessions.session_for(t).await?),
            None => None,
        };
        self.chrome
            .conn
            .call_raw(session.as_deref(), method, params, timeout)
            .await
    }

    async fn dispose_context(&self) {
        let disposed = self
            .chrome
            .conn
            .call_raw(
                None,
                "Target.disposeBrowserContext",
                json!({"browserContextId": self.context_id}),
                self.timeout,
            )
            .await;
        if let Err(err) = disposed {
            tracing::warn!(context = %self.context_id, error = %err, "disposing browser context failed");
        }
    }

    /// Disposes the context (closing its tabs) and gives the slot back to the pool.
    pub async fn release(mut self) {
        self.release_inner().await;
    }

    async fn release_inner(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
        if self.chrome.is_alive() {
            self.dispose_context().await;
        }
        if let Some(guard) = self.egress.take() {
            guard.close().await;
        }
        self.proxy.take();
        if let Some(lease) = self.lease.take() {
            lease.finish().await;
        }
    }
}

impl Drop for BrowserSession {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
        if self.released {
            return;
        }
        let chrome = self.chrome.clone();
        let context_id = self.context_id.clone();
        let lease = self.lease.take();
        let timeout = self.timeout;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if chrome.is_alive() {
                    let _ = chrome
                        .conn
                        .call_raw(
                            None,
                            "Target.disposeBrowserContext",
                            json!({"browserContextId": context_id}),
                            timeout,
                        )
                        .await;
                }
                if let Some(lease) = lease {
                    lease.finish().await;
                }
            });
        }
    }
}
