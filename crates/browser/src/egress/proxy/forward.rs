//! Plain http: absolute-form requests forwarded to the origin in origin form, over a kept
//! connection per client connection (an `Upgrade` is honoured).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_http1;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use url::{Host, Url};

use super::{ConnectFailure, OriginSlot, ProxyBody, Shared, refused, text};
use crate::egress::policy::{DenyReason, EgressDenied, EgressPolicy, shorten_url};

/// Hop-by-hop headers a proxy must not forward (RFC 9110 §7.6.1), besides those `Connection`
/// names.
const HOP_BY_HOP: [&str; 7] = [
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
];

fn strip_hop_by_hop(headers: &mut header::HeaderMap, keep_upgrade: bool) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for name in named.iter().map(String::as_str).chain(HOP_BY_HOP) {
        if keep_upgrade && name == "upgrade" {
            continue;
        }
        headers.remove(name);
    }
    if !keep_upgrade {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
}

pub(super) async fn forward(
    mut req: Request<Incoming>,
    shared: &Arc<Shared>,
    slot: &OriginSlot,
) -> Response<ProxyBody> {
    let uri = req.uri().clone();
    let url = match request_url(&uri) {
        Ok(url) => url,
        Err(response) => return response,
    };
    let shown = shorten_url(url.as_str());
    let Some(port) = url.port_or_known_default() else {
        return text(
            StatusCode::BAD_REQUEST,
            "browserd egress proxy: no port".into(),
        );
    };
    let policy = match shared.policy.for_url(&shown) {
        Ok(policy) => policy,
        Err(denied) => return refused(shared, denied, "HTTP"),
    };
    if let Err(denied) = policy.check_url(&url) {
        return refused(shared, denied, "HTTP");
    }
    let Some(host) = url.host() else {
        return refused(
            shared,
            EgressDenied::new(&shown, DenyReason::MissingHost),
            "HTTP",
        );
    };
    let key = format!("{host}:{port}");
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);

    let mut sender = match origin_sender(shared, slot, policy, &host, port, &key, &shown).await {
        Ok(sender) => sender,
        Err(response) => return response,
    };

    let wants_upgrade = req.headers().contains_key(header::UPGRADE);
    let client_upgrade = wants_upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers, wants_upgrade);
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    parts.uri = match path.parse() {
        Ok(p) => p,
        Err(_) => {
            return text(
                StatusCode::BAD_REQUEST,
                "browserd egress proxy: bad path".into(),
            );
        }
    };
    if !parts.headers.contains_key(header::HOST)
        && let Some(authority) = uri.authority()
        && let Ok(value) = header::HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(header::HOST, value);
    }
    let sent = sender.send_request(Request::from_parts(parts, body));
    let mut response = match tokio::time::timeout(shared.options.response_timeout, sent).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("browserd egress proxy: {key}: {e}"),
            );
        }
        Err(_) => {
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("browserd egress proxy: {key} did not answer in time"),
            );
        }
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_upgrade) = client_upgrade {
            splice_upgrade(shared, client_upgrade, &mut response);
        }
    } else {
        *slot.lock().await = Some((key, sender));
        strip_hop_by_hop(response.headers_mut(), false);
    }
    response.map(|body| body.boxed())
}

/// The URL of an absolute-form `http://` request, or the answer refusing the request.
#[allow(clippy::result_large_err)] // the refusal is the response itself, returned at once
fn request_url(uri: &hyper::Uri) -> Result<Url, Response<ProxyBody>> {
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(text(
            StatusCode::BAD_REQUEST,
            "browserd egress proxy: expected CONNECT host:port or an absolute-form http:// request"
                .into(),
        ));
    }
    match Url::parse(&uri.to_string()) {
        Ok(url) if url.scheme() == "http" => Ok(url),
        Ok(url) => Err(text(
            StatusCode::BAD_REQUEST,
            format!(
                "browserd egress proxy: only http:// is forwarded (use CONNECT for {}:)",
                url.scheme()
            ),
        )),
        Err(e) => Err(text(
            StatusCode::BAD_REQUEST,
            format!("browserd egress proxy: invalid request URL: {e}"),
        )),
    }
}

/// A connection to the origin `key` (`host`:`port`): the kept one when it goes there and is
/// usable, else a new one to an address the policy allows — or the answer refusing the
/// request.
async fn origin_sender(
    shared: &Arc<Shared>,
    slot: &OriginSlot,
    policy: &EgressPolicy,
    host: &Host<&str>,
    port: u16,
    key: &str,
    shown: &str,
) -> Result<client_http1::SendRequest<Incoming>, Response<ProxyBody>> {
    // The kept origin connection, if it goes to the same host and port and is usable.
    let kept = slot.lock().await.take();
    let mut sender = match kept {
        Some((k, mut s)) if k == key && !s.is_closed() => {
            match tokio::time::timeout(Duration::from_secs(1), s.ready()).await {
                Ok(Ok(())) => Some(s),
                _ => None,
            }
        }
        _ => None,
    };
    if sender.is_none() {
        let check = policy.resolve_checked(host, shown);
        let addrs = match shared.checked(shown, check).await {
            Ok(addrs) => addrs,
            Err(denied) => return Err(refused(shared, denied, "HTTP")),
        };
        let stream = match shared.connect(&addrs, port, shown).await {
            Ok(stream) => stream,
            Err(ConnectFailure::Denied(denied)) => return Err(refused(shared, denied, "HTTP")),
            Err(ConnectFailure::Unreachable(e)) => {
                return Err(text(
                    StatusCode::BAD_GATEWAY,
                    format!("browserd egress proxy: cannot reach {key}: {e}"),
                ));
            }
        };
        let handshake = client_http1::Builder::new().handshake(TokioIo::new(stream));
        let (s, conn) = match tokio::time::timeout(shared.options.connect_timeout, handshake).await
        {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                return Err(text(
                    StatusCode::BAD_GATEWAY,
                    format!("browserd egress proxy: {key}: {e}"),
                ));
            }
            Err(_) => {
                return Err(text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("browserd egress proxy: {key}: handshake timed out"),
                ));
            }
        };
        let cancel = shared.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = conn.with_upgrades() => {}
            }
        });
        sender = Some(s);
    }
    sender.ok_or_else(|| {
        text(
            StatusCode::BAD_GATEWAY,
            "browserd egress proxy: no connection".into(),
        )
    })
}

/// Splices the client's and the origin's upgraded connections (a `101 Switching Protocols`
/// answer: WebSocket) once both are ready, until the proxy shuts down.
fn splice_upgrade(
    shared: &Arc<Shared>,
    client_upgrade: hyper::upgrade::OnUpgrade,
    response: &mut Response<Incoming>,
) {
    let origin_upgrade = hyper::upgrade::on(response);
    let cancel = shared.cancel.clone();
    tokio::spawn(async move {
        let pair = tokio::select! {
            () = cancel.cancelled() => return,
            pair = async { tokio::try_join!(client_upgrade, origin_upgrade) } => pair,
        };
        if let Ok((client, origin)) = pair {
            let (mut client, mut origin) = (TokioIo::new(client), TokioIo::new(origin));
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut client, &mut origin) => {}
            }
        }
    });
}
