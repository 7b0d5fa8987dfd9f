//! Each paused request: checked against the policy and answered, always.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use serde_json::{Value, json};
use url::Url;

use super::{BlockedRequest, Shared, now_ms};
use crate::egress::link::CdpLink;
use crate::egress::policy::{DenyReason, EgressDenied, shorten_url};

/// Checks one paused request and answers it, always.
pub(super) async fn answer_paused(
    link: CdpLink,
    shared: Arc<Shared>,
    session: String,
    params: Value,
) {
    let Some(request_id) = params
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let url_text = params
        .pointer("/request/url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let fragment = params
        .pointer("/request/urlFragment")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let resource_type = params
        .get("resourceType")
        .and_then(Value::as_str)
        .map(str::to_string);

    let verdict = check(&shared, &url_text).await;

    let timeout = shared.options.command_timeout;
    match verdict {
        Ok(()) => {
            shared.allowed.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = link
                .call(
                    "Fetch.continueRequest",
                    Some(&session),
                    json!({ "requestId": request_id }),
                    timeout,
                )
                .await
            {
                tracing::debug!(error = %e, "egress: continueRequest failed (request gone?)");
            }
        }
        Err(denied) => {
            let (target_id, target_type) = {
                let st = shared.lock();
                st.armed
                    .get(&session)
                    .or_else(|| st.in_scope.get(&session))
                    .map(|i| (i.target_id.clone(), i.target_type.clone()))
                    .unwrap_or_default()
            };
            tracing::info!(
                origin = %origin_of(&url_text),
                reason = %denied.reason,
                resource_type = resource_type.as_deref().unwrap_or(""),
                "egress: request blocked"
            );
            let full_url = format!("{url_text}{fragment}");
            shared.record(BlockedRequest {
                url: shorten_url(&full_url),
                reason: denied.reason,
                blocked_at_ms: now_ms(),
                is_navigation: resource_type.as_deref() == Some("Document"),
                resource_type,
                target_id,
                target_type,
            });
            if let Err(e) = link
                .call(
                    "Fetch.failRequest",
                    Some(&session),
                    json!({ "requestId": request_id, "errorReason": "BlockedByClient" }),
                    timeout,
                )
                .await
            {
                tracing::debug!(error = %e, "egress: failRequest failed (request gone?)");
            }
        }
    }
}

/// The policy verdict, failing closed on timeout or panic.
async fn check(shared: &Shared, url_text: &str) -> Result<(), EgressDenied> {
    let url = Url::parse(url_text).map_err(|e| {
        EgressDenied::new(
            url_text,
            DenyReason::InvalidUrl {
                detail: e.to_string(),
            },
        )
    })?;
    let policy = shared.policy.for_url(url_text)?;
    let run = std::panic::AssertUnwindSafe(policy.check_url_resolved(&url)).catch_unwind();
    match tokio::time::timeout(shared.options.check_timeout, run).await {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(_panic)) => Err(EgressDenied::new(
            url_text,
            DenyReason::CheckFailed {
                detail: "internal error".to_string(),
            },
        )),
        Err(_) => Err(EgressDenied::new(
            url_text,
            DenyReason::CheckFailed {
                detail: format!("timed out after {:?}", shared.options.check_timeout),
            },
        )),
    }
}

/// `scheme://host:port` of a URL, for logs (paths and queries may carry secrets).
fn origin_of(url: &str) -> String {
    Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| "<unparsable>".to_string())
}
