//! The serializer's side of a capture: browser-use's hidden-content hints before it, the
//! selector map after it, inline or on the large-stack capture thread.

use std::{collections::HashSet, sync::Arc};

use super::run_capture_work;
use crate::{
    dom::{HiddenHint, NodeId, NodeKind, Tree},
    error::Result,
    interactive::is_interactive,
    serializer::{Serialized, Serializer, cap_text},
    types::{ElementInfo, SelectorMap},
};

/// Trees up to this many nodes and this depth are serialized on the calling task; the
/// serializer recurses, so anything deeper goes to the large-stack capture thread.
const INLINE_SERIALIZE_MAX_NODES: usize = 20_000;
const INLINE_SERIALIZE_MAX_DEPTH: usize = 128;

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

/// Serializes the tree (inline when small and shallow, else on the large-stack capture
/// thread) after browser-use's hidden-content hints: the serializer's output, its selector map
/// and the sessions of the cross-origin frames the capture descended into.
pub(super) async fn serialize_tree(
    tree: Tree,
    root: Option<NodeId>,
    previous: &HashSet<(String, i64)>,
    paint_order_filtering: bool,
) -> Result<(Serialized, SelectorMap, Vec<String>)> {
    let previous = previous.clone();
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
    Ok((serialized, selector_map, frame_sessions))
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
