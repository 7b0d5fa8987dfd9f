//! Waiting for the page to settle after an action, on events rather than sleeps.
//!
//! `settle.js` (the tracker) is installed in every document of a session's targets before the
//! page's scripts run. Before an action [`BrowserSession::settle_begin`] marks its start in
//! the focused tab's documents (one round trip, pipelined over the tab and the cross-origin
//! frames of the last capture); after it [`BrowserSession::settle_after`] waits — inside the
//! page, on the page's own events — until what the action started has finished: requests,
//! short timers, animation frames, CSS transitions and animations, the callbacks of
//! IntersectionObservers and ResizeObservers (two rendering frames when any is at work),
//! WebSocket messages and their answers, inserted scripts/frames, a navigation (whose load is
//! awaited here, on CDP lifecycle events, then the new document settles from its start, past
//! its loading screen), and a short quiet window after the last DOM mutation. A page that never settles costs at most the cap; the report
//! says how long the settle took, why it ended and what was still pending.

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::{sync::broadcast, time::Instant};

use crate::{
    cdp::CdpEvent,
    session::{BrowserSession, WaitOutcome, load_cap, wait_for_event},
};

/// The tracker script (see its header).
pub(crate) const TRACKER_JS: &str = include_str!("settle.js");

/// browser-use waits up to 2 s for pending network requests before a capture.
pub const DEFAULT_SETTLE_CAP: Duration = Duration::from_secs(2);
/// How long the DOM must stay unchanged after the last mutation the action caused: long
/// enough for a frame or two of rendering scheduled with requestAnimationFrame.
pub const SETTLE_QUIET: Duration = Duration::from_millis(30);
/// Navigations followed within one settle (a redirecting page chain is bounded).
const MAX_NAVIGATIONS: usize = 3;
/// Time the page gets beyond the cap to answer (its main thread may be busy).
const ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// How a session waits after actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettleSettings {
    /// Upper bound of one settle (per document: a navigation's new page gets its own).
    pub cap: Duration,
    /// Quiet window after the last DOM mutation caused by the action.
    pub quiet: Duration,
}

impl Default for SettleSettings {
    fn default() -> Self {
        Self {
            cap: DEFAULT_SETTLE_CAP,
            quiet: SETTLE_QUIET,
        }
    }
}

/// Why a settle ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleEnd {
    /// Everything the action started finished and the DOM went quiet.
    Quiet,
    /// The action navigated; the new page loaded and went quiet.
    Navigation,
    /// The cap was reached with work still pending.
    Cap,
    /// The page has no tracker (e.g. a browser error page) or did not answer.
    Unavailable,
}

/// What a settle cost and why it ended; attached to the action result as `metadata.settle`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettleReport {
    pub ms: u64,
    pub ended: SettleEnd,
    /// What was still pending when the cap was reached (kind and URL), at most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
}

/// The start of an action, as marked in the focused tab.
pub(crate) struct ActionMark {
    target: String,
    session: String,
    /// The tracker's document id in the tab's main frame (`None`: no tracker there).
    doc: Option<String>,
    /// Cross-origin frame sessions of the tab with their document ids.
    frames: Vec<(String, String)>,
    /// The child frame the action's element lives in, when its target's session reaches it
    /// only through the element (a cross-origin frame in the same process: no session of its
    /// own, and no same-origin parent to reach its tracker).
    element_frame: Option<ElementFrame>,
    /// Events since just before the action (navigation lifecycle).
    events: broadcast::Receiver<Arc<CdpEvent>>,
}

/// A frame's tracker reached through an element of the frame: functions called on the element
/// run in the frame's main world, where its tracker lives.
struct ElementFrame {
    session: String,
    object_id: String,
    doc: String,
}

/// A node in the child frame an action happens in (its element, or the document keys go to),
/// for settling that frame: its session and backend node.
pub(crate) struct ActionElement<'a> {
    pub(crate) session: &'a str,
    pub(crate) backend_node_id: i64,
}

#[derive(Deserialize)]
struct TrackerAnswer {
    reason: String,
    doc: String,
    #[serde(default)]
    pending: Vec<String>,
}

/// `begin()` of the tracker of the called-on element's window (its document id).
const TRACKER_BEGIN_ON: &str = "function() { const w = (this.ownerDocument && this.ownerDocument.defaultView) || window; const t = w[Symbol.for('browserd.settle')]; return t ? t.begin() : null; }";
/// `settle(doc, quietMs, capMs)` of the tracker of the called-on element's window.
const TRACKER_SETTLE_ON: &str = "function(doc, quietMs, capMs) { const w = (this.ownerDocument && this.ownerDocument.defaultView) || window; const t = w[Symbol.for('browserd.settle')]; return t ? t.settle(doc, quietMs, capMs) : null; }";

fn tracker_call(body: &str) -> String {
    format!(
        "(() => {{ const t = window[Symbol.for('browserd.settle')]; return t ? {body} : null; }})()"
    )
}

impl BrowserSession {
    /// Evaluates `expression` in a session's main world; `None` when it fails, throws or
    /// answers nothing.
    async fn tracker_eval(
        &self,
        session: &str,
        expression: String,
        timeout: Duration,
    ) -> Option<Value> {
        self.eval(session, &expression, timeout)
            .await
            .ok()
            .filter(|v| !v.is_null())
    }

    /// Calls `function` on a remote object (in its frame's main world); `None` when it fails,
    /// throws or answers nothing.
    async fn tracker_call_on(
        &self,
        session: &str,
        object_id: &str,
        function: &str,
        arguments: Vec<Value>,
        timeout: Duration,
    ) -> Option<Value> {
        #[derive(Deserialize)]
        struct Answer {
            result: Remote,
            #[serde(rename = "exceptionDetails", default)]
            exception: Option<Value>,
        }
        #[derive(Deserialize)]
        struct Remote {
            #[serde(default)]
            value: Option<Value>,
        }
        let arguments: Vec<Value> = arguments
            .into_iter()
            .map(|v| serde_json::json!({ "value": v }))
            .collect();
        let answer: Answer = self
            .chrome
            .conn
            .call_raw(
                Some(session),
                "Runtime.callFunctionOn",
                serde_json::json!({"functionDeclaration": function, "objectId": object_id, "arguments": arguments, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await
            .ok()?
            .decode()
            .ok()?;
        if answer.exception.is_some() {
            return None;
        }
        answer.result.value.filter(|v| !v.is_null())
    }

    /// The document of the same-process child frame that holds the keyboard focus of the
    /// focused tab (its session and the document's backend node), following focused iframes
    /// down at most three levels; `None` when the focus is in the tab's own document (or in an
    /// out-of-process frame, which has its own session). Keys sent to the page go there.
    pub(crate) async fn focused_child_frame(&self) -> Option<(String, i64)> {
        #[derive(Deserialize)]
        struct Evaluated {
            result: Object,
        }
        #[derive(Deserialize)]
        struct Object {
            #[serde(rename = "objectId")]
            object_id: Option<String>,
        }
        #[derive(Deserialize)]
        struct Described {
            node: DescribedNode,
        }
        #[derive(Deserialize)]
        struct DescribedNode {
            #[serde(rename = "nodeName", default)]
            node_name: String,
            #[serde(rename = "contentDocument", default)]
            content_document: Option<Box<DocumentNode>>,
        }
        #[derive(Deserialize)]
        struct DocumentNode {
            #[serde(rename = "backendNodeId")]
            backend_node_id: i64,
        }
        let target = self.focused_target().await.ok()?;
        let session = self.prepare_tab(&target).await.ok()?;
        let conn = &self.chrome.conn;
        let mut active = conn
            .call_raw(
                Some(&session),
                "Runtime.evaluate",
                serde_json::json!({"expression": "document.activeElement"}),
                self.timeout,
            )
            .await
            .ok()?
            .decode::<Evaluated>()
            .ok()?
            .result
            .object_id?;
        let mut found = None;
        for _ in 0..3 {
            let described = conn
                .call_raw(
                    Some(&session),
                    "DOM.describeNode",
                    serde_json::json!({"objectId": active, "pierce": true, "depth": 0}),
                    self.timeout,
                )
                .await
                .ok()
                .and_then(|r| r.decode::<Described>().ok());
            let Some(document) = described
                .filter(|d| d.node.node_name.eq_ignore_ascii_case("iframe"))
                .and_then(|d| d.node.content_document)
            else {
                break;
            };
            found = Some((session.clone(), document.backend_node_id));
            // The focus inside that frame's document.
            let Some(element) = self
                .active_element_of_document(&session, document.backend_node_id)
                .await
            else {
                break;
            };
            active = element;
        }
        found
    }

    /// The remote object of node `backend_node_id` in its frame's main world (`DOM.resolveNode`).
    async fn node_object(&self, session: &str, backend_node_id: i64) -> Option<String> {
        #[derive(Deserialize)]
        struct Resolved {
            object: Object,
        }
        #[derive(Deserialize)]
        struct Object {
            #[serde(rename = "objectId")]
            object_id: Option<String>,
        }
        self.chrome
            .conn
            .call_raw(
                Some(session),
                "DOM.resolveNode",
                serde_json::json!({"backendNodeId": backend_node_id}),
                self.timeout,
            )
            .await
            .ok()?
            .decode::<Resolved>()
            .ok()?
            .object
            .object_id
    }

    /// The remote object of the active element of the document `backend_node_id` (a frame's
    /// document), in that frame's main world.
    async fn active_element_of_document(
        &self,
        session: &str,
        backend_node_id: i64,
    ) -> Option<String> {
        #[derive(Deserialize)]
        struct Called {
            result: Object,
        }
        #[derive(Deserialize)]
        struct Object {
            #[serde(rename = "objectId")]
            object_id: Option<String>,
        }
        let document = self.node_object(session, backend_node_id).await?;
        let conn = &self.chrome.conn;
        conn.call_raw(
            Some(session),
            "Runtime.callFunctionOn",
            serde_json::json!({"functionDeclaration": "function() { return this.activeElement; }", "objectId": document}),
            self.timeout,
        )
        .await
        .ok()?
        .decode::<Called>()
        .ok()?
        .result
        .object_id
    }

    /// Marks the start of an action in the frame of `element` (see [`ActionMark`]).
    async fn begin_in_element_frame(&self, element: &ActionElement<'_>) -> Option<ElementFrame> {
        let object_id = self
            .node_object(element.session, element.backend_node_id)
            .await?;
        let doc = self
            .tracker_call_on(
                element.session,
                &object_id,
                TRACKER_BEGIN_ON,
                Vec::new(),
                self.timeout,
            )
            .await?;
        Some(ElementFrame {
            session: element.session.to_owned(),
            object_id,
            doc: doc.as_str()?.to_owned(),
        })
    }

    /// Marks the start of an action in the focused tab (and the cross-origin frames of its
    /// last capture, and the child frame of the action's element). `None` when there is no
    /// focused tab.
    pub(crate) async fn settle_begin(
        &self,
        element: Option<ActionElement<'_>>,
    ) -> Option<ActionMark> {
        let target = self.focused_target().await.ok()?;
        let session = self.prepare_tab(&target).await.ok()?;
        let frame_sessions = self.state.lock().await.frame_sessions.clone();
        let events = self.chrome.conn.events();
        let begin = tracker_call("t.begin()");
        let timeout = self.timeout;
        let element_frame = async {
            match &element {
                Some(element) => self.begin_in_element_frame(element).await,
                None => None,
            }
        };
        let (doc, frames, element_frame) = tokio::join!(
            self.tracker_eval(&session, begin.clone(), timeout),
            futures::future::join_all(frame_sessions.into_iter().map(|frame| {
                let begin = begin.clone();
                async move {
                    let doc = self.tracker_eval(&frame, begin, timeout).await;
                    doc.and_then(|d| d.as_str().map(|d| (frame, d.to_owned())))
                }
            })),
            element_frame
        );
        Some(ActionMark {
            target,
            session,
            doc: doc.and_then(|d| d.as_str().map(str::to_owned)),
            frames: frames.into_iter().flatten().collect(),
            element_frame,
            events,
        })
    }

    /// Waits until the page has settled from what the action since `mark` started (see the
    /// module docs), at most the cap per document.
    pub(crate) async fn settle_after(&self, mut mark: ActionMark) -> SettleReport {
        let started = Instant::now();
        // An action that moved the focus (a new tab) settles the new tab from its start.
        if !self.follow_focus(&mut mark).await {
            return report(started, SettleEnd::Unavailable, Vec::new());
        }
        let Some(mut doc) = mark.doc.clone() else {
            return report(started, SettleEnd::Unavailable, Vec::new());
        };
        let mut navigated = false;
        let mut frames = std::mem::take(&mut mark.frames);
        for _ in 0..=MAX_NAVIGATIONS {
            drain(&mut mark.events);
            // Cross-origin frames settle alongside the main frame, once.
            let frames_now = std::mem::take(&mut frames);
            let (main, others) = self.settle_documents(&mut mark, &doc, &frames_now).await;
            match main {
                Some(answer) if answer.reason != "navigation" => {
                    return settled(started, answer, others, navigated, &doc);
                }
                answer => {
                    // The document began to unload, or went away while we waited: wait for
                    // the navigation to finish, then settle the page it led to.
                    if answer.is_none() && !self.document_replaced(&mark, &doc).await {
                        return report(started, SettleEnd::Unavailable, Vec::new());
                    }
                    navigated = true;
                    match self.next_document(&mut mark, &doc, started).await {
                        Ok(next_doc) => doc = next_doc,
                        Err(ended) => return ended,
                    }
                }
            }
        }
        report(started, SettleEnd::Cap, vec!["navigations".into()])
    }

    /// Moves `mark` to the focused tab when the action moved the focus (a new tab, settled
    /// from its start); false when that tab cannot be prepared.
    async fn follow_focus(&self, mark: &mut ActionMark) -> bool {
        if let Ok(focused) = self.focused_target().await
            && focused != mark.target
        {
            match self.prepare_tab(&focused).await {
                Ok(session) => {
                    mark.target = focused;
                    mark.session = session;
                    mark.doc = Some(String::new());
                    mark.frames.clear();
                    mark.element_frame = None;
                }
                Err(_) => return false,
            }
        }
        true
    }

    /// One round of settling, concurrently: the main frame's document `doc`, the cross-origin
    /// `frames` and the element's frame (taken from `mark`: once). The main frame's answer,
    /// and the others'.
    async fn settle_documents(
        &self,
        mark: &mut ActionMark,
        doc: &str,
        frames: &[(String, String)],
    ) -> (Option<TrackerAnswer>, Vec<Option<Value>>) {
        let settings = self.settle;
        let quiet_ms = settings.quiet.as_millis() as u64;
        let cap_ms = settings.cap.as_millis() as u64;
        let settle = |doc: &str| {
            tracker_call(&format!(
                "t.settle({}, {quiet_ms}, {cap_ms})",
                Value::String(doc.to_owned())
            ))
        };
        let answer_timeout = settings.cap + ANSWER_MARGIN;
        let main = self.tracker_eval(&mark.session, settle(doc), answer_timeout);
        let others = futures::future::join_all(
            frames
                .iter()
                .map(|(session, doc)| self.tracker_eval(session, settle(doc), answer_timeout)),
        );
        // The element's frame too, once.
        let element_frame = mark.element_frame.take();
        let in_element_frame = async {
            match &element_frame {
                Some(frame) => {
                    self.tracker_call_on(
                        &frame.session,
                        &frame.object_id,
                        TRACKER_SETTLE_ON,
                        vec![
                            Value::String(frame.doc.clone()),
                            quiet_ms.into(),
                            cap_ms.into(),
                        ],
                        answer_timeout,
                    )
                    .await
                }
                None => None,
            }
        };
        let (main, mut others, in_element_frame) = tokio::join!(main, others, in_element_frame);
        others.push(in_element_frame);
        let main: Option<TrackerAnswer> = main.and_then(|v| serde_json::from_value(v).ok());
        (main, others)
    }

    /// Waits for the navigation that took the tab away from `doc` to finish: the tracker's
    /// document of the page it led to (`doc` started afresh when it is the same document: a
    /// cancelled navigation, a download), or the report the settle ends with.
    async fn next_document(
        &self,
        mark: &mut ActionMark,
        doc: &str,
        started: Instant,
    ) -> Result<String, SettleReport> {
        let before = self.target_url(&mark.target).await.unwrap_or_default();
        let outcome = wait_for_navigation_end(
            &mut mark.events,
            &mark.session,
            &mark.target,
            load_cap(&before, ""),
        )
        .await;
        if matches!(outcome, WaitOutcome::TimedOut) {
            return Err(report(
                started,
                SettleEnd::Cap,
                vec![format!("document {before}")],
            ));
        }
        // The same document (a cancelled navigation, a download) starts afresh;
        // a new one settles from its start.
        let next = tracker_call(&format!(
            "(t.doc() === {} ? t.begin() : t.doc())",
            Value::String(doc.to_owned())
        ));
        match self
            .tracker_eval(&mark.session, next, self.timeout)
            .await
            .and_then(|v| v.as_str().map(str::to_owned))
        {
            Some(next_doc) => Ok(next_doc),
            None => Err(report(started, SettleEnd::Unavailable, Vec::new())),
        }
    }

    /// Whether the tab's main document is no longer the one `doc` names (it navigated while
    /// the tracker was waiting, so the evaluation was cut short).
    async fn document_replaced(&self, mark: &ActionMark, doc: &str) -> bool {
        let current = self
            .tracker_eval(&mark.session, tracker_call("t.doc()"), self.timeout)
            .await;
        match current {
            Some(Value::String(current)) => current != doc,
            // No tracker now: an error page, or a document still committing.
            _ => true,
        }
    }
}

fn report(started: Instant, ended: SettleEnd, pending: Vec<String>) -> SettleReport {
    SettleReport {
        ms: started.elapsed().as_millis() as u64,
        ended,
        pending,
    }
}

/// The report of a settle whose main frame answered without navigating away: capped when a
/// document hit the cap (with what was pending, ten at most), else quiet — or navigation,
/// when the page navigated since the action.
fn settled(
    started: Instant,
    answer: TrackerAnswer,
    others: Vec<Option<Value>>,
    navigated: bool,
    doc: &str,
) -> SettleReport {
    let mut pending = answer.pending;
    let mut capped = answer.reason == "cap";
    for other in others
        .into_iter()
        .flatten()
        .filter_map(|v| serde_json::from_value::<TrackerAnswer>(v).ok())
    {
        capped |= other.reason == "cap";
        pending.extend(other.pending);
    }
    pending.truncate(10);
    let ended = if capped {
        SettleEnd::Cap
    } else if navigated || answer.doc != doc {
        SettleEnd::Navigation
    } else {
        SettleEnd::Quiet
    };
    if !capped {
        pending.clear();
    }
    report(started, ended, pending)
}

fn drain(rx: &mut broadcast::Receiver<Arc<CdpEvent>>) {
    use broadcast::error::TryRecvError;
    while let Ok(_) | Err(TryRecvError::Lagged(_)) = rx.try_recv() {}
}

/// Waits for the navigation under way in the tab to end: its load event, a same-document
/// navigation, the main frame stopping (a download or a cancelled navigation never loads),
/// or a download starting.
pub(crate) async fn wait_for_navigation_end(
    rx: &mut broadcast::Receiver<Arc<CdpEvent>>,
    session: &str,
    target: &str,
    cap: Duration,
) -> WaitOutcome {
    let main_frame = format!("\"frameId\":\"{target}\"");
    wait_for_event(rx, cap, |ev| {
        (ev.session_id.as_deref() == Some(session)
            && (matches!(
                ev.method.as_str(),
                "Page.loadEventFired" | "Page.navigatedWithinDocument"
            ) || (ev.method == "Page.frameStoppedLoading"
                && ev.raw.as_str().contains(&main_frame))))
            || ev.method == "Browser.downloadWillBegin"
    })
    .await
}
