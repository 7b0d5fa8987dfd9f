//! Harness of the egress proxy tests: a DNS server the test controls (UDP, A records, answers
//! that change from one query to the next), fixture servers on several loopback addresses that
//! count every TCP connection they accept (not only HTTP requests), and a pool whose egress
//! checks and proxy resolve through that DNS server.
//!
//! Addresses: 127.0.0.2 is "allowed", 127.0.0.3 "forbidden" (the policies list it in
//! `blocked_networks`), 127.0.0.4 a third site. The allowed and forbidden servers listen on the
//! same port, so a name rebound from one address to the other reaches the other server.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Response, StatusCode, Uri, header};
use axum::response::IntoResponse;
use browserd_browser::egress::EgressSettings;
use browserd_browser::{BrowserPool, BrowserSession, ContextOptions, PoolConfig};
use serde_json::Value;
use tokio::net::{TcpListener, UdpSocket};

/// One multi-thread runtime per test binary: the pool's Chrome handler lives on it.
pub static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
});

pub const ALLOWED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const FORBIDDEN: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
pub const THIRD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

/// A DNS server answering A queries from a table; each name has a sequence of answers (the
/// n-th query gets the n-th entry, the last one repeats), TTL 0 so nothing caches them.
pub struct Dns {
    pub addr: SocketAddr,
    table: Arc<Mutex<HashMap<String, Vec<Ipv4Addr>>>>,
    /// A queries per name.
    queries: Arc<Mutex<HashMap<String, usize>>>,
}

impl Dns {
    pub async fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind dns");
        let addr = socket.local_addr().expect("dns addr");
        let table: Arc<Mutex<HashMap<String, Vec<Ipv4Addr>>>> = Arc::default();
        let queries: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let (t, q) = (table.clone(), queries.clone());
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                    continue;
                };
                if let Some(answer) = answer(&buf[..n], &t, &q) {
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        Self {
            addr,
            table,
            queries,
        }
    }

    /// Sets the answers of `name` (lowercase, no trailing dot).
    pub fn set(&self, name: &str, answers: &[Ipv4Addr]) {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), answers.to_vec());
    }

    /// A queries received for `name`.
    pub fn queries(&self, name: &str) -> usize {
        self.queries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
            .unwrap_or(0)
    }
}

/// Parses one query and builds its answer (A from the table; other types: no records;
/// unknown names: NXDOMAIN).
fn answer(
    query: &[u8],
    table: &Mutex<HashMap<String, Vec<Ipv4Addr>>>,
    queries: &Mutex<HashMap<String, usize>>,
) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let mut labels = Vec::new();
    let mut i = 12;
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*query.get(i)?, *query.get(i + 1)?]);
    let question_end = i + 4;
    let question = query.get(12..question_end)?;
    let name = labels.join(".");
    let known = table
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .cloned();
    let mut records: Vec<Ipv4Addr> = Vec::new();
    if qtype == 1
        && let Some(seq) = &known
    {
        let mut q = queries.lock().unwrap_or_else(|p| p.into_inner());
        let n = q.entry(name.clone()).or_insert(0);
        records.push(seq[(*n).min(seq.len() - 1)]);
        *n += 1;
    }
    let rcode: u16 = if known.is_some() { 0 } else { 3 };
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&query[0..2]);
    let flags = 0x8180 | (u16::from(query[2] & 0x78) << 8) | rcode;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(question);
    for ip in records {
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}

#[path = "../support/hits.rs"]
mod hits;
pub use hits::Hits;

/// A fixture server on one loopback address.
pub struct Server {
    pub addr: SocketAddr,
    pub hits: Arc<Hits>,
    /// TCP connections accepted (a preconnect or a WebSocket counts before any request).
    pub accepts: Arc<AtomicUsize>,
}

impl Server {
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    /// `scheme://host:port{path}` on this server's port.
    pub fn url(&self, scheme: &str, host: &str, path: &str) -> String {
        format!("{scheme}://{host}:{}{path}", self.addr.port())
    }
}

/// A listener that counts accepted connections.
struct Counting {
    inner: TcpListener,
    accepts: Arc<AtomicUsize>,
}

impl axum::serve::Listener for Counting {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((stream, addr)) = self.inner.accept().await {
                self.accepts.fetch_add(1, Ordering::SeqCst);
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

async fn serve_on(addr: SocketAddr) -> Server {
    let listener = TcpListener::bind(addr).await.expect("bind fixture server");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(Hits::default());
    let accepts = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/ws/{*rest}", axum::routing::get(ws_route))
        .fallback(fixture)
        .with_state(hits.clone());
    let counting = Counting {
        inner: listener,
        accepts: accepts.clone(),
    };
    tokio::spawn(async move {
        let _ = axum::serve(counting, app).await;
    });
    Server {
        addr,
        hits,
        accepts,
    }
}

fn html(body: String) -> Response<Body> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .body(Body::from(body))
        .expect("response")
}

fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

async fn fixture(
    State(hits): State<Arc<Hits>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response<Body> {
    let target = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    hits.push(host, target);
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let path = uri.path();
    if path.starts_with("/redirect") {
        return Response::builder()
            .status(StatusCode::FOUND)
            .header(header::LOCATION, get("to"))
            .body(Body::empty())
            .expect("response");
    }
    if path.starts_with("/preconnect") {
        let links: String = get("to")
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(|to| format!("<link rel=\"preconnect\" href=\"{}\">", attr(to)))
            .collect();
        return html(format!(
            "<!doctype html><head>{links}<title>preconnect</title></head><p>preconnect</p>"
        ));
    }
    if path.starts_with("/embed") {
        // An image and an iframe from `src`.
        return html(format!(
            "<!doctype html><title>embed</title><img src=\"{img}\"><iframe src=\"{frame}\"></iframe>",
            img = attr(&get("img")),
            frame = attr(&get("frame"))
        ));
    }
    if path.starts_with("/page") {
        return html("<!doctype html><title>page</title><p>ok</p>".to_string());
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain")
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .body(Body::from("hit"))
        .expect("response")
}

/// `/ws/…`: a WebSocket echo (the hit is recorded before the upgrade).
async fn ws_route(
    State(hits): State<Arc<Hits>>,
    headers: HeaderMap,
    uri: Uri,
    ws: WebSocketUpgrade,
) -> Response<Body> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    hits.push(host, uri.path().to_string());
    ws.on_upgrade(echo).into_response()
}

async fn echo(mut socket: WebSocket) {
    while let Some(Ok(msg)) = socket.recv().await {
        if let Message::Text(text) = msg
            && socket
                .send(Message::Text(format!("echo:{text}").into()))
                .await
                .is_err()
        {
            return;
        }
    }
}

/// The servers, the DNS server and a pool resolving through it (one Chrome).
pub struct Env {
    pub dns: Dns,
    pub allowed: Server,
    pub forbidden: Server,
    pub third: Server,
    pub pool: BrowserPool,
}

impl Env {
    pub async fn start() -> Env {
        let dns = Dns::start().await;
        let allowed = serve_on(SocketAddr::from((ALLOWED, 0))).await;
        let forbidden = serve_on(SocketAddr::from((FORBIDDEN, allowed.addr.port()))).await;
        let third = serve_on(SocketAddr::from((THIRD, allowed.addr.port()))).await;
        dns.set("allowed.test", &[ALLOWED]);
        dns.set("other.test", &[ALLOWED]);
        dns.set("evil.test", &[FORBIDDEN]);
        dns.set("third.test", &[THIRD]);
        let pool = BrowserPool::new(PoolConfig {
            processes: 1,
            contexts_per_process: 4,
            recycle_after_tasks: 0,
            egress_dns: vec![dns.addr],
            ..PoolConfig::default()
        })
        .expect("pool");
        Env {
            dns,
            allowed,
            forbidden,
            third,
            pool,
        }
    }

    /// A session with `settings` plus loopback open and 127.0.0.3 blocked.
    pub async fn session(&self, mut settings: EgressSettings) -> BrowserSession {
        settings.allow_loopback = true;
        settings.blocked_networks.push(format!("{FORBIDDEN}/32"));
        self.pool
            .lease_with(ContextOptions {
                egress: Some(settings),
                ..ContextOptions::default()
            })
            .await
            .expect("lease with egress")
    }

    pub async fn shutdown(self) {
        self.pool.shutdown().await;
    }
}

/// Evaluates `expr` in the focused tab, awaiting a promise.
pub async fn js(session: &BrowserSession, expr: &str) -> Value {
    let target = session.focused_target().await.expect("focused");
    let raw = session
        .cdp_with_timeout(
            Some(&target),
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            Duration::from_secs(20),
        )
        .await
        .expect("evaluate");
    let v: Value = serde_json::from_str(raw.as_str()).expect("json");
    v["result"]["result"]["value"].clone()
}

/// Opens a WebSocket to `url` in the page, sends "hi" and resolves to the echo, or to
/// `failed:<event>` (capped at 10 s).
pub async fn websocket(session: &BrowserSession, url: &str) -> String {
    let expr = format!(
        "new Promise(resolve => {{
            const t = setTimeout(() => resolve('failed:timeout'), 10000);
            let ws;
            try {{ ws = new WebSocket({url:?}); }} catch (e) {{ clearTimeout(t); resolve('failed:' + e.message); return; }}
            ws.onopen = () => ws.send('hi');
            ws.onmessage = m => {{ clearTimeout(t); resolve(String(m.data)); ws.close(); }};
            ws.onerror = () => {{ clearTimeout(t); resolve('failed:error'); }};
            ws.onclose = () => {{ clearTimeout(t); resolve('failed:close'); }};
        }})"
    );
    js(session, &expr).await.as_str().unwrap_or("").to_string()
}

/// Polls `condition` every 25 ms for up to 10 s.
pub async fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
