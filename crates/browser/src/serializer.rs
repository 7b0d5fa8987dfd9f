//! browser-use's serializer: simplified tree → paint order → optimise → bbox containment →
//! indices → indexed text (`[index]<tag attr=value />`).

use std::collections::{HashMap, HashSet};

use crate::{
    dom::{AxValue, NodeId, NodeKind, ShadowRootKind, Tree},
    interactive::is_interactive,
    paint_order::{PRect, RectUnion},
};

/// Attributes shown by default (browser-use's `DEFAULT_INCLUDE_ATTRIBUTES`).
pub const DEFAULT_INCLUDE_ATTRIBUTES: &[&str] = &[
    "title",
    "type",
    "checked",
    "id",
    "name",
    "role",
    "value",
    "placeholder",
    "data-date-format",
    "alt",
    "aria-label",
    "aria-expanded",
    "data-state",
    "aria-checked",
    "aria-valuemin",
    "aria-valuemax",
    "aria-valuenow",
    "aria-placeholder",
    "pattern",
    "min",
    "max",
    "minlength",
    "maxlength",
    "step",
    "accept",
    "multiple",
    "inputmode",
    "autocomplete",
    "aria-autocomplete",
    "list",
    "data-mask",
    "data-inputmask",
    "data-datepicker",
    "format",
    "expected_format",
    "contenteditable",
    "pseudo",
    "checked",
    "selected",
    "expanded",
    "pressed",
    "disabled",
    "invalid",
    "valuemin",
    "valuemax",
    "valuenow",
    "keyshortcuts",
    "haspopup",
    "multiselectable",
    "required",
    "valuetext",
    "level",
    "busy",
    "live",
    "ax_name",
];

/// (target, enclosing iframe) that owns a node's paint order.
type FrameContext = (u16, Option<std::sync::Arc<str>>);

pub(crate) const DISABLED_ELEMENTS: [&str; 6] =
    ["style", "script", "head", "meta", "link", "title"];
pub(crate) const SVG_CHILDREN: [&str; 16] = [
    "path", "rect", "g", "circle", "ellipse", "line", "polyline", "polygon", "use", "defs",
    "clippath", "mask", "pattern", "image", "text", "tspan",
];

#[derive(Clone, Debug, Default)]
pub(crate) struct Compound {
    role: &'static str,
    name: String,
    min: Option<String>,
    max: Option<String>,
    now: Option<String>,
    count: Option<usize>,
    options: Vec<String>,
    format: Option<&'static str>,
}

#[derive(Debug)]
pub(crate) struct SNode {
    pub node: NodeId,
    pub children: Vec<u32>,
    pub interactive: bool,
    pub index: Option<u32>,
    pub is_new: bool,
    pub ignored_by_paint_order: bool,
    pub excluded_by_parent: bool,
    pub is_shadow_host: bool,
    pub is_compound: bool,
    pub compound: Vec<Compound>,
}

pub use browserd_views::PageStats;

pub(crate) struct Serialized {
    pub text: String,
    /// (index, node) in document order.
    pub selected: Vec<(u32, NodeId)>,
    pub stats: PageStats,
    pub has_root: bool,
    /// Indices marked `*`.
    pub new_indices: HashSet<u32>,
}

pub(crate) struct Serializer<'t> {
    tree: &'t Tree,
    nodes: Vec<SNode>,
    interactive_cache: HashMap<NodeId, bool>,
    previous: &'t HashSet<(String, i64)>,
    exclude_attr: Option<String>,
    paint_order_filtering: bool,
}

impl<'t> Serializer<'t> {
    pub fn new(
        tree: &'t Tree,
        previous: &'t HashSet<(String, i64)>,
        session_tag: Option<&str>,
        paint_order_filtering: bool,
    ) -> Self {
        Self {
            tree,
            nodes: Vec::new(),
            interactive_cache: HashMap::new(),
            previous,
            exclude_attr: session_tag.map(|s| format!("data-browser-use-exclude-{s}")),
            paint_order_filtering,
        }
    }

    fn interactive(&mut self, id: NodeId) -> bool {
        if let Some(&v) = self.interactive_cache.get(&id) {
            return v;
        }
        let v = is_interactive(self.tree, id);
        self.interactive_cache.insert(id, v);
        v
    }

    pub fn run(mut self, root: Option<NodeId>) -> Serialized {
        let simplified = root.and_then(|r| self.simplify(r));
        if let (Some(s), true) = (simplified, self.paint_order_filtering) {
            self.paint_order(s);
        }
        let optimized = simplified.and_then(|s| self.optimize(s));
        if let Some(s) = optimized {
            self.bbox_filter(s, None);
        }
        let mut selected = Vec::new();
        if let Some(s) = optimized {
            let mut reserved = HashSet::new();
            let mut stack = vec![s];
            while let Some(cur) = stack.pop() {
                let n = &self.nodes[cur as usize];
                reserved.insert(self.tree.node(n.node).backend_node_id);
                stack.extend(n.children.iter().copied());
            }
            let mut next_synthetic = reserved.iter().copied().max().unwrap_or(0) + 1;
            let mut used: HashSet<u32> = HashSet::new();
            self.assign_indices(s, &reserved, &mut next_synthetic, &mut used, &mut selected);
        }
        let mut text = String::new();
        let mut stats = PageStats::default();
        if let Some(s) = optimized {
            self.serialize(s, 0, &mut text);
            self.stats(s, &mut stats);
        }
        if text.ends_with('\n') {
            text.pop();
        }
        let new_indices = self
            .nodes
            .iter()
            .filter(|n| n.is_new)
            .filter_map(|n| n.index)
            .collect();
        Serialized {
            text,
            selected,
            stats,
            has_root: optimized.is_some(),
            new_indices,
        }
    }

    fn push(&mut self, node: NodeId) -> u32 {
        self.nodes.push(SNode {
            node,
            children: Vec::new(),
            interactive: false,
            index: None,
            is_new: false,
            ignored_by_paint_order: false,
            excluded_by_parent: false,
            is_shadow_host: false,
            is_compound: false,
            compound: Vec::new(),
        });
        (self.nodes.len() - 1) as u32
    }

    // ---- step 1 ---------------------------------------------------------------------------

    fn simplify(&mut self, id: NodeId) -> Option<u32> {
        let tree = self.tree;
        let node = tree.node(id);
        match node.kind {
            NodeKind::Document => {
                for child in tree.children_and_shadow_roots(id).collect::<Vec<_>>() {
                    if let Some(s) = self.simplify(child) {
                        return Some(s);
                    }
                }
                None
            }
            NodeKind::ShadowRoot(_) => {
                let s = self.push(id);
                for child in tree.children_and_shadow_roots(id).collect::<Vec<_>>() {
                    if let Some(c) = self.simplify(child) {
                        self.nodes[s as usize].children.push(c);
                    }
                }
                Some(s)
            }
            NodeKind::Element => {
                if DISABLED_ELEMENTS.contains(&node.tag.as_str())
                    || SVG_CHILDREN.contains(&node.tag.as_str())
                {
                    return None;
                }
                let excluded = self
                    .exclude_attr
                    .as_deref()
                    .and_then(|a| node.attr(a))
                    .filter(|v| !v.is_empty())
                    .or_else(|| node.attr("data-browser-use-exclude"));
                if excluded.is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                    return None;
                }
                if (node.tag == "iframe" || node.tag == "frame")
                    && let Some(doc) = node.content_document
                {
                    let s = self.push(id);
                    for child in tree.node(doc).children.clone() {
                        if let Some(c) = self.simplify(child) {
                            self.nodes[s as usize].children.push(c);
                        }
                    }
                    return Some(s);
                }
                let mut visible = node.visible;
                let scrollable = tree.is_scrollable(id);
                let has_content = !node.children.is_empty() || !node.shadow_roots.is_empty();
                let shadow_host = !node.shadow_roots.is_empty();
                if !visible
                    && node
                        .attributes
                        .iter()
                        .any(|(k, _)| k.starts_with("aria-") || k.starts_with("pseudo"))
                {
                    visible = true;
                }
                if !visible && node.is_file_input() {
                    visible = true;
                }
                if visible || scrollable || has_content || shadow_host {
                    let s = self.push(id);
                    self.nodes[s as usize].is_shadow_host = shadow_host;
                    for child in tree.children_and_shadow_roots(id).collect::<Vec<_>>() {
                        if let Some(c) = self.simplify(child) {
                            self.nodes[s as usize].children.push(c);
                        }
                    }
                    self.add_compound(s);
                    let sn = &self.nodes[s as usize];
                    if shadow_host && !sn.children.is_empty() {
                        return Some(s);
                    }
                    if visible || scrollable || !sn.children.is_empty() {
                        return Some(s);
                    }
                    // Drop the node we pushed (it stays in the arena, unreferenced).
                }
                None
            }
            NodeKind::Text => {
                let trimmed = node.text.trim();
                if node.layout.is_some() && node.visible && trimmed.chars().nth(1).is_some() {
                    return Some(self.push(id));
                }
                None
            }
        }
    }

    fn add_compound(&mut self, s: u32) {
        let tree = self.tree;
        let id = self.nodes[s as usize].node;
        let node = tree.node(id);
        let tag = node.tag.as_str();
        let input_type = node.attr("type").unwrap_or("");
        let mut out: Vec<Compound> = Vec::new();
        let c = |role: &'static str, name: &str| Compound {
            role,
            name: name.to_owned(),
            ..Default::default()
        };
        match tag {
            "input" => match input_type {
                "range" => out.push(Compound {
                    min: Some(py_float(parse_num(node.attr("min").unwrap_or("0"), 0.0))),
                    max: Some(py_float(parse_num(
                        node.attr("max").unwrap_or("100"),
                        100.0,
                    ))),
                    ..c("slider", "Value")
                }),
                "number" => {
                    out.push(c("button", "Increment"));
                    out.push(c("button", "Decrement"));
                    out.push(Compound {
                        min: node.attr("min").and_then(parse_opt_num).map(py_float),
                        max: node.attr("max").and_then(parse_opt_num).map(py_float),
                        ..c("textbox", "Value")
                    });
                }
                "color" => {
                    out.push(c("textbox", "Hex Value"));
                    out.push(c("button", "Color Picker"));
                }
                "file" => {
                    let multiple = node.has_attr("multiple");
                    let mut current = "None".to_owned();
                    if let Some(ax) = &node.ax {
                        for (name, value) in &ax.properties {
                            let text = value.to_text().unwrap_or_default();
                            if name == "valuetext" && value.truthy() {
                                let v = text.trim();
                                let lower = v.to_lowercase();
                                if !v.is_empty()
                                    && lower != "no file chosen"
                                    && lower != "no file selected"
                                {
                                    current = v.to_owned();
                                }
                                break;
                            } else if name == "value" && value.truthy() {
                                let v = text.trim();
                                if !v.is_empty() {
                                    current = v.rsplit(['\\', '/']).next().unwrap_or(v).to_owned();
                                    break;
                                }
                            }
                        }
                    }
                    out.push(c("button", "Browse Files"));
                    out.push(Compound {
                        now: Some(current),
                        ..c(
                            "textbox",
                            if multiple {
                                "Files Selected"
                            } else {
                                "File Selected"
                            },
                        )
                    });
                }
                _ => {}
            },
            "select" | "details" | "audio" | "video" => {
                if !node.ax.as_ref().is_some_and(|a| a.has_children) {
                    return;
                }
                match tag {
                    "select" => {
                        out.push(c("button", "Dropdown Toggle"));
                        let mut options = c("listbox", "Options");
                        if let Some((count, first, format)) = self.select_options(id) {
                            options.count = Some(count);
                            options.options = first;
                            options.format = format;
                        }
                        out.push(options);
                    }
                    "details" => {
                        out.push(c("button", "Toggle Disclosure"));
                        out.push(c("region", "Content Area"));
                    }
                    _ => {
                        let slider = |name: &str| Compound {
                            min: Some("0".into()),
                            max: Some("100".into()),
                            ..c("slider", name)
                        };
                        out.push(c("button", "Play/Pause"));
                        out.push(slider("Progress"));
                        out.push(c("button", "Mute"));
                        out.push(slider("Volume"));
                        if tag == "video" {
                            out.push(c("button", "Fullscreen"));
                        }
                    }
                }
            }
            _ => return,
        }
        if !out.is_empty() {
            let sn = &mut self.nodes[s as usize];
            sn.is_compound = true;
            sn.compound = out;
        }
    }

    fn select_options(&self, select: NodeId) -> Option<(usize, Vec<String>, Option<&'static str>)> {
        let tree = self.tree;
        let mut options: Vec<(String, String)> = Vec::new();
        fn walk(tree: &Tree, id: NodeId, out: &mut Vec<(String, String)>) {
            let n = tree.node(id);
            if n.tag == "option" {
                let mut value = n
                    .attr("value")
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default();
                let mut text = String::new();
                for &c in &n.children {
                    let cn = tree.node(c);
                    if cn.kind == NodeKind::Text && !cn.text.is_empty() {
                        text.push_str(cn.text.trim());
                        text.push(' ');
                    }
                }
                let text = text.trim().to_owned();
                if value.is_empty() && !text.is_empty() {
                    value = text.clone();
                }
                if !text.is_empty() || !value.is_empty() {
                    out.push((text, value));
                }
            } else {
                for &c in &n.children {
                    walk(tree, c, out);
                }
            }
        }
        for &c in &tree.node(select).children {
            walk(tree, c, &mut options);
        }
        if options.is_empty() {
            return None;
        }
        let mut first: Vec<String> = Vec::new();
        for (text, value) in options.iter().take(4) {
            let display = if text.is_empty() { value } else { text };
            if !display.is_empty() {
                let capped: String = display.chars().take(30).collect();
                let ellipsis = if display.chars().count() > 30 {
                    "..."
                } else {
                    ""
                };
                first.push(format!("{capped}{ellipsis}"));
            }
        }
        if options.len() > 4 {
            first.push(format!("... {} more options...", options.len() - 4));
        }
        let values: Vec<&str> = options
            .iter()
            .take(5)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
            .collect();
        let mut format = None;
        if options.len() >= 2 {
            if values.iter().all(|v| v.chars().all(|c| c.is_ascii_digit())) {
                format = Some("numeric");
            } else if values
                .iter()
                .all(|v| v.chars().count() == 2 && v.chars().all(|c| c.is_uppercase()))
            {
                format = Some("country/state codes");
            } else if values.iter().all(|v| v.contains('/') || v.contains('-')) {
                format = Some("date/path format");
            } else if values.iter().any(|v| v.contains('@')) {
                format = Some("email addresses");
            }
        }
        Some((options.len(), first, format))
    }

    // ---- step 2: paint order ---------------------------------------------------------------

    fn paint_order(&mut self, root: u32) {
        let tree = self.tree;
        let mut with_order: Vec<(i64, u32)> = Vec::new();
        let mut stack = vec![root];
        while let Some(s) = stack.pop() {
            let sn = &self.nodes[s as usize];
            let n = tree.node(sn.node);
            if let Some(l) = &n.layout
                && let (Some(order), Some(_)) = (l.paint_order, l.bounds)
            {
                with_order.push((order, s));
            }
            stack.extend(sn.children.iter().rev().copied());
        }
        // Highest paint order first; within a group, document order.
        with_order.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut unions: HashMap<FrameContext, RectUnion> = HashMap::new();
        let mut i = 0;
        while i < with_order.len() {
            let order = with_order[i].0;
            let mut j = i;
            let mut to_add: Vec<(FrameContext, PRect)> = Vec::new();
            while j < with_order.len() && with_order[j].0 == order {
                let s = with_order[j].1;
                let node_id = self.nodes[s as usize].node;
                let n = tree.node(node_id);
                let (Some(l), Some(b)) = (n.layout.as_ref(), n.bounds()) else {
                    j += 1;
                    continue;
                };
                let rect = PRect {
                    x1: b.x,
                    y1: b.y,
                    x2: b.x + b.width,
                    y2: b.y + b.height,
                };
                let context = (n.target, self.frame_context(node_id));
                let union = unions.entry(context.clone()).or_default();
                if union.contains(&rect) {
                    self.nodes[s as usize].ignored_by_paint_order = true;
                }
                let transparent = l.has_styles && l.background_transparent;
                let translucent = l.has_styles && l.opacity < 0.8;
                if !(transparent || translucent) {
                    to_add.push((context, rect));
                }
                j += 1;
            }
            for (context, rect) in to_add {
                unions.entry(context).or_default().add(rect);
            }
            i = j;
        }
    }

    /// The frame id of the closest enclosing iframe element (browser-use's document context).
    fn frame_context(&self, id: NodeId) -> Option<std::sync::Arc<str>> {
        let tree = self.tree;
        let mut cur = tree.node(id).parent;
        while let Some(p) = cur {
            let pn = tree.node(p);
            if pn.tag == "iframe" || pn.tag == "frame" {
                return pn
                    .content_document
                    .and_then(|d| tree.node(d).frame_id.clone())
                    .or_else(|| Some(std::sync::Arc::from(format!("#{p}"))));
            }
            cur = pn.parent;
        }
        None
    }

    // ---- step 3: optimise ------------------------------------------------------------------

    fn optimize(&mut self, s: u32) -> Option<u32> {
        let children = std::mem::take(&mut self.nodes[s as usize].children);
        let mut kept = Vec::with_capacity(children.len());
        for c in children {
            if let Some(k) = self.optimize(c) {
                kept.push(k);
            }
        }
        self.nodes[s as usize].children = kept;
        let node_id = self.nodes[s as usize].node;
        let n = self.tree.node(node_id);
        let visible = n.layout.is_some() && n.visible;
        if visible
            || self.tree.is_scrollable(node_id)
            || n.kind == NodeKind::Text
            || !self.nodes[s as usize].children.is_empty()
            || n.is_file_input()
        {
            Some(s)
        } else {
            None
        }
    }

    // ---- step 4: bounding-box containment ---------------------------------------------------

    fn bbox_filter(&mut self, s: u32, active: Option<crate::dom::Rect>) {
        let tree = self.tree;
        let node_id = self.nodes[s as usize].node;
        let n = tree.node(node_id);
        if let Some(parent_bounds) = active
            && self.should_exclude(node_id, parent_bounds)
        {
            self.nodes[s as usize].excluded_by_parent = true;
        }
        let mut propagate = active;
        if n.kind == NodeKind::Element
            && is_propagating(&n.tag, n.attr("role"))
            && let Some(b) = n.bounds()
        {
            propagate = Some(b);
        }
        for c in self.nodes[s as usize].children.clone() {
            self.bbox_filter(c, propagate);
        }
    }

    fn should_exclude(&self, id: NodeId, parent: crate::dom::Rect) -> bool {
        excluded_by_containment(self.tree, id, parent)
    }

    // ---- step 5: indices ----------------------------------------------------------------------

    fn has_interactive_descendants(&mut self, s: u32) -> bool {
        for c in self.nodes[s as usize].children.clone() {
            let node = self.nodes[c as usize].node;
            if self.interactive(node) || self.has_interactive_descendants(c) {
                return true;
            }
        }
        false
    }

    fn assign_indices(
        &mut self,
        s: u32,
        reserved: &HashSet<i64>,
        next_synthetic: &mut i64,
        used: &mut HashSet<u32>,
        selected: &mut Vec<(u32, NodeId)>,
    ) {
        let (excluded, ignored, node_id) = {
            let sn = &self.nodes[s as usize];
            (sn.excluded_by_parent, sn.ignored_by_paint_order, sn.node)
        };
        if !excluded && !ignored {
            let tree = self.tree;
            let interactive = self.interactive(node_id);
            let n = tree.node(node_id);
            let visible = n.layout.is_some() && n.visible;
            let scrollable = tree.is_scrollable(node_id);
            let shadow_form = interactive
                && n.layout.is_none()
                && matches!(
                    n.tag.as_str(),
                    "input" | "button" | "select" | "textarea" | "a"
                )
                && n.in_shadow;
            let mut make = false;
            if scrollable {
                let role = n.attr("role").unwrap_or("").to_lowercase();
                let class = n.attr("class").unwrap_or("").to_lowercase();
                let classes: Vec<&str> = class.split_whitespace().collect();
                let dropdown = matches!(
                    role.as_str(),
                    "listbox" | "menu" | "combobox" | "menubar" | "tree" | "grid"
                ) || n.tag == "select"
                    || classes.contains(&"dropdown")
                    || classes.contains(&"dropdown-menu")
                    || classes.contains(&"select-menu")
                    || (classes.contains(&"ui") && class.contains("dropdown"));
                make = dropdown || !self.has_interactive_descendants(s);
            } else if interactive && (visible || n.is_file_input() || shadow_form) {
                make = true;
            }
            if make {
                let backend = n.backend_node_id;
                let index = if backend > 0
                    && backend <= u32::MAX as i64
                    && !used.contains(&(backend as u32))
                {
                    backend as u32
                } else {
                    while reserved.contains(next_synthetic) {
                        *next_synthetic += 1;
                    }
                    let v = *next_synthetic as u32;
                    *next_synthetic += 1;
                    v
                };
                used.insert(index);
                let target_id = tree.targets[n.target as usize].target_id.to_string();
                let is_new = self.nodes[s as usize].is_compound
                    || (!self.previous.is_empty()
                        && !self.previous.contains(&(target_id, backend)));
                let sn = &mut self.nodes[s as usize];
                sn.interactive = true;
                sn.index = Some(index);
                sn.is_new = is_new;
                selected.push((index, node_id));
            }
        }
        for c in self.nodes[s as usize].children.clone() {
            self.assign_indices(c, reserved, next_synthetic, used, selected);
        }
    }

    // ---- step 6: text ------------------------------------------------------------------------

    fn shadow_prefix(&self, s: u32) -> &'static str {
        let sn = &self.nodes[s as usize];
        if !sn.is_shadow_host {
            return "";
        }
        let closed = sn.children.iter().any(|&c| {
            matches!(
                self.tree.node(self.nodes[c as usize].node).kind,
                NodeKind::ShadowRoot(ShadowRootKind::Closed)
            )
        });
        if closed {
            "|SHADOW(closed)|"
        } else {
            "|SHADOW(open)|"
        }
    }

    fn serialize(&self, s: u32, depth: usize, out: &mut String) {
        let sn = &self.nodes[s as usize];
        if sn.excluded_by_parent {
            for &c in &sn.children {
                self.serialize(c, depth, out);
            }
            return;
        }
        let tree = self.tree;
        let n = tree.node(sn.node);
        let mut next_depth = depth;
        match n.kind {
            NodeKind::Element => {
                if n.tag == "svg" {
                    push_tabs(out, depth);
                    out.push_str(self.shadow_prefix(s));
                    if let (true, Some(index)) = (sn.interactive, sn.index) {
                        if sn.is_new {
                            out.push('*');
                        }
                        out.push('[');
                        out.push_str(&index.to_string());
                        out.push(']');
                    }
                    out.push_str("<svg");
                    let attrs = build_attributes(tree, sn.node);
                    if !attrs.is_empty() {
                        out.push(' ');
                        out.push_str(&attrs);
                    }
                    out.push_str(" /> <!-- SVG content collapsed -->\n");
                    return;
                }
                let scrollable = tree.is_scrollable(sn.node);
                let is_frame = n.tag == "iframe" || n.tag == "frame";
                if sn.interactive || scrollable || is_frame {
                    next_depth += 1;
                    let mut attrs = build_attributes(tree, sn.node);
                    if sn.interactive {
                        let image = self.image_context(s);
                        if !image.is_empty() {
                            if !attrs.is_empty() {
                                attrs.push(' ');
                            }
                            attrs.push_str(&image);
                        }
                    }
                    if !sn.compound.is_empty() {
                        let parts: Vec<String> = sn
                            .compound
                            .iter()
                            .map(|c| {
                                let mut p: Vec<String> = Vec::new();
                                if !c.name.is_empty() {
                                    p.push(format!("name={}", c.name));
                                }
                                p.push(format!("role={}", c.role));
                                if let Some(v) = &c.min {
                                    p.push(format!("min={v}"));
                                }
                                if let Some(v) = &c.max {
                                    p.push(format!("max={v}"));
                                }
                                if let Some(v) = &c.now {
                                    p.push(format!("current={v}"));
                                }
                                if let Some(v) = c.count {
                                    p.push(format!("count={v}"));
                                }
                                if !c.options.is_empty() {
                                    let shown: Vec<&str> =
                                        c.options.iter().take(4).map(|s| s.as_str()).collect();
                                    p.push(format!("options={}", shown.join("|")));
                                }
                                if let Some(f) = c.format {
                                    p.push(format!("format={f}"));
                                }
                                format!("({})", p.join(","))
                            })
                            .collect();
                        if !attrs.is_empty() {
                            attrs.push(' ');
                        }
                        attrs.push_str("compound_components=");
                        attrs.push_str(&parts.join(","));
                    }
                    let show_scroll = tree.should_show_scroll_info(sn.node);
                    push_tabs(out, depth);
                    out.push_str(self.shadow_prefix(s));
                    if show_scroll && !sn.interactive {
                        out.push_str("|scroll element|<");
                    } else if let (true, Some(index)) = (sn.interactive, sn.index) {
                        if sn.is_new {
                            out.push('*');
                        }
                        out.push_str(if show_scroll { "|scroll element[" } else { "[" });
                        out.push_str(&index.to_string());
                        out.push_str("]<");
                    } else if n.tag == "iframe" {
                        out.push_str("|IFRAME|<");
                    } else if n.tag == "frame" {
                        out.push_str("|FRAME|<");
                    } else {
                        out.push('<');
                    }
                    out.push_str(&n.tag);
                    if !attrs.is_empty() {
                        out.push(' ');
                        out.push_str(&attrs);
                    }
                    out.push_str(" />");
                    if show_scroll {
                        let info = scroll_info_text(tree, sn.node);
                        if !info.is_empty() {
                            out.push_str(" (");
                            out.push_str(&info);
                            out.push(')');
                        }
                    }
                    out.push('\n');
                }
            }
            NodeKind::ShadowRoot(kind) => {
                push_tabs(out, depth);
                out.push_str(if kind == ShadowRootKind::Closed {
                    "Closed Shadow\n"
                } else {
                    "Open Shadow\n"
                });
                for &c in &sn.children {
                    self.serialize(c, depth + 1, out);
                }
                if !sn.children.is_empty() {
                    push_tabs(out, depth);
                    out.push_str("Shadow End\n");
                }
                return;
            }
            NodeKind::Text => {
                let trimmed = n.text.trim();
                if n.layout.is_some()
                    && n.visible
                    && !sn.ignored_by_paint_order
                    && trimmed.chars().nth(1).is_some()
                {
                    push_tabs(out, depth);
                    out.push_str(trimmed);
                    out.push('\n');
                }
            }
            NodeKind::Document => {}
        }
        for &c in &sn.children {
            self.serialize(c, next_depth, out);
        }
        if n.kind == NodeKind::Element && (n.tag == "iframe" || n.tag == "frame") {
            if !n.hidden_hints.is_empty() {
                push_tabs(out, depth);
                out.push_str(&format!(
                    "... ({} more elements below - scroll to reveal):\n",
                    n.hidden_hints.len()
                ));
                for h in &n.hidden_hints {
                    push_tabs(out, depth);
                    out.push_str(&format!(
                        "    <{}> \"{}\" ~{} pages down\n",
                        h.tag,
                        h.text,
                        py_float(h.pages)
                    ));
                }
            } else if n.has_hidden_content {
                push_tabs(out, depth);
                out.push_str("... (more content below viewport - scroll to reveal)\n");
            }
        }
    }

    fn image_context(&self, s: u32) -> String {
        let tree = self.tree;
        let mut contexts: Vec<String> = Vec::new();
        let add = |id: NodeId, contexts: &mut Vec<String>| {
            let n = tree.node(id);
            if n.kind != NodeKind::Element || n.tag != "img" {
                return;
            }
            let mut parts: Vec<String> = Vec::new();
            for (attr, out) in [
                ("alt", "image_alt"),
                ("title", "image_title"),
                ("aria-label", "image_label"),
            ] {
                let raw = n.attr(attr).unwrap_or("");
                if raw.chars().count() > 4096 {
                    continue;
                }
                let v = raw.trim();
                if !v.is_empty() {
                    parts.push(format!("{out}={}", cap_text(v, 100)));
                }
            }
            let src = normalize_src(n.attr("src").unwrap_or(""));
            if !src.is_empty() {
                parts.push(format!("image_src={}", cap_text(&src, 100)));
            }
            if !parts.is_empty() {
                contexts.push(parts.join(" "));
            }
        };
        add(self.nodes[s as usize].node, &mut contexts);
        let mut iters: Vec<std::slice::Iter<'_, u32>> =
            vec![self.nodes[s as usize].children.iter()];
        let mut visited = 0;
        while !iters.is_empty() && visited < 100 && contexts.len() < 3 {
            let Some(next) = iters.last_mut().and_then(|it| it.next()) else {
                iters.pop();
                continue;
            };
            visited += 1;
            let child = &self.nodes[*next as usize];
            add(child.node, &mut contexts);
            if !child.children.is_empty() {
                iters.push(child.children.iter());
            }
        }
        contexts.join(" ")
    }

    fn stats(&self, s: u32, stats: &mut PageStats) {
        let sn = &self.nodes[s as usize];
        let n = self.tree.node(sn.node);
        stats.total_elements += 1;
        match n.kind {
            NodeKind::Element => {
                match n.tag.as_str() {
                    "a" => stats.links += 1,
                    "iframe" | "frame" => stats.iframes += 1,
                    "img" => stats.images += 1,
                    _ => {}
                }
                if self.tree.is_scrollable(sn.node) {
                    stats.scroll_containers += 1;
                }
                if sn.interactive {
                    stats.interactive_elements += 1;
                }
                if sn.is_shadow_host {
                    if self.shadow_prefix(s) == "|SHADOW(closed)|" {
                        stats.shadow_closed += 1;
                    } else {
                        stats.shadow_open += 1;
                    }
                }
            }
            NodeKind::Text => stats.text_chars += n.text.trim().chars().count(),
            _ => {}
        }
        for &c in &sn.children {
            self.stats(c, stats);
        }
    }
}

/// The elements that propagate their bounds to descendants (`PROPAGATING_ELEMENTS`).
pub(crate) fn is_propagating(tag: &str, role: Option<&str>) -> bool {
    match tag {
        "a" | "button" => true,
        "div" | "span" => matches!(role, Some("button") | Some("combobox")),
        "input" => role == Some("combobox"),
        _ => false,
    }
}

/// browser-use's `_should_exclude_child`: ≥ 99 % inside `parent` and no exception applies.
pub(crate) fn excluded_by_containment(tree: &Tree, id: NodeId, parent: crate::dom::Rect) -> bool {
    let n = tree.node(id);
    if n.kind == NodeKind::Text {
        return false;
    }
    let Some(child) = n.bounds() else {
        return false;
    };
    let x_overlap =
        ((child.x + child.width).min(parent.x + parent.width) - child.x.max(parent.x)).max(0.0);
    let y_overlap =
        ((child.y + child.height).min(parent.y + parent.height) - child.y.max(parent.y)).max(0.0);
    let area = child.width * child.height;
    if area == 0.0 || (x_overlap * y_overlap) / area < 0.99 {
        return false;
    }
    if matches!(n.tag.as_str(), "input" | "select" | "textarea" | "label") {
        return false;
    }
    if is_propagating(&n.tag, n.attr("role")) {
        return false;
    }
    if n.has_attr("onclick") {
        return false;
    }
    if n.attr("aria-label").is_some_and(|v| !v.trim().is_empty()) {
        return false;
    }
    if let Some(role) = n.attr("role")
        && matches!(
            role,
            "button" | "link" | "checkbox" | "radio" | "tab" | "menuitem" | "option"
        )
    {
        return false;
    }
    true
}

fn push_tabs(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push('\t');
    }
}

fn parse_num(s: &str, default: f64) -> f64 {
    s.trim().parse::<f64>().unwrap_or(default)
}

fn parse_opt_num(s: &str) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    s.trim().parse::<f64>().ok()
}

/// Python's `repr(float)` for the values we print (`0.0`, `1.5`, `100.0`).
pub(crate) fn py_float(v: f64) -> String {
    format!("{v:?}")
}

/// browser-use's `cap_text_length`.
pub(crate) fn cap_text(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}...", &text[..cut]),
    }
}

fn normalize_src(src: &str) -> String {
    if src.chars().count() > 4096 {
        return String::new();
    }
    let clean: String = src
        .trim_matches(|c: char| (c as u32) <= 0x20)
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    if clean.to_lowercase().starts_with("data:") {
        return String::new();
    }
    let without_query = clean.split('?').next().unwrap_or("");
    let without_fragment = without_query.split('#').next().unwrap_or("");
    let trimmed = without_fragment.trim_end_matches('/');
    trimmed.rsplit('/').next().unwrap_or("").to_owned()
}

/// browser-use's `get_scroll_info_text`.
fn scroll_info_text(tree: &Tree, id: NodeId) -> String {
    let n = tree.node(id);
    if n.tag == "iframe" {
        if let Some(doc) = n.content_document {
            let html = tree
                .node(doc)
                .children
                .iter()
                .copied()
                .find(|&c| tree.node(c).tag == "html");
            if let Some(info) = html.and_then(|h| scroll_info(tree, h))
                && (info.pages_below > 0.0 || info.pages_above > 0.0)
            {
                return format!(
                    "scroll: {:.1}↑ {:.1}↓ {}%",
                    info.pages_above, info.pages_below, info.vertical_pct as i64
                );
            }
        }
        return "scroll".to_owned();
    }
    let Some(info) = scroll_info(tree, id) else {
        return String::new();
    };
    let mut parts = Vec::new();
    if info.scrollable_height > info.visible_height {
        parts.push(format!(
            "{:.1} pages above, {:.1} pages below",
            info.pages_above, info.pages_below
        ));
    }
    if info.scrollable_width > info.visible_width {
        parts.push(format!("horizontal {:.0}%", info.horizontal_pct));
    }
    parts.join(" ")
}

struct ScrollInfo {
    scrollable_height: f64,
    scrollable_width: f64,
    visible_height: f64,
    visible_width: f64,
    pages_above: f64,
    pages_below: f64,
    vertical_pct: f64,
    horizontal_pct: f64,
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn scroll_info(tree: &Tree, id: NodeId) -> Option<ScrollInfo> {
    if !tree.is_scrollable(id) {
        return None;
    }
    let l = tree.node(id).layout.as_ref()?;
    let (scroll, client) = (l.scroll_rect?, l.client_rect?);
    let above = scroll.y.max(0.0);
    let below = (scroll.height - client.height - scroll.y).max(0.0);
    let mut vertical_pct = 0.0;
    let mut horizontal_pct = 0.0;
    if scroll.height > client.height {
        let max = scroll.height - client.height;
        vertical_pct = if max > 0.0 {
            scroll.y / max * 100.0
        } else {
            0.0
        };
    }
    if scroll.width > client.width {
        let max = scroll.width - client.width;
        horizontal_pct = if max > 0.0 {
            scroll.x / max * 100.0
        } else {
            0.0
        };
    }
    let pages = |v: f64| {
        if client.height > 0.0 {
            v / client.height
        } else {
            0.0
        }
    };
    Some(ScrollInfo {
        scrollable_height: scroll.height,
        scrollable_width: scroll.width,
        visible_height: client.height,
        visible_width: client.width,
        pages_above: round1(pages(above)),
        pages_below: round1(pages(below)),
        vertical_pct: round1(vertical_pct),
        horizontal_pct: round1(horizontal_pct),
    })
}

/// browser-use's `_build_attributes_string` with the default include list.
pub(crate) fn build_attributes(tree: &Tree, id: NodeId) -> String {
    let include = DEFAULT_INCLUDE_ATTRIBUTES;
    let n = tree.node(id);
    // Insertion-ordered map.
    let mut attrs: Vec<(String, String)> = Vec::new();
    let set = |attrs: &mut Vec<(String, String)>, k: &str, v: String| {
        if let Some(slot) = attrs.iter_mut().find(|(key, _)| key == k) {
            slot.1 = v;
        } else {
            attrs.push((k.to_owned(), v));
        }
    };
    for (k, v) in &n.attributes {
        if include.contains(&k.as_str()) {
            let v = v.trim();
            if !v.is_empty() {
                set(&mut attrs, k, v.to_owned());
            }
        }
    }
    let is_input = n.tag == "input";
    let input_type = n.attr("type").unwrap_or("").to_lowercase();
    if is_input && !n.attributes.is_empty() {
        let format = match input_type.as_str() {
            "date" => Some("YYYY-MM-DD"),
            "time" => Some("HH:MM"),
            "datetime-local" => Some("YYYY-MM-DDTHH:MM"),
            "month" => Some("YYYY-MM"),
            "week" => Some("YYYY-W##"),
            _ => None,
        };
        if let Some(f) = format {
            set(&mut attrs, "format", f.to_owned());
        }
        if !attrs.iter().any(|(k, _)| k == "placeholder") {
            if let Some(f) = format {
                set(&mut attrs, "placeholder", f.to_owned());
            } else if input_type == "tel" && !attrs.iter().any(|(k, _)| k == "pattern") {
                set(&mut attrs, "placeholder", "123-456-7890".to_owned());
            } else if input_type == "text" || input_type.is_empty() {
                let class = n.attr("class").unwrap_or("").to_lowercase();
                if n.has_attr("uib-datepicker-popup") {
                    let f = n.attr("uib-datepicker-popup").unwrap_or("");
                    if !f.is_empty() {
                        set(&mut attrs, "expected_format", f.to_owned());
                        set(&mut attrs, "format", f.to_owned());
                    }
                } else if ["datepicker", "datetimepicker", "daterangepicker"]
                    .iter()
                    .any(|i| class.contains(i))
                    || n.has_attr("data-datepicker")
                {
                    let f = n.attr("data-date-format").unwrap_or("");
                    let f = if f.is_empty() { "mm/dd/yyyy" } else { f };
                    set(&mut attrs, "placeholder", f.to_owned());
                    set(&mut attrs, "format", f.to_owned());
                }
            }
        }
    }
    let is_password = is_input && input_type == "password";
    if let Some(ax) = &n.ax {
        for (name, value) in &ax.properties {
            if !include.contains(&name.as_str()) || *value == AxValue::Other {
                continue;
            }
            if is_password && (name == "value" || name == "valuetext") {
                continue;
            }
            match value {
                AxValue::Bool(b) => set(&mut attrs, name, b.to_string()),
                other => {
                    let text = other.to_text().unwrap_or_default();
                    let text = text.trim();
                    if !text.is_empty() {
                        set(&mut attrs, name, text.to_owned());
                    }
                }
            }
        }
    }
    if matches!(n.tag.as_str(), "input" | "textarea" | "select") {
        if is_password {
            attrs.retain(|(k, _)| k != "value");
        } else if let Some(ax) = &n.ax {
            for (name, value) in &ax.properties {
                if (name == "valuetext" || name == "value") && value.truthy() {
                    let text = value.to_text().unwrap_or_default();
                    let text = text.trim();
                    if !text.is_empty() {
                        set(&mut attrs, "value", text.to_owned());
                        break;
                    }
                }
            }
        }
    }
    if attrs.is_empty() {
        return String::new();
    }
    // Duplicate values (in include-list order).
    let ordered: Vec<&str> = include
        .iter()
        .copied()
        .filter(|k| attrs.iter().any(|(a, _)| a == k))
        .collect();
    if ordered.len() > 1 {
        const PROTECTED: [&str; 6] = [
            "format",
            "expected_format",
            "placeholder",
            "value",
            "aria-label",
            "title",
        ];
        let mut seen: HashMap<String, &str> = HashMap::new();
        let mut remove: HashSet<&str> = HashSet::new();
        for key in ordered {
            let value = attrs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            if value.chars().count() > 5 {
                if seen.contains_key(&value) && !PROTECTED.contains(&key) {
                    remove.insert(key);
                } else {
                    seen.insert(value, key);
                }
            }
        }
        attrs.retain(|(k, _)| !remove.contains(k.as_str()));
    }
    if let Some(role) = n.ax.as_ref().and_then(|a| a.role.as_deref())
        && !role.is_empty()
        && n.node_name == role
    {
        attrs.retain(|(k, _)| k != "role");
    }
    attrs.retain(|(k, v)| {
        let v = v.to_lowercase();
        let redundant = match k.as_str() {
            "type" => v == n.node_name.to_lowercase(),
            "invalid" => v == "false",
            "required" => matches!(v.as_str(), "false" | "0" | "no"),
            _ => false,
        };
        !redundant
    });
    if attrs.iter().any(|(k, _)| k == "expanded") {
        attrs.retain(|(k, _)| k != "aria-expanded");
    }
    // Text is always '' in browser-use's call, so only empty values would match.
    attrs.retain(|(k, v)| {
        !(matches!(k.as_str(), "aria-label" | "placeholder" | "title") && v.trim().is_empty())
    });
    attrs
        .iter()
        .map(|(k, v)| {
            let capped = cap_text(v, 100);
            if capped.is_empty() {
                format!("{k}=''")
            } else {
                format!("{k}={capped}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_match_python_formatting() {
        assert_eq!(py_float(0.0), "0.0");
        assert_eq!(py_float(1.5), "1.5");
        assert_eq!(cap_text("abcdef", 3), "abc...");
        assert_eq!(cap_text("abc", 3), "abc");
        assert_eq!(
            normalize_src(" https://x.test/a/b/logo.png?x=1#f "),
            "logo.png"
        );
        assert_eq!(normalize_src("data:image/png;base64,AAAA"), "");
    }
}
