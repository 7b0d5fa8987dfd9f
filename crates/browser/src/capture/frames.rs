//! Cross-origin frames: the iframes whose documents live in targets of their own, each read
//! and hung under its iframe element.

use std::{collections::HashSet, sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::json;

use super::{
    Capture, SessionSource, build_target, device_pixel_ratio, layout_metrics,
    listeners::click_listener_ids, snapshot_params,
};
use crate::{
    cdp::{CdpConnection, RawResponse},
    dom::{NodeId, NodeKind, TargetRef, Tree},
    error::Result,
    snapshot::LayoutMetrics,
    types::CaptureOptions,
};

/// A cross-origin iframe element waiting for its own target's tree.
struct FramePending {
    iframe: NodeId,
    target: u16,
    depth: usize,
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

impl<S: SessionSource> Capture<'_, S> {
    /// Descends into the cross-origin frames of `tree` (their own targets in
    /// `iframe_targets`), breadth bounded by `max_iframes` and depth by `max_iframe_depth`,
    /// and hangs each frame's tree under its iframe element.
    pub(super) async fn descend_frames(
        &self,
        mut tree: Tree,
        iframe_targets: &HashSet<String>,
    ) -> Result<Tree> {
        let (conn, options, timeout) = (self.conn, self.options, self.timeout);
        let mut queue: Vec<FramePending> = pending_frames(&tree, 0, 0, options);
        let mut visited: HashSet<String> = HashSet::new();
        while let Some(pending) = queue.pop() {
            if visited.len() >= options.max_iframes || pending.depth >= options.max_iframe_depth {
                continue;
            }
            let parent_session = tree.targets[pending.target as usize].session_id.clone();
            let backend = tree.node(pending.iframe).backend_node_id;
            let Some(frame_id) = self.frame_id_of(&parent_session, backend).await else {
                continue;
            };
            if !iframe_targets.contains(&frame_id) || !visited.insert(frame_id.clone()) {
                continue;
            }
            let Ok(child_session) = self.sessions.session_for(&frame_id).await else {
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
        Ok(tree)
    }

    /// The frame id of the iframe element `backend` (`DOM.describeNode` on its parent's
    /// session); `None` when it cannot be read.
    async fn frame_id_of(&self, parent_session: &str, backend: i64) -> Option<String> {
        #[derive(Deserialize)]
        struct Described {
            node: DescribedFrame,
        }
        #[derive(Deserialize)]
        struct DescribedFrame {
            #[serde(rename = "frameId")]
            frame_id: Option<String>,
        }
        let Ok(raw) = self
            .conn
            .call_raw(
                Some(parent_session),
                "DOM.describeNode",
                json!({"backendNodeId": backend}),
                self.timeout,
            )
            .await
        else {
            return None;
        };
        raw.decode::<Described>().ok().and_then(|d| d.node.frame_id)
    }
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
