//! Navigation of a session's tabs: `Page.navigate` and the wait for the new document's
//! `load` lifecycle event under browser-use's caps (`load_cap`), plus the event-wait helper
//! (`wait_for_event`) that actions and the settle logic share.

use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::json;

use super::BrowserSession;
use crate::{
    cdp::CdpEvent,
    error::{BrowserError, Result},
};

impl BrowserSession {
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
                // Chrome is gone: nothing will come; the caller's next call fails at once.
                if ev.method == crate::cdp::CONNECTION_CLOSED_EVENT {
                    return WaitOutcome::Lagged;
                }
            }
            Ok(Err(RecvError::Lagged(_))) => return WaitOutcome::Lagged,
            Ok(Err(RecvError::Closed)) => return WaitOutcome::TimedOut,
        }
    }
}
