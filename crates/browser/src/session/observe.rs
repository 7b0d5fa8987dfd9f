//! Observing a session's focused tab: the capture entry point (indexed text, selector map,
//! page info, optional screenshot; the selector map and new-element marks kept in the session
//! state) over `crate::capture`, browser-use's element text framing (`llm_text`) and the
//! viewport screenshot alone.

use std::collections::HashSet;

use super::BrowserSession;
use crate::{
    capture::{self, SessionSource, page_info_from_metrics},
    error::{BrowserError, Result},
    types::{CaptureOptions, PageState, Screenshot, ScreenshotFormat, Tab},
};

impl BrowserSession {
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
        // A tab whose renderer died is replaced first; the agent is told in `browser_errors`.
        let mut browser_errors = self.recover_crashed_tabs().await;
        match self.capture_focused(options, browser_errors.clone()).await {
            // It died during this capture: replaced now, captured once more.
            Err(BrowserError::TargetCrashed { .. }) => {
                browser_errors.extend(self.recover_crashed_tabs().await);
                self.capture_focused(options, browser_errors).await
            }
            other => other,
        }
    }

    async fn capture_focused(
        &self,
        options: &CaptureOptions,
        browser_errors: Vec<String>,
    ) -> Result<PageState> {
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
        if let Some(lease) = &self.lease {
            lease.refill_spare_once();
        }
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
            browser_errors,
        })
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
