//! A task's browser session: one isolated context, its tabs, the focused tab, captures,
//! and what happens in it on its own: JavaScript dialogs (closed automatically and reported),
//! downloads (into the task workspace), tabs the page opens, the egress guard and the context's
//! egress proxy listener.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use crate::{
    actions::{Workspace, workspace::sanitize_file_name},
    capture::{self, SessionSource, page_info_from_metrics},
    cdp::{CdpEvent, RawResponse},
    egress::{
        BlockedRequest, ContextProxy, EgressGuard, EgressGuardOptions, EgressPolicy, EgressScope,
        EgressSettings,
    },
    error::{BrowserError, Result},
    pool::{Chrome, EgressNet, Lease},
    settle::SettleSettings,
    types::{
        CaptureOptions, DownloadInfo, DownloadState, PageState, Screenshot, ScreenshotFormat,
        SelectorMap, Tab, Viewport,
    },
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
}

/// Things that happened in the session between actions.
#[derive(Default)]
pub(crate) struct SessionEvents {
    dialogs: std::sync::Mutex<Vec<String>>,
    downloads: std::sync::Mutex<Vec<DownloadInfo>>,
    /// Downloads finished since the last action result.
    finished_downloads: std::sync::Mutex<Vec<String>>,
    prepared: Mutex<HashSet<String>>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SessionEvents {
    pub(crate) fn take_dialogs(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.dialogs))
    }
    pub(crate) fn take_finished_downloads(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.finished_downloads))
    }
}

#[derive(Deserialize)]
struct TargetInfoWire {
    #[serde(rename = "targetId")]
    target_id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(rename = "browserContextId", default)]
    browser_context_id: Option<String>,
}

#[derive(Deserialize)]
struct TargetsWire {
    #[serde(rename = "targetInfos")]
    target_infos: Vec<TargetInfoWire>,
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

/// Raw-connection sessions per target, attached on first use.
pub(crate) struct Sessions {
    chrome: Arc<Chrome>,
    by_target: Mutex<HashMap<String, String>>,
}

impl Sessions {
    async fn target_of(&self, session: &str) -> Option<String> {
        self.by_target
            .lock()
            .await
            .iter()
            .find(|(_, s)| s.as_str() == session)
            .map(|(t, _)| t.clone())
    }
}

impl SessionSource for Sessions {
    async fn session_for(&self, target_id: &str) -> Result<String> {
        // The lock is held across the attach: two callers racing for a new tab (the action
        // that opened it and the listener preparing it) must end up on one session, or events
        // enabled on one would be awaited on the other.
        let mut by_target = self.by_target.lock().await;
        if let Some(s) = by_target.get(target_id) {
            return Ok(s.clone());
        }
        let session = self.chrome.conn.attach(target_id).await?;
        // The settle tracker runs in every document of the target from now on, before the
        // page's scripts (and at once in the current one).
        if let Err(err) = self
            .chrome
            .conn
            .call_raw(
                Some(&session),
                "Page.addScriptToEvaluateOnNewDocument",
                json!({"source": crate::settle::TRACKER_JS, "runImmediately": true}),
                self.chrome.conn.default_timeout(),
            )
            .await
        {
            // Actions on this target then report their settle as unavailable.
            tracing::debug!(target_id, error = %err, "settle tracker not installed");
        }
        by_target.insert(target_id.to_owned(), session.clone());
        Ok(session)
    }
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
    listener: Option<tokio::task::JoinHandle<()>>,
    lease: Option<Lease>,
    released: bool,
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

impl BrowserSession {
    /// `default_viewport` applies when `options` has none.
    pub(crate) async fn open(
        chrome: Arc<Chrome>,
        timeout: Duration,
        options: ContextOptions,
        default_viewport: Viewport,
        net: Arc<EgressNet>,
    ) -> Result<Self> {
        let workspace = match &options.workspace_dir {
            Some(dir) => Workspace::open(dir)?,
            None => Workspace::temporary()?,
        };
        let policy = match &options.egress {
            Some(settings) => Some(Arc::new(
                EgressPolicy::new(settings.clone())
                    .map_err(|e| BrowserError::Egress(e.to_string()))?
                    .with_shared_resolver(net.resolver.clone()),
            )),
            None => None,
        };
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
                    .map_err(|e| match e {
                        crate::egress::ProxyError::UnknownUpstream(_) => {
                            BrowserError::InvalidArgument(e.to_string())
                        }
                        other => BrowserError::Egress(other.to_string()),
                    })?,
            ),
            _ => None,
        };
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
        let context_id = chrome
            .conn
            .call_raw(None, "Target.createBrowserContext", context_params, timeout)
            .await?
            .decode::<Created>()?
            .browser_context_id;
        let sessions = Arc::new(Sessions {
            chrome: chrome.clone(),
            by_target: Mutex::new(HashMap::new()),
        });
        let events = Arc::new(SessionEvents::default());
        let mut session = Self {
            sessions,
            chrome,
            context_id,
            timeout,
            settle: options.settle,
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
            viewport: options.viewport.unwrap_or(default_viewport),
            listener: None,
            lease: None,
            released: false,
            focus: tokio::sync::watch::Sender::new(None),
        };
        match session.start(policy).await {
            Ok(()) => Ok(session),
            Err(err) => {
                session.dispose_context().await;
                session.released = true;
                Err(err)
            }
        }
    }

    /// Installs the egress guard, the event listener and download behaviour, then opens the
    /// first tab.
    async fn start(&mut self, policy: Option<Arc<EgressPolicy>>) -> Result<()> {
        if let Some(policy) = policy {
            let guard = EgressGuard::attach(
                &self.chrome.ws_url,
                EgressScope::Context(self.context_id.clone()),
                policy,
                EgressGuardOptions::default(),
            )
            .await
            .map_err(|e| BrowserError::Egress(e.to_string()))?;
            self.egress = Some(guard);
        }
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
            json!({
                "behavior": "allowAndName",
                "browserContextId": self.context_id,
                "downloadPath": self.workspace.downloads_dir().to_string_lossy(),
                "eventsEnabled": true,
            }),
            self.timeout,
        )
        .await?;
        self.listener = Some(tokio::spawn(listen(
            rx,
            ListenerCtx {
                sessions: self.sessions.clone(),
                events: self.events.clone(),
                context_id: self.context_id.clone(),
                downloads_dir: self.workspace.downloads_dir(),
                timeout: self.timeout,
                viewport: self.viewport,
            },
        )));
        self.new_tab("about:blank").await?;
        Ok(())
    }

    pub(crate) fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
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

    /// Opens a tab in this context and focuses it; returns its target id.
    pub async fn new_tab(&self, url: &str) -> Result<String> {
        #[derive(Deserialize)]
        struct Created {
            #[serde(rename = "targetId")]
            target_id: String,
        }
        // Opened blank and then navigated, so the load is awaited like any navigation (and the
        // tab's events are enabled before its first document).
        let target_id = self
            .chrome
            .conn
            .call_raw(
                None,
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": self.context_id}),
                self.timeout,
            )
            .await?
            .decode::<Created>()?
            .target_id;
        self.prepare_tab(&target_id).await?;
        self.state.lock().await.focused = Some(target_id.clone());
        self.focus.send_replace(Some(target_id.clone()));
        if url != "about:blank" {
            let outcome = self.navigate_target(&target_id, url).await?;
            if let Some(text) = outcome.error_text {
                return Err(BrowserError::InvalidArgument(format!(
                    "navigation to {url} failed: {text}"
                )));
            }
        }
        Ok(target_id)
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

    /// Makes sure the tab's raw session has Page events and lifecycle events enabled and the
    /// session's viewport set.
    pub(crate) async fn prepare_tab(&self, target_id: &str) -> Result<String> {
        prepare_tab(
            &self.sessions,
            &self.events,
            target_id,
            self.viewport,
            self.timeout,
        )
        .await
    }

    /// Navigates the focused tab and waits for its load event (browser-use's caps: 20 s for
    /// the command, then 3 s same-site / 8 s otherwise; a slow load is not an error).
    pub async fn navigate(&self, url: &str) -> Result<()> {
        let target = self.focused_target().await?;
        let outcome = self.navigate_target(&target, url).await?;
        match outcome.error_text {
            Some(text) => Err(BrowserError::InvalidArgument(format!(
                "navigation to {url} failed: {text}"
            ))),
            None => Ok(()),
        }
    }

    /// Navigates `target` and waits for the load event of the new document.
    pub(crate) async fn navigate_target(&self, target: &str, url: &str) -> Result<NavOutcome> {
        let session = self.prepare_tab(target).await?;
        let before = self.target_url(target).await.unwrap_or_default();
        let mut rx = self.chrome.conn.events();
        #[derive(Deserialize)]
        struct Navigated {
            #[serde(rename = "frameId")]
            frame_id: String,
            #[serde(rename = "loaderId")]
            loader_id: Option<String>,
            #[serde(rename = "errorText")]
            error_text: Option<String>,
        }
        let nav: Navigated = self
            .chrome
            .conn
            .call_raw(
                Some(&session),
                "Page.navigate",
                json!({"url": url, "transitionType": "address_bar"}),
                crate::actions::timeouts::NAVIGATE_COMMAND,
            )
            .await?
            .decode()?;
        if let Some(text) = nav.error_text.filter(|t| !t.is_empty()) {
            return Ok(NavOutcome {
                error_text: Some(text),
                load_timed_out: false,
            });
        }
        let Some(loader) = nav.loader_id else {
            return Ok(NavOutcome::default());
        };
        let cap = load_cap(&before, url);
        let loaded = wait_for_event(&mut rx, cap, |ev| {
            ev.session_id.as_deref() == Some(session.as_str())
                && ev.method == "Page.lifecycleEvent"
                && ev.params::<LifecycleWire>().is_ok_and(|p| {
                    p.name == "load" && p.loader_id == loader && p.frame_id == nav.frame_id
                })
        })
        .await;
        let loaded = match loaded {
            WaitOutcome::Seen => true,
            WaitOutcome::Lagged => self.ready_state_complete(&session).await,
            WaitOutcome::TimedOut => false,
        };
        Ok(NavOutcome {
            error_text: None,
            load_timed_out: !loaded,
        })
    }

    pub(crate) async fn ready_state_complete(&self, session: &str) -> bool {
        #[derive(Deserialize)]
        struct Eval {
            result: EvalValue,
        }
        #[derive(Deserialize)]
        struct EvalValue {
            value: Option<String>,
        }
        match self
            .chrome
            .conn
            .call_raw(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": "document.readyState", "returnByValue": true}),
                Duration::from_secs(2),
            )
            .await
            .and_then(|r| r.decode::<Eval>())
        {
            Ok(e) => e.result.value.as_deref() == Some("complete"),
            Err(_) => false,
        }
    }

    /// The current URL of a target.
    pub(crate) async fn target_url(&self, target: &str) -> Result<String> {
        #[derive(Deserialize)]
        struct Info {
            #[serde(rename = "targetInfo")]
            target_info: TargetInfoWire,
        }
        let info: Info = self
            .chrome
            .conn
            .call_raw(
                None,
                "Target.getTargetInfo",
                json!({"targetId": target}),
                self.timeout,
            )
            .await?
            .decode()?;
        Ok(info.target_info.url)
    }

    /// The focused tab's target id.
    pub async fn focused_target(&self) -> Result<String> {
        self.state
            .lock()
            .await
            .focused
            .clone()
            .ok_or_else(|| BrowserError::TabNotFound("(no focused tab)".into()))
    }

    /// Tabs (page targets) of this context, in Chrome's order.
    pub async fn tabs(&self) -> Result<Vec<Tab>> {
        let targets: TargetsWire = self
            .chrome
            .conn
            .call_raw(None, "Target.getTargets", json!({}), self.timeout)
            .await?
            .decode()?;
        Ok(targets
            .target_infos
            .into_iter()
            .filter(|t| {
                t.kind == "page" && t.browser_context_id.as_deref() == Some(&self.context_id)
            })
            .map(|t| Tab::new(t.target_id, t.url, t.title))
            .collect())
    }

    /// Tabs and cross-origin frame targets of this context, from one `Target.getTargets`.
    async fn tabs_and_frames(&self) -> Result<(Vec<Tab>, HashSet<String>)> {
        let targets: TargetsWire = self
            .chrome
            .conn
            .call_raw(None, "Target.getTargets", json!({}), self.timeout)
            .await?
            .decode()?;
        let mut tabs = Vec::new();
        let mut frames = HashSet::new();
        for t in targets.target_infos {
            if t.browser_context_id.as_deref() != Some(&self.context_id) {
                continue;
            }
            match t.kind.as_str() {
                "page" => tabs.push(Tab::new(t.target_id, t.url, t.title)),
                "iframe" => {
                    frames.insert(t.target_id);
                }
                _ => {}
            }
        }
        Ok((tabs, frames))
    }

    /// Focuses a tab by full target id or its 4-character short id.
    pub async fn switch_tab(&self, tab: &str) -> Result<String> {
        let tabs = self.tabs().await?;
        let found = tabs
            .iter()
            .find(|t| t.target_id == tab || t.tab_id == tab)
            .ok_or_else(|| BrowserError::TabNotFound(tab.to_owned()))?;
        self.state.lock().await.focused = Some(found.target_id.clone());
        self.focus.send_replace(Some(found.target_id.clone()));
        Ok(found.target_id.clone())
    }

    /// Closes a tab (full or short id); focus moves to the last remaining tab.
    pub async fn close_tab(&self, tab: &str) -> Result<()> {
        let tabs = self.tabs().await?;
        let found = tabs
            .iter()
            .find(|t| t.target_id == tab || t.tab_id == tab)
            .ok_or_else(|| BrowserError::TabNotFound(tab.to_owned()))?;
        let mut rx = self.chrome.conn.events();
        self.cdp(
            None,
            "Target.closeTarget",
            json!({"targetId": found.target_id}),
        )
        .await?;
        // Closing is asynchronous: wait (browser-use's TabClosed cap, 3 s) until it is gone.
        let needle = format!("\"targetId\":\"{}\"", found.target_id);
        let _ = wait_for_event(&mut rx, Duration::from_secs(3), |ev| {
            ev.method == "Target.targetDestroyed" && ev.raw.as_str().contains(&needle)
        })
        .await;
        let mut state = self.state.lock().await;
        if state.focused.as_deref() == Some(&found.target_id) {
            state.focused = tabs
                .iter()
                .rev()
                .find(|t| t.target_id != found.target_id)
                .map(|t| t.target_id.clone());
            self.focus.send_replace(state.focused.clone());
        }
        Ok(())
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

    /// A viewport screenshot of the focused tab alone (what `capture` takes alongside the DOM
    /// when asked), scaled down to fit `max_size` (width, height) when given. Chrome answers it
    /// after its next compositor frame, tens of ms later.
    pub async fn viewport_screenshot(
        &self,
        format: ScreenshotFormat,
        max_size: Option<(u32, u32)>,
    ) -> Result<Screenshot> {
        let target = self.focused_target().await?;
        let session = self.sessions.session_for(&target).await?;
        capture::screenshot(
            &self.chrome.conn,
            &session,
            format,
            self.viewport,
            max_size,
            self.timeout,
        )
        .await
    }

    /// Captures the focused tab: indexed text, selector map, page info and (optionally) a
    /// screenshot. `*` marks elements not present in the previous capture of this session
    /// (reset when the focused tab changes).
    pub async fn capture(&self, options: &CaptureOptions) -> Result<PageState> {
        let target = self.focused_target().await?;
        let previous = {
            let state = self.state.lock().await;
            if state.previous_focus.as_deref() == Some(&target) {
                state.previous.clone()
            } else {
                HashSet::new()
            }
        };
        let output = capture::capture(
            &self.chrome.conn,
            &*self.sessions,
            &target,
            self.tabs_and_frames(),
            &previous,
            options,
            self.viewport,
            self.timeout,
        )
        .await?;
        {
            let mut state = self.state.lock().await;
            state.previous = output
                .selector_map
                .values()
                .map(|e| (e.target_id.clone(), e.backend_node_id))
                .collect();
            state.previous_focus = Some(target.clone());
            state.selector_map = output.selector_map.clone();
            state.frame_sessions = output.frame_sessions.clone();
        }
        let tabs = output.tabs;
        let page_info = output
            .metrics
            .as_ref()
            .map(page_info_from_metrics)
            .unwrap_or_default();
        let (url, title) = tabs
            .iter()
            .find(|t| t.target_id == target)
            .map(|t| (t.url.clone(), t.title.clone()))
            .unwrap_or_default();

        let (llm_text, truncated) = llm_text(
            &output.dom_text,
            output.has_root,
            &page_info,
            options.max_text_len,
        );
        Ok(PageState {
            llm_text,
            dom_text: output.dom_text,
            truncated,
            selector_map: output.selector_map,
            url,
            title,
            tabs: tabs.iter().map(Tab::info).collect(),
            focused_tab: Some(crate::types::short_tab_id(&target)),
            page_info,
            stats: output.stats,
            screenshot: output.screenshot,
            timings: output.timings,
            closed_popup_messages: self.events.take_dialogs(),
        })
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

/// browser-use's element text: capped at `max_len` characters, `[Start of page]` when nothing
/// is above the viewport, `[End of page]` when nothing is below, `empty page` when empty.
pub(crate) fn llm_text(
    dom_text: &str,
    has_root: bool,
    page: &crate::types::PageInfo,
    max_len: usize,
) -> (String, bool) {
    let dom_text = if has_root {
        dom_text
    } else {
        "Empty DOM tree (you might have to wait for the page to load)"
    };
    let (mut text, truncated) = match dom_text.char_indices().nth(max_len) {
        Some((cut, _)) => (dom_text[..cut].to_owned(), true),
        None => (dom_text.to_owned(), false),
    };
    if text.is_empty() {
        return ("empty page".to_owned(), truncated);
    }
    if page.pages_above() <= 0.0 {
        text = format!("[Start of page]\n{text}");
    }
    if page.pages_below() <= 0.0 {
        text.push_str("\n[End of page]");
    }
    (text, truncated)
}

/// How a navigation ended.
#[derive(Debug, Default, Clone)]
pub(crate) struct NavOutcome {
    /// `net::ERR_…` from Page.navigate.
    pub error_text: Option<String>,
    /// The load event did not come within the cap (the page may still be usable).
    pub load_timed_out: bool,
}

#[derive(Deserialize)]
struct LifecycleWire {
    #[serde(rename = "frameId")]
    frame_id: String,
    #[serde(rename = "loaderId")]
    loader_id: String,
    name: String,
}

/// browser-use's load-wait cap: 3 s when staying on the same host, 8 s otherwise.
pub(crate) fn load_cap(before: &str, after: &str) -> Duration {
    let host = |u: &str| {
        url::Url::parse(u)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
    };
    match (host(before), host(after)) {
        (Some(a), Some(b)) if a == b => crate::actions::timeouts::LOAD_SAME_DOMAIN,
        _ => crate::actions::timeouts::LOAD_OTHER_DOMAIN,
    }
}

pub(crate) enum WaitOutcome {
    Seen,
    /// Events were lost (receiver lagged): the caller must check state directly.
    Lagged,
    TimedOut,
}

/// Waits until an event matching `pred` arrives on `rx`, at most `cap`.
pub(crate) async fn wait_for_event(
    rx: &mut tokio::sync::broadcast::Receiver<Arc<CdpEvent>>,
    cap: Duration,
    mut pred: impl FnMut(&CdpEvent) -> bool,
) -> WaitOutcome {
    use tokio::sync::broadcast::error::RecvError;
    let deadline = tokio::time::Instant::now() + cap;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return WaitOutcome::TimedOut,
            Ok(Ok(ev)) => {
                if pred(&ev) {
                    return WaitOutcome::Seen;
                }
            }
            Ok(Err(RecvError::Lagged(_))) => return WaitOutcome::Lagged,
            Ok(Err(RecvError::Closed)) => return WaitOutcome::TimedOut,
        }
    }
}

/// Enables Page events and lifecycle events on the tab and sets its viewport (browser-use's
/// headless `Emulation.setDeviceMetricsOverride`: device scale factor 1, not mobile), once per
/// tab; the three commands are pipelined. The override lives as long as the tab's session on
/// the crate's connection, which is kept for the tab's life, so it survives navigations.
async fn prepare_tab(
    sessions: &Sessions,
    events: &SessionEvents,
    target_id: &str,
    viewport: Viewport,
    timeout: Duration,
) -> Result<String> {
    let session = sessions.session_for(target_id).await?;
    let mut prepared = events.prepared.lock().await;
    if prepared.contains(target_id) {
        return Ok(session);
    }
    let conn = &sessions.chrome.conn;
    let (page, lifecycle, metrics) = tokio::join!(
        conn.call_raw(Some(&session), "Page.enable", json!({}), timeout),
        conn.call_raw(
            Some(&session),
            "Page.setLifecycleEventsEnabled",
            json!({"enabled": true}),
            timeout
        ),
        conn.call_raw(
            Some(&session),
            "Emulation.setDeviceMetricsOverride",
            json!({
                "width": viewport.width,
                "height": viewport.height,
                "deviceScaleFactor": 1,
                "mobile": false,
            }),
            timeout
        ),
    );
    page?;
    lifecycle?;
    metrics?;
    prepared.insert(target_id.to_owned());
    Ok(session)
}

struct ListenerCtx {
    sessions: Arc<Sessions>,
    events: Arc<SessionEvents>,
    context_id: String,
    downloads_dir: PathBuf,
    timeout: Duration,
    viewport: Viewport,
}

#[derive(Deserialize)]
struct TargetCreatedWire {
    #[serde(rename = "targetInfo")]
    target_info: TargetInfoWire,
}

#[derive(Deserialize)]
struct DialogWire {
    message: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct DownloadBeginWire {
    #[serde(rename = "frameId")]
    frame_id: String,
    guid: String,
    url: String,
    #[serde(rename = "suggestedFilename", default)]
    suggested_filename: String,
}

#[derive(Deserialize)]
struct DownloadProgressWire {
    guid: String,
    #[serde(rename = "totalBytes", default)]
    total_bytes: f64,
    #[serde(rename = "receivedBytes", default)]
    received_bytes: f64,
    state: String,
}

/// Handles the session's events: new tabs get Page events (so their dialogs are seen),
/// dialogs are closed (alert/confirm/beforeunload accepted, prompt dismissed) and recorded,
/// downloads are tracked and renamed to a safe unique name when complete.
async fn listen(mut rx: tokio::sync::broadcast::Receiver<Arc<CdpEvent>>, ctx: ListenerCtx) {
    use tokio::sync::broadcast::error::RecvError;
    let ctx = Arc::new(ctx);
    loop {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(lost = n, "session event listener lagged");
                continue;
            }
            Err(RecvError::Closed) => break,
        };
        match ev.method.as_str() {
            "Target.targetCreated" => {
                if let Ok(p) = ev.params::<TargetCreatedWire>() {
                    let info = p.target_info;
                    if info.kind == "page"
                        && info.browser_context_id.as_deref() == Some(&ctx.context_id)
                    {
                        let ctx = ctx.clone();
                        tokio::spawn(async move {
                            if let Err(err) = prepare_tab(
                                &ctx.sessions,
                                &ctx.events,
                                &info.target_id,
                                ctx.viewport,
                                ctx.timeout,
                            )
                            .await
                            {
                                tracing::debug!(error = %err, "could not prepare new tab");
                            }
                        });
                    }
                }
            }
            "Page.javascriptDialogOpening" => {
                let Some(session) = ev.session_id.clone() else {
                    continue;
                };
                if ctx.sessions.target_of(&session).await.is_none() {
                    continue;
                }
                if let Ok(p) = ev.params::<DialogWire>() {
                    let accept = p.kind != "prompt";
                    lock(&ctx.events.dialogs).push(format!("[{}] {}", p.kind, p.message));
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let _ = ctx
                            .sessions
                            .chrome
                            .conn
                            .call_raw(
                                Some(&session),
                                "Page.handleJavaScriptDialog",
                                json!({"accept": accept}),
                                ctx.timeout,
                            )
                            .await;
                    });
                }
            }
            "Browser.downloadWillBegin" => {
                if let Ok(p) = ev.params::<DownloadBeginWire>() {
                    let ours = ctx.events.prepared.lock().await.contains(&p.frame_id)
                        || ctx
                            .sessions
                            .by_target
                            .lock()
                            .await
                            .contains_key(&p.frame_id);
                    if ours {
                        lock(&ctx.events.downloads).push(DownloadInfo {
                            guid: p.guid,
                            url: p.url,
                            suggested_filename: p.suggested_filename,
                            path: None,
                            state: DownloadState::InProgress,
                            received_bytes: 0,
                            total_bytes: 0,
                        });
                    }
                }
            }
            "Browser.downloadProgress" => {
                if let Ok(p) = ev.params::<DownloadProgressWire>() {
                    let finished = {
                        let mut downloads = lock(&ctx.events.downloads);
                        let Some(d) = downloads.iter_mut().find(|d| d.guid == p.guid) else {
                            continue;
                        };
                        d.received_bytes = p.received_bytes.max(0.0) as u64;
                        d.total_bytes = p.total_bytes.max(0.0) as u64;
                        match p.state.as_str() {
                            "completed" if d.state == DownloadState::InProgress => Some(d.clone()),
                            "canceled" => {
                                d.state = DownloadState::Canceled;
                                None
                            }
                            _ => None,
                        }
                    };
                    if let Some(done) = finished {
                        let path = finish_download(&ctx.downloads_dir, &done);
                        // Listed for the next action result before it shows as completed.
                        if let Some(path) = &path {
                            lock(&ctx.events.finished_downloads)
                                .push(path.to_string_lossy().into_owned());
                        }
                        let mut downloads = lock(&ctx.events.downloads);
                        if let Some(d) = downloads.iter_mut().find(|d| d.guid == done.guid) {
                            d.state = DownloadState::Completed;
                            d.path = path;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Moves `downloads/<guid>` to a sanitized unique name; returns the final path.
fn finish_download(dir: &std::path::Path, d: &DownloadInfo) -> Option<PathBuf> {
    let from = dir.join(&d.guid);
    if !from.is_file() {
        return None;
    }
    let name = sanitize_file_name(&d.suggested_filename, "download");
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_owned(), format!(".{e}")),
        _ => (name.clone(), String::new()),
    };
    let mut to = dir.join(&name);
    let mut n = 1;
    while to.exists() {
        to = dir.join(format!("{stem} ({n}){ext}"));
        n += 1;
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => Some(to),
        Err(_) => Some(from),
    }
}
