//! One capture: CDP calls (concurrent), tree build, selective accessibility, serializer.
//!
//! The stages live in their own modules: the click-listener probe (`listeners`), the page's
//! metrics and screenshot (`page`), the cross-origin frames (`frames`), the accessibility
//! lookups (`ax`) and the serializer's inputs and outputs (`serialize`).

mod ax;
mod frames;
mod listeners;
mod page;
mod serialize;

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    cdp::{CdpConnection, RawResponse},
    dom::{NodeId, TargetRef, Tree, append_snapshot, compute_visibility},
    error::{BrowserError, Result},
    serializer::Serialized,
    snapshot::{CaptureSnapshot, LayoutMetrics, SNAPSHOT_STYLES},
    types::{CaptureOptions, CaptureTimings, Screenshot, SelectorMap, Tab, Viewport},
};
use listeners::{ListenerScan, click_listener_ids, click_listener_scan, light_dom_listener_ids};
use page::{device_pixel_ratio, layout_metrics};
pub(crate) use page::{page_info_from_metrics, screenshot};
use serialize::serialize_tree;

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

pub(crate) fn snapshot_params() -> serde_json::Value {
    json!({
        "computedStyles": SNAPSHOT_STYLES,
        "includePaintOrder": true,
        "includeDOMRects": true,
        "includeBlendedBackgroundColors": false,
        "includeTextColorOpacities": false,
    })
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

/// What every stage of one capture reads through.
struct Capture<'a, S> {
    conn: &'a CdpConnection,
    sessions: &'a S,
    options: &'a CaptureOptions,
    timeout: Duration,
}

/// The main target's tree with its cross-origin frames and accessibility data, before the
/// listener flags and the serializer.
struct ReadTree {
    tree: Tree,
    root: Option<NodeId>,
    metrics: LayoutMetrics,
    tabs: Vec<Tab>,
    timings: CaptureTimings,
}

/// The serializer's output with what the capture hands on with it.
struct Dom {
    serialized: Serialized,
    selector_map: SelectorMap,
    metrics: LayoutMetrics,
    tabs: Vec<Tab>,
    timings: CaptureTimings,
    frame_sessions: Vec<String>,
}

/// Captures the tree of `target_id` (+ its cross-origin frames) and serializes it.
/// `viewport` is the tab's emulated viewport (what a screenshot shows).
///
/// Stages: the tree ([`Capture::read_tree`]: snapshot, build, cross-origin frames,
/// accessibility), the click listeners, the serializer ([`serialize_tree`]); the screenshot
/// is taken meanwhile and highlighted last.
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
    let session = sessions.session_for(target_id).await?;
    let capture = Capture {
        conn,
        sessions,
        options,
        timeout,
    };
    let shot = take_screenshot(conn, &session, options, viewport, timeout);
    // Everything independent goes out in the same instant: snapshot, metrics, screenshot, the
    // context's target list, and last the listener probe, whose bounded scan then runs in
    // Chrome while we receive and decode the snapshot. Its second round trip overlaps the
    // tree build; the accessibility lookups follow it in Chrome's queue, and the listener
    // flags are applied afterwards (nothing before the serializer reads them).
    let listeners = async {
        let scan = click_listener_scan(conn, &session, timeout).await;
        (scan, started.elapsed())
    };
    let main = capture.read_tree(target_id, &session, targets, started);
    // The screenshot waits for a compositor frame (tens of ms): nothing else waits for it —
    // the DOM side runs to the end of serialization while it is in flight.
    let dom = async {
        let (main, (scan, listener_probe)) = tokio::join!(main, listeners);
        let ReadTree {
            mut tree,
            root,
            metrics,
            tabs,
            mut timings,
        } = main?;
        let js_ids = capture.listener_ids(&session, &tree, root, scan).await;
        timings.listener_probe = listener_probe;
        flag_click_listeners(&mut tree, &js_ids);

        let serialize_started = Instant::now();
        let (serialized, selector_map, frame_sessions) =
            serialize_tree(tree, root, previous, options.paint_order_filtering).await?;
        timings.serialize = serialize_started.elapsed();
        Ok::<_, BrowserError>(Dom {
            serialized,
            selector_map,
            metrics,
            tabs,
            timings,
            frame_sessions,
        })
    };
    let (dom, shot) = tokio::join!(dom, shot);
    let Dom {
        serialized,
        selector_map,
        metrics,
        tabs,
        mut timings,
        frame_sessions,
    } = dom?;
    timings.total = started.elapsed();

    let screenshot = highlight(
        shot,
        options,
        &selector_map,
        viewport,
        &mut timings,
        started,
    )
    .await;
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

/// The screenshot the options ask for, if any.
async fn take_screenshot(
    conn: &CdpConnection,
    session: &str,
    options: &CaptureOptions,
    viewport: Viewport,
    timeout: Duration,
) -> Option<Result<Screenshot>> {
    match options.screenshot {
        Some(format) => Some(
            screenshot(
                conn,
                session,
                format,
                viewport,
                options.screenshot_max_size,
                timeout,
            )
            .await,
        ),
        None => None,
    }
}

/// The screenshot (a failed one is logged and left out), with the elements' highlights drawn
/// on it when the options ask for them.
async fn highlight(
    shot: Option<Result<Screenshot>>,
    options: &CaptureOptions,
    selector_map: &SelectorMap,
    viewport: Viewport,
    timings: &mut CaptureTimings,
    started: Instant,
) -> Option<Screenshot> {
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
    screenshot
}

impl<S: SessionSource> Capture<'_, S> {
    /// The main target's snapshot, metrics and the context's targets (concurrently), its
    /// tree, then the cross-origin frames' trees and the accessibility data.
    async fn read_tree(
        &self,
        target_id: &str,
        session: &str,
        targets: impl std::future::Future<Output = Result<(Vec<Tab>, HashSet<String>)>>,
        started: Instant,
    ) -> Result<ReadTree> {
        let (conn, options, timeout) = (self.conn, self.options, self.timeout);
        let mut timings = CaptureTimings::default();
        let snapshot = conn.call_raw(
            Some(session),
            "DOMSnapshot.captureSnapshot",
            snapshot_params(),
            timeout,
        );
        let metrics = layout_metrics(conn, session, timeout);
        let (raw, metrics, targets) = tokio::join!(snapshot, metrics, targets);
        let raw = raw?;
        let metrics = metrics.unwrap_or_default();
        let (tabs, iframe_targets) = targets?;
        timings.cdp = started.elapsed();

        let build_started = Instant::now();
        let mut tree = Tree::default();
        tree.targets.push(TargetRef {
            target_id: Arc::from(target_id),
            session_id: Arc::from(session),
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
            tree = self.descend_frames(tree, &iframe_targets).await?;
        }
        timings.cross_origin_frames = frames_started.elapsed();

        // Accessibility only where it can matter (see `needs_ax`).
        let ax_started = Instant::now();
        timings.ax_nodes = self.fetch_accessibility(&mut tree, root).await;
        timings.accessibility = ax_started.elapsed();
        Ok(ReadTree {
            tree,
            root,
            metrics,
            tabs,
            timings,
        })
    }

    /// The backend ids of the main document's elements with click listeners: the scan's
    /// positions mapped onto the snapshot, else (shadow trees, a page that changed) asked of
    /// Chrome.
    async fn listener_ids(
        &self,
        session: &str,
        tree: &Tree,
        root: Option<NodeId>,
        scan: ListenerScan,
    ) -> HashSet<i64> {
        match scan {
            ListenerScan::Nothing => HashSet::new(),
            ListenerScan::Positions { total, hits } => {
                match light_dom_listener_ids(tree, root, total, &hits) {
                    Some(ids) => ids,
                    // Shadow trees or a page that changed: ask Chrome for the nodes instead.
                    None => click_listener_ids(self.conn, session, self.timeout).await,
                }
            }
        }
    }
}

/// Flags the main target's elements among `js_ids` as having a JS click listener.
fn flag_click_listeners(tree: &mut Tree, js_ids: &HashSet<i64>) {
    if !js_ids.is_empty() {
        for node in tree.nodes.iter_mut() {
            if node.target == 0 && js_ids.contains(&node.backend_node_id) {
                node.js_click_listener = true;
            }
        }
    }
}
