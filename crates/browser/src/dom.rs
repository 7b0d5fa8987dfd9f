//! The merged page tree: DOMSnapshot structure + layout + accessibility, one arena per capture.

use std::{collections::HashMap, sync::Arc};

use crate::snapshot::{
    CaptureSnapshot, DocumentSnapshot, NodeTreeSnapshot, STYLE_BACKGROUND, STYLE_CURSOR,
    STYLE_DISPLAY, STYLE_OPACITY, STYLE_OVERFLOW_X, STYLE_OVERFLOW_Y, STYLE_VISIBILITY,
};

/// Arena index of a node.
pub(crate) type NodeId = u32;

/// An axis-aligned rectangle in CSS pixels.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

impl Rect {
    fn from_device(r: [f64; 4], dpr: f64) -> Self {
        Rect {
            x: r[0] / dpr,
            y: r[1] / dpr,
            width: r[2] / dpr,
            height: r[3] / dpr,
        }
    }
    fn from_raw(r: [f64; 4]) -> Self {
        Rect {
            x: r[0],
            y: r[1],
            width: r[2],
            height: r[3],
        }
    }
    /// Centre point.
    pub fn center(&self) -> (f64, f64) {
        (self.x + self.width / 2.0, self.y + self.height / 2.0)
    }
}

/// Kind of shadow root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShadowRootKind {
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Document,
    Element,
    Text,
    ShadowRoot(ShadowRootKind),
}

/// Layout facts from the snapshot, already reduced to what the rules read.
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    /// Bounds in CSS px, document coordinates of the node's own frame.
    pub bounds: Option<Rect>,
    pub client_rect: Option<Rect>,
    pub scroll_rect: Option<Rect>,
    pub has_styles: bool,
    pub display_none: bool,
    pub visibility_hidden: bool,
    pub opacity: f64,
    pub opacity_raw_ok: bool,
    pub overflow_allows_scroll: bool,
    pub cursor_pointer: bool,
    pub background_transparent: bool,
    pub paint_order: Option<i64>,
}

/// Accessibility facts of one node.
#[derive(Clone, Debug, Default)]
pub struct AxInfo {
    pub role: Option<String>,
    pub name: Option<String>,
    pub ignored: bool,
    pub has_children: bool,
    /// (property name, value) in Chrome's order.
    pub properties: Vec<(String, AxValue)>,
}

/// A property value of an AX node.
#[derive(Clone, Debug, PartialEq)]
pub enum AxValue {
    Bool(bool),
    /// The number and its JSON spelling (`1`, `1.5`, `1.0`), printed like Python's `str`.
    Number(f64, String),
    Text(String),
    Other,
}

impl AxValue {
    pub(crate) fn truthy(&self) -> bool {
        match self {
            AxValue::Bool(b) => *b,
            AxValue::Number(n, _) => *n != 0.0,
            AxValue::Text(s) => !s.is_empty(),
            AxValue::Other => false,
        }
    }
    /// Python's `str(value)` (booleans rendered `true`/`false` by the caller where needed).
    pub(crate) fn to_text(&self) -> Option<String> {
        match self {
            AxValue::Bool(b) => Some(if *b { "True" } else { "False" }.to_owned()),
            AxValue::Number(_, repr) => Some(repr.clone()),
            AxValue::Text(s) => Some(s.clone()),
            AxValue::Other => None,
        }
    }
    pub(crate) fn from_json(v: Option<serde_json::Value>) -> AxValue {
        match v {
            Some(serde_json::Value::Bool(b)) => AxValue::Bool(b),
            Some(serde_json::Value::Number(n)) => {
                AxValue::Number(n.as_f64().unwrap_or(0.0), n.to_string())
            }
            Some(serde_json::Value::String(s)) => AxValue::Text(s),
            _ => AxValue::Other,
        }
    }
}

/// One node of the merged tree.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub kind: NodeKind,
    /// Lower-case tag for elements, `#text` / `#document` / `#document-fragment` otherwise.
    pub tag: String,
    /// The node name as Chrome reports it (`DIV`, `svg`, …).
    pub node_name: String,
    pub text: String,
    pub attributes: Vec<(String, String)>,
    pub backend_node_id: i64,
    pub target: u16,
    pub frame_id: Option<Arc<str>>,
    pub parent: Option<NodeId>,
    pub children: Vec<NodeId>,
    pub shadow_roots: Vec<NodeId>,
    pub content_document: Option<NodeId>,
    pub layout: Option<Layout>,
    pub ax: Option<AxInfo>,
    pub visible: bool,
    pub js_click_listener: bool,
    /// Position in CSS px relative to the top-level viewport.
    pub absolute: Option<Rect>,
    /// `DOM.describeNode`-style frame id of an iframe element whose document lives in
    /// another target (filled by the capture for cross-origin frames).
    pub hidden_hints: Vec<HiddenHint>,
    pub has_hidden_content: bool,
    pub in_shadow: bool,
}

/// One "element below the fold" hint of an iframe.
#[derive(Clone, Debug)]
pub(crate) struct HiddenHint {
    pub tag: String,
    pub text: String,
    pub pages: f64,
}

impl Node {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn has_attr(&self, name: &str) -> bool {
        self.attributes.iter().any(|(k, _)| k == name)
    }
    pub fn bounds(&self) -> Option<Rect> {
        self.layout.as_ref().and_then(|l| l.bounds)
    }
    pub fn is_file_input(&self) -> bool {
        self.tag == "input" && self.attr("type") == Some("file")
    }
}

/// Per-target data shared by all nodes of that target.
#[derive(Clone, Debug)]
pub(crate) struct TargetRef {
    pub target_id: Arc<str>,
    pub session_id: Arc<str>,
}

/// The arena for one capture.
#[derive(Default, Debug)]
pub(crate) struct Tree {
    pub nodes: Vec<Node>,
    pub targets: Vec<TargetRef>,
}

impl Tree {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize]
    }
    /// Children followed by shadow roots (browser-use's `children_and_shadow_roots`).
    pub fn children_and_shadow_roots(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let n = self.node(id);
        n.children.iter().chain(n.shadow_roots.iter()).copied()
    }

    /// CDP-or-CSS scroll detection (`is_actually_scrollable`).
    pub fn is_scrollable(&self, id: NodeId) -> bool {
        let n = self.node(id);
        let Some(layout) = &n.layout else {
            return false;
        };
        let (Some(scroll), Some(client)) = (layout.scroll_rect, layout.client_rect) else {
            return false;
        };
        let overflows = scroll.height > client.height + 1.0 || scroll.width > client.width + 1.0;
        if !overflows {
            return false;
        }
        if layout.has_styles {
            layout.overflow_allows_scroll
        } else {
            matches!(
                n.tag.as_str(),
                "div" | "main" | "section" | "article" | "aside" | "body" | "html"
            )
        }
    }

    /// browser-use's `should_show_scroll_info`.
    pub fn should_show_scroll_info(&self, id: NodeId) -> bool {
        let n = self.node(id);
        if n.tag == "iframe" {
            return true;
        }
        if !self.is_scrollable(id) {
            return false;
        }
        if n.tag == "body" || n.tag == "html" {
            return true;
        }
        if let Some(p) = n.parent
            && self.is_scrollable(p)
        {
            return false;
        }
        true
    }

    /// browser-use's element XPath: `tag[position]` segments from the node up to its document
    /// (shadow roots are passed through; an iframe's document starts a new path), the position
    /// counted among same-tag element siblings and written only when there are several.
    pub fn x_path(&self, id: NodeId) -> String {
        let mut segments: Vec<String> = Vec::new();
        let mut current = Some(id);
        while let Some(cid) = current {
            let n = self.node(cid);
            match n.kind {
                NodeKind::ShadowRoot(_) => {
                    current = n.parent;
                    continue;
                }
                NodeKind::Element => {}
                _ => break,
            }
            let parent = n.parent;
            if parent.is_some_and(|p| self.node(p).tag == "iframe") {
                break;
            }
            let segment = match parent {
                Some(p) => {
                    let same: Vec<NodeId> = self
                        .node(p)
                        .children
                        .iter()
                        .copied()
                        .filter(|&c| {
                            let cn = self.node(c);
                            cn.kind == NodeKind::Element && cn.tag == n.tag
                        })
                        .collect();
                    match same.iter().position(|&c| c == cid) {
                        Some(i) if same.len() > 1 => format!("{}[{}]", n.tag, i + 1),
                        _ => n.tag.clone(),
                    }
                }
                None => n.tag.clone(),
            };
            segments.push(segment);
            current = parent;
        }
        segments.reverse();
        segments.join("/")
    }

    /// Tags of the element's ancestors and itself, from the top document down (shadow roots
    /// and iframe documents included), the branch a stable identity hashes.
    pub fn branch_path(&self, id: NodeId) -> Vec<&str> {
        let mut path = Vec::new();
        let mut current = Some(id);
        while let Some(cid) = current {
            let n = self.node(cid);
            if n.kind == NodeKind::Element {
                path.push(n.tag.as_str());
            }
            current = n.parent;
        }
        path.reverse();
        path
    }

    /// Text of all descendant text nodes joined by newlines (browser-use's
    /// `get_all_children_text`).
    pub fn all_children_text(&self, id: NodeId) -> String {
        let mut parts: Vec<&str> = Vec::new();
        let mut stack = vec![id];
        while let Some(cur) = stack.pop() {
            let n = self.node(cur);
            if n.kind == NodeKind::Text {
                parts.push(n.text.as_str());
            }
            for &c in n.children.iter().rev() {
                stack.push(c);
            }
        }
        parts.join("\n").trim().to_owned()
    }
}

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
        let tag = match kind {
            NodeKind::Element => name.to_ascii_lowercase(),
            NodeKind::Text => "#text".to_owned(),
            NodeKind::Document => "#document".to_owned(),
            NodeKind::ShadowRoot(_) => "#document-fragment".to_owned(),
        };
        let layout_info = match lookups.layout_of[i] {
            u32::MAX => None,
            li => Some(read_layout(&doc.layout, li as usize, strings, dpr)),
        };
        // Live form values (never for sensitive inputs).
        if kind == NodeKind::Element && (tag == "input" || tag == "textarea") {
            lookups.apply_form_values(&mut attributes, i);
        }
        let backend = nodes.backend_node_id.get(i).copied().unwrap_or(0);
        let in_shadow = match parent {
            Some(p) => {
                let pn = &tree.nodes[p as usize];
                pn.in_shadow || matches!(pn.kind, NodeKind::ShadowRoot(_))
            }
            None => false,
        };
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

/// Visibility (viewport ± threshold through every frame) and absolute positions for the
/// subtree under `root`. `chain` are the frames above `root` (empty for a target's root).
pub(crate) fn compute_visibility(
    tree: &mut Tree,
    root: NodeId,
    initial_offset: (f64, f64),
    viewport_threshold: f64,
) {
    #[derive(Clone, Copy)]
    enum Frame {
        Iframe(Rect),
        Html { scroll: Rect, client: Rect },
    }
    // Iterative DFS carrying (node, frames chain length, offset).
    let mut chain: Vec<Frame> = Vec::new();
    // stack entries: (node, chain_len_at_entry, offset)
    let mut stack: Vec<(NodeId, usize, (f64, f64))> = vec![(root, 0, initial_offset)];
    while let Some((id, chain_len, offset)) = stack.pop() {
        chain.truncate(chain_len);
        let (kind, tag, layout, parent_is_doc) = {
            let n = tree.node(id);
            let parent_is_doc = n
                .parent
                .map(|p| tree.node(p).kind == NodeKind::Document)
                .unwrap_or(false);
            (n.kind, n.tag.clone(), n.layout.clone(), parent_is_doc)
        };
        let bounds = layout.as_ref().and_then(|l| l.bounds);
        let absolute = bounds.map(|b| Rect {
            x: b.x + offset.0,
            y: b.y + offset.1,
            width: b.width,
            height: b.height,
        });
        let mut child_offset = offset;
        let mut own_frame: Option<Frame> = None;
        if kind == NodeKind::Element
            && tag == "html"
            && parent_is_doc
            && let Some(l) = &layout
            && let (Some(scroll), Some(client)) = (l.scroll_rect, l.client_rect)
        {
            own_frame = Some(Frame::Html { scroll, client });
            child_offset.0 -= scroll.x;
            child_offset.1 -= scroll.y;
        }
        if kind == NodeKind::Element
            && (tag == "iframe" || tag == "frame")
            && let Some(b) = bounds
        {
            own_frame = Some(Frame::Iframe(b));
            child_offset.0 += b.x;
            child_offset.1 += b.y;
        }
        // Visibility: the node's own frame entry is skipped (browser-use `frame is node`).
        let visible = match &layout {
            None => false,
            Some(l) => {
                if l.display_none || l.visibility_hidden || (l.opacity_raw_ok && l.opacity <= 0.0) {
                    false
                } else if let Some(b) = l.bounds {
                    let mut cur = b;
                    let mut ok = true;
                    for frame in chain.iter().rev() {
                        match *frame {
                            Frame::Iframe(ib) => {
                                cur.x += ib.x;
                                cur.y += ib.y;
                            }
                            Frame::Html { scroll, client } => {
                                let ax = cur.x - scroll.x;
                                let ay = cur.y - scroll.y;
                                let intersects = ax < client.width
                                    && ax + cur.width > 0.0
                                    && ay < client.height + viewport_threshold
                                    && ay + cur.height > -viewport_threshold;
                                if !intersects {
                                    ok = false;
                                    break;
                                }
                                cur.x -= scroll.x;
                                cur.y -= scroll.y;
                            }
                        }
                    }
                    ok
                } else {
                    false
                }
            }
        };
        {
            let n = tree.node_mut(id);
            n.visible = visible;
            n.absolute = absolute;
        }
        if let Some(f) = own_frame {
            chain.push(f);
        }
        let next_len = chain.len();
        let n = tree.node(id);
        let mut next: Vec<NodeId> = Vec::with_capacity(n.children.len() + n.shadow_roots.len() + 1);
        next.extend(n.children.iter().copied());
        next.extend(n.shadow_roots.iter().copied());
        if let Some(cd) = n.content_document {
            // Content documents of same-target iframes share the chain; cross-target ones
            // were already computed with their own chain (marked by a different target).
            if tree.node(cd).target == n.target {
                next.push(cd);
            }
        }
        for c in next.into_iter().rev() {
            stack.push((c, next_len, child_offset));
        }
    }
}
