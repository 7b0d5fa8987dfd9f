//! The state a browser context hands to the next task of its `/api/v2` session: its cookies
//! (CDP `Storage.getCookies` / `Storage.setCookies` on the context) and the URLs of its open
//! tabs. Saved in Postgres by the worker, so the next task may run on any worker. The CDP calls
//! are the browser crate's (`BrowserSession::cookies` / `set_cookies`).

use std::time::Duration;

use browserd_browser::BrowserSession;
use serde_json::Value;

/// One call of saving or restoring takes at most this long.
const STATE_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Opening one restored tab takes at most this long.
const TAB_RESTORE_TIMEOUT: Duration = Duration::from_secs(30);
/// Tabs restored at most.
const MAX_TABS: usize = 20;

/// Cookies and open tabs of a browser context.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrowserState {
    /// CDP `Network.Cookie` objects.
    pub cookies: Vec<Value>,
    /// URLs of the open tabs (http(s) only), in the browser's order.
    pub tabs: Vec<String>,
    /// Index of the focused tab in `tabs`.
    pub focused: usize,
}

/// Reads the context's cookies and tabs. `None` when the browser does not answer.
pub async fn save(session: &BrowserSession) -> Option<BrowserState> {
    let cookies = match tokio::time::timeout(STATE_CALL_TIMEOUT, session.cookies()).await {
        Ok(Ok(cookies)) => cookies,
        Ok(Err(err)) => {
            tracing::warn!(%err, "could not read the session's cookies");
            return None;
        }
        Err(_) => {
            tracing::warn!("reading the session's cookies timed out");
            return None;
        }
    };
    let focused_target = session.focused_target().await.ok();
    let mut tabs = Vec::new();
    let mut focused = 0;
    match tokio::time::timeout(STATE_CALL_TIMEOUT, session.tabs()).await {
        Ok(Ok(list)) => {
            for tab in list {
                if !(tab.url.starts_with("http://") || tab.url.starts_with("https://")) {
                    continue;
                }
                if focused_target.as_deref() == Some(tab.target_id.as_str()) {
                    focused = tabs.len();
                }
                tabs.push(tab.url);
            }
        }
        Ok(Err(err)) => tracing::warn!(%err, "could not list the session's tabs"),
        Err(_) => tracing::warn!("listing the session's tabs timed out"),
    }
    Some(BrowserState {
        cookies,
        tabs,
        focused,
    })
}

/// Puts `state` into the fresh context: its cookies, and its tabs unless `open_tabs` is false
/// (a resumed run goes back to its own last page). Failures are logged, not fatal: the task
/// runs with what could be restored.
pub async fn restore(session: &BrowserSession, state: &BrowserState, open_tabs: bool) {
    match tokio::time::timeout(STATE_CALL_TIMEOUT, session.set_cookies(&state.cookies)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(%err, "could not restore the session's cookies"),
        Err(_) => tracing::warn!("restoring the session's cookies timed out"),
    }
    if !open_tabs || state.tabs.is_empty() {
        return;
    }
    let mut targets = Vec::new();
    for (i, url) in state.tabs.iter().take(MAX_TABS).enumerate() {
        let opened = if i == 0 {
            let target = session.focused_target().await;
            match tokio::time::timeout(TAB_RESTORE_TIMEOUT, session.navigate(url)).await {
                Ok(Ok(())) => target.ok(),
                Ok(Err(err)) => {
                    tracing::warn!(%err, "could not reopen a tab of the session");
                    target.ok()
                }
                Err(_) => {
                    tracing::warn!("reopening a tab of the session timed out");
                    target.ok()
                }
            }
        } else {
            match tokio::time::timeout(TAB_RESTORE_TIMEOUT, session.new_tab(url)).await {
                Ok(Ok(target)) => Some(target),
                Ok(Err(err)) => {
                    tracing::warn!(%err, "could not reopen a tab of the session");
                    None
                }
                Err(_) => {
                    tracing::warn!("reopening a tab of the session timed out");
                    None
                }
            }
        };
        targets.push(opened);
    }
    if let Some(Some(target)) = targets.get(state.focused)
        && let Err(err) = session.switch_tab(target).await
    {
        tracing::warn!(%err, "could not focus the session's tab");
    }
}
