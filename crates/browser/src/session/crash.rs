//! Tabs whose renderer died: a page that crashed its renderer (a renderer bug, an
//! out-of-memory, `Page.crash`) or that the pool's memory watch killed for using more than its
//! cap. Only the tabs of that renderer are hit — other tasks' contexts live in other
//! renderers — and only this session notices: the listener records the crash
//! (`Target.targetCrashed`, with the memory cap when the pool's watch had just killed a
//! renderer) and fails the tab's CDP calls, in flight and to come (Chrome would hold them until
//! their timeouts), and the next capture — or the one it interrupted, once more — replaces each
//! crashed tab with a new one —
//! at the same address after a crash, blank after a memory kill or a second crash of the same
//! address — and tells the agent in the state's browser errors.

use std::time::Duration;

use super::BrowserSession;
use crate::types::short_tab_id;

/// A page target of the session whose renderer process ended.
#[derive(Clone, Debug)]
pub(crate) struct CrashedTab {
    pub target_id: String,
    /// Chrome's termination status (`crashed`, `killed`, `oom`, `abnormal`, …).
    pub status: String,
    /// The memory cap (MiB) when the pool's memory watch had just killed a renderer of this
    /// Chrome as the crash was reported: the likeliest cause.
    pub memory_cap_mb: Option<u64>,
}

/// How recent a memory kill of the pool's watch must be, when the crash is reported, to
/// explain it.
pub(super) const MEMORY_KILL_WINDOW: Duration = Duration::from_secs(10);

impl BrowserSession {
    /// Replaces the tabs that crashed since the last call (see the module docs) and returns
    /// what the agent is told, one line per tab.
    pub(crate) async fn recover_crashed_tabs(&self) -> Vec<String> {
        let crashed = self.events.take_crashed();
        if crashed.is_empty() {
            return Vec::new();
        }
        let tabs = self.tabs().await.unwrap_or_default();
        let mut notices = Vec::new();
        for crash in crashed {
            let Some(tab) = tabs.iter().find(|t| t.target_id == crash.target_id) else {
                continue; // closed since
            };
            let focused = self.focused_target().await.ok();
            let was_focused = focused.as_deref() == Some(tab.target_id.as_str());
            let memory_kill = crash.memory_cap_mb;
            let repeated = {
                let mut seen = super::listener::lock(&self.events.crashed_urls);
                let repeated = seen.contains(&tab.url);
                seen.insert(tab.url.clone());
                repeated
            };
            let reopen_at = if memory_kill.is_some() || repeated || !tab.url.starts_with("http") {
                "about:blank"
            } else {
                tab.url.as_str()
            };
            tracing::warn!(
                url = %tab.url, status = %crash.status, memory_kill = memory_kill.is_some(),
                "a tab's renderer died; replacing the tab"
            );
            metrics::counter!("browserd_tab_crashes_total", "cause" => if memory_kill.is_some() { "memory" } else { "crash" }).increment(1);
            if let Err(err) = self.close_tab(&tab.target_id).await {
                tracing::debug!(%err, "closing the crashed tab failed");
            }
            if let Some(session) = self.sessions.by_target.lock().await.remove(&tab.target_id) {
                self.chrome.conn.forget_session(&session);
            }
            let reopened = self.new_tab(reopen_at).await;
            if !was_focused && let Some(previous) = &focused {
                let _ = self.switch_tab(previous).await;
            }
            let old_id = short_tab_id(&tab.target_id);
            let new_id = match &reopened {
                Ok(target) => short_tab_id(target),
                Err(_) => "(none)".to_owned(),
            };
            let notice = match (memory_kill, repeated, &reopened) {
                (Some(limit_mb), _, _) => format!(
                    "The page {} in tab {old_id} used more than {limit_mb} MB of memory and was \
                     closed; tab {new_id} (blank) replaces it. Do not open that page again.",
                    tab.url
                ),
                (None, true, _) => format!(
                    "The page {} in tab {old_id} crashed again ({}); tab {new_id} (blank) \
                     replaces it.",
                    tab.url, crash.status
                ),
                (None, false, Ok(_)) if reopen_at != "about:blank" => format!(
                    "The page {} in tab {old_id} crashed ({}); it was reopened in tab {new_id}. \
                     What was typed or opened on it is lost.",
                    tab.url, crash.status
                ),
                (None, false, Ok(_)) => format!(
                    "The page {} in tab {old_id} crashed ({}); tab {new_id} (blank) replaces it.",
                    tab.url, crash.status
                ),
                (None, false, Err(err)) => format!(
                    "The page {} in tab {old_id} crashed ({}); reopening it failed: {err}",
                    tab.url, crash.status
                ),
            };
            notices.push(notice);
        }
        notices
    }
}
