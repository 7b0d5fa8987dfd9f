//! Tabs of a session: the page targets of its context and the CDP session of each on the
//! crate's raw connection (`Sessions`, attached on first use with the settle tracker
//! installed), opening, listing, focusing and closing tabs, and preparing a tab (Page and
//! lifecycle events, the session's viewport) once before it is used.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use super::{BrowserSession, listener::SessionEvents, navigation::wait_for_event};
use crate::{
    capture::SessionSource,
    error::{BrowserError, Result},
    pool::Chrome,
    types::{Tab, Viewport},
};

#[derive(Deserialize)]
pub(super) struct TargetInfoWire {
    #[serde(rename = "targetId")]
    pub(super) target_id: String,
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) title: String,
    #[serde(default)]
    pub(super) url: String,
    #[serde(rename = "browserContextId", default)]
    pub(super) browser_context_id: Option<String>,
}

#[derive(Deserialize)]
struct TargetsWire {
    #[serde(rename = "targetInfos")]
    target_infos: Vec<TargetInfoWire>,
}

/// Raw-connection sessions per target, attached on first use.
pub(crate) struct Sessions {
    pub(super) chrome: Arc<Chrome>,
    pub(super) by_target: Mutex<HashMap<String, String>>,
    /// Scripts every document of the context runs first
    /// ([`BrowserSession::add_init_script`]), registered on each target at its attach.
    pub(super) init_scripts: std::sync::Mutex<Vec<String>>,
}

impl Sessions {
    pub(super) async fn target_of(&self, session: &str) -> Option<String> {
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
        let scripts = self
            .init_scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for source in scripts {
            if let Err(err) = self
                .chrome
                .conn
                .call_raw(
                    Some(&session),
                    "Page.addScriptToEvaluateOnNewDocument",
                    json!({"source": source}),
                    self.chrome.conn.default_timeout(),
                )
                .await
            {
                tracing::warn!(target_id, error = %err, "context script not installed");
            }
        }
        by_target.insert(target_id.to_owned(), session.clone());
        Ok(session)
    }
}

impl BrowserSession {
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
    pub(super) async fn tabs_and_frames(&self) -> Result<(Vec<Tab>, HashSet<String>)> {
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
}

/// Enables Page events and lifecycle events on the tab, sets its viewport (browser-use's
/// headless `Emulation.setDeviceMetricsOverride`: device scale factor 1, not mobile) and the
/// full build's generic font families ([`crate::launch::FULL_BUILD_FONT_FAMILIES`], which the
/// headless shell lacks), once per tab; the four commands are pipelined. The override lives as long as the tab's session on
/// the crate's connection, which is kept for the tab's life, so it survives navigations.
pub(super) async fn prepare_tab(
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
    let fonts: serde_json::Map<String, serde_json::Value> = crate::launch::FULL_BUILD_FONT_FAMILIES
        .iter()
        .map(|(generic, family)| ((*generic).to_owned(), json!(family)))
        .collect();
    let (page, lifecycle, metrics, font_families) = tokio::join!(
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
        conn.call_raw(
            Some(&session),
            "Page.setFontFamilies",
            json!({"fontFamilies": fonts}),
            timeout
        ),
    );
    page?;
    lifecycle?;
    metrics?;
    font_families?;
    prepared.insert(target_id.to_owned());
    Ok(session)
}
