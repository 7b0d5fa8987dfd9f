//! Finding a recorded element again in the page as it is now: by identity
//! ([`find_element`]), or, for a skill's element chosen by the row that showed a value, by
//! that value ([`find_near`]).

use super::MatchedBy;
use crate::browser::AgentBrowser;
use crate::skill::params::{shows, shows_exactly};
use crate::views::InteractedElement;

/// Finds `recorded` among the elements of the current capture. An element with `near` is
/// never found here (its index, hash and XPath point at the recorded row): see
/// [`find_near`].
pub fn find_element(
    recorded: &InteractedElement,
    current: &[InteractedElement],
) -> Option<(u64, MatchedBy)> {
    if recorded.near.is_some() {
        return None;
    }
    let hash = recorded.element_hash.as_deref().filter(|h| !h.is_empty());
    if let Some(hash) = hash {
        if current
            .iter()
            .any(|e| e.index == recorded.index && e.element_hash.as_deref() == Some(hash))
        {
            return Some((recorded.index, MatchedBy::Index));
        }
        if let Some(e) = only(
            current
                .iter()
                .filter(|e| e.element_hash.as_deref() == Some(hash)),
        ) {
            return Some((e.index, MatchedBy::Hash));
        }
    }
    let same_tag = |e: &&InteractedElement| e.node_name.eq_ignore_ascii_case(&recorded.node_name);
    let name = recorded
        .ax_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    // What sits at the recorded place is only the same element if it is called the same: the
    // button now first in a list is not the one that was first before.
    let same_name = |e: &&InteractedElement| {
        name.is_none_or(|name| e.ax_name.as_deref().map(str::trim) == Some(name))
    };
    if let Some(x_path) = recorded.x_path.as_deref().filter(|x| !x.is_empty())
        && let Some(e) = only(
            current
                .iter()
                .filter(same_tag)
                .filter(same_name)
                .filter(|e| e.x_path.as_deref() == Some(x_path)),
        )
    {
        return Some((e.index, MatchedBy::XPath));
    }
    if name.is_some()
        && let Some(e) = only(current.iter().filter(same_tag).filter(same_name))
    {
        return Some((e.index, MatchedBy::AxName));
    }
    None
}

/// The single item of `items`, if there is exactly one.
fn only<'a>(
    mut items: impl Iterator<Item = &'a InteractedElement>,
) -> Option<&'a InteractedElement> {
    let first = items.next()?;
    items.next().is_none().then_some(first)
}

/// Finds the element of `recorded`'s kind (same tag and accessible name) whose region shows
/// `recorded.near`: its index and region. None, or more than one (exact case first, then
/// ignoring case), is a miss with the reason.
pub async fn find_near(
    browser: &dyn AgentBrowser,
    recorded: &InteractedElement,
    current: &[InteractedElement],
) -> Result<(u64, String), String> {
    let near = recorded.near.as_deref().unwrap_or_default().trim();
    let name = recorded
        .ax_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    let candidates: Vec<u64> = current
        .iter()
        .filter(|e| e.node_name.eq_ignore_ascii_case(&recorded.node_name))
        .filter(|e| name.is_none_or(|name| e.ax_name.as_deref().map(str::trim) == Some(name)))
        .map(|e| e.index)
        .collect();
    if candidates.is_empty() || near.is_empty() {
        return Err(format!("no element like {}", describe(recorded)));
    }
    let regions = browser.element_regions(&candidates).await;
    let shown: Vec<(u64, String)> = candidates
        .iter()
        .zip(regions)
        .filter_map(|(index, region)| Some((*index, region?)))
        .collect();
    let exact: Vec<&(u64, String)> = shown
        .iter()
        .filter(|(_, region)| shows_exactly(region, near))
        .collect();
    let hits = if exact.is_empty() {
        shown
            .iter()
            .filter(|(_, region)| shows(region, near))
            .collect()
    } else {
        exact
    };
    match hits.as_slice() {
        [(index, region)] => Ok((*index, region.clone())),
        [] => Err(format!(
            "none of the {} candidates shows \"{near}\"",
            candidates.len()
        )),
        many => Err(format!(
            "{} candidates show \"{near}\" (ambiguous)",
            many.len()
        )),
    }
}

/// The element as a reader recognises it: tag, name, the value it sits next to, XPath.
pub(super) fn describe(element: &InteractedElement) -> String {
    let mut text = format!("<{}>", element.node_name);
    if let Some(name) = element.ax_name.as_deref().filter(|n| !n.is_empty()) {
        text.push_str(&format!(" \"{name}\""));
    }
    if let Some(near) = element.near.as_deref() {
        text.push_str(&format!(" next to \"{near}\""));
    } else if let Some(x_path) = element.x_path.as_deref().filter(|x| !x.is_empty()) {
        text.push_str(&format!(" at {x_path}"));
    }
    text
}
