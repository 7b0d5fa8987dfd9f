//! Navigation actions: open a URL (search, navigate), go back, close a tab.

use serde::Deserialize;
use serde_json::json;

use super::{
    ActionResult,
    exec::{Fail, Outcome},
    timeouts,
};
use crate::{
    session::{BrowserSession, WaitOutcome, load_cap, wait_for_event},
    types::short_tab_id,
};

impl BrowserSession {
    pub(super) async fn check_egress(&self, url: &str) -> Result<(), Fail> {
        if let Some(guard) = &self.egress {
            let refused = |d: crate::egress::EgressDenied| {
                Fail::new(format!("Navigation to {url} is not allowed: {}", d.reason))
            };
            let policy = guard.policy().for_url(url).map_err(refused)?;
            let parsed = policy.check_str(url).map_err(|d| {
                Fail::new(format!("Navigation to {url} is not allowed: {}", d.reason))
            })?;
            policy.check_url_resolved(&parsed).await.map_err(|d| {
                Fail::new(format!("Navigation to {url} is not allowed: {}", d.reason))
            })?;
        }
        Ok(())
    }

    pub(super) async fn open_url(&self, raw_url: &str, new_tab: bool) -> Outcome {
        let url = normalize_url(raw_url)?;
        self.check_egress(&url).await?;
        let target = if new_tab {
            self.new_tab("about:blank").await?
        } else {
            self.focused_target().await?
        };
        let outcome = self.navigate_target(&target, &url).await?;
        if let Some(text) = outcome.error_text {
            if text.contains("ERR_BLOCKED_BY_CLIENT") {
                let _ = self.navigate_target(&target, "about:blank").await;
                return Err(Fail::new(format!(
                    "Navigation blocked by the egress policy: {url}"
                )));
            }
            return Err(Fail::new(format!(
                "Navigation failed - site unavailable: {url} ({text})"
            )));
        }
        // A redirect may have landed somewhere the policy forbids.
        let landed = self.target_url(&target).await.unwrap_or_default();
        if let Some(guard) = &self.egress
            && let Err(denied) = guard
                .policy()
                .for_url(&landed)
                .and_then(|policy| policy.check_str(&landed))
        {
            let _ = self.navigate_target(&target, "about:blank").await;
            return Err(Fail::new(format!(
                "Navigation blocked by the egress policy: {landed} ({})",
                denied.reason
            )));
        }
        let mut memory = if new_tab {
            format!("Opened new tab #{} with url {url}", short_tab_id(&target))
        } else {
            format!("Navigated to {url}")
        };
        if outcome.load_timed_out {
            memory.push_str(" (page still loading)");
        }
        let mut result = ActionResult::memory(memory);
        if outcome.load_timed_out {
            result = result.with_meta(
                "loading_status",
                json!("load event not fired within the wait cap"),
            );
        }
        Ok(result)
    }

    pub(super) async fn go_back(&self) -> Outcome {
        #[derive(Deserialize)]
        struct History {
            #[serde(rename = "currentIndex")]
            current_index: usize,
            entries: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            id: i64,
            url: String,
        }
        let target = self.focused_target().await?;
        let session = self.prepare_tab(&target).await?;
        let history: History = self
            .chrome
            .conn
            .call_raw(
                Some(&session),
                "Page.getNavigationHistory",
                json!({}),
                self.timeout,
            )
            .await?
            .decode()?;
        if history.current_index == 0 || history.entries.len() <= history.current_index {
            return Err(Fail::new(
                "Cannot go back: there is no previous page in this tab's history".into(),
            ));
        }
        let entry = &history.entries[history.current_index - 1];
        let before = &history.entries[history.current_index].url;
        let mut rx = self.chrome.conn.events();
        self.chrome
            .conn
            .call_raw(
                Some(&session),
                "Page.navigateToHistoryEntry",
                json!({"entryId": entry.id}),
                timeouts::GO_BACK,
            )
            .await?;
        let cap = load_cap(before, &entry.url);
        let outcome = wait_for_event(&mut rx, cap, |ev| {
            ev.session_id.as_deref() == Some(session.as_str())
                && match ev.method.as_str() {
                    "Page.loadEventFired" | "Page.navigatedWithinDocument" => true,
                    "Page.frameNavigated" => ev.raw.as_str().contains("BackForwardCacheRestore"),
                    _ => false,
                }
        })
        .await;
        let mut memory = format!("Navigated back to {}", entry.url);
        if matches!(outcome, WaitOutcome::TimedOut) {
            memory.push_str(" (page still loading)");
        }
        Ok(ActionResult::memory(memory))
    }

    pub(super) async fn close(&self, tab_id: &str) -> Outcome {
        let tabs = self.tabs().await?;
        let Some(tab) = tabs
            .iter()
            .find(|t| t.tab_id == tab_id || t.target_id == tab_id)
        else {
            return Ok(ActionResult::memory(format!(
                "Tab #{tab_id} is not open (nothing to close)"
            )));
        };
        let url = tab.url.clone();
        self.close_tab(tab_id).await?;
        if self.tabs().await?.is_empty() {
            self.new_tab("about:blank").await?;
        }
        Ok(ActionResult::memory(format!(
            "Closed tab #{tab_id} ({url})"
        )))
    }
}

/// Adds `https://` to a bare host like `example.com/x`; rejects empty input.
fn normalize_url(raw: &str) -> Result<String, Fail> {
    let url = raw.trim();
    if url.is_empty() {
        return Err(Fail::new("url is empty".into()));
    }
    let has_scheme = url.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && !scheme.contains('.')
    }) && (url.contains("://")
        || url.starts_with("about:")
        || url.starts_with("data:")
        || url.starts_with("javascript:")
        || url.starts_with("blob:"));
    if has_scheme {
        Ok(url.to_owned())
    } else {
        Ok(format!("https://{url}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_a_scheme() {
        assert_eq!(
            normalize_url("example.com/x").expect("ok"),
            "https://example.com/x"
        );
        assert_eq!(normalize_url("http://a.b").expect("ok"), "http://a.b");
        assert_eq!(normalize_url("about:blank").expect("ok"), "about:blank");
        assert_eq!(
            normalize_url("localhost:8080/x").expect("ok"),
            "https://localhost:8080/x"
        );
        assert!(normalize_url("  ").is_err());
    }
}
