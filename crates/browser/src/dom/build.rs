//! Building the tree from a DOMSnapshot: one arena node per kept snapshot node, the shadow
//! roots the flat tree leaves out re-created, live form values (never for sensitive inputs),
//! layout read per node.

use std::{collections::HashMap, sync::Arc};

use super::{Layout, Node, NodeId, NodeKind, Rect, ShadowRootKind, Tree};
use crate::snapshot::{
    CaptureSnapshot, DocumentSnapshot, NodeTreeSnapshot, STYLE_BACKGROUND, STYLE_CURSOR,
    STYLE_DISPLAY, STYLE_OPACITY, STYLE_OVERFLOW_X, STYLE_OVERFLOW_Y, STYLE_VISIBILITY,
};

fn string_at<'s>(strings: &'s [std::borrow::Cow<'_, str>], idx: i64) -> &'s str {
    if idx < 0 {
        return "";
    }
    strings.get(idx as usize).map(|s| s.as_ref()).unwrap_or("")
}

const SENSITIVE_TYPES: [&str; 3] = ["password", "file", "hidden"];

/// Appends the documents of one target's snapshot to `tree`; returns the root (main document
/// of the target) or `None` if the snapshot is empty.
pub(crate) fn append_snapshot(
    tree: &mut Tree,
    snap: &CaptureSnapshot<'_>,
    target: u16,
    device_pixel_ratio: f64,
    js_click_ids: &std::collections::HashSet<i64>,
    max_documents: usize,
) -> Option<NodeId> {
    let strings = &snap.strings;
    let dpr = if device_pixel_ratio > 0.0 {
        device_pixel_ratio
    } else {
        1.0
    };
    let mut doc_roots: Vec<Option<NodeId>> = Vec::with_capacity(snap.documents.len());
    // (iframe node id, content document index) to link after all documents exist.
    let mut pending_links: Vec<(NodeId, usize)> = Vec::new();

    for doc in snap.documents.iter().take(max_documents) {
        let root = append_document(
            tree,
            doc,
            strings,
            target,
            dpr,
            js_click_ids,
            &mut pending_links,
        );
        doc_roots.push(root);
    }
    for (iframe, doc_index) in pending_links {
        if let Some(Some(doc_root)) = doc_roots.get(doc_index) {
            tree.nodes[iframe as usize].content_document = Some(*doc_root);
            tree.nodes[*doc_root as usize].parent = Some(iframe);
        }
    }
    doc_roots.first().copied().flatten()
}

/// Appends one document of a target's snapshot to `tree` (its iframes' content documents
/// noted in `pending_links`, to be linked once every document exists); returns its root.
fn append_document(
    tree: &mut Tree,
    doc: &DocumentSnapshot,
    strings: &[std::borrow::Cow<'_, str>],
    target: u16,
    dpr: f64,
    js_click_ids: &std::collections::HashSet<i64>,
    pending_links: &mut Vec<(NodeId, usize)>,
) -> Option<NodeId> {
    let nodes = &doc.nodes;
    let count = nodes.node_type.len();
    let frame_id: Option<Arc<str>> = {
        let f = string_at(strings, doc.frame_id);
        (!f.is_empty()).then(|| Arc::from(f))
    };
    let _ = string_at(strings, doc.document_url);

    let lookups = DocumentLookups::of(doc, strings, count);

    let mut arena_of: Vec<u32> = vec![u32::MAX; count];
    // Synthetic shadow-root node per (host arena id, kind).
    let mut shadow_root_of: HashMap<(NodeId, ShadowRootKind), NodeId> = HashMap::new();
    let mut root: Option<NodeId> = None;
    for i in 0..count {
        let node_type = nodes.node_type[i];
        let parent_snapshot = nodes.parent_index.get(i).copied().unwrap_or(-1);
        let Some(parent) = arena_parent(
            tree,
            &mut shadow_root_of,
            &lookups,
            &arena_of,
            (i, parent_snapshot),
            target,
        ) else {
            continue;
        };
        let name = string_at(strings, *nodes.node_name.get(i).unwrap_or(&-1));
        let kind = match node_type {
            9 => NodeKind::Document,
            1 => NodeKind::Element,
            3 => NodeKind::Text,
            _ => continue,
        };
        if parent.is_none() && kind != NodeKind::Document {
            continue;
        }
        let value = if kind == NodeKind::Text {
            let v = string_at(strings, *nodes.node_value.get(i).unwrap_or(&-1));
            if v.trim().is_empty() {
                continue;
            }
            v.to_owned()
        } else {
            String::new()
        };
        let mut attributes = if kind == NodeKind::Element {
            element_attributes(nodes, i, strings)
        } else {
            Vec::new()
        };
        let tag = tag_of(kind, name);
        let layout_info = match lookups.layout_of[i] {
            u32::MAX => None,
            li => Some(read_layout(&doc.layout, li as usize, strings, dpr)),
        };
        // Live form values (never for sensitive inputs).
        if kind == NodeKind::Element && (tag == "input" || tag == "textarea") {
            lookups.apply_form_values(&mut attributes, i);
        }
        let backend = nodes.backend_node_id.get(i).copied().unwrap_or(0);
        let in_shadow = parent.is_some_and(|p| inside_shadow_root(tree, p));
        let id = tree.nodes.len() as NodeId;
        tree.nodes.push(Node {
            kind,
            tag,
            node_name: name.to_owned(),
            text: value,
            attributes,
            backend_node_id: backend,
            target,
            frame_id: frame_id.clone(),
            parent,
            children: Vec::new(),
            shadow_roots: Vec::new(),
            content_document: None,
            layout: layout_info,
            ax: None,
            visible: false,
            js_click_listener: js_click_ids.contains(&backend),
            absolute: None,
            hidden_hints: Vec::new(),
            has_hidden_content: false,
            in_shadow,
        });
        arena_of[i] = id;
        if let Some(p) = parent {
            let pn = &mut tree.nodes[p as usize];
            if matches!(kind, NodeKind::ShadowRoot(_)) {
                pn.shadow_roots.push(id);
            } else {
                pn.children.push(id);
            }
        } else if root.is_none() {
            root = Some(id);
        }
        if let Some(&d) = lookups.content_doc.get(&i) {
            pending_links.push((id, d));
        }
    }
    root
}

/// A node's tag: an element's name in lowercase, `#text`, `#document` or
/// `#document-fragment`.
fn tag_of(kind: NodeKind, name: &str) -> String {
    match kind {
        NodeKind::Element => name.to_ascii_lowercase(),
        NodeKind::Text => "#text".to_owned(),
        NodeKind::Document => "#document".to_owned(),
        NodeKind::ShadowRoot(_) => "#document-fragment".to_owned(),
    }
}

/// Whether a child of arena node `parent` sits in a shadow tree: the parent is a shadow root
/// or in one.
fn inside_shadow_root(tree: &Tree, parent: NodeId) -> bool {
    let node = &tree.nodes[parent as usize];
    node.in_shadow || matches!(node.kind, NodeKind::ShadowRoot(_))
}

/// The arena parent of snapshot node `i` (`at`: `i` and its snapshot parent, -1 for none):
/// its parent's node — or, DOMSnapshot walking the flat tree (shadow content hangs directly
/// under its host and carries the shadow root's mode), the shadow root re-created between
/// them; `Some(None)` for a document root. `None`: the node is left out, with its subtree.
fn arena_parent(
    tree: &mut Tree,
    shadow_root_of: &mut HashMap<(NodeId, ShadowRootKind), NodeId>,
    lookups: &DocumentLookups<'_>,
    arena_of: &[u32],
    (i, parent_snapshot): (usize, i64),
    target: u16,
) -> Option<Option<NodeId>> {
    let mut parent = if parent_snapshot >= 0 {
        match arena_of.get(parent_snapshot as usize) {
            Some(&p) if p != u32::MAX => Some(p),
            // Parent was skipped (pseudo element, UA shadow root…): skip subtree.
            _ => return None,
        }
    } else {
        None
    };
    if lookups.pseudo[i] {
        return None;
    }
    // DOMSnapshot walks the flat tree: shadow content hangs directly under its host and
    // carries the shadow root's mode. Re-create the shadow root between them.
    let own_shadow = lookups.shadow_kind.get(&i).copied();
    let parent_shadow = (parent_snapshot >= 0)
        .then(|| {
            lookups
                .shadow_kind
                .get(&(parent_snapshot as usize))
                .copied()
        })
        .flatten();
    if let (Some(mode), Some(host)) = (own_shadow, parent)
        && own_shadow != parent_shadow
    {
        let kind = match mode {
            "open" => ShadowRootKind::Open,
            "closed" => ShadowRootKind::Closed,
            // user-agent shadow content (inside <input>, <video>…) is Chrome's.
            _ => return None,
        };
        let shadow = shadow_root(tree, shadow_root_of, host, kind, target);
        parent = Some(shadow);
    }
    Some(parent)
}

/// The rare data of one document of a snapshot (DOMSnapshot's index → value lists), as lookups
/// by node index, built once per document.
struct DocumentLookups<'s> {
    pseudo: Vec<bool>,
    shadow_kind: HashMap<usize, &'s str>,
    input_value: HashMap<usize, &'s str>,
    checked: Vec<bool>,
    has_checked_data: bool,
    content_doc: HashMap<usize, usize>,
    /// First layout entry per node.
    layout_of: Vec<u32>,
}

impl<'s> DocumentLookups<'s> {
    fn of(doc: &DocumentSnapshot, strings: &'s [std::borrow::Cow<'_, str>], count: usize) -> Self {
        let nodes = &doc.nodes;
        let mut pseudo = vec![false; count];
        for &i in &nodes.pseudo_type.index {
            if let Some(p) = pseudo.get_mut(i as usize) {
                *p = true;
            }
        }
        let mut shadow_kind: HashMap<usize, &str> = HashMap::new();
        for (i, v) in nodes
            .shadow_root_type
            .index
            .iter()
            .zip(&nodes.shadow_root_type.value)
        {
            shadow_kind.insert(*i as usize, string_at(strings, *v));
        }
        let mut input_value: HashMap<usize, &str> = HashMap::new();
        for rare in [&nodes.text_value, &nodes.input_value] {
            for (i, v) in rare.index.iter().zip(&rare.value) {
                input_value.insert(*i as usize, string_at(strings, *v));
            }
        }
        let mut checked = vec![false; count];
        for &i in &nodes.input_checked.index {
            if let Some(c) = checked.get_mut(i as usize) {
                *c = true;
            }
        }
        let has_checked_data = !nodes.input_checked.index.is_empty();
        let mut content_doc: HashMap<usize, usize> = HashMap::new();
        for (i, v) in nodes
            .content_document_index
            .index
            .iter()
            .zip(&nodes.content_document_index.value)
        {
            content_doc.insert(*i as usize, *v as usize);
        }
        // First layout entry per node.
        let layout = &doc.layout;
        let mut layout_of: Vec<u32> = vec![u32::MAX; count];
        for (li, &ni) in layout.node_index.iter().enumerate() {
            if let Some(slot) = layout_of.get_mut(ni as usize)
                && *slot == u32::MAX
            {
                *slot = li as u32;
            }
        }
        Self {
            pseudo,
            shadow_kind,
            input_value,
            checked,
            has_checked_data,
            content_doc,
            layout_of,
        }
    }

    /// Live form values on an `input` or `textarea`'s attributes — never for sensitive inputs,
    /// which lose even their static value.
    fn apply_form_values(&self, attributes: &mut Vec<(String, String)>, i: usize) {
        let sensitive = attributes.iter().any(|(k, v)| {
            let v = v.to_ascii_lowercase();
            (k.eq_ignore_ascii_case("type") && SENSITIVE_TYPES.contains(&v.as_str()))
                || (k.eq_ignore_ascii_case("autocomplete")
                    && (v.starts_with("cc-") || v.starts_with("one-time-code")))
        });
        if sensitive {
            // Never keep a secret: not even the static value attribute.
            attributes.retain(|(k, _)| !k.eq_ignore_ascii_case("value"));
        } else if let Some(v) = self.input_value.get(&i) {
            set_attr(attributes, "value", v);
        }
        if self.has_checked_data {
            if self.checked[i] {
                set_attr(attributes, "checked", "true");
            } else {
                attributes.retain(|(k, _)| k != "checked");
            }
        }
    }
}

/// The synthetic shadow root of `kind` under `host` (one per host and kind, made on first use).
fn shadow_root(
    tree: &mut Tree,
    shadow_root_of: &mut HashMap<(NodeId, ShadowRootKind), NodeId>,
    host: NodeId,
    kind: ShadowRootKind,
    target: u16,
) -> NodeId {
    match shadow_root_of.get(&(host, kind)) {
        Some(&s) => s,
        None => {
            let s = tree.nodes.len() as NodeId;
            let host_node = &tree.nodes[host as usize];
            let shadow_node = Node {
                kind: NodeKind::ShadowRoot(kind),
                tag: "#document-fragment".to_owned(),
                node_name: "#document-fragment".to_owned(),
                text: String::new(),
                attributes: Vec::new(),
                backend_node_id: 0,
                target,
                frame_id: host_node.frame_id.clone(),
                parent: Some(host),
                children: Vec::new(),
                shadow_roots: Vec::new(),
                content_document: None,
                layout: None,
                ax: None,
                visible: false,
                js_click_listener: false,
                absolute: None,
                hidden_hints: Vec::new(),
                has_hidden_content: false,
                in_shadow: true,
            };
            tree.nodes.push(shadow_node);
            tree.nodes[host as usize].shadow_roots.push(s);
            shadow_root_of.insert((host, kind), s);
            s
        }
    }
}

/// An element's attributes, in order.
fn element_attributes(
    nodes: &NodeTreeSnapshot,
    i: usize,
    strings: &[std::borrow::Cow<'_, str>],
) -> Vec<(String, String)> {
    let mut attributes: Vec<(String, String)> = Vec::new();
    let raw = nodes.attributes.get(i);
    attributes.reserve(raw.len() / 2);
    for pair in raw.chunks_exact(2) {
        attributes.push((
            string_at(strings, pair[0]).to_owned(),
            string_at(strings, pair[1]).to_owned(),
        ));
    }
    attributes
}

fn set_attr(attributes: &mut Vec<(String, String)>, key: &str, value: &str) {
    if let Some(slot) = attributes.iter_mut().find(|(k, _)| k == key) {
        slot.1 = value.to_owned();
    } else {
        attributes.push((key.to_owned(), value.to_owned()));
    }
}

fn read_layout(
    layout: &crate::snapshot::LayoutTreeSnapshot,
    li: usize,
    strings: &[std::borrow::Cow<'_, str>],
    dpr: f64,
) -> Layout {
    let styles = layout.styles.get(li);
    let style = |i: usize| -> Option<&str> {
        styles
            .get(i)
            .map(|&s| string_at(strings, s))
            .filter(|_| i < styles.len())
    };
    let has_styles = !styles.is_empty();
    let opacity_raw = style(STYLE_OPACITY).unwrap_or("1");
    let (opacity, opacity_raw_ok) = match opacity_raw.trim().parse::<f64>() {
        Ok(v) => (v, true),
        Err(_) => (1.0, false),
    };
    let scrolls = |v: Option<&str>| {
        v.is_some_and(|v| {
            ["auto", "scroll", "overlay"]
                .iter()
                .any(|s| v.trim().eq_ignore_ascii_case(s))
        })
    };
    Layout {
        bounds: layout
            .bounds
            .get(li)
            .and_then(|r| r.0)
            .map(|r| Rect::from_device(r, dpr)),
        client_rect: layout
            .client_rects
            .get(li)
            .and_then(|r| r.0)
            .map(Rect::from_raw),
        scroll_rect: layout
            .scroll_rects
            .get(li)
            .and_then(|r| r.0)
            .map(Rect::from_raw),
        has_styles,
        display_none: style(STYLE_DISPLAY).is_some_and(|d| d.eq_ignore_ascii_case("none")),
        visibility_hidden: style(STYLE_VISIBILITY)
            .is_some_and(|d| d.eq_ignore_ascii_case("hidden")),
        opacity,
        opacity_raw_ok,
        overflow_allows_scroll: scrolls(style(STYLE_OVERFLOW_X))
            || scrolls(style(STYLE_OVERFLOW_Y)),
        cursor_pointer: style(STYLE_CURSOR) == Some("pointer"),
        background_transparent: style(STYLE_BACKGROUND).unwrap_or("rgba(0, 0, 0, 0)")
            == "rgba(0, 0, 0, 0)",
        paint_order: layout.paint_orders.get(li).copied(),
    }
}
