//! Authentication of `/v1`: bearer keys (header), and for the event WebSocket also single-use
//! tickets (`?ticket=`) and the `Sec-WebSocket-Protocol: bearer, <key>` convention.
//!
//! Order of checks, so that a flood of made-up keys never reaches Postgres at full rate:
//! 1. a key in the URL (`?key=`, `?api_key=`, `?token=`, …) is refused outright (400);
//! 2. a key found in the process's short-lived cache of successful lookups (keyed by SHA-256,
//!    evicted on revocation by the hub's `api_keys` notifications, and after [`KEY_CACHE_TTL`])
//!    is accepted without touching the database;
//! 3. anything else — no key, an unknown key, a ticket — first takes a token from the client
//!    address's bucket (429 when empty), and only then is looked up;
//! 4. an authenticated key takes a token from its own bucket (429 when empty).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use browserd_tasks::TaskCore;
use browserd_tasks::records::{KEY_PREFIX, KeySignal, hash_api_key};
use browserd_types::{ApiKeyId, TaskId};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::client_ip::request_client_ip;
use crate::error::ApiError;
use crate::extract::Caller;

/// A successful key lookup is reused for this long (revocations evict it at once through the
/// hub; this bounds staleness should a notification be lost).
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
/// Entries kept at most; the cache is emptied when full (bounded memory).
const KEY_CACHE_CAPACITY: usize = 10_000;
/// The routes (a task's WebSockets) that accept tickets and the subprotocol convention.
pub(crate) const WEBSOCKET_ROUTES: [&str; 2] = ["/v1/tasks/{id}/events", "/v1/tasks/{id}/live"];
/// The subprotocol a browser offers next to its key: `new WebSocket(url, ["bearer", key])`.
pub const BEARER_SUBPROTOCOL: &str = "bearer";
/// Query parameters that look like a long-lived credential in a URL; always refused.
const KEY_QUERY_PARAMS: &[&str] = &[
    "key",
    "api_key",
    "apikey",
    "api-key",
    "token",
    "access_token",
    "bearer",
    "authorization",
];

/// A token bucket's shape (per key, or per client address): `burst` requests at once, then one
/// more every `replenish_every`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub replenish_every: Duration,
    pub burst: NonZeroU32,
}

impl RateLimit {
    /// `per_second` requests per second with a burst of `burst`.
    pub fn per_second(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        Self {
            replenish_every: Duration::from_secs(1) / per_second.get(),
            burst,
        }
    }
}

/// One token bucket per `K` (an API key, or a client address).
pub(crate) struct KeyedRateLimiter<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    clock: DefaultClock,
}

impl<K: Hash + Eq + Clone> KeyedRateLimiter<K> {
    pub(crate) fn new(limit: RateLimit) -> Arc<Self> {
        let quota = Quota::with_period(limit.replenish_every)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
            .allow_burst(limit.burst);
        Arc::new(Self {
            limiter: DefaultKeyedRateLimiter::keyed(quota),
            clock: DefaultClock::default(),
        })
    }

    /// `Err(seconds to wait)` when `key` is over its budget.
    pub(crate) fn check(&self, key: &K) -> Result<(), u64> {
        self.limiter.check_key(key).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }

    /// Forgets keys whose buckets are full again (bounded memory).
    pub(crate) fn retain_recent(&self) {
        self.limiter.retain_recent();
    }
}

pub(crate) type KeyRateLimiter = KeyedRateLimiter<ApiKeyId>;
pub(crate) type IpRateLimiter = KeyedRateLimiter<IpAddr>;

/// Successful key lookups of this process, by key hash.
pub(crate) struct KeyCache {
    entries: Mutex<HashMap<[u8; 32], (ApiKeyId, Instant)>>,
    ttl: Duration,
}

impl KeyCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            entries: Mutex::default(),
            ttl,
        }
    }

    fn get(&self, hash: &[u8; 32]) -> Option<ApiKeyId> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(hash)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(id, _)| *id)
    }

    fn insert(&self, hash: [u8; 32], id: ApiKeyId) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= KEY_CACHE_CAPACITY {
            entries.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if entries.len() >= KEY_CACHE_CAPACITY {
                entries.clear();
            }
        }
        entries.insert(hash, (id, Instant::now()));
    }

    fn forget(&self, id: ApiKeyId) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, (cached, _)| *cached != id);
    }

    fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Evicts revoked keys as the hub announces them, until `shutdown`.
    pub(crate) fn follow_revocations(
        self: &Arc<Self>,
        core: &TaskCore,
        shutdown: CancellationToken,
    ) {
        let cache = Arc::clone(self);
        let mut signals = core.key_signals();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    signal = signals.recv() => match signal {
                        Some(KeySignal::Revoked(id)) => cache.forget(id),
                        Some(KeySignal::Resync) => cache.clear(),
                        None => {
                            // The hub stopped: no more revocations arrive, so cache nothing.
                            cache.clear();
                            break;
                        }
                    },
                }
            }
        });
    }
}

/// What a request presented.
enum Credential {
    Key(SecretString),
    Ticket { ticket: SecretString, task: TaskId },
}

fn unauthorized(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Unauthorized {
        code,
        message: message.into(),
    }
}

fn bearer_token(value: &axum::http::HeaderValue) -> Result<SecretString, ApiError> {
    let value = value
        .to_str()
        .map_err(|_| unauthorized("invalid_api_key", "invalid API key"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthorized("invalid_api_key", "expected `Authorization: Bearer <key>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthorized(
            "invalid_api_key",
            "expected `Authorization: Bearer <key>`",
        ));
    }
    Ok(SecretString::from(token.trim().to_owned()))
}

/// The key of `Sec-WebSocket-Protocol: bearer, <key>`, when the client offers `bearer`.
fn subprotocol_key(headers: &HeaderMap) -> Result<Option<SecretString>, ApiError> {
    let offered: Vec<&str> = headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if !offered.contains(&BEARER_SUBPROTOCOL) {
        return Ok(None);
    }
    let keys: Vec<&&str> = offered
        .iter()
        .filter(|p| p.starts_with(KEY_PREFIX))
        .collect();
    match keys.as_slice() {
        [key] => Ok(Some(SecretString::from((**key).to_owned()))),
        _ => Err(unauthorized(
            "invalid_api_key",
            "with the `bearer` subprotocol, offer exactly one other subprotocol: your key \
             (`Sec-WebSocket-Protocol: bearer, bd_…`)",
        )),
    }
}

/// The task id of a WebSocket route path (`/v1/tasks/{id}/events`, `/v1/tasks/{id}/live`).
fn events_task(path: &str) -> Option<TaskId> {
    let mut segments = path.trim_start_matches('/').split('/');
    match (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) {
        (Some("v1"), Some("tasks"), Some(id), Some("events" | "live")) => id.parse().ok(),
        _ => None,
    }
}

/// Reads the request's credential, refusing keys in the URL.
fn credential(request: &Request) -> Result<Credential, ApiError> {
    let query = request.uri().query().unwrap_or("");
    let mut ticket = None;
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if KEY_QUERY_PARAMS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(ApiError::BadRequest {
                code: "credential_in_url",
                message: format!(
                    "credentials are never accepted in the URL (`{name}=`): URLs end up in logs \
                     and browser history. Send `Authorization: Bearer <key>`; for the event \
                     WebSocket, a ticket (POST /v1/tasks/{{id}}/events/ticket, then \
                     `?ticket=`) or `Sec-WebSocket-Protocol: bearer, <key>`"
                ),
            });
        }
        if name == "ticket" {
            ticket = Some(value.into_owned());
        }
    }
    let events = request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|path| WEBSOCKET_ROUTES.contains(&path.as_str()));
    if let Some(value) = request.headers().get(AUTHORIZATION) {
        return bearer_token(value).map(Credential::Key);
    }
    if events {
        if let Some(key) = subprotocol_key(request.headers())? {
            return Ok(Credential::Key(key));
        }
        if let Some(ticket) = ticket {
            let task = events_task(request.uri().path())
                .ok_or_else(|| unauthorized("invalid_ticket", "invalid or expired ticket"))?;
            return Ok(Credential::Ticket {
                ticket: SecretString::from(ticket),
                task,
            });
        }
        return Err(unauthorized(
            "missing_api_key",
            "send your API key as `Authorization: Bearer <key>`, as \
             `Sec-WebSocket-Protocol: bearer, <key>`, or a ticket as `?ticket=`",
        ));
    }
    Err(unauthorized(
        "missing_api_key",
        "send your API key as `Authorization: Bearer <key>`",
    ))
}

/// Middleware: authenticates the request (401 otherwise), applies the rate limits (429 with
/// `Retry-After`), and makes the key available to handlers as [`Caller`].
pub(crate) async fn require_api_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let client = request_client_ip(
        request.headers(),
        request.extensions(),
        &state.edge.trusted_proxies,
    );
    let credential = credential(&request);
    let caller = match authenticate(&state, client, credential).await {
        Ok(caller) => caller,
        Err(err) => return closing_if_unread(request.headers(), err.into_response()),
    };
    tracing::Span::current().record("api_key_id", tracing::field::display(caller.key_id));
    if let Some(limiter) = &state.rate_limiter
        && let Err(retry_after_secs) = limiter.check(&caller.key_id)
    {
        metrics::counter!("browserd_rate_limited_total", "limit" => "key").increment(1);
        let refused = ApiError::RateLimited { retry_after_secs }.into_response();
        return closing_if_unread(request.headers(), refused);
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// A refusal sent without reading the request's body: the server cannot reuse the connection
/// (the unread body is still on it), so the response says `Connection: close`. Without it, a
/// client that sends its next request on the same connection right away may find the connection
/// closed under it, with no response.
pub(crate) fn closing_if_unread(request: &HeaderMap, mut response: Response) -> Response {
    let chunked = request.get(axum::http::header::TRANSFER_ENCODING).is_some();
    let sized = request
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    if chunked || sized {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Another front door's way in (`/api/v2`, whose key travels in its own header): the same
/// per-address limit, key cache and lookup as `/v1`. `None` (no key sent) costs the client a
/// token and is a 401.
pub(crate) async fn authenticate_key(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
    key: Option<SecretString>,
) -> Result<Caller, ApiError> {
    let client = request_client_ip(headers, extensions, &state.edge.trusted_proxies);
    let credential = key
        .filter(|k| !k.expose_secret().is_empty())
        .map(Credential::Key)
        .ok_or_else(|| unauthorized("missing_api_key", "send your API key"));
    authenticate(state, client, credential).await
}

/// The pre-auth limit for a route that takes no key (a signed download link): the client
/// address pays a token, as a request without a key does.
pub(crate) fn charge_unauthenticated(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<(), ApiError> {
    let client = request_client_ip(headers, extensions, &state.edge.trusted_proxies);
    charge_client(state, client)
}

/// Takes a token from the client address's bucket: every request that is about to cost a
/// database lookup (or carries no credential at all) pays here first.
fn charge_client(state: &AppState, client: IpAddr) -> Result<(), ApiError> {
    if let Some(limiter) = &state.edge.ip_limiter
        && let Err(retry_after_secs) = limiter.check(&client)
    {
        metrics::counter!("browserd_rate_limited_total", "limit" => "client").increment(1);
        return Err(ApiError::RateLimited { retry_after_secs });
    }
    Ok(())
}

async fn authenticate(
    state: &AppState,
    client: IpAddr,
    credential: Result<Credential, ApiError>,
) -> Result<Caller, ApiError> {
    let credential = match credential {
        Ok(credential) => credential,
        Err(err @ ApiError::Unauthorized { .. }) => {
            charge_client(state, client)?;
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    match credential {
        Credential::Key(key) => {
            let hash = hash_api_key(key.expose_secret());
            if let Some(key_id) = state.edge.key_cache.get(&hash) {
                return Ok(Caller::key(key_id));
            }
            charge_client(state, client)?;
            let record = state
                .core
                .authenticate_api_key(&key)
                .await?
                .ok_or_else(|| unauthorized("invalid_api_key", "invalid API key"))?;
            state.edge.key_cache.insert(hash, record.id);
            Ok(Caller::key(record.id))
        }
        Credential::Ticket { ticket, task } => {
            charge_client(state, client)?;
            let (key_id, scope) = state
                .core
                .redeem_ws_ticket(&ticket, task)
                .await?
                .ok_or_else(|| {
                    unauthorized(
                        "invalid_ticket",
                        "invalid or expired ticket (tickets work once, for the task they were \
                         issued for, within their lifetime)",
                    )
                })?;
            Ok(Caller::scoped(key_id, scope))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_task_reads_the_path() {
        let id = TaskId::new();
        assert_eq!(events_task(&format!("/v1/tasks/{id}/events")), Some(id));
        assert_eq!(events_task(&format!("/v1/tasks/{id}/live")), Some(id));
        assert_eq!(events_task("/v1/tasks/nope/events"), None);
        assert_eq!(events_task(&format!("/v1/tasks/{id}")), None);
    }

    #[test]
    fn subprotocol_convention() {
        let mut headers = HeaderMap::new();
        headers.insert(SEC_WEBSOCKET_PROTOCOL, "bearer, bd_abc".parse().unwrap());
        let key = subprotocol_key(&headers).unwrap().unwrap();
        assert_eq!(key.expose_secret(), "bd_abc");
        headers.insert(SEC_WEBSOCKET_PROTOCOL, "chat".parse().unwrap());
        assert!(subprotocol_key(&headers).unwrap().is_none());
        headers.insert(SEC_WEBSOCKET_PROTOCOL, "bearer".parse().unwrap());
        assert!(subprotocol_key(&headers).is_err());
        headers.insert(
            SEC_WEBSOCKET_PROTOCOL,
            "bearer, bd_a, bd_b".parse().unwrap(),
        );
        assert!(subprotocol_key(&headers).is_err());
    }
}
