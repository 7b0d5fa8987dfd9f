//! Accessibility data, fetched only for the nodes where it can matter (see `needs_ax`).

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;

use super::{Capture, SessionSource};
use crate::{
    cdp::RawResponse,
    dom::{AxInfo, AxValue, NodeId, NodeKind, Tree},
    interactive::needs_ax,
    snapshot::AxTreeWire,
};

impl<S: SessionSource> Capture<'_, S> {
    /// Fetches the accessibility data of every node where it can matter ([`ax_candidates`]),
    /// 256 lookups in flight at most; the number of nodes asked for.
    pub(super) async fn fetch_accessibility(&self, tree: &mut Tree, root: Option<NodeId>) -> usize {
        let (conn, timeout) = (self.conn, self.timeout);
        let wanted = ax_candidates(tree, root);
        let asked = wanted.len();
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
                        let info = answer.ok().and_then(|raw| ax_info(&raw, backend));
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
        asked
    }
}

/// The accessibility data of node `backend` in a `getPartialAXTree` answer.
fn ax_info(raw: &RawResponse, backend: i64) -> Option<AxInfo> {
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
