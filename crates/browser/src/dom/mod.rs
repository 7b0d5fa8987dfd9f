//! The merged page tree: DOMSnapshot structure + layout + accessibility, one arena per capture.

mod build;

use std::sync::Arc;

pub(crate) use build::append_snapshot;

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
