//! A task's browser session: one isolated context, its tabs, the focused tab, captures.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use chromiumoxide::cdp::browser_protocol::{
    browser::BrowserContextId,
    target::{CreateBrowserContextParams, CreateTargetParams, TargetId},
};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use crate::{
    capture::{self, SessionSource, page_info_from_metrics},
    cdp::RawResponse,
    error::{BrowserError, Result},
    pool::{Chrome, Lease},
    types::{CaptureOptions, PageState, TabInfo},
};

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

struct SessionState {
    focused: Option<String>,
    /// (target id, backend node id) of the previous capture's selector map.
    previous: HashSet<(String, i64)>,
    previous_focus: Option<String>,
}

/// Raw-connection sessions per target, attached on first use.
struct Sessions {
    chrome: Arc<Chrome>,
    by_target: Mutex<HashMap<String, String>>,
}

impl SessionSource for Sessions {
    async fn session_for(&self, target_id: &str) -> Result<String> {
        if let Some(s) = self.by_target.lock().await.get(target_id) {
            return Ok(s.clone());
        }
        let session = self.chrome.conn.attach(target_id).await?;
        self.by_target
            .lock()
            .await
            .insert(target_id.to_owned(), session.clone());
        Ok(session)
    }
}

/// One task's browser: an isolated context (own cookies, storage, tabs) on a pooled Chrome.
///
/// Call [`BrowserSession::release`] when the task ends; dropping the session releases it in
/// the background.
pub struct BrowserSession {
    chrome: Arc<Chrome>,
    context_id: String,
    timeout: Duration,
    sessions: Sessions,
    state: Mutex<SessionState>,
    lease: Option<Lease>,
    released: bool,
}

impl std::fmt::Debug for BrowserSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserSession")
            .field("context_id", &self.context_id)
            .finish()
    }
}

impl BrowserSession {
    pub(crate) async fn open(chrome: Arc<Chrome>, timeout: Duration) -> Result<Self> {
        let context_id = {
            let guard = chrome.browser.read().await;
            let browser = guard.as_ref().ok_or(BrowserError::ConnectionClosed)?;
            let id = tokio::time::timeout(
                timeout,
                browser.create_browser_context(CreateBrowserContextParams::default()),
            )
            .await
            .map_err(|_| BrowserError::Timeout {
                method: "Target.createBrowserContext".into(),
                timeout,
            })??;
            id.inner().clone()
        };
        let session = Self {
            sessions: Sessions {
                chrome: chrome.clone(),
                by_target: Mutex::new(HashMap::new()),
            },
            chrome,
            context_id,
            timeout,
            state: Mutex::new(SessionState {
                focused: None,
                previous: HashSet::new(),
                previous_focus: None,
            }),
            lease: None,
            released: false,
        };
        let first = session.new_tab("about:blank").await;
        match first {
            Ok(_) => Ok(session),
            Err(err) => {
                session.dispose_context().await;
                let mut session = session;
                session.released = true;
                Err(err)
            }
        }
    }

    pub(crate) fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The CDP browser-context id of this session.
    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// The DevTools websocket URL of the Chrome hosting this session.
    pub fn websocket_url(&self) -> &str {
        &self.chrome.ws_url
    }

    /// Timeout used for CDP commands of this session.
    pub fn cdp_timeout(&self) -> Duration {
        self.timeout
    }

    fn timeout_err(&self, method: &str) -> BrowserError {
        BrowserError::Timeout {
            method: method.to_owned(),
            timeout: self.timeout,
        }
    }

    /// Opens a tab in this context and focuses it; returns its target id.
    pub async fn new_tab(&self, url: &str) -> Result<String> {
        let target_id = {
            let guard = self.chrome.browser.read().await;
            let browser = guard.as_ref().ok_or(BrowserError::ConnectionClosed)?;
            let params = CreateTargetParams::builder()
                .url(url)
                .browser_context_id(BrowserContextId::new(self.context_id.clone()))
                .build()
                .map_err(BrowserError::InvalidArgument)?;
            let page = tokio::time::timeout(self.timeout, browser.new_page(params))
                .await
                .map_err(|_| self.timeout_err("Target.createTarget"))??;
            page.target_id().as_ref().to_owned()
        };
        self.state.lock().await.focused = Some(target_id.clone());
        Ok(target_id)
    }

    /// Navigates the focused tab and waits for the load (bounded by the CDP timeout).
    pub async fn navigate(&self, url: &str) -> Result<()> {
        let target = self.focused_target().await?;
        let guard = self.chrome.browser.read().await;
        let browser = guard.as_ref().ok_or(BrowserError::ConnectionClosed)?;
        let page = tokio::time::timeout(
            self.timeout,
            browser.get_page(TargetId::new(target.clone())),
        )
        .await
        .map_err(|_| self.timeout_err("Target.getTargets"))??;
        tokio::time::timeout(self.timeout, page.goto(url))
            .await
            .map_err(|_| self.timeout_err("Page.navigate"))??;
        Ok(())
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
    pub async fn tabs(&self) -> Result<Vec<TabInfo>> {
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
            .map(|t| TabInfo::new(t.target_id, t.url, t.title))
            .collect())
    }

    /// Tabs and cross-origin frame targets of this context, from one `Target.getTargets`.
    async fn tabs_and_frames(&self) -> Result<(Vec<TabInfo>, HashSet<String>)> {
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
                "page" => tabs.push(TabInfo::new(t.target_id, t.url, t.title)),
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
        Ok(found.target_id.clone())
    }

    /// Closes a tab (full or short id); focus moves to the last remaining tab.
    pub async fn close_tab(&self, tab: &str) -> Result<()> {
        let tabs = self.tabs().await?;
        let found = tabs
            .iter()
            .find(|t| t.target_id == tab || t.tab_id == tab)
            .ok_or_else(|| BrowserError::TabNotFound(tab.to_owned()))?;
        self.cdp(
            None,
            "Target.closeTarget",
            json!({"targetId": found.target_id}),
        )
        .await?;
        let mut state = self.state.lock().await;
        if state.focused.as_deref() == Some(&found.target_id) {
            state.focused = tabs
                .iter()
                .rev()
                .find(|t| t.target_id != found.target_id)
                .map(|t| t.target_id.clone());
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
            &self.sessions,
            &target,
            self.tabs_and_frames(),
            &previous,
            options,
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
        }
        let tabs = output.tabs;
        let mut page_info = output
            .metrics
            .as_ref()
            .map(page_info_from_metrics)
            .unwrap_or_default();
        if let Some(tab) = tabs.iter().find(|t| t.target_id == target) {
            page_info.url = tab.url.clone();
            page_info.title = tab.title.clone();
        }
        page_info.focused_tab = Some(crate::types::short_tab_id(&target));
        page_info.tabs = tabs;

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
            page_info,
            stats: output.stats,
            screenshot: output.screenshot,
            timings: output.timings,
        })
    }

    async fn dispose_context(&self) {
        let guard = self.chrome.browser.read().await;
        if let Some(browser) = guard.as_ref() {
            let dispose =
                browser.dispose_browser_context(BrowserContextId::new(self.context_id.clone()));
            if tokio::time::timeout(self.timeout, dispose).await.is_err() {
                tracing::warn!(context = %self.context_id, "disposing browser context timed out");
            }
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
        if self.chrome.is_alive() {
            self.dispose_context().await;
        }
        if let Some(lease) = self.lease.take() {
            lease.finish().await;
        }
    }
}

impl Drop for BrowserSession {
    fn drop(&mut self) {
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
