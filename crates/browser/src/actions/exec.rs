//! Execution of [`Action`]s on a [`BrowserSession`].

use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Action, ActionContext, ActionResult, ClickParams, ExtractParams, FindElementsParams,
    InputParams, SaveAsPdfParams, ScrollParams, SearchPageParams, js, keys, markdown, timeouts,
    workspace::{Workspace, WorkspaceError, sanitize_file_name},
};
use crate::{
    cdp::CdpEvent,
    error::BrowserError,
    session::{BrowserSession, WaitOutcome, load_cap, wait_for_event},
    types::{ElementInfo, short_tab_id},
};

/// An action failure: the message the model reads.
#[derive(Debug)]
struct Fail(String);

impl From<BrowserError> for Fail {
    fn from(err: BrowserError) -> Self {
        Fail(match err {
            BrowserError::Timeout { method, timeout } => {
                format!(
                    "The browser did not answer in time ({method}, {timeout:?}); the page may be busy or frozen"
                )
            }
            BrowserError::ConnectionClosed => "The browser connection was lost".to_owned(),
            BrowserError::Protocol {
                method, message, ..
            } => format!("Browser error in {method}: {message}"),
            other => other.to_string(),
        })
    }
}

impl From<WorkspaceError> for Fail {
    fn from(err: WorkspaceError) -> Self {
        Fail(err.to_string())
    }
}

type Outcome = Result<ActionResult, Fail>;

/// Largest `evaluate` result returned as text.
pub const EVALUATE_MAX_CHARS: usize = 20_000;
/// Results at least this long are shown to the model only once.
const SHOW_ONCE_CHARS: usize = 10_000;

fn truncate_chars(text: &str, max: usize) -> (String, bool) {
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

#[derive(Deserialize)]
struct RemoteObject {
    #[serde(default)]
    value: Option<Value>,
    #[serde(rename = "objectId", default)]
    object_id: Option<String>,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct EvalAnswer {
    result: RemoteObject,
    #[serde(rename = "exceptionDetails", default)]
    exception: Option<ExceptionDetails>,
}

#[derive(Deserialize)]
struct ExceptionDetails {
    #[serde(default)]
    text: String,
    #[serde(default)]
    exception: Option<RemoteObject>,
}

impl ExceptionDetails {
    fn message(&self) -> String {
        self.exception
            .as_ref()
            .and_then(|e| e.description.clone())
            .unwrap_or_else(|| self.text.clone())
            .lines()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Where an element lives and its remote object.
struct Resolved {
    session: String,
    object_id: String,
}

impl BrowserSession {
    /// Runs one action and returns what the model sees. Never fails: every problem is an
    /// [`ActionResult::error`]. Dialogs closed, downloads finished and requests blocked since
    /// the previous action are reported in the result.
    pub async fn execute(&self, action: &Action, ctx: &ActionContext) -> ActionResult {
        let limit = overall_timeout(action);
        let mut result = match tokio::time::timeout(limit, self.run(action, ctx)).await {
            Ok(Ok(result)) => result,
            Ok(Err(Fail(message))) => ActionResult::error(message),
            Err(_) => ActionResult::error(format!(
                "Action {} timed out after {} s; the page may be busy. Check the page state before retrying.",
                action.name(),
                limit.as_secs()
            )),
        };
        self.report_side_effects(&mut result);
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
        if let Some(guard) = &self.egress {
            let blocked = guard.drain_blocked();
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
            Action::Wait(p) => {
                let secs = (p.seconds - 1).clamp(0, 30) as u64;
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(ActionResult::memory(format!(
                    "Waited for {} seconds",
                    p.seconds
                )))
            }
            Action::Click(p) => self.click(p, ctx).await,
            Action::Input(p) => self.input(p, ctx).await,
            Action::UploadFile(p) => self.upload(p.index, &p.path, ctx).await,
            Action::Switch(p) => {
                let target = self.switch_tab(p.tab_id.trim()).await.map_err(|_| {
                    Fail(format!(
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

    fn done(&self, text: &str, success: bool, files: &[String]) -> Outcome {
        let mut attachments = Vec::new();
        for name in files {
            let path = self.workspace.resolve(name)?;
            if !path.is_file() {
                return Err(Fail(format!(
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

    // ---- element plumbing ---------------------------------------------------------------

    async fn element(&self, index: u32) -> Result<Arc<ElementInfo>, Fail> {
        self.state.lock().await.selector_map.get(&index).cloned().ok_or_else(|| {
            Fail(format!(
                "Element index {index} not available - page may have changed. Use an index from the current page state."
            ))
        })
    }

    async fn resolve(&self, el: &ElementInfo) -> Result<Resolved, Fail> {
        #[derive(Deserialize)]
        struct Answer {
            object: RemoteObject,
        }
        let answer: Answer = self
            .chrome
            .conn
            .call_raw(Some(&el.session_id), "DOM.resolveNode", json!({"backendNodeId": el.backend_node_id}), self.timeout)
            .await
            .map_err(|_| Fail(format!("Element with index {} is no longer in the page; the page changed. Use the current page state.", el.index)))?
            .decode()?;
        let object_id = answer.object.object_id.ok_or_else(|| {
            Fail(format!(
                "Element with index {} could not be resolved",
                el.index
            ))
        })?;
        Ok(Resolved {
            session: el.session_id.clone(),
            object_id,
        })
    }

    /// Resolves the element and scrolls it into view, both requests in flight together (they
    /// only need the backendNodeId; Chrome runs them in order on the element's session).
    async fn resolve_and_scroll_into_view(&self, el: &ElementInfo) -> Result<Resolved, Fail> {
        let scroll = self.chrome.conn.call_raw(
            Some(&el.session_id),
            "DOM.scrollIntoViewIfNeeded",
            json!({"backendNodeId": el.backend_node_id}),
            self.timeout,
        );
        let (resolved, _) = tokio::join!(self.resolve(el), scroll);
        resolved
    }

    async fn call_on(
        &self,
        r: &Resolved,
        function: &str,
        args: Vec<Value>,
        timeout: Duration,
    ) -> Result<Value, Fail> {
        let arguments: Vec<Value> = args.into_iter().map(|v| json!({"value": v})).collect();
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(
                Some(&r.session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": function, "objectId": r.object_id, "arguments": arguments, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail(format!("Page script failed: {}", ex.message())));
        }
        Ok(answer.result.value.unwrap_or(Value::Null))
    }

    async fn eval(
        &self,
        session: &str,
        expression: &str,
        timeout: Duration,
    ) -> Result<Value, Fail> {
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail(format!("Page script failed: {}", ex.message())));
        }
        Ok(answer.result.value.unwrap_or(Value::Null))
    }

    async fn focused_session(&self) -> Result<String, Fail> {
        let target = self.focused_target().await?;
        Ok(self.prepare_tab(&target).await?)
    }

    // ---- navigation ---------------------------------------------------------------------

    async fn check_egress(&self, url: &str) -> Result<(), Fail> {
        if let Some(guard) = &self.egress {
            let policy = guard.policy();
            let parsed = policy
                .check_str(url)
                .map_err(|d| Fail(format!("Navigation to {url} is not allowed: {}", d.reason)))?;
            policy
                .check_url_resolved(&parsed)
                .await
                .map_err(|d| Fail(format!("Navigation to {url} is not allowed: {}", d.reason)))?;
        }
        Ok(())
    }

    async fn open_url(&self, raw_url: &str, new_tab: bool) -> Outcome {
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
                return Err(Fail(format!(
                    "Navigation blocked by the egress policy: {url}"
                )));
            }
            return Err(Fail(format!(
                "Navigation failed - site unavailable: {url} ({text})"
            )));
        }
        // A redirect may have landed somewhere the policy forbids.
        let landed = self.target_url(&target).await.unwrap_or_default();
        if let Some(guard) = &self.egress
            && let Err(denied) = guard.policy().check_str(&landed)
        {
            let _ = self.navigate_target(&target, "about:blank").await;
            return Err(Fail(format!(
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

    async fn go_back(&self) -> Outcome {
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
            return Err(Fail(
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

    async fn close(&self, tab_id: &str) -> Outcome {
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

    // ---- click --------------------------------------------------------------------------

    async fn click(&self, p: &ClickParams, ctx: &ActionContext) -> Outcome {
        let tabs_before: Vec<String> = self
            .tabs()
            .await?
            .into_iter()
            .map(|t| t.target_id)
            .collect();
        let focused = self.focused_target().await?;
        let focused_session = self.prepare_tab(&focused).await?;
        let mut rx = self.chrome.conn.events();
        // Whether the clicked element is one whose activation usually navigates (a link, a
        // submit control). Form submission is scheduled asynchronously by the page, so for
        // these the navigation-start event may arrive a little after the click returns.
        let mut may_navigate = false;
        let mut result = match (p.index, p.coordinate_x, p.coordinate_y) {
            (_, Some(x), Some(y)) => self.click_coordinates(&focused_session, x, y, ctx).await?,
            (Some(index), _, _) => {
                let el = self.element(index).await?;
                may_navigate = likely_navigates(&el);
                if el.is_select || el.tag_name == "select" {
                    return self.dropdown_options(&el).await;
                }
                if el.is_file_input {
                    return Err(Fail(format!(
                        "Cannot click on file input element (index {index}). File uploads must be done using the upload_file action."
                    )));
                }
                self.click_element(&el).await?
            }
            _ => {
                return Err(Fail(
                    "click needs an index, or both coordinate_x and coordinate_y".into(),
                ));
            }
        };
        // One browser round trip first, so navigation events the click caused have arrived.
        let tabs_after = self.tabs().await?;
        // A navigation the click started: wait for its load (browser-use's caps).
        let main_frame = format!("\"frameId\":\"{focused}\"");
        let is_navigation_start = |ev: &CdpEvent| {
            ev.session_id.as_deref() == Some(focused_session.as_str())
                && matches!(
                    ev.method.as_str(),
                    "Page.frameRequestedNavigation"
                        | "Page.frameStartedNavigating"
                        | "Page.frameStartedLoading"
                )
                && ev.raw.as_str().contains(&main_frame)
                && !ev.raw.as_str().contains("\"disposition\":\"new")
        };
        let mut started = false;
        while let Ok(ev) = rx.try_recv() {
            if is_navigation_start(&ev) {
                started = true;
                break;
            }
        }
        if !started && may_navigate && tabs_after.len() == tabs_before.len() {
            // Event-driven grace window: returns as soon as the navigation starts.
            started = matches!(
                wait_for_event(&mut rx, CLICK_NAVIGATION_GRACE, is_navigation_start).await,
                WaitOutcome::Seen | WaitOutcome::Lagged
            );
        }
        if started {
            let before = self.target_url(&focused).await.unwrap_or_default();
            // Ends on the load event, a same-document navigation, or the main frame stopping
            // (a download or a cancelled navigation never fires load).
            let outcome = wait_for_event(&mut rx, load_cap(&before, ""), |ev| {
                (ev.session_id.as_deref() == Some(focused_session.as_str())
                    && (matches!(
                        ev.method.as_str(),
                        "Page.loadEventFired" | "Page.navigatedWithinDocument"
                    ) || (ev.method == "Page.frameStoppedLoading"
                        && ev.raw.as_str().contains(&main_frame))))
                    || ev.method == "Browser.downloadWillBegin"
            })
            .await;
            if matches!(outcome, WaitOutcome::TimedOut) {
                result = result.with_meta(
                    "loading_status",
                    json!("navigation started by the click is still loading"),
                );
            }
        }
        // A new tab the click opened: focus it and say so.
        if let Some(new_tab) = tabs_after
            .iter()
            .find(|t| !tabs_before.contains(&t.target_id))
        {
            let target = new_tab.target_id.clone();
            let _ = self.prepare_tab(&target).await;
            if let Some(denied) = self.popup_denied(&target, &new_tab.url).await {
                // browser-use's security watchdog closes tabs opened on forbidden URLs.
                let _ = self.close_tab(&target).await;
                let _ = self.switch_tab(&focused).await;
                result.append_error(&format!("The click opened a new tab that the egress policy blocked; it was closed: {denied}"));
                return Ok(result);
            }
            self.switch_tab(&target).await?;
            result.append_note(&format!(
                "Opened a new tab (tab_id: {}) and switched to it",
                short_tab_id(&target)
            ));
        }
        Ok(result)
    }

    /// Why a tab the page opened is forbidden, if it is: its URL fails the policy (waits for
    /// the tab's first navigation to commit or fail, capped at the same-site load cap).
    async fn popup_denied(&self, target: &str, url_at_open: &str) -> Option<String> {
        let guard = self.egress.as_ref()?;
        let policy = guard.policy();
        let url_now = |u: &str| -> Option<String> {
            if u.is_empty() || u == "about:blank" {
                return None;
            }
            policy
                .check_str(u)
                .err()
                .map(|d| format!("{} ({})", d.url, d.reason))
        };
        if let Some(denied) = url_now(url_at_open) {
            return Some(denied);
        }
        let deadline = tokio::time::Instant::now() + timeouts::LOAD_SAME_DOMAIN;
        let mut rx = self.chrome.conn.events();
        let session = self.prepare_tab(target).await.ok()?;
        loop {
            if let Ok(u) = self.target_url(target).await {
                if let Some(denied) = url_now(&u) {
                    return Some(denied);
                }
                if !u.is_empty() && u != "about:blank" {
                    return None;
                }
            }
            let event = tokio::time::timeout_at(deadline, async {
                loop {
                    match rx.recv().await {
                        Ok(ev)
                            if ev.session_id.as_deref() == Some(session.as_str())
                                && matches!(
                                    ev.method.as_str(),
                                    "Page.frameNavigated"
                                        | "Page.loadEventFired"
                                        | "Page.lifecycleEvent"
                                ) =>
                        {
                            return true;
                        }
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(_) => return false,
                    }
                }
            })
            .await;
            if !matches!(event, Ok(true)) {
                return None;
            }
        }
    }

    async fn click_coordinates(
        &self,
        session: &str,
        x: f64,
        y: f64,
        ctx: &ActionContext,
    ) -> Outcome {
        let (vw, vh) = self.viewport(session).await;
        // The screenshot shows the whole emulated viewport, scrollbars included.
        let shown = self.emulated_viewport();
        let (x, y) = match ctx.llm_screenshot_size {
            Some((sw, sh)) if sw > 0.0 && sh > 0.0 => (
                x * f64::from(shown.width) / sw,
                y * f64::from(shown.height) / sh,
            ),
            _ => (x, y),
        };
        if !(0.0..=vw).contains(&x) || !(0.0..=vh).contains(&y) {
            return Err(Fail(format!(
                "Coordinates ({x:.0}, {y:.0}) are outside the viewport ({vw:.0}x{vh:.0})"
            )));
        }
        self.mouse_click(session, x, y).await?;
        Ok(
            ActionResult::memory(format!("Clicked at coordinates ({x:.0}, {y:.0})"))
                .with_meta("click_x", json!(x))
                .with_meta("click_y", json!(y)),
        )
    }

    async fn viewport(&self, session: &str) -> (f64, f64) {
        #[derive(Deserialize)]
        struct Metrics {
            #[serde(rename = "cssVisualViewport")]
            css_visual_viewport: Viewport,
        }
        #[derive(Deserialize)]
        struct Viewport {
            #[serde(rename = "clientWidth")]
            client_width: f64,
            #[serde(rename = "clientHeight")]
            client_height: f64,
        }
        match self
            .chrome
            .conn
            .call_raw(
                Some(session),
                "Page.getLayoutMetrics",
                json!({}),
                self.timeout,
            )
            .await
            .and_then(|r| r.decode::<Metrics>())
        {
            Ok(m) => (
                m.css_visual_viewport.client_width,
                m.css_visual_viewport.client_height,
            ),
            Err(_) => (1280.0, 720.0),
        }
    }

    async fn mouse_click(&self, session: &str, x: f64, y: f64) -> Result<(), Fail> {
        // Move, press and release go out together: Chrome's input router handles one
        // session's events in order, so awaiting each answer first only adds round trips.
        let conn = &self.chrome.conn;
        let (moved, pressed, released) = tokio::join!(
            conn.call_raw(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": "mouseMoved", "x": x, "y": y}),
                self.timeout,
            ),
            conn.call_raw(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": "mousePressed", "x": x, "y": y, "button": "left", "clickCount": 1}),
                timeouts::MOUSE_PRESSED,
            ),
            conn.call_raw(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": "mouseReleased", "x": x, "y": y, "button": "left", "clickCount": 1}),
                timeouts::MOUSE_RELEASED,
            ),
        );
        moved?;
        pressed?;
        released?;
        Ok(())
    }

    /// Content quads of the element, in its document's viewport coordinates.
    async fn quads(&self, el: &ElementInfo) -> Vec<Vec<f64>> {
        #[derive(Deserialize)]
        struct Quads {
            quads: Vec<Vec<f64>>,
        }
        self.chrome
            .conn
            .call_raw(
                Some(&el.session_id),
                "DOM.getContentQuads",
                json!({"backendNodeId": el.backend_node_id}),
                self.timeout,
            )
            .await
            .and_then(|r| r.decode::<Quads>())
            .map(|q| q.quads)
            .unwrap_or_default()
    }

    async fn click_element(&self, el: &ElementInfo) -> Outcome {
        let r = self.resolve_and_scroll_into_view(el).await?;
        let ((vw, vh), quads) = tokio::join!(self.viewport(&r.session), self.quads(el));
        let label = describe(el);
        let point = best_point(&quads, vw, vh);
        let Some((x, y)) = point else {
            self.call_on(&r, js::JS_CLICK, vec![], timeouts::CLICK)
                .await?;
            return Ok(ActionResult::memory(format!(
                "Clicked {label} (via JavaScript: no visible geometry)"
            )));
        };
        let probe = self
            .call_on(&r, js::CLICK_PROBE, vec![json!(x), json!(y)], self.timeout)
            .await?;
        let checked_before = probe.get("checked").cloned().unwrap_or(Value::Null);
        let topmost = probe.get("ok").and_then(Value::as_bool).unwrap_or(false);
        let mut how = "";
        if topmost {
            self.mouse_click(&r.session, x, y).await?;
        } else {
            self.call_on(&r, js::JS_CLICK, vec![], timeouts::CLICK)
                .await?;
            how = " (via JavaScript: the point was covered by another element)";
        }
        if !checked_before.is_null() {
            let after = self
                .call_on(&r, js::CHECKED_STATE, vec![], self.timeout)
                .await
                .unwrap_or(Value::Null);
            if after == checked_before && topmost {
                self.call_on(&r, js::JS_CLICK, vec![], timeouts::CLICK)
                    .await?;
                how = " (via JavaScript: the mouse click did not toggle it)";
            }
        }
        Ok(ActionResult::memory(format!("Clicked {label}{how}"))
            .with_meta("click_x", json!(x))
            .with_meta("click_y", json!(y)))
    }

    // ---- input --------------------------------------------------------------------------

    async fn input(&self, p: &InputParams, ctx: &ActionContext) -> Outcome {
        let el = self.element(p.index).await?;
        let r = self.resolve_and_scroll_into_view(&el).await?;
        let conn = &self.chrome.conn;
        let shown = match ctx
            .sensitive_values
            .iter()
            .find(|s| !s.value.is_empty() && p.text.contains(&s.value))
        {
            Some(secret) => format!("<secret>{}</secret>", secret.name),
            None => p.text.clone(),
        };
        let prep = self
            .call_on(
                &r,
                js::PREPARE_INPUT,
                vec![json!(p.clear), json!(p.text)],
                self.timeout,
            )
            .await?;
        let kind = prep.get("kind").and_then(Value::as_str).unwrap_or("other");
        match kind {
            "unsupported" => {
                let t = prep.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(Fail(format!(
                    "Element {} is an input of type {t}; it cannot take text. Use click or upload_file.",
                    p.index
                )));
            }
            "direct" => {
                let value = prep.get("value").and_then(Value::as_str).unwrap_or("");
                if value != p.text {
                    return Err(Fail(format!(
                        "The field rejected '{}' (value is now '{value}'); use the format the field expects (e.g. YYYY-MM-DD)",
                        shown
                    )));
                }
                return Ok(ActionResult::memory(format!(
                    "Typed '{shown}' into {}",
                    describe(&el)
                )));
            }
            _ => {}
        }
        // One key press per character, pipelined in order on the element's session.
        let events: Vec<Value> = p.text.chars().flat_map(keys::char_events).collect();
        let sends = events.into_iter().map(|ev| {
            conn.call_raw(
                Some(&r.session),
                "Input.dispatchKeyEvent",
                ev,
                timeouts::TYPE_TEXT,
            )
        });
        for answer in futures::future::join_all(sends).await {
            answer?;
        }
        let value = self
            .call_on(&r, js::READ_VALUE, vec![], self.timeout)
            .await
            .unwrap_or(Value::Null);
        let mut memory = format!("Typed '{shown}' into {}", describe(&el));
        if let Some(actual) = value.as_str() {
            let expected_tail = p.text.replace('\n', "");
            let actual_flat = actual.replace('\n', "");
            let ok = if p.clear {
                actual_flat == expected_tail
            } else {
                actual_flat.ends_with(&expected_tail)
            };
            if !ok && shown == p.text {
                memory.push_str(&format!(
                    " (note: the field now contains '{}')",
                    truncate_chars(actual, 200).0
                ));
            }
        }
        let mut result = ActionResult::memory(memory);
        if prep.get("autocomplete").and_then(Value::as_bool) == Some(true) {
            result.append_note(
                "This field may show suggestions; check the page state and pick one if needed.",
            );
        }
        Ok(result)
    }

    // ---- scroll / keys ------------------------------------------------------------------

    async fn scroll(&self, p: &ScrollParams) -> Outcome {
        if !p.pages.is_finite() || p.pages < 0.0 || p.pages > 100.0 {
            return Err(Fail("pages must be a number between 0 and 100".into()));
        }
        let sign = if p.down { 1.0 } else { -1.0 };
        let direction = if p.down { "down" } else { "up" };
        match p.index.filter(|i| *i != 0) {
            Some(index) => {
                let el = self.element(index).await?;
                let r = self.resolve(&el).await?;
                let moved = self
                    .call_on(
                        &r,
                        js::SCROLL_ELEMENT,
                        vec![json!(sign * p.pages)],
                        timeouts::SCROLL,
                    )
                    .await?;
                let target = moved
                    .get("target")
                    .and_then(Value::as_str)
                    .unwrap_or("element")
                    .to_owned();
                Ok(ActionResult::memory(format!(
                    "Scrolled {direction} {} pages in {target} (element {index})",
                    p.pages
                )))
            }
            None => {
                let session = self.focused_session().await?;
                let (_, vh) = self.viewport(&session).await;
                let dy = sign * p.pages * vh;
                let moved = self
                    .eval(
                        &session,
                        &js::with_arg(js::SCROLL_PAGE, &json!({"dy": dy})),
                        timeouts::SCROLL,
                    )
                    .await?;
                let mut memory = format!("Scrolled {direction} {} pages", p.pages);
                if moved.get("edge").and_then(Value::as_bool) == Some(true) {
                    memory.push_str(if p.down {
                        " (already at the bottom)"
                    } else {
                        " (already at the top)"
                    });
                } else if let Some(t) = moved
                    .get("target")
                    .and_then(Value::as_str)
                    .filter(|t| *t != "page")
                {
                    memory.push_str(&format!(" in {t}"));
                }
                Ok(ActionResult::memory(memory))
            }
        }
    }

    async fn send_keys(&self, keys_text: &str) -> Outcome {
        let presses = keys::parse_keys(keys_text);
        if presses.is_empty() {
            return Err(Fail("keys is empty".into()));
        }
        let session = self.focused_session().await?;
        for press in &presses {
            for ev in keys::key_events(press) {
                self.chrome
                    .conn
                    .call_raw(
                        Some(&session),
                        "Input.dispatchKeyEvent",
                        ev,
                        timeouts::SEND_KEYS,
                    )
                    .await?;
            }
        }
        Ok(ActionResult::memory(format!("Sent keys: {keys_text}")))
    }

    // ---- dropdowns / upload -------------------------------------------------------------

    async fn dropdown_options(&self, el: &ElementInfo) -> Outcome {
        let r = self.resolve(el).await?;
        let answer = self
            .call_on(&r, js::DROPDOWN_OPTIONS, vec![], timeouts::DROPDOWN)
            .await?;
        let options = answer
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if options.is_empty() {
            return Err(Fail(format!(
                "Element {} is not a dropdown with options (no <select>, listbox or menu found)",
                el.index
            )));
        }
        let lines: Vec<String> = options
            .iter()
            .map(|o| {
                format!(
                    "{}: text={}, value={}{}",
                    o.get("index").and_then(Value::as_u64).unwrap_or(0),
                    serde_json::to_string(o.get("text").and_then(Value::as_str).unwrap_or(""))
                        .unwrap_or_default(),
                    serde_json::to_string(o.get("value").and_then(Value::as_str).unwrap_or(""))
                        .unwrap_or_default(),
                    if o.get("selected").and_then(Value::as_bool) == Some(true) {
                        " (selected)"
                    } else {
                        ""
                    },
                )
            })
            .collect();
        let content = format!(
            "Options of dropdown {}:\n{}\nUse select_dropdown with the exact text or value.",
            el.index,
            lines.join("\n")
        );
        Ok(ActionResult::once(
            content,
            format!("Found {} options in dropdown {}", options.len(), el.index),
        ))
    }

    async fn select_dropdown(&self, index: u32, text: &str) -> Outcome {
        let el = self.element(index).await?;
        let r = self.resolve(&el).await?;
        let answer = self
            .call_on(
                &r,
                js::SELECT_OPTION,
                vec![json!(text)],
                timeouts::SELECT_DROPDOWN,
            )
            .await?;
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            let chosen = answer.get("text").and_then(Value::as_str).unwrap_or(text);
            let value = answer.get("value").and_then(Value::as_str).unwrap_or("");
            return Ok(ActionResult::memory(format!(
                "Selected option '{chosen}' (value {value}) in dropdown {index}"
            )));
        }
        let options: Vec<String> = answer
            .get("options")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let why = if answer.get("disabled").and_then(Value::as_bool) == Some(true) {
            "is disabled"
        } else {
            "was not found"
        };
        Err(Fail(format!(
            "Option '{text}' {why} in dropdown {index}. Available options: {}. Use the exact text or value.",
            if options.is_empty() {
                "(none)".to_owned()
            } else {
                options.join(" | ")
            }
        )))
    }

    async fn upload(&self, index: u32, path: &str, ctx: &ActionContext) -> Outcome {
        let file = self.allowed_file(path, ctx)?;
        let el = self.element(index).await?;
        let r = self.resolve(&el).await?;
        #[derive(Deserialize)]
        struct Answer {
            result: RemoteObject,
        }
        let answer: Answer = self
            .chrome
            .conn
            .call_raw(
                Some(&r.session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": js::UPLOAD_TARGET, "objectId": r.object_id, "returnByValue": false}),
                self.timeout,
            )
            .await?
            .decode()?;
        let input = match (answer.result.object_id, answer.result.subtype.as_deref()) {
            (Some(id), _) => id,
            _ => {
                return Err(Fail(format!(
                    "No file input found near element {index} or on the page"
                )));
            }
        };
        self.chrome
            .conn
            .call_raw(
                Some(&r.session),
                "DOM.setFileInputFiles",
                json!({"files": [file.to_string_lossy()], "objectId": input}),
                timeouts::UPLOAD_FILE,
            )
            .await?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(ActionResult::memory(format!(
            "Uploaded file {name} to element {index}"
        )))
    }

    /// A local file the task may use: listed in `available_file_paths`, or inside the
    /// workspace (downloads included).
    fn allowed_file(&self, path: &str, ctx: &ActionContext) -> Result<std::path::PathBuf, Fail> {
        let candidate = std::path::Path::new(path);
        for allowed in &ctx.available_file_paths {
            let matches = allowed == candidate
                || allowed
                    .file_name()
                    .is_some_and(|n| candidate.as_os_str() == n);
            if matches
                && let Ok(canon) = allowed.canonicalize()
                && canon.is_file()
            {
                return Ok(canon);
            }
        }
        let relative = if candidate.is_absolute() {
            candidate
                .strip_prefix(self.workspace.root())
                .map(|p| p.to_string_lossy().into_owned())
                .ok()
        } else {
            Some(path.to_owned())
        };
        if let Some(rel) = relative
            && let Ok(resolved) = self.workspace.resolve(&rel)
            && resolved.is_file()
        {
            return Ok(resolved);
        }
        Err(Fail(format!(
            "File {path} is not available to this task. Use a file from available_file_paths, a download or a file written to the workspace."
        )))
    }

    // ---- reading the page ---------------------------------------------------------------

    async fn extract(&self, p: &ExtractParams) -> Outcome {
        let session = self.focused_session().await?;
        let target = self.focused_target().await?;
        let url = self.target_url(&target).await.unwrap_or_default();
        let wants_images = p.extract_images || {
            let q = p.query.to_lowercase();
            ["image", "photo", "picture", "img", "logo", "icon"]
                .iter()
                .any(|w| q.contains(w))
        };
        let html = self
            .eval(
                &session,
                &js::with_arg(
                    js::EXTRACT_HTML,
                    &json!({"links": p.extract_links, "images": wants_images}),
                ),
                timeouts::EXTRACT,
            )
            .await?;
        let html = html.as_str().unwrap_or_default().to_owned();
        let start = p.start_from_char;
        let page = tokio::task::spawn_blocking(move || markdown::html_to_markdown(&html, start))
            .await
            .map_err(|_| Fail("markdown conversion failed".into()))?
            .map_err(Fail)?;
        let stats = &page.stats;
        let mut stats_text = format!(
            "Original HTML: {} chars; markdown: {} chars; this chunk: chars {}..{}",
            stats.original_html_chars,
            stats.total_markdown_chars,
            stats.start_from_char,
            stats.start_from_char + stats.chunk_chars
        );
        if let Some(next) = stats.next_start_char {
            stats_text.push_str(&format!(
                "; more content follows: call extract again with start_from_char={next}"
            ));
        }
        let collected = if p.already_collected.is_empty() {
            String::new()
        } else {
            format!(
                "\n<already_collected>\n{}\n</already_collected>",
                p.already_collected.join("\n")
            )
        };
        let content = format!(
            "<url>{url}</url>\n<query>{}</query>\n<content_stats>{stats_text}</content_stats>\n<webpage_content>\n{}\n</webpage_content>{collected}",
            p.query, page.content
        );
        let memory = format!("Extracted page content of {url} for query: {}", p.query);
        Ok(ActionResult::once(content, memory)
            .with_meta("extraction", json!({"url": url, "query": p.query, "markdown": page.content, "stats": page.stats, "extract_links": p.extract_links, "extract_images": wants_images})))
    }

    /// Runs a page-side query script (`search_page`, `find_elements`) with its argument and
    /// returns the total count and the listed results under `list_key`.
    async fn page_query(
        &self,
        session: &str,
        script: &str,
        arg: &Value,
        list_key: &str,
    ) -> Result<(u64, Vec<Value>), Fail> {
        let mut answer = self
            .eval(
                session,
                &js::with_arg(script, arg),
                timeouts::SCROLL_TO_TEXT,
            )
            .await?;
        if let Some(err) = answer.get("error").and_then(Value::as_str) {
            return Err(Fail(err.to_owned()));
        }
        let total = answer.get("total").and_then(Value::as_u64).unwrap_or(0);
        let list = match answer.get_mut(list_key).map(Value::take) {
            Some(Value::Array(list)) => list,
            _ => Vec::new(),
        };
        Ok((total, list))
    }

    async fn search_page(&self, p: &SearchPageParams) -> Outcome {
        if p.pattern.is_empty() {
            return Err(Fail("pattern is empty".into()));
        }
        let session = self.focused_session().await?;
        let arg = json!({"pattern": p.pattern, "regex": p.regex, "case_sensitive": p.case_sensitive, "context_chars": p.context_chars.min(2000), "css_scope": p.css_scope, "max_results": p.max_results.clamp(1, 500)});
        let (total, matches) = self
            .page_query(&session, js::SEARCH_PAGE, &arg, "matches")
            .await?;
        if total == 0 {
            return Ok(ActionResult::memory(format!(
                "No matches for '{}' on the page",
                p.pattern
            )));
        }
        let mut out = format!("Found {total} matches for '{}'", p.pattern);
        if (matches.len() as u64) < total {
            out.push_str(&format!(" (showing {})", matches.len()));
        }
        out.push_str(":\n");
        for (i, m) in matches.iter().enumerate() {
            out.push_str(&format!(
                "{}. [{}] …{}…\n",
                i + 1,
                m.get("path").and_then(Value::as_str).unwrap_or(""),
                m.get("context").and_then(Value::as_str).unwrap_or("")
            ));
        }
        Ok(ActionResult::once(
            out,
            format!("Searched page for '{}': {total} matches", p.pattern),
        ))
    }

    async fn find_elements(&self, p: &FindElementsParams) -> Outcome {
        let session = self.focused_session().await?;
        let arg = json!({"selector": p.selector, "attributes": p.attributes, "max_results": p.max_results.clamp(1, 1000), "include_text": p.include_text});
        let (total, items) = self
            .page_query(&session, js::FIND_ELEMENTS, &arg, "items")
            .await?;
        if total == 0 {
            return Ok(ActionResult::memory(format!(
                "No elements match '{}'",
                p.selector
            )));
        }
        let mut out = format!("Found {total} elements matching '{}'", p.selector);
        if (items.len() as u64) < total {
            out.push_str(&format!(" (showing {})", items.len()));
        }
        out.push_str(":\n");
        for (i, item) in items.iter().enumerate() {
            out.push_str(&format!(
                "[{i}] <{}>",
                item.get("tag").and_then(Value::as_str).unwrap_or("?")
            ));
            if let Some(text) = item
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push_str(&format!(" \"{text}\""));
            }
            if let Some(attrs) = item.get("attrs").and_then(Value::as_object) {
                for (k, v) in attrs {
                    out.push_str(&format!(" {{{k}=\"{}\"}}", v.as_str().unwrap_or("")));
                }
            }
            out.push_str(&format!(
                " ({} children)\n",
                item.get("children").and_then(Value::as_u64).unwrap_or(0)
            ));
        }
        Ok(ActionResult::once(
            out,
            format!("Found {total} elements matching '{}'", p.selector),
        ))
    }

    async fn screenshot(&self, file_name: Option<&str>) -> Outcome {
        let Some(name) = file_name else {
            return Ok(
                ActionResult::memory("Requested a screenshot for the next observation")
                    .with_meta("include_screenshot", json!(true)),
            );
        };
        let session = self.focused_session().await?;
        let data = self
            .capture_bytes(
                &session,
                "Page.captureScreenshot",
                json!({"format": "png"}),
                timeouts::SCREENSHOT,
            )
            .await?;
        let mut file = sanitize_file_name(name, "screenshot.png");
        if !file.to_ascii_lowercase().ends_with(".png") {
            file.push_str(".png");
        }
        let path = self.workspace.unique_path(&file)?;
        std::fs::write(&path, data)
            .map_err(|e| Fail(format!("Could not save the screenshot: {e}")))?;
        let shown = display_name(&self.workspace, &path);
        let mut result = ActionResult::memory(format!("Saved screenshot to {shown}"));
        result.attachments = Some(vec![path.to_string_lossy().into_owned()]);
        Ok(result)
    }

    async fn save_as_pdf(&self, p: &SaveAsPdfParams) -> Outcome {
        if !(0.1..=2.0).contains(&p.scale) {
            return Err(Fail("scale must be between 0.1 and 2.0".into()));
        }
        let session = self.focused_session().await?;
        let target = self.focused_target().await?;
        let (w, h) = p.paper_format.inches();
        let mut params = json!({
            "printBackground": p.print_background, "landscape": p.landscape, "scale": p.scale,
            "paperWidth": w, "paperHeight": h, "displayHeaderFooter": p.display_header_footer,
        });
        if let Some(t) = &p.header_template {
            params["headerTemplate"] = json!(t);
        }
        if let Some(t) = &p.footer_template {
            params["footerTemplate"] = json!(t);
        }
        let data = self
            .capture_bytes(&session, "Page.printToPDF", params, timeouts::PRINT_TO_PDF)
            .await?;
        let name = match &p.file_name {
            Some(n) => sanitize_file_name(n, "page.pdf"),
            None => {
                let title = self
                    .tabs()
                    .await
                    .ok()
                    .and_then(|t| {
                        t.into_iter()
                            .find(|t| t.target_id == target)
                            .map(|t| t.title)
                    })
                    .unwrap_or_default();
                let stem: String = title
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                    .take(50)
                    .collect();
                let stem = stem.trim().replace(' ', "_");
                if stem.is_empty() {
                    "page.pdf".to_owned()
                } else {
                    format!("{stem}.pdf")
                }
            }
        };
        let name = if name.to_ascii_lowercase().ends_with(".pdf") {
            name
        } else {
            format!("{name}.pdf")
        };
        let path = self.workspace.unique_path(&name)?;
        std::fs::write(&path, &data).map_err(|e| Fail(format!("Could not save the PDF: {e}")))?;
        let shown = display_name(&self.workspace, &path);
        let mut result = ActionResult::memory(format!(
            "Saved page as PDF to {shown} ({} bytes)",
            data.len()
        ));
        result.attachments = Some(vec![path.to_string_lossy().into_owned()]);
        Ok(result)
    }

    async fn capture_bytes(
        &self,
        session: &str,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Vec<u8>, Fail> {
        #[derive(Deserialize)]
        struct Data {
            data: String,
        }
        use base64::Engine;
        let data: Data = self
            .chrome
            .conn
            .call_raw(Some(session), method, params, timeout)
            .await?
            .decode()?;
        base64::engine::general_purpose::STANDARD
            .decode(data.data)
            .map_err(|e| Fail(format!("{method} returned invalid data: {e}")))
    }

    async fn evaluate(&self, code: &str) -> Outcome {
        if code.trim().is_empty() {
            return Err(Fail("code is empty".into()));
        }
        let session = self.focused_session().await?;
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(Some(&session), "Runtime.evaluate", json!({"expression": code, "returnByValue": true, "awaitPromise": true, "userGesture": true}), timeouts::EVALUATE)
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail(format!(
                "JavaScript execution error: {}",
                ex.message()
            )));
        }
        let text = match (&answer.result.value, answer.result.kind.as_deref()) {
            (Some(Value::String(s)), _) => s.clone(),
            (Some(Value::Null), _) => "null".to_owned(),
            (Some(v), _) => v.to_string(),
            (None, Some("undefined")) => "undefined".to_owned(),
            (None, _) => answer
                .result
                .description
                .clone()
                .unwrap_or_else(|| "undefined".to_owned()),
        };
        let (text, _) = truncate_chars(&text, EVALUATE_MAX_CHARS);
        let memory: String = text.chars().take(1000).collect();
        if text.chars().count() >= SHOW_ONCE_CHARS {
            Ok(ActionResult::once(
                text,
                format!("JavaScript result (first 1000 characters): {memory}"),
            ))
        } else {
            Ok(ActionResult::memory(text))
        }
    }
}

/// Adds `https://` to a bare host like `example.com/x`; rejects empty input.
fn normalize_url(raw: &str) -> Result<String, Fail> {
    let url = raw.trim();
    if url.is_empty() {
        return Err(Fail("url is empty".into()));
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

/// The point to click: centre of the largest quad part inside the viewport, clamped.
fn best_point(quads: &[Vec<f64>], vw: f64, vh: f64) -> Option<(f64, f64)> {
    let mut best: Option<(f64, (f64, f64))> = None;
    for q in quads.iter().filter(|q| q.len() >= 8) {
        let xs = [q[0], q[2], q[4], q[6]];
        let ys = [q[1], q[3], q[5], q[7]];
        let (x0, x1) = (
            xs.iter().cloned().fold(f64::MAX, f64::min),
            xs.iter().cloned().fold(f64::MIN, f64::max),
        );
        let (y0, y1) = (
            ys.iter().cloned().fold(f64::MAX, f64::min),
            ys.iter().cloned().fold(f64::MIN, f64::max),
        );
        let (ix0, ix1) = (x0.max(0.0), x1.min(vw));
        let (iy0, iy1) = (y0.max(0.0), y1.min(vh));
        let area = (ix1 - ix0).max(0.0) * (iy1 - iy0).max(0.0);
        if area <= 0.0 {
            continue;
        }
        let centre = ((ix0 + ix1) / 2.0, (iy0 + iy1) / 2.0);
        if best.is_none_or(|(a, _)| area > a) {
            best = Some((area, centre));
        }
    }
    best.map(|(_, (x, y))| {
        (
            x.clamp(0.0, (vw - 1.0).max(0.0)),
            y.clamp(0.0, (vh - 1.0).max(0.0)),
        )
    })
}

fn describe(el: &ElementInfo) -> String {
    let text: String = el.text.chars().take(60).collect();
    let name = el
        .ax_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(text.trim());
    if name.is_empty() {
        format!("element {} <{}>", el.index, el.tag_name)
    } else {
        format!("element {} <{}> \"{name}\"", el.index, el.tag_name)
    }
}

fn display_name(ws: &Workspace, path: &std::path::Path) -> String {
    path.strip_prefix(ws.root())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// How long a click on a link or submit control waits for the navigation it schedules to
/// start (the wait ends at the first navigation event, so it only costs time when nothing
/// navigates).
const CLICK_NAVIGATION_GRACE: Duration = Duration::from_millis(250);

/// Links with an `href` and form submit controls: clicks that usually start a navigation.
fn likely_navigates(el: &ElementInfo) -> bool {
    let kind = el.attr("type").map(str::to_ascii_lowercase);
    match el.tag_name.as_str() {
        "a" | "area" => el
            .attr("href")
            .is_some_and(|h| !h.is_empty() && !h.starts_with('#') && !h.starts_with("javascript:")),
        "button" => !matches!(kind.as_deref(), Some("button" | "reset")),
        "input" => matches!(kind.as_deref(), Some("submit" | "image")),
        _ => false,
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

    #[test]
    fn picks_visible_centre() {
        let quads = vec![vec![-50.0, 0.0, 50.0, 0.0, 50.0, 20.0, -50.0, 20.0]];
        assert_eq!(best_point(&quads, 800.0, 600.0), Some((25.0, 10.0)));
        let off = vec![vec![0.0, 700.0, 10.0, 700.0, 10.0, 720.0, 0.0, 720.0]];
        assert_eq!(best_point(&off, 800.0, 600.0), None);
    }

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
