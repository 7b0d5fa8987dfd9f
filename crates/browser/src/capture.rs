//! One capture: CDP calls (concurrent), tree build, selective accessibility, serializer.

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::Engine;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use crate::{
    cdp::{CdpConnection, RawResponse},
    dom::{
        AxInfo, AxValue, HiddenHint, NodeId, NodeKind, TargetRef, Tree, append_snapshot,
        compute_visibility,
    },
    error::{BrowserError, Result},
    interactive::{is_interactive, needs_ax},
    serializer::{Serialized, Serializer, cap_text},
    snapshot::{AxTreeWire, CaptureSnapshot, LayoutMetrics, SNAPSHOT_STYLES},
    types::{
        CaptureOptions, CaptureTimings, ElementInfo, PageInfo, Screenshot, ScreenshotFormat,
        SelectorMap, Tab, Viewport,
    },
};

const MAX_LISTENER_ELEMENTS: usize = 100;
const LISTENER_OVERFLOW: &str = "__browserd_too_many_click_listeners__";

/// Resolves a target id to a session on the raw connection (attaching once).
pub(crate) trait SessionSource: Send + Sync {
    fn session_for(
        &self,
        target_id: &str,
    ) -> impl std::future::Future<Output = Result<String>> + Send;
}

/// Everything one capture produced, before the caller adds tabs.
pub(crate) struct CaptureOutput {
    pub dom_text: String,
    pub has_root: bool,
    pub selector_map: SelectorMap,
    pub stats: crate::serializer::PageStats,
    pub metrics: Option<LayoutMetrics>,
    pub screenshot: Option<Screenshot>,
    pub timings: CaptureTimings,
    /// The context's tabs, listed concurrently with the snapshot.
    pub tabs: Vec<Tab>,
    /// Sessions of the cross-origin frames the capture descended into.
    pub frame_sessions: Vec<String>,
}

/// Runs `f` on a dedicated thread with a large stack (deep DOMs recurse deeply) and awaits it.
async fn on_capture_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("browserd-capture".into())
        .stack_size(256 << 20)
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    rx.await.map_err(|_| BrowserError::Decode {
        method: "capture".into(),
        reason: "capture worker thread panicked".into(),
    })
}

/// Snapshots up to this size are decoded and built on the calling task (a few ms of CPU at
/// most; the build is iterative): a hand-off to a fresh thread costs more than the work on a
/// busy machine.
const INLINE_BUILD_MAX_BYTES: usize = 512 * 1024;
/// Trees up to this many nodes and this depth are serialized on the calling task; the
/// serializer recurses, so anything deeper goes to the large-stack capture thread.
const INLINE_SERIALIZE_MAX_NODES: usize = 20_000;
const INLINE_SERIALIZE_MAX_DEPTH: usize = 128;

/// Runs `f` inline when `inline`, else on the large-stack capture thread.
async fn run_capture_work<T: Send + 'static>(
    inline: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    if inline {
        Ok(f())
    } else {
        on_capture_thread(f).await
    }
}

/// Whether the tree under `root` is small and shallow enough to serialize inline.
fn small_and_shallow(tree: &Tree, root: Option<NodeId>) -> bool {
    if tree.nodes.len() > INLINE_SERIALIZE_MAX_NODES {
        return false;
    }
    let Some(root) = root else {
        return true;
    };
    let mut stack = vec![(root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        if depth > INLINE_SERIALIZE_MAX_DEPTH {
            return false;
        }
        let n = tree.node(id);
        for c in tree.children_and_shadow_roots(id) {
            stack.push((c, depth + 1));
        }
        if let Some(cd) = n.content_document {
            stack.push((cd, depth + 1));
        }
    }
    true
}

pub(crate) fn snapshot_params() -> serde_json::Value {
    json!({
        "computedStyles": SNAPSHOT_STYLES,
        "includePaintOrder": true,
        "includeDOMRects": true,
        "includeBlendedBackgroundColors": false,
        "includeTextColorOpacities": false,
    })
}

/// Object group of the listener probe's remote objects (released after each probe).
const LISTENER_OBJECT_GROUP: &str = "browserd-click-listeners";

/// The event types that make an element "have a JS click listener" (browser-use's probe).
const CLICK_LISTENER_TYPES: [&str; 5] =
    ["click", "mousedown", "mouseup", "pointerdown", "pointerup"];

/// The JS test on `l = getEventListeners(el)` for a click/mouse/pointer listener.
fn has_click_listener_js() -> String {
    CLICK_LISTENER_TYPES
        .iter()
        .map(|t| format!("l.{t}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Elements with click/mouse/pointer listeners (browser-use's `getEventListeners` probe):
/// skipped above 10 000 elements, abandoned above 100 matches. Failures are not fatal.
///
/// The bounded scan runs in the page exactly as browser-use's does, but only counts; when
/// 1..=100 elements matched it hands back `document`, and one
/// `DOMDebugger.getEventListeners(depth -1, pierce false)` — the same listener source
/// `getEventListeners` reads, over the same light-DOM subtree `querySelectorAll('*')` walks —
/// returns every listener with its `backendNodeId`. Two round trips in all, instead of one
/// `DOM.describeNode` per matching element (each CDP call costs ~0.1–0.2 ms of Chrome's
/// main thread, which was most of the probe's cost on small pages).
async fn click_listener_ids(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> HashSet<i64> {
    let types = has_click_listener_js();
    let expression = format!(
        r#"(() => {{
  if (typeof getEventListeners !== 'function') return null;
  const all = document.querySelectorAll('*');
  if (all.length > 10000) return null;
  let found = 0;
  for (const el of all) {{
    try {{
      const l = getEventListeners(el);
      if ({types}) {{
        found += 1;
        if (found > {MAX_LISTENER_ELEMENTS}) return '{LISTENER_OVERFLOW}';
      }}
    }} catch (e) {{}}
  }}
  return found > 0 ? document : null;
}})()"#
    );
    #[derive(Deserialize)]
    struct Evaluated {
        result: RemoteObject,
    }
    #[derive(Deserialize)]
    struct RemoteObject {
        #[serde(rename = "objectId")]
        object_id: Option<String>,
    }
    #[derive(Deserialize)]
    struct Listeners<'a> {
        #[serde(borrow)]
        listeners: Vec<Listener<'a>>,
    }
    #[derive(Deserialize)]
    struct Listener<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(rename = "backendNodeId")]
        backend_node_id: Option<i64>,
    }
    let mut ids = HashSet::new();
    let Ok(raw) = conn
        .call_raw(
            Some(session),
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "includeCommandLineAPI": true,
                "returnByValue": false,
                "objectGroup": LISTENER_OBJECT_GROUP,
            }),
            timeout,
        )
        .await
    else {
        return ids;
    };
    let document_object = raw
        .decode::<Evaluated>()
        .ok()
        .and_then(|e| e.result.object_id);
    let Some(document_object) = document_object else {
        return ids;
    };
    // Commands on one session run in order: the release is processed after the listeners.
    let listeners = conn.call_raw(
        Some(session),
        "DOMDebugger.getEventListeners",
        json!({"objectId": document_object, "depth": -1, "pierce": false}),
        timeout,
    );
    let release = conn.call_raw(
        Some(session),
        "Runtime.releaseObjectGroup",
        json!({"objectGroup": LISTENER_OBJECT_GROUP}),
        timeout,
    );
    let (listeners, _) = tokio::join!(listeners, release);
    if let Ok(raw) = listeners
        && let Ok(found) = raw.decode::<Listeners<'_>>()
    {
        ids.extend(
            found
                .listeners
                .iter()
                .filter(|l| CLICK_LISTENER_TYPES.contains(&l.kind.as_ref()))
                .filter_map(|l| l.backend_node_id),
        );
    }
    ids
}

/// What the in-page click-listener scan of the main document found.
#[derive(Debug, Default, PartialEq)]
enum ListenerScan {
    /// No listeners, too many elements or matches, or the scan failed: nothing to flag.
    #[default]
    Nothing,
    /// `total` elements in `querySelectorAll('*')` order; the matching ones by position, with
    /// their `nodeName` to check the mapping onto the snapshot.
    Positions {
        total: usize,
        hits: Vec<(usize, String)>,
    },
}

/// The scan of [`click_listener_ids`] answering by value in one round trip: positions in
/// document order (`querySelectorAll('*')`), which [`light_dom_listener_ids`] maps onto the
/// snapshot's elements — no second call to name the nodes.
async fn click_listener_scan(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> ListenerScan {
    let types = has_click_listener_js();
    let expression = format!(
        r#"(() => {{
  if (typeof getEventListeners !== 'function') return null;
  const all = document.querySelectorAll('*');
  if (all.length > 10000) return null;
  const hits = [];
  for (let i = 0; i < all.length; i++) {{
    try {{
      const l = getEventListeners(all[i]);
      if ({types}) {{
        if (hits.length >= {MAX_LISTENER_ELEMENTS}) return null;
        hits.push([i, all[i].nodeName]);
      }}
    }} catch (e) {{}}
  }}
  return hits.length > 0 ? {{total: all.length, hits}} : null;
}})()"#
    );
    #[derive(Deserialize)]
    struct Evaluated {
        result: Returned,
    }
    #[derive(Deserialize)]
    struct Returned {
        value: Option<Found>,
    }
    #[derive(Deserialize)]
    struct Found {
        total: usize,
        hits: Vec<(usize, String)>,
    }
    let answer = conn
        .call_raw(
            Some(session),
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "includeCommandLineAPI": true,
                "returnByValue": true,
            }),
            timeout,
        )
        .await;
    match answer.and_then(|raw| raw.decode::<Evaluated>()) {
        Ok(Evaluated {
            result: Returned {
                value: Some(Found { total, hits }),
            },
        }) => ListenerScan::Positions { total, hits },
        _ => ListenerScan::Nothing,
    }
}

/// Maps scan positions onto the main document's light-DOM elements of the snapshot (which
/// lists them in document order). `None` when the mapping cannot be trusted: the document has
/// shadow trees (the snapshot walks the flat tree, where slotted light children move), or the
/// element count or a hit's `nodeName` differs (the page changed between snapshot and scan).
fn light_dom_listener_ids(
    tree: &Tree,
    root: Option<NodeId>,
    total: usize,
    hits: &[(usize, String)],
) -> Option<HashSet<i64>> {
    let main_frame = tree.node(root?).frame_id.clone();
    let mut elements: Vec<NodeId> = Vec::with_capacity(total);
    for (id, node) in tree.nodes.iter().enumerate() {
        if node.target != 0 || node.frame_id != main_frame {
            continue;
        }
        if node.in_shadow || matches!(node.kind, NodeKind::ShadowRoot(_)) {
            return None;
        }
        if node.kind == NodeKind::Element {
            elements.push(id as NodeId);
        }
    }
    if elements.len() != total {
        return None;
    }
    let mut ids = HashSet::with_capacity(hits.len());
    for (position, node_name) in hits {
        let node = tree.node(*elements.get(*position)?);
        if !node.node_name.eq_ignore_ascii_case(node_name) {
            return None;
        }
        ids.insert(node.backend_node_id);
    }
    Some(ids)
}

async fn layout_metrics(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> Result<LayoutMetrics> {
    conn.call_raw(Some(session), "Page.getLayoutMetrics", json!({}), timeout)
        .await?
        .decode()
}

fn device_pixel_ratio(m: &LayoutMetrics) -> f64 {
    let css = m
        .css_visual_viewport
        .client_width
        .or(m.css_layout_viewport.client_width)
        .unwrap_or(1920.0);
    let device = m.visual_viewport.client_width.unwrap_or(css);
    if css > 0.0 { device / css } else { 1.0 }
}

/// Page metrics as browser-use's `_get_page_info` computes them.
pub(crate) fn page_info_from_metrics(m: &LayoutMetrics) -> PageInfo {
    let css_width = m
        .css_visual_viewport
        .client_width
        .or(m.css_layout_viewport.client_width)
        .unwrap_or(1280.0);
    let device_width = m.visual_viewport.client_width.unwrap_or(css_width);
    let dpr = if css_width > 0.0 {
        device_width / css_width
    } else {
        1.0
    };
    let nonzero = |v: Option<f64>| v.filter(|x| *x != 0.0);
    let viewport_width = nonzero(m.css_layout_viewport.client_width)
        .or(m.layout_viewport.client_width)
        .unwrap_or(1280.0) as i64;
    let viewport_height = nonzero(m.css_layout_viewport.client_height)
        .or(m.layout_viewport.client_height)
        .unwrap_or(720.0) as i64;
    let page_width = (m.content_size.width.unwrap_or(viewport_width as f64 * dpr) / dpr) as i64;
    let page_height = (m
        .content_size
        .height
        .unwrap_or(viewport_height as f64 * dpr)
        / dpr) as i64;
    let scroll_x = nonzero(m.css_visual_viewport.page_x)
        .or(m.css_layout_viewport.page_x)
        .unwrap_or(0.0) as i64;
    let scroll_y = nonzero(m.css_visual_viewport.page_y)
        .or(m.css_layout_viewport.page_y)
        .unwrap_or(0.0) as i64;
    PageInfo {
        viewport_width,
        viewport_height,
        page_width,
        page_height,
        scroll_x,
        scroll_y,
        pixels_above: scroll_y,
        pixels_below: (page_height - viewport_height - scroll_y).max(0),
        pixels_left: scroll_x,
        pixels_right: (page_width - viewport_width - scroll_x).max(0),
    }
}

/// A screenshot of the visual viewport of `viewport`'s size, scaled down to fit `max_size`
/// when given and smaller. Chrome scales it while rendering: a `clip` of the visual viewport
/// (document coordinates, so its scroll offset is read first) with a `scale`, which neither
/// resizes the page nor fires resize / media-query events, and keeps the scrollbars.
///
/// Unscaled, it is taken from the view (`fromSurface: false`): the same pixels after the same
/// forced redraw, but Chrome's GPU process then keeps no copy of the frame, which an unclipped
/// surface capture leaves there until the tab's next frame — on a page that stays still while
/// the model thinks, 4 bytes per viewport pixel (8 MB for 1920×1080) per tab. A clipped
/// capture (the scaled one here) keeps none either; the view path ignores `clip`, so a scaled
/// screenshot still comes from the surface.
pub(crate) async fn screenshot(
    conn: &CdpConnection,
    session: &str,
    format: ScreenshotFormat,
    viewport: Viewport,
    max_size: Option<(u32, u32)>,
    timeout: Duration,
) -> Result<Screenshot> {
    #[derive(Deserialize)]
    struct Shot {
        data: String,
    }
    let mut params = match format {
        ScreenshotFormat::Png => json!({"format": "png", "captureBeyondViewport": false}),
        ScreenshotFormat::Jpeg { quality } => json!({
            "format": "jpeg", "quality": quality.min(100), "captureBeyondViewport": false
        }),
    };
    let (width, height) = viewport.screenshot_size(max_size);
    if (width, height) == (viewport.width, viewport.height) {
        params["fromSurface"] = json!(false);
    } else {
        let metrics = layout_metrics(conn, session, timeout).await?;
        let scroll = &metrics.css_visual_viewport;
        params["clip"] = json!({
            "x": scroll.page_x.unwrap_or(0.0),
            "y": scroll.page_y.unwrap_or(0.0),
            "width": viewport.width,
            "height": viewport.height,
            "scale": f64::from(width) / f64::from(viewport.width.max(1)),
        });
    }
    let raw = conn
        .call_raw(Some(session), "Page.captureScreenshot", params, timeout)
        .await?;
    let shot: Shot = raw.decode()?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(shot.data.as_bytes())
        .map_err(|e| BrowserError::Decode {
            method: "Page.captureScreenshot".into(),
            reason: e.to_string(),
        })?;
    Ok(Screenshot {
        format,
        data,
        width,
        height,
    })
}

/// A cross-origin iframe element waiting for its own target's tree.
struct FramePending {
    iframe: NodeId,
    target: u16,
    depth: usize,
}

/// Builds one target's part of the tree on the capture thread.
async fn build_target(
    mut tree: Tree,
    raw: RawResponse,
    target: u16,
    dpr: f64,
    js_ids: HashSet<i64>,
    initial_offset: (f64, f64),
    options: CaptureOptions,
) -> Result<(Tree, Option<NodeId>)> {
    let inline = raw.len() <= INLINE_BUILD_MAX_BYTES;
    run_capture_work(inline, move || -> Result<(Tree, Option<NodeId>)> {
        let snap: CaptureSnapshot<'_> = raw.decode()?;
        let root = append_snapshot(&mut tree, &snap, target, dpr, &js_ids, options.max_iframes);
        if let Some(r) = root {
            compute_visibility(&mut tree, r, initial_offset, options.viewport_threshold);
        }
        Ok((tree, root))
    })
    .await?
}

/// Fetches one target's snapshot, listener ids and metrics concurrently.
async fn fetch_target(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> Result<(RawResponse, HashSet<i64>, LayoutMetrics)> {
    let snapshot = conn.call_raw(
        Some(session),
        "DOMSnapshot.captureSnapshot",
        snapshot_params(),
        timeout,
    );
    let listeners = click_listener_ids(conn, session, timeout);
    let metrics = layout_metrics(conn, session, timeout);
    let (snapshot, listeners, metrics) = tokio::join!(snapshot, listeners, metrics);
    Ok((snapshot?, listeners, metrics.unwrap_or_default()))
}

/// Captures the tree of `target_id` (+ its cross-origin frames) and serializes it.
/// `viewport` is the tab's emulated viewport (what a screenshot shows).
#[allow(clippy::too_many_arguments)] // one crate-internal caller, `BrowserSession::capture`
pub(crate) async fn capture<S: SessionSource>(
    conn: &CdpConnection,
    sessions: &S,
    target_id: &str,
    targets: impl std::future::Future<Output = Result<(Vec<Tab>, HashSet<String>)>>,
    previous: &HashSet<(String, i64)>,
    options: &CaptureOptions,
    viewport: Viewport,
    timeout: Duration,
) -> Result<CaptureOutput> {
    let started = Instant::now();
    let mut timings = CaptureTimings::default();
    let session = sessions.session_for(target_id).await?;

    let shot = async {
        match options.screenshot {
            Some(format) => Some(
                screenshot(
                    conn,
                    &session,
                    format,
                    viewport,
                    options.screenshot_max_size,
                    timeout,
                )
                .await,
            ),
            None => None,
        }
    };
    // Everything independent goes out in the same instant: snapshot, metrics, screenshot, the
    // context's target list, and last the listener probe, whose bounded scan then runs in
    // Chrome while we receive and decode the snapshot. Its second round trip overlaps the
    // tree build; the accessibility lookups follow it in Chrome's queue, and the listener
    // flags are applied afterwards (nothing before the serializer reads them).
    let listeners = async {
        let scan = click_listener_scan(conn, &session, timeout).await;
        (scan, started.elapsed())
    };
    let main = async {
        let snapshot = conn.call_raw(
            Some(&session),
            "DOMSnapshot.captureSnapshot",
            snapshot_params(),
            timeout,
        );
        let metrics = layout_metrics(conn, &session, timeout);
        let (raw, metrics, targets) = tokio::join!(snapshot, metrics, targets);
        let raw = raw?;
        let metrics = metrics.unwrap_or_default();
        let (tabs, iframe_targets) = targets?;
        timings.cdp = started.elapsed();

        let build_started = Instant::now();
        let mut tree = Tree::default();
        tree.targets.push(TargetRef {
            target_id: Arc::from(target_id),
            session_id: Arc::from(session.as_str()),
        });
        let dpr = device_pixel_ratio(&metrics);
        let (mut tree, root) = build_target(
            tree,
            raw,
            0,
            dpr,
            HashSet::new(),
            (0.0, 0.0),
            options.clone(),
        )
        .await?;
        timings.build = build_started.elapsed();

        // Cross-origin frames: only when the context has iframe targets at all.
        let frames_started = Instant::now();
        if options.cross_origin_iframes && !iframe_targets.is_empty() {
            let mut queue: Vec<FramePending> = pending_frames(&tree, 0, 0, options);
            let mut visited: HashSet<String> = HashSet::new();
            while let Some(pending) = queue.pop() {
                if visited.len() >= options.max_iframes || pending.depth >= options.max_iframe_depth
                {
                    continue;
                }
                let parent_session = tree.targets[pending.target as usize].session_id.clone();
                let backend = tree.node(pending.iframe).backend_node_id;
                #[derive(Deserialize)]
                struct Described {
                    node: DescribedFrame,
                }
                #[derive(Deserialize)]
                struct DescribedFrame {
                    #[serde(rename = "frameId")]
                    frame_id: Option<String>,
                }
                let Ok(raw) = conn
                    .call_raw(
                        Some(&parent_session),
                        "DOM.describeNode",
                        json!({"backendNodeId": backend}),
                        timeout,
                    )
                    .await
                else {
                    continue;
                };
                let Some(frame_id) = raw.decode::<Described>().ok().and_then(|d| d.node.frame_id)
                else {
                    continue;
                };
                if !iframe_targets.contains(&frame_id) || !visited.insert(frame_id.clone()) {
                    continue;
                }
                let Ok(child_session) = sessions.session_for(&frame_id).await else {
                    continue;
                };
                let Ok((raw, js_ids, child_metrics)) =
                    fetch_target(conn, &child_session, timeout).await
                else {
                    continue;
                };
                let target_index = tree.targets.len() as u16;
                tree.targets.push(TargetRef {
                    target_id: Arc::from(frame_id.as_str()),
                    session_id: Arc::from(child_session.as_str()),
                });
                let offset = tree
                    .node(pending.iframe)
                    .absolute
                    .map(|a| (a.x, a.y))
                    .unwrap_or((0.0, 0.0));
                let child_dpr = device_pixel_ratio(&child_metrics);
                let iframe = pending.iframe;
                let built = build_target(
                    tree,
                    raw,
                    target_index,
                    child_dpr,
                    js_ids,
                    offset,
                    options.clone(),
                )
                .await?;
                tree = built.0;
                if let Some(child_root) = built.1 {
                    tree.node_mut(iframe).content_document = Some(child_root);
                    tree.node_mut(child_root).parent = Some(iframe);
                    queue.extend(pending_frames(
                        &tree,
                        target_index,
                        pending.depth + 1,
                        options,
                    ));
                }
            }
        }
        timings.cross_origin_frames = frames_started.elapsed();

        // Accessibility only where it can matter (see `needs_ax`).
        let ax_started = Instant::now();
        let wanted = ax_candidates(&tree, root);
        timings.ax_nodes = wanted.len();
        if !wanted.is_empty() {
            let sessions_by_target: Vec<Arc<str>> =
                tree.targets.iter().map(|t| t.session_id.clone()).collect();
            let results: Vec<(NodeId, Option<AxInfo>)> = futures::stream::iter(wanted)
                .map(|(node, target, backend)| {
                    let session = sessions_by_target[target as usize].clone();
                    async move {
                        let answer = conn
                            .call_raw(
                                Some(&session),
                                "Accessibility.getPartialAXTree",
                                json!({"backendNodeId": backend, "fetchRelatives": false}),
                                timeout,
                            )
                            .await;
                        let info = answer.ok().and_then(|raw| {
                            let tree: AxTreeWire = raw.decode().ok()?;
                            let node = tree
                                .nodes
                                .into_iter()
                                .find(|n| n.backend_dom_node_id == Some(backend))?;
                            Some(AxInfo {
                                role: node.role.and_then(|r| r.value).and_then(|v| match v {
                                    serde_json::Value::String(s) => Some(s),
                                    _ => None,
                                }),
                                name: node.name.and_then(|r| r.value).and_then(|v| match v {
                                    serde_json::Value::String(s) => Some(s),
                                    _ => None,
                                }),
                                ignored: node.ignored,
                                has_children: !node.child_ids.is_empty(),
                                properties: node
                                    .properties
                                    .into_iter()
                                    .map(|p| (p.name, AxValue::from_json(p.value.value)))
                                    .collect(),
                            })
                        });
                        (node, info)
                    }
                })
                .buffer_unordered(256)
                .collect()
                .await;
            for (node, info) in results {
                tree.node_mut(node).ax = info;
            }
        }
        timings.accessibility = ax_started.elapsed();
        Ok::<_, BrowserError>((tree, root, metrics, tabs, timings))
    };
    // The screenshot waits for a compositor frame (tens of ms): nothing else waits for it —
    // the DOM side runs to the end of serialization while it is in flight.
    let dom = async {
        let (main, (scan, listener_probe)) = tokio::join!(main, listeners);
        let (mut tree, root, metrics, tabs, mut timings) = main?;
        let js_ids = match scan {
            ListenerScan::Nothing => HashSet::new(),
            ListenerScan::Positions { total, hits } => {
                match light_dom_listener_ids(&tree, root, total, &hits) {
                    Some(ids) => ids,
                    // Shadow trees or a page that changed: ask Chrome for the nodes instead.
                    None => click_listener_ids(conn, &session, timeout).await,
                }
            }
        };
        timings.listener_probe = listener_probe;
        if !js_ids.is_empty() {
            for node in tree.nodes.iter_mut() {
                if node.target == 0 && js_ids.contains(&node.backend_node_id) {
                    node.js_click_listener = true;
                }
            }
        }

        let serialize_started = Instant::now();
        let previous = previous.clone();
        let paint_order_filtering = options.paint_order_filtering;
        let inline = small_and_shallow(&tree, root);
        let (serialized, selector_map, tree) = run_capture_work(inline, move || {
            let mut tree = tree;
            hidden_hints(&mut tree);
            let serialized: Serialized =
                Serializer::new(&tree, &previous, None, paint_order_filtering).run(root);
            let selector_map = selector_map(&tree, &serialized);
            (serialized, selector_map, tree)
        })
        .await?;
        let frame_sessions: Vec<String> = tree
            .targets
            .iter()
            .skip(1)
            .map(|t| t.session_id.to_string())
            .collect();
        drop(tree);
        timings.serialize = serialize_started.elapsed();
        Ok::<_, BrowserError>((
            serialized,
            selector_map,
            metrics,
            tabs,
            timings,
            frame_sessions,
        ))
    };
    let (dom, shot) = tokio::join!(dom, shot);
    let (serialized, selector_map, metrics, tabs, mut timings, frame_sessions) = dom?;
    timings.total = started.elapsed();

    let mut screenshot = match shot {
        Some(Ok(s)) => Some(s),
        Some(Err(err)) => {
            tracing::warn!(error = %err, "screenshot failed");
            None
        }
        None => None,
    };
    if options.highlight_elements
        && let Some(shot) = screenshot.take()
    {
        let drawing = Instant::now();
        screenshot = Some(
            crate::highlight::highlighted(
                shot,
                selector_map.clone(),
                (viewport.width, viewport.height),
            )
            .await,
        );
        timings.highlight = drawing.elapsed();
        timings.total = started.elapsed();
    }
    Ok(CaptureOutput {
        dom_text: serialized.text,
        has_root: serialized.has_root,
        selector_map,
        stats: serialized.stats,
        metrics: Some(metrics),
        screenshot,
        timings,
        tabs,
        frame_sessions,
    })
}

/// Cross-origin iframe elements of `target` worth descending into.
fn pending_frames(
    tree: &Tree,
    target: u16,
    depth: usize,
    options: &CaptureOptions,
) -> Vec<FramePending> {
    if depth >= options.max_iframe_depth {
        return Vec::new();
    }
    tree.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            n.target == target
                && n.kind == NodeKind::Element
                && n.tag == "iframe"
                && n.content_document.is_none()
                && n.visible
                && n.bounds()
                    .is_some_and(|b| b.width >= 10.0 && b.height >= 10.0)
        })
        .map(|(i, _)| FramePending {
            iframe: i as NodeId,
            target,
            depth,
        })
        .collect()
}

/// (node, target, backend id) of every node whose accessibility data can matter.
fn ax_candidates(tree: &Tree, root: Option<NodeId>) -> Vec<(NodeId, u16, i64)> {
    let Some(root) = root else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // (node, inside a special subtree, bounds of the enclosing propagating element)
    let mut stack: Vec<(NodeId, bool, Option<crate::dom::Rect>)> = vec![(root, false, None)];
    while let Some((id, special, propagating)) = stack.pop() {
        let n = tree.node(id);
        // The serializer drops these elements with their whole subtree.
        if n.kind == NodeKind::Element
            && (crate::serializer::DISABLED_ELEMENTS.contains(&n.tag.as_str())
                || crate::serializer::SVG_CHILDREN.contains(&n.tag.as_str()))
        {
            continue;
        }
        let special_here = special
            || n.attr("contenteditable")
                .is_some_and(|v| !v.eq_ignore_ascii_case("false"))
            || n.attr("aria-hidden") == Some("true")
            || n.has_attr("disabled")
            || n.has_attr("inert")
            || n.attr("aria-disabled")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let relevant = n.visible
            || n.is_file_input()
            || (n.layout.is_none() && n.in_shadow)
            || (tree.is_scrollable(id));
        // Elements the bbox-containment step will hide inside a link/button never get an
        // index, so their accessibility data cannot matter (scrollables excepted).
        let contained = propagating
            .is_some_and(|p| crate::serializer::excluded_by_containment(tree, id, p))
            && !tree.is_scrollable(id);
        if relevant && !contained && needs_ax(tree, id, special) {
            out.push((id, n.target, n.backend_node_id));
        }
        let next_propagating = if n.kind == NodeKind::Element
            && crate::serializer::is_propagating(&n.tag, n.attr("role"))
        {
            n.bounds().or(propagating)
        } else {
            propagating
        };
        for c in tree.children_and_shadow_roots(id) {
            stack.push((c, special_here, next_propagating));
        }
        if let Some(cd) = n.content_document {
            stack.push((cd, false, None));
        }
    }
    out
}

/// browser-use's per-iframe "elements below the fold" hints.
fn hidden_hints(tree: &mut Tree) {
    let frames: Vec<(NodeId, NodeId)> = tree
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::Element && (n.tag == "iframe" || n.tag == "frame"))
        .filter_map(|(i, n)| n.content_document.map(|d| (i as NodeId, d)))
        .collect();
    for (iframe, doc) in frames {
        let viewport_height = tree
            .node(iframe)
            .layout
            .as_ref()
            .and_then(|l| l.client_rect)
            .map(|r| r.height)
            .unwrap_or(0.0);
        let mut hints: Vec<HiddenHint> = Vec::new();
        let mut any_hidden = false;
        let mut stack = vec![doc];
        while let Some(id) = stack.pop() {
            let n = tree.node(id);
            let hidden_by_threshold = !n.visible
                && n.layout.as_ref().is_some_and(|l| {
                    l.bounds.is_some()
                        && !(l.display_none
                            || l.visibility_hidden
                            || (l.opacity_raw_ok && l.opacity <= 0.0))
                });
            if hidden_by_threshold {
                any_hidden = true;
            }
            if n.kind == NodeKind::Element && hidden_by_threshold && is_interactive(tree, id) {
                let text =
                    n.ax.as_ref()
                        .and_then(|a| a.name.clone())
                        .filter(|s| !s.is_empty())
                        .map(|s| s.chars().take(40).collect::<String>())
                        .unwrap_or_else(|| {
                            n.attr("placeholder")
                                .filter(|s| !s.is_empty())
                                .or(n.attr("title").filter(|s| !s.is_empty()))
                                .or(n.attr("aria-label"))
                                .unwrap_or("")
                                .chars()
                                .take(40)
                                .collect()
                        });
                let y = n.bounds().map(|b| b.y).unwrap_or(0.0);
                let pages = if viewport_height > 0.0 {
                    (y / viewport_height * 10.0).round() / 10.0
                } else {
                    0.0
                };
                hints.push(HiddenHint {
                    tag: n.tag.clone(),
                    text: if text.is_empty() {
                        "(no label)".into()
                    } else {
                        text
                    },
                    pages,
                });
            }
            for c in tree
                .children_and_shadow_roots(id)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                stack.push(c);
            }
        }
        hints.sort_by(|a, b| a.pages.total_cmp(&b.pages));
        hints.truncate(10);
        let node = tree.node_mut(iframe);
        node.has_hidden_content = hints.is_empty() && any_hidden;
        node.hidden_hints = hints;
    }
}

fn selector_map(tree: &Tree, serialized: &Serialized) -> SelectorMap {
    let mut map = SelectorMap::new();
    for &(index, id) in &serialized.selected {
        let n = tree.node(id);
        let target = &tree.targets[n.target as usize];
        map.insert(
            index,
            Arc::new(ElementInfo {
                index,
                backend_node_id: n.backend_node_id,
                target_id: target.target_id.to_string(),
                session_id: target.session_id.to_string(),
                frame_id: n.frame_id.as_deref().map(str::to_owned),
                tag_name: n.tag.clone(),
                attributes: n.attributes.clone(),
                ax_role: n.ax.as_ref().and_then(|a| a.role.clone()),
                ax_name: n.ax.as_ref().and_then(|a| a.name.clone()),
                bounds: n.bounds(),
                absolute_bounds: n.absolute,
                is_scrollable: tree.is_scrollable(id),
                is_visible: n.visible,
                is_file_input: n.is_file_input(),
                is_select: n.tag == "select",
                in_shadow_root: n.in_shadow,
                is_new: serialized.new_indices.contains(&index),
                text: cap_text(&tree.all_children_text(id), 100),
                x_path: tree.x_path(id),
                element_hash: crate::types::element_hash(
                    &tree.branch_path(id),
                    &n.attributes,
                    n.ax.as_ref().and_then(|a| a.name.as_deref()),
                ),
            }),
        );
    }
    map
}
