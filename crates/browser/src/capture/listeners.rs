//! The click-listener probe: which elements have a JS click, mouse or pointer listener
//! (browser-use's `getEventListeners` probe).

use std::{collections::HashSet, time::Duration};

use serde::Deserialize;
use serde_json::json;

use crate::{
    cdp::CdpConnection,
    dom::{NodeId, NodeKind, Tree},
};

const MAX_LISTENER_ELEMENTS: usize = 100;
const LISTENER_OVERFLOW: &str = "__browserd_too_many_click_listeners__";

/// Object group of the listener probe's remote objects (released after each probe).
const LISTENER_OBJECT_GROUP: &str = "browserd-click-listeners";

/// The event types that make an element "have a JS click listener" (browser-use's probe).
const CLICK_LISTENER_TYPES: [&str; 5] =
    ["click", "mousedown", "mouseup", "pointerdown", "pointerup"];

/// The JS test on `l = getEventListeners(el)` for a click/mouse/pointer listener.
fn has_click_listener_js() -> String {
    CLICK_LISTENER_TYPES
        .iter()
        .map(|t| format!("l.{t}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Elements with click/mouse/pointer listeners (browser-use's `getEventListeners` probe):
/// skipped above 10 000 elements, abandoned above 100 matches. Failures are not fatal.
///
/// The bounded scan runs in the page exactly as browser-use's does, but only counts; when
/// 1..=100 elements matched it hands back `document`, and one
/// `DOMDebugger.getEventListeners(depth -1, pierce false)` — the same listener source
/// `getEventListeners` reads, over the same light-DOM subtree `querySelectorAll('*')` walks —
/// returns every listener with its `backendNodeId`. Two round trips in all, instead of one
/// `DOM.describeNode` per matching element (each CDP call costs ~0.1–0.2 ms of Chrome's
/// main thread, which was most of the probe's cost on small pages).
pub(super) async fn click_listener_ids(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> HashSet<i64> {
    let types = has_click_listener_js();
    let expression = format!(
        r#"(() => {{
  if (typeof getEventListeners !== 'function') return null;
  const all = document.querySelectorAll('*');
  if (all.length > 10000) return null;
  let found = 0;
  for (const el of all) {{
    try {{
      const l = getEventListeners(el);
      if ({types}) {{
        found += 1;
        if (found > {MAX_LISTENER_ELEMENTS}) return '{LISTENER_OVERFLOW}';
      }}
    }} catch (e) {{}}
  }}
  return found > 0 ? document : null;
}})()"#
    );
    #[derive(Deserialize)]
    struct Evaluated {
        result: RemoteObject,
    }
    #[derive(Deserialize)]
    struct RemoteObject {
        #[serde(rename = "objectId")]
        object_id: Option<String>,
    }
    #[derive(Deserialize)]
    struct Listeners<'a> {
        #[serde(borrow)]
        listeners: Vec<Listener<'a>>,
    }
    #[derive(Deserialize)]
    struct Listener<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(rename = "backendNodeId")]
        backend_node_id: Option<i64>,
    }
    let mut ids = HashSet::new();
    let Ok(raw) = conn
        .call_raw(
            Some(session),
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "includeCommandLineAPI": true,
                "returnByValue": false,
                "objectGroup": LISTENER_OBJECT_GROUP,
            }),
            timeout,
        )
        .await
    else {
        return ids;
    };
    let document_object = raw
        .decode::<Evaluated>()
        .ok()
        .and_then(|e| e.result.object_id);
    let Some(document_object) = document_object else {
        return ids;
    };
    // Commands on one session run in order: the release is processed after the listeners.
    let listeners = conn.call_raw(
        Some(session),
        "DOMDebugger.getEventListeners",
        json!({"objectId": document_object, "depth": -1, "pierce": false}),
        timeout,
    );
    let release = conn.call_raw(
        Some(session),
        "Runtime.releaseObjectGroup",
        json!({"objectGroup": LISTENER_OBJECT_GROUP}),
        timeout,
    );
    let (listeners, _) = tokio::join!(listeners, release);
    if let Ok(raw) = listeners
        && let Ok(found) = raw.decode::<Listeners<'_>>()
    {
        ids.extend(
            found
                .listeners
                .iter()
                .filter(|l| CLICK_LISTENER_TYPES.contains(&l.kind.as_ref()))
                .filter_map(|l| l.backend_node_id),
        );
    }
    ids
}

/// What the in-page click-listener scan of the main document found.
#[derive(Debug, Default, PartialEq)]
pub(super) enum ListenerScan {
    /// No listeners, too many elements or matches, or the scan failed: nothing to flag.
    #[default]
    Nothing,
    /// `total` elements in `querySelectorAll('*')` order; the matching ones by position, with
    /// their `nodeName` to check the mapping onto the snapshot.
    Positions {
        total: usize,
        hits: Vec<(usize, String)>,
    },
}

/// The scan of [`click_listener_ids`] answering by value in one round trip: positions in
/// document order (`querySelectorAll('*')`), which [`light_dom_listener_ids`] maps onto the
/// snapshot's elements — no second call to name the nodes.
pub(super) async fn click_listener_scan(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> ListenerScan {
    let types = has_click_listener_js();
    let expression = format!(
        r#"(() => {{
  if (typeof getEventListeners !== 'function') return null;
  const all = document.querySelectorAll('*');
  if (all.length > 10000) return null;
  const hits = [];
  for (let i = 0; i < all.length; i++) {{
    try {{
      const l = getEventListeners(all[i]);
      if ({types}) {{
        if (hits.length >= {MAX_LISTENER_ELEMENTS}) return null;
        hits.push([i, all[i].nodeName]);
      }}
    }} catch (e) {{}}
  }}
  return hits.length > 0 ? {{total: all.length, hits}} : null;
}})()"#
    );
    #[derive(Deserialize)]
    struct Evaluated {
        result: Returned,
    }
    #[derive(Deserialize)]
    struct Returned {
        value: Option<Found>,
    }
    #[derive(Deserialize)]
    struct Found {
        total: usize,
        hits: Vec<(usize, String)>,
    }
    let answer = conn
        .call_raw(
            Some(session),
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "includeCommandLineAPI": true,
                "returnByValue": true,
            }),
            timeout,
        )
        .await;
    match answer.and_then(|raw| raw.decode::<Evaluated>()) {
        Ok(Evaluated {
            result: Returned {
                value: Some(Found { total, hits }),
            },
        }) => ListenerScan::Positions { total, hits },
        _ => ListenerScan::Nothing,
    }
}

/// Maps scan positions onto the main document's light-DOM elements of the snapshot (which
/// lists them in document order). `None` when the mapping cannot be trusted: the document has
/// shadow trees (the snapshot walks the flat tree, where slotted light children move), or the
/// element count or a hit's `nodeName` differs (the page changed between snapshot and scan).
pub(super) fn light_dom_listener_ids(
    tree: &Tree,
    root: Option<NodeId>,
    total: usize,
    hits: &[(usize, String)],
) -> Option<HashSet<i64>> {
    let main_frame = tree.node(root?).frame_id.clone();
    let mut elements: Vec<NodeId> = Vec::with_capacity(total);
    for (id, node) in tree.nodes.iter().enumerate() {
        if node.target != 0 || node.frame_id != main_frame {
            continue;
        }
        if node.in_shadow || matches!(node.kind, NodeKind::ShadowRoot(_)) {
            return None;
        }
        if node.kind == NodeKind::Element {
            elements.push(id as NodeId);
        }
    }
    if elements.len() != total {
        return None;
    }
    let mut ids = HashSet::with_capacity(hits.len());
    for (position, node_name) in hits {
        let node = tree.node(*elements.get(*position)?);
        if !node.node_name.eq_ignore_ascii_case(node_name) {
            return None;
        }
        ids.insert(node.backend_node_id);
    }
    Some(ids)
}
