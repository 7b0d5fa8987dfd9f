//! browser-use's interactivity rules (`ClickableElementDetector.is_interactive`), in order.

use crate::dom::{NodeId, NodeKind, Tree};

const SEARCH_INDICATORS: [&str; 10] = [
    "search",
    "magnify",
    "glass",
    "lookup",
    "find",
    "query",
    "search-icon",
    "search-btn",
    "search-button",
    "searchbox",
];

const INTERACTIVE_TAGS: [&str; 9] = [
    "button", "input", "select", "textarea", "a", "details", "summary", "option", "optgroup",
];

const INTERACTIVE_ATTRIBUTES: [&str; 6] = [
    "onclick",
    "onmousedown",
    "onmouseup",
    "onkeydown",
    "onkeyup",
    "tabindex",
];

pub(crate) const INTERACTIVE_ROLES: [&str; 16] = [
    "button",
    "link",
    "menuitem",
    "option",
    "radio",
    "checkbox",
    "tab",
    "textbox",
    "combobox",
    "slider",
    "spinbutton",
    "search",
    "searchbox",
    "row",
    "cell",
    "gridcell",
];

fn has_form_control_descendant(tree: &Tree, id: NodeId, max_depth: u32) -> bool {
    if max_depth == 0 {
        return false;
    }
    for child in tree.children_and_shadow_roots(id) {
        let c = tree.node(child);
        if c.kind != NodeKind::Element {
            continue;
        }
        if matches!(c.tag.as_str(), "input" | "select" | "textarea") {
            return true;
        }
        if has_form_control_descendant(tree, child, max_depth - 1) {
            return true;
        }
    }
    false
}

/// Rules 1–11 of browser-use, first match wins.
pub(crate) fn is_interactive(tree: &Tree, id: NodeId) -> bool {
    let node = tree.node(id);
    // 1. only elements, never html/body
    if node.kind != NodeKind::Element {
        return false;
    }
    let tag = node.tag.as_str();
    if tag == "html" || tag == "body" {
        return false;
    }
    // 2. JS click listener
    if node.js_click_listener {
        return true;
    }
    // 3. large iframes
    if tag == "iframe" || tag == "frame" {
        if let Some(b) = node.bounds() {
            if b.width > 100.0 && b.height > 100.0 {
                return true;
            }
        }
    }
    // 4. labels and spans wrapping form controls
    if tag == "label" {
        if node.attr("for").is_some_and(|v| !v.is_empty()) {
            return false;
        }
        if has_form_control_descendant(tree, id, 2) {
            return true;
        }
    }
    if tag == "span" && has_form_control_descendant(tree, id, 2) {
        return true;
    }
    // 5. search indicators in class / id / data-*
    if !node.attributes.is_empty() {
        let class = node.attr("class").unwrap_or("").to_lowercase();
        let class_joined = class.split_whitespace().collect::<Vec<_>>().join(" ");
        if SEARCH_INDICATORS.iter().any(|i| class_joined.contains(i)) {
            return true;
        }
        let element_id = node.attr("id").unwrap_or("").to_lowercase();
        if SEARCH_INDICATORS.iter().any(|i| element_id.contains(i)) {
            return true;
        }
        for (k, v) in &node.attributes {
            if k.starts_with("data-") {
                let v = v.to_lowercase();
                if SEARCH_INDICATORS.iter().any(|i| v.contains(i)) {
                    return true;
                }
            }
        }
    }
    // 6. accessibility properties
    if let Some(ax) = &node.ax {
        for (name, value) in &ax.properties {
            match name.as_str() {
                "disabled" | "hidden" if value.truthy() => return false,
                "focusable" | "editable" | "settable" if value.truthy() => return true,
                "checked" | "expanded" | "pressed" | "selected" => return true,
                "required" | "autocomplete" if value.truthy() => return true,
                "keyshortcuts" if value.truthy() => return true,
                _ => {}
            }
        }
    }
    // 7. interactive tags
    if INTERACTIVE_TAGS.contains(&tag) {
        return true;
    }
    // 8. interactive attributes, 9a. ARIA roles
    if !node.attributes.is_empty() {
        if INTERACTIVE_ATTRIBUTES.iter().any(|a| node.has_attr(a)) {
            return true;
        }
        if let Some(role) = node.attr("role") {
            if INTERACTIVE_ROLES.contains(&role) {
                return true;
            }
        }
    }
    // 9b. AX roles
    if let Some(role) = node.ax.as_ref().and_then(|a| a.role.as_deref()) {
        if INTERACTIVE_ROLES.contains(&role) || role == "listbox" {
            return true;
        }
    }
    // 10. icon-sized elements with hints
    if let Some(b) = node.bounds() {
        if (10.0..=50.0).contains(&b.width) && (10.0..=50.0).contains(&b.height) {
            const ICON_ATTRS: [&str; 5] = ["class", "role", "onclick", "data-action", "aria-label"];
            if ICON_ATTRS.iter().any(|a| node.has_attr(a)) {
                return true;
            }
        }
    }
    // 11. cursor: pointer
    node.layout.as_ref().is_some_and(|l| l.cursor_pointer)
}

/// Whether the accessibility node of `id` can change the outcome of the rules or the printed
/// attributes. Elements for which it cannot are not sent to `Accessibility.getPartialAXTree`
/// (see the crate docs: full AX trees cost more than the whole snapshot on large pages).
pub(crate) fn needs_ax(tree: &Tree, id: NodeId, inside_editable: bool) -> bool {
    let node = tree.node(id);
    if node.kind != NodeKind::Element {
        return false;
    }
    let tag = node.tag.as_str();
    if tag == "html" || tag == "body" {
        return false;
    }
    if inside_editable {
        return true;
    }
    // Tags with implicit interactive roles or AX states.
    const AX_TAGS: [&str; 20] = [
        "button", "input", "select", "textarea", "a", "details", "summary", "option", "optgroup",
        "td", "th", "tr", "iframe", "frame", "area", "audio", "video", "label", "embed", "object",
    ];
    if AX_TAGS.contains(&tag) {
        return true;
    }
    for (k, _) in &node.attributes {
        let k = k.as_str();
        if k.starts_with("aria-")
            || k.starts_with("on")
            || matches!(
                k,
                "tabindex" | "contenteditable" | "role" | "disabled" | "required" | "autocomplete"
            )
        {
            return true;
        }
    }
    if tree.is_scrollable(id) {
        return true;
    }
    let Some(layout) = &node.layout else {
        return false;
    };
    // Rules 10 and 11 would say yes: AX `hidden`/`disabled` may still veto them.
    if layout.cursor_pointer {
        return true;
    }
    if let Some(b) = layout.bounds {
        if (10.0..=50.0).contains(&b.width)
            && (10.0..=50.0).contains(&b.height)
            && ["class", "data-action"].iter().any(|a| node.has_attr(a))
        {
            return true;
        }
    }
    false
}
