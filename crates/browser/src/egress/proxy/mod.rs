//! The egress proxy: network-level enforcement of a task's [`EgressPolicy`].
//!
//! The CDP guard ([`super::guard`]) sees the requests Chromium's Fetch domain reports; it does
//! not see WebSocket handshakes, `<link rel=preconnect>` connects or WebRTC, and Chromium
//! resolves names again after the guard's lookup. So every browser context of a task also
//! sends all of its traffic through a proxy of its own (`Target.createBrowserContext
//! {proxyServer, proxyBypassList: "<-loopback>"}`; `<-loopback>` removes Chromium's implicit
//! bypass of localhost and 127.0.0.0/8). [`EgressProxy::open`] binds one listener per context
//! on 127.0.0.1 with an ephemeral port: the socket a connection arrives on says which task's
//! policy applies, with no credentials to hand out or check, and dropping the
//! [`ContextProxy`] closes the listener and every connection it accepted.
//!
//! Per request:
//! - `CONNECT host:port` (https, wss, and ws, which Chromium tunnels too):
//!   [`EgressPolicy::check_tunnel`] (host rules, domain lists on the origin), then one lookup
//!   ([`EgressPolicy::resolve_checked`]: every address checked), then a TCP connection to one of
//!   exactly those addresses (pinned: no second lookup that a rebinding DNS server could
//!   answer differently), `200`, and bytes are copied both ways. No TLS interception.
//! - absolute-form `GET http://host/path` (plain http): the full [`EgressPolicy::check_url`],
//!   the same pinned lookup and connection, and the request is forwarded in origin form (an
//!   `Upgrade` is honoured). The connection to the origin is kept for the next request of the
//!   same client connection to the same host and port.
//! - anything else: `400`.
//!
//! A refused destination gets `403` with a one-line body naming it and the reason, and is
//! recorded for [`ContextProxy::drain_blocked`] (the same [`BlockedRequest`] the guard
//! reports, `target_type` `"proxy"`). Logs carry only `host:port`. Every lookup, connect and
//! response wait has a timeout. Connections to any listener of the proxy itself are refused,
//! so a page cannot reach another task's listener and borrow its policy.
//!
//! An optional upstream proxy per task ([`UpstreamProxy`]: `http://[user:pass@]host:port`,
//! spoken to with `CONNECT`, or `socks5://[user:pass@]host:port`) carries the connection
//! after the checks: the upstream is asked for the checked address, never the name, so the
//! pinning holds there too. Its credentials never appear in logs, errors or `Debug`.

mod forward;
mod upstream;

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client_http1;
use hyper::server::conn::http1 as server_http1;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use url::Url;

use forward::forward;
pub use upstream::UpstreamProxy;

use super::guard::{BlockedRequest, now_ms};
use super::policy::{DenyReason, EgressDenied, EgressPolicy, PolicySlot};

/// Tunables of the egress proxy.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Timeout of the policy check of one connection or request, DNS included.
    pub check_timeout: Duration,
    /// Timeout of one TCP connect (to the destination or the upstream proxy, handshake
    /// included).
    pub connect_timeout: Duration,
    /// How long a client may take to send a request's head.
    pub header_timeout: Duration,
    /// How long the origin may take to answer a forwarded request's head.
    pub response_timeout: Duration,
    /// Blocked entries kept for [`ContextProxy::drain_blocked`]; older ones are dropped.
    pub blocked_log_capacity: usize,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            check_timeout: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            response_timeout: Duration::from_secs(120),
            blocked_log_capacity: 512,
        }
    }
}

/// The proxy could not serve a context.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The task names an upstream proxy the operator did not configure.
    #[error("unknown proxy {0:?}: not in the operator's configured proxies")]
    UnknownUpstream(String),
    /// The listener could not be bound.
    #[error("egress proxy: cannot listen on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
}

/// Counters of one context's proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProxyStats {
    /// Client connections accepted (from Chromium).
    pub client_connections: u64,
    /// `CONNECT` tunnels opened.
    pub tunnels: u64,
    /// Plain http requests forwarded.
    pub requests: u64,
    /// Connections to a destination (or the upstream) opened.
    pub origin_connections: u64,
    /// Tunnels and requests refused by the policy.
    pub blocked: u64,
    /// Allowed destinations that could not be reached.
    pub connect_failures: u64,
}

/// The egress proxy of a pool: shared settings and the set of listeners, one per context.
#[derive(Debug)]
pub struct EgressProxy {
    options: ProxyOptions,
    upstreams: HashMap<String, UpstreamProxy>,
    listeners: Arc<Mutex<HashSet<SocketAddr>>>,
}

impl EgressProxy {
    /// A proxy with these options and named upstream proxies (operator configuration).
    pub fn new(options: ProxyOptions, upstreams: HashMap<String, UpstreamProxy>) -> Self {
        Self {
            options,
            upstreams,
            listeners: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Names of the configured upstream proxies.
    pub fn upstream_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.upstreams.keys().cloned().collect();
        names.sort();
        names
    }

    /// Starts the listener of one browser context: `policy` decides every connection it
    /// accepts; `upstream` names a configured upstream proxy.
    pub async fn open(
        &self,
        policy: Arc<EgressPolicy>,
        upstream: Option<&str>,
    ) -> Result<ContextProxy, ProxyError> {
        self.open_slot(PolicySlot::bound(policy), upstream).await
    }

    /// [`EgressProxy::open`] for a context opened ahead of its task, with no upstream: every
    /// connection is refused until [`ContextProxy::bind`] gives it the task's policy.
    pub async fn open_unbound(&self) -> Result<ContextProxy, ProxyError> {
        self.open_slot(PolicySlot::unbound(), None).await
    }

    async fn open_slot(
        &self,
        policy: PolicySlot,
        upstream: Option<&str>,
    ) -> Result<ContextProxy, ProxyError> {
        let upstream = match upstream {
            Some(name) => Some(
                self.upstreams
                    .get(name)
                    .cloned()
                    .ok_or_else(|| ProxyError::UnknownUpstream(name.to_string()))?,
            ),
            None => None,
        };
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        lock(&self.listeners).insert(addr);
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            policy,
            upstream,
            options: self.options.clone(),
            listeners: self.listeners.clone(),
            blocked: Mutex::new(VecDeque::new()),
            counters: Counters::default(),
            cancel: cancel.clone(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(ContextProxy {
            addr,
            shared,
            cancel,
            accept,
        })
    }
}

/// One context's listener (see the module docs). Dropping it closes the listener and every
/// connection it accepted.
pub struct ContextProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ContextProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish()
    }
}

impl ContextProxy {
    /// The listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The value of `Target.createBrowserContext`'s `proxyServer`.
    pub fn proxy_server(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The value of `proxyBypassList`: nothing bypasses the proxy, loopback included.
    pub const BYPASS_LIST: &'static str = "<-loopback>";

    /// Takes the connections and requests refused since the last call, oldest first.
    pub fn drain_blocked(&self) -> Vec<BlockedRequest> {
        lock(&self.shared.blocked).drain(..).collect()
    }

    /// Current counters.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        ProxyStats {
            client_connections: c.client_connections.load(Ordering::Relaxed),
            tunnels: c.tunnels.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            origin_connections: c.origin_connections.load(Ordering::Relaxed),
            blocked: c.blocked.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
        }
    }

    /// The policy applied (empty while an unbound listener waits for its task).
    pub fn policy(&self) -> &PolicySlot {
        &self.shared.policy
    }

    /// Binds the task's policy to a listener opened unbound; false (and nothing changes) if
    /// it already has one.
    pub fn bind(&self, policy: Arc<EgressPolicy>) -> bool {
        self.shared.policy.bind(policy)
    }

    /// Closes the listener and every connection.
    pub fn close(self) {
        drop(self);
    }
}

impl Drop for ContextProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.accept.abort();
        lock(&self.shared.listeners).remove(&self.addr);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the proxy writes to a connection: the origin's stream or the proxy's own.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

#[derive(Default)]
struct Counters {
    client_connections: AtomicU64,
    tunnels: AtomicU64,
    requests: AtomicU64,
    origin_connections: AtomicU64,
    blocked: AtomicU64,
    connect_failures: AtomicU64,
}

struct Shared {
    policy: PolicySlot,
    upstream: Option<UpstreamProxy>,
    options: ProxyOptions,
    listeners: Arc<Mutex<HashSet<SocketAddr>>>,
    blocked: Mutex<VecDeque<BlockedRequest>>,
    counters: Counters,
    cancel: CancellationToken,
}

impl Shared {
    fn record(&self, denied: EgressDenied, kind: &str) {
        self.counters.blocked.fetch_add(1, Ordering::Relaxed);
        let mut log = lock(&self.blocked);
        if log.len() >= self.options.blocked_log_capacity.max(1) {
            log.pop_front();
        }
        log.push_back(BlockedRequest {
            url: denied.url,
            reason: denied.reason,
            blocked_at_ms: now_ms(),
            resource_type: Some(kind.to_string()),
            is_navigation: false,
            target_id: String::new(),
            target_type: "proxy".to_string(),
        });
    }

    /// Runs a check under the check timeout; a timeout refuses.
    async fn checked<F>(&self, shown: &str, check: F) -> Result<Vec<IpAddr>, EgressDenied>
    where
        F: Future<Output = Result<Vec<IpAddr>, EgressDenied>>,
    {
        match tokio::time::timeout(self.options.check_timeout, check).await {
            Ok(verdict) => verdict,
            Err(_) => Err(EgressDenied::new(
                shown,
                DenyReason::CheckFailed {
                    detail: format!("timed out after {:?}", self.options.check_timeout),
                },
            )),
        }
    }

    /// Connects to the first reachable of the checked addresses (through the upstream, if
    /// any). Never to one of the proxy's own listeners.
    async fn connect(
        &self,
        addrs: &[IpAddr],
        port: u16,
        shown: &str,
    ) -> Result<Box<dyn Io>, ConnectFailure> {
        let mut last = String::from("no address");
        for ip in addrs {
            let target = SocketAddr::new(*ip, port);
            if self.is_own_listener(target) {
                return Err(ConnectFailure::Denied(EgressDenied::new(
                    shown,
                    DenyReason::CheckFailed {
                        detail: format!("{target} is browserd's egress proxy itself"),
                    },
                )));
            }
            let attempt = async {
                match &self.upstream {
                    Some(up) => up.connect(target).await,
                    None => {
                        let s = TcpStream::connect(target).await?;
                        let _ = s.set_nodelay(true);
                        Ok(Box::new(s) as Box<dyn Io>)
                    }
                }
            };
            match tokio::time::timeout(self.options.connect_timeout, attempt).await {
                Ok(Ok(stream)) => {
                    self.counters
                        .origin_connections
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => {
                    last = format!("connect timed out after {:?}", self.options.connect_timeout)
                }
            }
        }
        self.counters
            .connect_failures
            .fetch_add(1, Ordering::Relaxed);
        Err(ConnectFailure::Unreachable(last))
    }

    fn is_own_listener(&self, target: SocketAddr) -> bool {
        let listeners = lock(&self.listeners);
        listeners.contains(&target)
            || (target.ip().is_unspecified() && listeners.iter().any(|l| l.port() == target.port()))
    }
}

enum ConnectFailure {
    Denied(EgressDenied),
    Unreachable(String),
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            () = shared.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                shared
                    .counters
                    .client_connections
                    .fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_client(stream, shared.clone()));
            }
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "egress proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The origin connection of one client connection, kept for its next request.
type OriginSlot = Arc<tokio::sync::Mutex<Option<(String, client_http1::SendRequest<Incoming>)>>>;

async fn serve_client(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let slot: OriginSlot = Arc::new(tokio::sync::Mutex::new(None));
    let svc_shared = shared.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = svc_shared.clone();
        let slot = slot.clone();
        async move { Ok::<_, Infallible>(handle(req, shared, slot).await) }
    });
    let conn = server_http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.options.header_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::select! {
        () = shared.cancel.cancelled() => {}
        served = conn => {
            if let Err(e) = served {
                tracing::debug!(error = %e, "egress proxy: client connection ended with an error");
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body + "\n"))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // The proxy's own answers are refusals and failures: the client connection ends with them.
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

fn refused(shared: &Shared, denied: EgressDenied, kind: &str) -> Response<ProxyBody> {
    let body = format!(
        "browserd egress proxy: {} is blocked by the egress policy: {}",
        denied.url, denied.reason
    );
    tracing::info!(
        destination = %origin_for_log(&denied.url),
        reason = %denied.reason,
        kind,
        "egress proxy: blocked"
    );
    shared.record(denied, kind);
    text(StatusCode::FORBIDDEN, body)
}

/// `scheme://host:port` (or `host:port`) of what was refused: paths may carry secrets.
fn origin_for_log(shown: &str) -> String {
    match Url::parse(shown) {
        Ok(u) if u.has_host() => u.origin().ascii_serialization(),
        _ => shown.split('/').next().unwrap_or_default().to_string(),
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: OriginSlot,
) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        tunnel(req, &shared).await
    } else {
        forward(req, &shared, &slot).await
    }
}

async fn tunnel(req: Request<Incoming>, shared: &Arc<Shared>) -> Response<ProxyBody> {
    let Some(authority) = req.uri().authority().cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "browserd egress proxy: CONNECT needs host:port".into(),
        );
    };
    let Some(port) = authority.port_u16() else {
        return text(
            StatusCode::BAD_REQUEST,
            "browserd egress proxy: CONNECT needs an explicit port".into(),
        );
    };
    let host = authority.host();
    let shown = format!("{host}:{port}");
    let check = async {
        let policy = shared.policy.for_url(&shown)?;
        policy.check_tunnel(host, port)?;
        let url = Url::parse(&format!("https://{host}:{port}/")).map_err(|e| {
            EgressDenied::new(
                &shown,
                DenyReason::InvalidUrl {
                    detail: e.to_string(),
                },
            )
        })?;
        let host = url
            .host()
            .ok_or_else(|| EgressDenied::new(&shown, DenyReason::MissingHost))?;
        policy.resolve_checked(&host, &shown).await
    };
    let addrs = match shared.checked(&shown, check).await {
        Ok(addrs) => addrs,
        Err(denied) => return refused(shared, denied, "CONNECT"),
    };
    let mut outbound = match shared.connect(&addrs, port, &shown).await {
        Ok(stream) => stream,
        Err(ConnectFailure::Denied(denied)) => return refused(shared, denied, "CONNECT"),
        Err(ConnectFailure::Unreachable(e)) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("browserd egress proxy: cannot reach {shown}: {e}"),
            );
        }
    };
    shared.counters.tunnels.fetch_add(1, Ordering::Relaxed);
    let cancel = shared.cancel.clone();
    tokio::spawn(async move {
        let upgraded = tokio::select! {
            () = cancel.cancelled() => return,
            upgraded = hyper::upgrade::on(req) => upgraded,
        };
        match upgraded {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                tokio::select! {
                    () = cancel.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut client, &mut outbound) => {}
                }
            }
            Err(e) => tracing::debug!(error = %e, "egress proxy: CONNECT upgrade failed"),
        }
    });
    Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    )
}
