//! Execution of [`Action`]s on a [`BrowserSession`]: the entry point, the dispatch and the
//! helpers every action shares. Each action family has its own file beside this one
//! (`navigation`, `click`, `input`, `scroll_keys`, `dropdown_upload`, `read_page`), on top of
//! the element plumbing in `element`.

use std::time::Duration;

use serde_json::{Value, json};

use browserd_views::SENT_TO_PAGE;

use super::{Action, ActionContext, ActionResult, js, timeouts, workspace::WorkspaceError};
use crate::{
    error::BrowserError, session::BrowserSession, settle::ActionElement, types::short_tab_id,
};

/// An action failure: the message the model reads, and whether it provably happened before
/// the action sent anything to the page.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) message: String,
    /// The action failed before it sent any input, navigation or script to the page (its
    /// element could not be found or resolved): repeating it cannot do it twice. Every other
    /// failure may have reached the page.
    pub(crate) before_page: bool,
}

impl Fail {
    /// A failure that may have happened after the action reached the page.
    pub(crate) fn new(message: String) -> Self {
        Self {
            message,
            before_page: false,
        }
    }

    /// A failure that happened before the action sent anything to the page.
    pub(crate) fn before_page(message: String) -> Self {
        Self {
            message,
            before_page: true,
        }
    }
}

impl From<BrowserError> for Fail {
    fn from(err: BrowserError) -> Self {
        Fail::new(match err {
            BrowserError::Timeout { method, timeout } => {
                format!(
                    "The browser did not answer in time ({method}, {timeout:?}); the page may be busy or frozen"
                )
            }
            BrowserError::ConnectionClosed => "The browser connection was lost".to_owned(),
            BrowserError::TargetCrashed { .. } => {
                "The page crashed or was closed (its renderer died); the next browser state \
                 shows what replaced it"
                    .to_owned()
            }
            BrowserError::Protocol {
                method, message, ..
            } => format!("Browser error in {method}: {message}"),
            other => other.to_string(),
        })
    }
}

impl From<WorkspaceError> for Fail {
    fn from(err: WorkspaceError) -> Self {
        Fail::new(err.to_string())
    }
}

pub(super) type Outcome = Result<ActionResult, Fail>;

pub(super) fn truncate_chars(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((cut, _)) => (
            format!(
                "{}… (truncated, {} characters in total)",
                &text[..cut],
                text.chars().count()
            ),
            true,
        ),
        None => (text.to_owned(), false),
    }
}

/// The longest `wait` (browser-use caps it at 30 s too).
const WAIT_MAX: Duration = Duration::from_secs(30);
/// After what the page was loading is replaced, how long the DOM must stay quiet before `wait`
/// returns (the result renders in the frames after the loading text goes).
const WAIT_QUIET: Duration = Duration::from_millis(150);

fn overall_timeout(action: &Action) -> Duration {
    match action {
        Action::Navigate(_) | Action::Search(_) => Duration::from_secs(30),
        Action::Click(_) => timeouts::CLICK + Duration::from_secs(10),
        Action::Input(_) => timeouts::TYPE_TEXT,
        Action::Scroll(_) => timeouts::SCROLL,
        Action::SendKeys(_) => timeouts::SEND_KEYS,
        Action::FindText(_) => timeouts::SCROLL_TO_TEXT,
        Action::Screenshot(_) => timeouts::SCREENSHOT,
        Action::Switch(_) => timeouts::SWITCH_TAB,
        Action::Close(_) => timeouts::CLOSE_TAB,
        Action::GoBack(_) => timeouts::GO_BACK,
        Action::DropdownOptions(_) => timeouts::DROPDOWN,
        Action::SelectDropdown(_) => timeouts::SELECT_DROPDOWN,
        Action::UploadFile(_) => timeouts::UPLOAD_FILE,
        Action::SaveAsPdf(_) => timeouts::PRINT_TO_PDF + Duration::from_secs(5),
        Action::Evaluate(_) => timeouts::EVALUATE,
        Action::Extract(_) => timeouts::EXTRACT,
        Action::Wait(_) => Duration::from_secs(60),
        _ => Duration::from_secs(30),
    }
}

impl BrowserSession {
    /// Runs one action and returns what the model sees. Never fails: every problem is an
    /// [`ActionResult::error`]. Dialogs closed, downloads finished and requests blocked since
    /// the previous action are reported in the result.
    pub async fn execute(&self, action: &Action, ctx: &ActionContext) -> ActionResult {
        let limit = overall_timeout(action);
        let mark = if action.settles_page() && !self.settle.cap.is_zero() {
            // An element in a child frame of its target: its frame is settled through it too.
            // Keys go to the focused element, which may be in a child frame.
            let element = match action.index() {
                Some(index) => self
                    .element(index)
                    .await
                    .ok()
                    .filter(|el| el.frame_id.as_deref().is_some_and(|f| f != el.target_id))
                    .map(|el| (el.session_id.clone(), el.backend_node_id)),
                None if matches!(action, Action::SendKeys(_)) => self.focused_child_frame().await,
                None => None,
            };
            self.settle_begin(
                element
                    .as_ref()
                    .map(|(session, backend_node_id)| ActionElement {
                        session,
                        backend_node_id: *backend_node_id,
                    }),
            )
            .await
        } else {
            None
        };
        let mut timed_out = false;
        let mut result = match tokio::time::timeout(limit, self.run(action, ctx)).await {
            Ok(Ok(result)) => result,
            Ok(Err(fail)) => {
                ActionResult::error(fail.message).with_meta(SENT_TO_PAGE, json!(!fail.before_page))
            }
            Err(_) => {
                timed_out = true;
                ActionResult::error(format!(
                    "Action {} timed out after {} s; the page may be busy. Check the page state before retrying.",
                    action.name(),
                    limit.as_secs()
                ))
            }
        };
        // The next action, or the next capture, sees the page once it has settled from
        // what this action started.
        if let Some(mark) = mark.filter(|_| !timed_out) {
            let report = self.settle_after(mark).await;
            result = result.with_meta("settle", json!(report));
        }
        self.report_side_effects(&mut result);
        // A failure not known to have happened before the page is one that may have reached
        // it (a timeout, a script error after the click, a blocked request it caused).
        if result.error.is_some() && result.sent_to_page().is_none() {
            result = result.with_meta(SENT_TO_PAGE, json!(true));
        }
        result
    }

    fn report_side_effects(&self, result: &mut ActionResult) {
        let dialogs = self.events.take_dialogs();
        if !dialogs.is_empty() {
            result.append_note(&format!(
                "Auto-closed JavaScript dialogs: {}",
                dialogs.join("; ")
            ));
            *result = std::mem::take(result).with_meta("closed_popup_messages", json!(dialogs));
        }
        let downloads = self.events.take_finished_downloads();
        if !downloads.is_empty() {
            result.append_note(&format!("Downloaded files: {}", downloads.join(", ")));
            *result = std::mem::take(result).with_meta("downloaded_files", json!(downloads));
        }
        let refused = self.events.take_refused_downloads();
        if !refused.is_empty() {
            result.append_error(&format!("Downloads cancelled: {}", refused.join("; ")));
            *result = std::mem::take(result).with_meta("cancelled_downloads", json!(refused));
        }
        if let Some(guard) = &self.egress {
            let blocked = self.drain_blocked();
            if !blocked.is_empty() {
                let mut lines: Vec<String> = blocked.iter().take(10).map(|b| b.message()).collect();
                if blocked.len() > 10 {
                    lines.push(format!(
                        "… and {} more blocked requests",
                        blocked.len() - 10
                    ));
                }
                result.append_error(&lines.join("\n"));
            }
            if !guard.is_active() {
                result.append_error("The egress guard of this browser stopped; the browser must not be used further.");
            }
        }
    }

    /// Re-focuses a remaining tab when the focused one was closed (by the page or Chrome);
    /// opens about:blank when none is left (browser-use keeps one tab open).
    async fn ensure_focus(&self) -> Result<(), Fail> {
        let tabs = self.tabs().await?;
        let focused = self.state.lock().await.focused.clone();
        if focused
            .as_ref()
            .is_some_and(|f| tabs.iter().any(|t| &t.target_id == f))
        {
            return Ok(());
        }
        match tabs.last() {
            Some(tab) => {
                self.switch_tab(&tab.target_id).await?;
            }
            None => {
                self.new_tab("about:blank").await?;
            }
        }
        Ok(())
    }

    async fn run(&self, action: &Action, ctx: &ActionContext) -> Outcome {
        if !matches!(action, Action::Done(_) | Action::Wait(_)) {
            self.ensure_focus().await?;
        }
        match action {
            Action::Done(p) => self.done(&p.text, p.success, &p.files_to_display),
            Action::Search(p) => {
                let url = p.engine.url(&p.query);
                let mut result = self.open_url(&url, false).await?;
                let memory = format!("Searched {} for '{}'", p.engine.title(), p.query);
                result.extracted_content = Some(memory.clone());
                result.long_term_memory = Some(memory);
                Ok(result)
            }
            Action::Navigate(p) => self.open_url(&p.url, p.new_tab).await,
            Action::GoBack(_) => self.go_back().await,
            Action::Wait(p) => self.wait(p.seconds).await,
            Action::Click(p) => self.click(p, ctx).await,
            Action::Input(p) => self.input(p, ctx).await,
            Action::UploadFile(p) => self.upload(p.index, &p.path, ctx).await,
            Action::Switch(p) => {
                let target = self.switch_tab(p.tab_id.trim()).await.map_err(|_| {
                    Fail::new(format!(
                        "No tab with id {} is open; use a tab_id from the page info",
                        p.tab_id
                    ))
                })?;
                let _ = self.prepare_tab(&target).await;
                let _ = self
                    .cdp(Some(&target), "Page.bringToFront", json!({}))
                    .await;
                let url = self.target_url(&target).await.unwrap_or_default();
                Ok(ActionResult::memory(format!(
                    "Switched to tab #{} ({url})",
                    short_tab_id(&target)
                )))
            }
            Action::Close(p) => self.close(p.tab_id.trim()).await,
            Action::Extract(p) => self.extract(p).await,
            Action::SearchPage(p) => self.search_page(p).await,
            Action::FindElements(p) => self.find_elements(p).await,
            Action::Scroll(p) => self.scroll(p).await,
            Action::SendKeys(p) => self.send_keys(&p.keys).await,
            Action::FindText(p) => {
                let session = self.focused_session().await?;
                let value = self
                    .eval(
                        &session,
                        &js::with_arg(js::FIND_TEXT, &json!(p.text)),
                        timeouts::SCROLL_TO_TEXT,
                    )
                    .await?;
                if value.get("found").and_then(Value::as_bool) == Some(true) {
                    Ok(ActionResult::memory(format!(
                        "Scrolled to text: {}",
                        p.text
                    )))
                } else {
                    Ok(ActionResult::memory(format!(
                        "Text '{}' not found or not visible on page",
                        p.text
                    )))
                }
            }
            Action::Screenshot(p) => self.screenshot(p.file_name.as_deref()).await,
            Action::SaveAsPdf(p) => self.save_as_pdf(p).await,
            Action::DropdownOptions(p) => {
                let el = self.element(p.index).await?;
                self.dropdown_options(&el).await
            }
            Action::SelectDropdown(p) => self.select_dropdown(p.index, &p.text).await,
            Action::Evaluate(p) => self.evaluate(&p.code).await,
        }
    }

    /// The `wait` action: the whole time asked (at most [`WAIT_MAX`]), unless the page shows
    /// what it is loading ("Checking availability…", a progress bar): then until that is
    /// replaced and the DOM has gone quiet, the time asked at most.
    async fn wait(&self, seconds: i64) -> Outcome {
        let asked = Duration::from_secs(seconds.clamp(0, WAIT_MAX.as_secs() as i64) as u64);
        let started = tokio::time::Instant::now();
        let loading = match self.focused_session().await {
            Ok(session) if !asked.is_zero() => {
                let arg = json!({"ms": asked.as_millis() as u64, "quietMs": WAIT_QUIET.as_millis() as u64});
                self.eval(
                    &session,
                    &js::with_arg(js::WAIT_FOR_LOADING, &arg),
                    asked + Duration::from_secs(2),
                )
                .await
                .ok()
            }
            _ => None,
        };
        let indicators: Vec<String> = loading
            .as_ref()
            .and_then(|v| v.get("indicators"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let replaced = loading
            .as_ref()
            .and_then(|v| v.get("replaced"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if replaced {
            let waited = started.elapsed().as_secs_f64();
            return Ok(ActionResult::memory(format!(
                "Waited {waited:.1} seconds, until the page's loading message was replaced ({})",
                indicators.join("; ")
            ))
            .with_meta("waited_ms", json!(started.elapsed().as_millis() as u64)));
        }
        // Nothing said loading (or it did not answer): the whole time asked.
        tokio::time::sleep_until(started + asked).await;
        let mut result = ActionResult::memory(format!("Waited for {seconds} seconds"));
        if !indicators.is_empty() {
            result.append_note(&format!("The page still shows: {}", indicators.join("; ")));
        }
        Ok(result.with_meta("waited_ms", json!(started.elapsed().as_millis() as u64)))
    }

    fn done(&self, text: &str, success: bool, files: &[String]) -> Outcome {
        let mut attachments = Vec::new();
        for name in files {
            let path = self.workspace.resolve(name)?;
            if !path.is_file() {
                return Err(Fail::new(format!(
                    "File {name} in files_to_display does not exist in the workspace"
                )));
            }
            attachments.push(path.to_string_lossy().into_owned());
        }
        let first: String = text.chars().take(100).collect();
        Ok(ActionResult {
            is_done: true,
            success: Some(success),
            extracted_content: Some(text.to_owned()),
            long_term_memory: Some(format!("Task completed: {success} - {first}")),
            attachments: (!attachments.is_empty()).then_some(attachments),
            ..ActionResult::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClickParams, ScrollParams};
    use super::*;

    #[test]
    fn schema_and_serde() {
        let action: Action = serde_json::from_str(r#"{"click":{"index":5}}"#).expect("parse");
        assert_eq!(
            action,
            Action::Click(ClickParams {
                index: Some(5),
                coordinate_x: None,
                coordinate_y: None
            })
        );
        let action: Action = serde_json::from_str(r#"{"scroll":{}}"#).expect("parse");
        assert_eq!(
            action,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 1.0,
                index: None
            })
        );
        let action: Action = serde_json::from_str(r#"{"search":{"query":"a b"}}"#).expect("parse");
        assert!(action.terminates_sequence());
        assert!(serde_json::from_str::<Action>(r#"{"fly":{}}"#).is_err());
        let schema = serde_json::to_value(super::super::action_schema()).expect("schema");
        let text = schema.to_string();
        for name in [
            "go_back",
            "select_dropdown",
            "save_as_pdf",
            "coordinate_x",
            "files_to_display",
        ] {
            assert!(text.contains(name), "{name} missing from schema");
        }
        assert_eq!(
            super::super::SearchEngine::Google.url("a b&c"),
            "https://www.google.com/search?q=a+b%26c&udm=14"
        );
    }
}
