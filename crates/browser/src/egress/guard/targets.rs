//! The targets a hub is told of: routed to their guard, armed (Fetch enabled, auto-attach on
//! their sessions) before they are resumed, released when they go.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::hub::Routes;
use super::requests::answer_paused;
use super::{BlockedRequest, SessionInfo, Shared, auto_attach_params, now_ms};
use crate::egress::link::{CdpLink, LinkError, RawEvent};
use crate::egress::policy::DenyReason;

pub(super) async fn dispatch(
    mut events: mpsc::UnboundedReceiver<RawEvent>,
    link: CdpLink,
    routes: Arc<Routes>,
    timeout: Duration,
) {
    while let Some(event) = events.recv().await {
        match event.method.as_str() {
            "Fetch.requestPaused" => {
                let Some(session) = event.session_id else {
                    continue;
                };
                let owner = routes.lock().sessions.get(&session).cloned();
                match owner {
                    Some(shared) => {
                        tokio::spawn(answer_paused(link.clone(), shared, session, event.params));
                    }
                    // Fetch is enabled only by a guard on a session it owns: a pause nobody
                    // owns is refused.
                    None => {
                        tokio::spawn(refuse_unowned(link.clone(), session, event.params, timeout));
                    }
                }
            }
            "Target.attachedToTarget" => {
                on_attached(
                    &link,
                    &routes,
                    event.session_id.as_deref(),
                    event.params,
                    timeout,
                );
            }
            "Target.detachedFromTarget" => {
                if let Some(session) = event.params.get("sessionId").and_then(Value::as_str) {
                    let owner = routes.lock().sessions.remove(session);
                    if let Some(shared) = owner {
                        let mut st = shared.lock();
                        st.in_scope.remove(session);
                        if let Some(info) = st.armed.remove(session) {
                            st.armed_targets.remove(&info.target_id);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

pub(super) async fn refuse_unowned(
    link: CdpLink,
    session: String,
    params: Value,
    timeout: Duration,
) {
    if let Some(request_id) = params.get("requestId").and_then(Value::as_str) {
        let _ = link
            .call(
                "Fetch.failRequest",
                Some(&session),
                json!({ "requestId": request_id, "errorReason": "BlockedByClient" }),
                timeout,
            )
            .await;
    }
}

pub(super) fn on_attached(
    link: &CdpLink,
    routes: &Arc<Routes>,
    parent_session: Option<&str>,
    params: Value,
    timeout: Duration,
) {
    let Some(session) = params
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let info = params.get("targetInfo").cloned().unwrap_or(Value::Null);
    let target_id = info
        .get("targetId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let target_type = info
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("other")
        .to_string();
    let context = info.get("browserContextId").and_then(Value::as_str);
    let waiting = params
        .get("waitingForDebugger")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let info = SessionInfo {
        target_id,
        target_type,
    };
    // The guard of the parent target (an OOPIF's, a worker's), else of the whole browser,
    // else of the target's context.
    let owner = {
        let mut routes = routes.lock();
        let owner = parent_session
            .and_then(|p| routes.sessions.get(p).cloned())
            .or_else(|| routes.whole.clone())
            .or_else(|| context.and_then(|c| routes.contexts.get(c).cloned()));
        if let Some(shared) = &owner {
            routes.sessions.insert(session.clone(), shared.clone());
            shared.lock().in_scope.insert(session.clone(), info.clone());
        }
        owner
    };
    let link = link.clone();
    let parent = parent_session.map(str::to_string);
    tokio::spawn(async move {
        match owner {
            Some(shared) => arm(&link, &shared, &session, info, waiting).await,
            None => release(&link, timeout, &session, parent.as_deref(), waiting).await,
        }
    });
}

/// Not ours: let it run and stop listening to it.
pub(super) async fn release(
    link: &CdpLink,
    timeout: Duration,
    session: &str,
    parent: Option<&str>,
    waiting: bool,
) {
    if waiting
        && let Err(e) = link
            .call(
                "Runtime.runIfWaitingForDebugger",
                Some(session),
                json!({}),
                timeout,
            )
            .await
    {
        tracing::debug!(error = %e, "egress: resuming a foreign target failed");
    }
    let _ = link
        .call(
            "Target.detachFromTarget",
            parent,
            json!({ "sessionId": session }),
            timeout,
        )
        .await;
}

/// Ours: enable interception (and auto-attach for its children), then resume it.
pub(super) async fn arm(
    link: &CdpLink,
    shared: &Shared,
    session: &str,
    info: SessionInfo,
    waiting: bool,
) {
    let timeout = shared.options.command_timeout;
    // Interception and the children's auto-attach (OOPIFs, dedicated workers must arrive
    // paused as well) are both in place before the target is resumed; Chrome runs a session's
    // commands in order, so they are sent together.
    let (fetch, children) = tokio::join!(
        link.call(
            "Fetch.enable",
            Some(session),
            json!({ "patterns": [{ "urlPattern": "*", "requestStage": "Request" }] }),
            timeout,
        ),
        link.call(
            "Target.setAutoAttach",
            Some(session),
            auto_attach_params(),
            timeout,
        )
    );
    match fetch {
        Ok(_) => {}
        // Dedicated workers have no Fetch domain: their requests are intercepted by the
        // session of the frame that owns them (armed before the worker could exist).
        Err(LinkError::Protocol { code: -32601, .. }) if info.target_type == "worker" => {}
        Err(e) => {
            on_arm_failed(link, shared, &info, &e).await;
            return;
        }
    }
    // Not every target type supports auto-attach (e.g. some workers); their children, if any,
    // are not web content.
    if let Err(e) = children {
        tracing::debug!(error = %e, target_type = %info.target_type, "egress: child auto-attach not available");
    }
    {
        let mut st = shared.lock();
        st.armed.insert(session.to_string(), info.clone());
        st.armed_targets.insert(info.target_id.clone());
        *st.stats
            .armed_targets
            .entry(info.target_type.clone())
            .or_default() += 1;
    }
    shared.armed_notify.notify_waiters();
    if waiting
        && let Err(e) = link
            .call(
                "Runtime.runIfWaitingForDebugger",
                Some(session),
                json!({}),
                timeout,
            )
            .await
    {
        tracing::warn!(error = %e, target_type = %info.target_type, "egress: resuming an armed target failed");
    }
}

pub(super) async fn on_arm_failed(
    link: &CdpLink,
    shared: &Shared,
    info: &SessionInfo,
    e: &LinkError,
) {
    tracing::warn!(error = %e, target_type = %info.target_type, "egress: cannot intercept target; holding it");
    {
        let mut st = shared.lock();
        st.stats.unarmed_targets += 1;
    }
    shared.record(BlockedRequest {
        url: String::new(),
        reason: DenyReason::CheckFailed {
            detail: format!(
                "requests of a new {} could not be intercepted: {e}",
                info.target_type
            ),
        },
        blocked_at_ms: now_ms(),
        resource_type: None,
        is_navigation: false,
        target_id: info.target_id.clone(),
        target_type: info.target_type.clone(),
    });
    if info.target_type == "page" {
        let _ = link
            .call(
                "Target.closeTarget",
                None,
                json!({ "targetId": info.target_id }),
                shared.options.command_timeout,
            )
            .await;
    }
}
