//! The click action: by index (mouse at the element's visible centre, JavaScript fallback) or
//! by coordinates; the navigations and new tabs it causes.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ActionContext, ActionResult, ClickParams,
    element::{Resolved, describe},
    exec::{Fail, Outcome},
    js, timeouts,
};
use crate::{
    cdp::CdpEvent,
    session::{BrowserSession, WaitOutcome, load_cap, wait_for_event},
    types::{ElementInfo, short_tab_id},
};

impl BrowserSession {
    pub(super) async fn click(&self, p: &ClickParams, ctx: &ActionContext) -> Outcome {
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
        // submit control): only used when settling is switched off.
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
                    return Err(Fail::new(format!(
                        "Cannot click on file input element (index {index}). File uploads must be done using the upload_file action."
                    )));
                }
                self.click_element(&el).await?
            }
            _ => {
                return Err(Fail::new(
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
        // A navigation that starts later (a form submission is scheduled by the page, a
        // handler may set `location` after a fetch) is awaited by the settle that follows
        // every action: the page-side tracker sees the submit and the unload. With settling
        // switched off (`settle_timeout_ms: 0`), a link or submit control still gets a short
        // event-driven window for its navigation to start.
        if !started
            && self.settle.cap.is_zero()
            && may_navigate
            && tabs_after.len() == tabs_before.len()
        {
            started = matches!(
                wait_for_event(&mut rx, CLICK_NAVIGATION_GRACE, is_navigation_start).await,
                WaitOutcome::Seen | WaitOutcome::Lagged
            );
        }
        if started {
            let before = self.target_url(&focused).await.unwrap_or_default();
            // Ends on the load event, a same-document navigation, or the main frame stopping
            // (a download or a cancelled navigation never fires load).
            let outcome = crate::settle::wait_for_navigation_end(
                &mut rx,
                &focused_session,
                &focused,
                load_cap(&before, ""),
            )
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
    pub(super) async fn popup_denied(&self, target: &str, url_at_open: &str) -> Option<String> {
        let guard = self.egress.as_ref()?;
        let policy = guard.policy();
        let url_now = |u: &str| -> Option<String> {
            if u.is_empty() || u == "about:blank" {
                return None;
            }
            policy
                .for_url(u)
                .and_then(|policy| policy.check_str(u))
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

    pub(super) async fn click_coordinates(
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
            return Err(Fail::new(format!(
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

    pub(super) async fn viewport(&self, session: &str) -> (f64, f64) {
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

    pub(super) async fn mouse_click(&self, session: &str, x: f64, y: f64) -> Result<(), Fail> {
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
    pub(super) async fn quads(&self, el: &ElementInfo) -> Vec<Vec<f64>> {
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

    pub(super) async fn click_element(&self, el: &ElementInfo) -> Outcome {
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
        // The hit test runs in the element's own document: an element of a child frame of its
        // target is hit-tested by Chrome from the root (the quads are in the root's
        // coordinates), then compared in the frame.
        let topmost = match self.hit_in_child_frame(el, x, y).await {
            None => self.probe_topmost(&r, x, y, None).await?,
            Some(ChildFrameHit::Node(hit)) => self.probe_topmost(&r, x, y, Some(hit)).await?,
            Some(ChildFrameHit::OtherDocument) => false,
        };
        let mut how = "";
        if topmost {
            self.mouse_click(&r.session, x, y).await?;
            // The click is sent again only when none of its events reached the element (the
            // page moved something over it between the probe and the click): a click that
            // arrived is never repeated, whatever the page made of it — its effect (a state
            // the server sets, a re-render) may come later, and a second click would undo or
            // repeat it.
            let reached = self
                .call_on(&r, js::CLICK_RECEIPT, vec![], self.timeout)
                .await
                .ok()
                .and_then(|v| v.as_bool())
                .unwrap_or(true);
            if !reached {
                self.call_on(&r, js::JS_CLICK, vec![], timeouts::CLICK)
                    .await?;
                how = " (via JavaScript: the mouse click did not reach it)";
            }
        } else {
            self.call_on(&r, js::JS_CLICK, vec![], timeouts::CLICK)
                .await?;
            how = " (via JavaScript: the point was covered by another element)";
        }
        Ok(ActionResult::memory(format!("Clicked {label}{how}"))
            .with_meta("click_x", json!(x))
            .with_meta("click_y", json!(y)))
    }

    /// Runs [`js::CLICK_PROBE`] (which also arms [`js::CLICK_RECEIPT`]): whether the element
    /// is the topmost hit at (x, y), hit-tested in its document or given as `hit` (an object id).
    async fn probe_topmost(
        &self,
        r: &Resolved,
        x: f64,
        y: f64,
        hit: Option<String>,
    ) -> Result<bool, Fail> {
        let given = match hit {
            Some(object_id) => json!({ "objectId": object_id }),
            None => json!({ "value": null }),
        };
        let probe = self
            .call_on_with(
                r,
                js::CLICK_PROBE,
                vec![json!({"value": x}), json!({"value": y}), given],
                self.timeout,
            )
            .await?;
        Ok(probe.get("ok").and_then(Value::as_bool).unwrap_or(false))
    }

    /// For an element in a child frame of its target (a same-process iframe, whose content
    /// quads are in the root document's coordinates): the node Chrome hit-tests at (x, y),
    /// through the frames, as the mouse click would. `None` for an element in its target's own
    /// document (the page-side probe hit-tests it).
    async fn hit_in_child_frame(&self, el: &ElementInfo, x: f64, y: f64) -> Option<ChildFrameHit> {
        let frame = el.frame_id.as_deref()?;
        if frame == el.target_id {
            return None;
        }
        #[derive(Deserialize)]
        struct Located {
            #[serde(rename = "backendNodeId")]
            backend_node_id: i64,
            #[serde(rename = "frameId", default)]
            frame_id: Option<String>,
        }
        #[derive(Deserialize)]
        struct ResolvedNode {
            object: super::element::RemoteObject,
        }
        let conn = &self.chrome.conn;
        let located = conn
            .call_raw(
                Some(&el.session_id),
                "DOM.getNodeForLocation",
                json!({"x": x.round() as i64, "y": y.round() as i64, "includeUserAgentShadowDOM": false}),
                self.timeout,
            )
            .await
            .and_then(|r| r.decode::<Located>());
        let Ok(located) = located else {
            return Some(ChildFrameHit::OtherDocument);
        };
        if located.frame_id.as_deref().is_some_and(|f| f != frame) {
            return Some(ChildFrameHit::OtherDocument);
        }
        let object = conn
            .call_raw(
                Some(&el.session_id),
                "DOM.resolveNode",
                json!({"backendNodeId": located.backend_node_id}),
                self.timeout,
            )
            .await
            .and_then(|r| r.decode::<ResolvedNode>())
            .ok()
            .and_then(|r| r.object.object_id);
        Some(object.map_or(ChildFrameHit::OtherDocument, ChildFrameHit::Node))
    }
}

/// What Chrome's hit test found at a click point of an element in a child frame.
enum ChildFrameHit {
    /// A node of the element's own document (its remote object id).
    Node(String),
    /// Nothing of the element's document: another document (the parent's overlay) is on top.
    OtherDocument,
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

/// Without settling: how long a click on a link or submit control waits for the navigation it
/// schedules to start (ends at the first navigation event).
const CLICK_NAVIGATION_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

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
    fn picks_visible_centre() {
        let quads = vec![vec![-50.0, 0.0, 50.0, 0.0, 50.0, 20.0, -50.0, 20.0]];
        assert_eq!(best_point(&quads, 800.0, 600.0), Some((25.0, 10.0)));
        let off = vec![vec![0.0, 700.0, 10.0, 700.0, 10.0, 720.0, 0.0, 720.0]];
        assert_eq!(best_point(&off, 800.0, 600.0), None);
    }
}
