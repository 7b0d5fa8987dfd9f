//! The raw CDP escape hatch: one connection per Chrome, untyped commands on any session.
//!
//! The connection runs over either of Chrome's two DevTools transports, behind the one
//! [`CdpConnection`]:
//! - **the pipe** (`--remote-debugging-pipe`), for every Chrome the pool launches: Chrome reads
//!   commands from its fd 3 and writes answers and events to its fd 4, each message ended by a
//!   NUL byte ([`CdpConnection::over_pipe`]). Nothing but the worker that holds the other ends
//!   can drive that Chrome: it listens on no port.
//! - **a WebSocket** to a `ws://…/devtools/browser/…` URL ([`CdpConnection::connect`]), for a
//!   remote Chrome the pool is given by URL.
//!
//! Contexts, tabs, navigation, everything that observes a page (DOMSnapshot, DOM,
//! Accessibility, layout metrics, screenshots), every action, the health watch and the egress
//! guard go through this module: commands are `(session, method, JSON params)`, answers
//! are kept as the raw UTF-8 text Chrome sent and decoded straight into the caller's own
//! types, so a Chrome protocol change can only break the fields we actually read, and huge
//! answers (a DOMSnapshot of a 2 MB page) are parsed once, without an intermediate
//! `serde_json::Value`.
//!
//! A client that needs a browser-level CDP client of its own (the egress guard, whose
//! auto-attach must hold new targets until it resumes them) gets one on the same connection:
//! [`CdpConnection::browser_session`] attaches a second session to the browser target
//! (`Target.attachToBrowserTarget`), and the events of that session and of every session
//! attached through it go to its own channel, not to [`CdpConnection::events`].

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::{SinkExt, StreamExt};
use serde::{Deserialize, de::DeserializeOwned};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes, protocol::WebSocketConfig};

use crate::error::{BrowserError, Result};

/// A CDP session id (flattened protocol) as Chrome reports it.
pub type SessionId = String;

/// A call waiting for its answer: its method, its session (None = browser) and where the
/// answer goes.
struct PendingCall {
    method: String,
    session: Option<SessionId>,
    answer: oneshot::Sender<Result<Utf8Bytes>>,
}

type Pending = HashMap<u64, PendingCall>;

/// An event Chrome pushed on this connection (only domains enabled on our own sessions).
#[derive(Debug, Clone)]
pub struct CdpEvent {
    /// e.g. `Target.detachedFromTarget`.
    pub method: String,
    /// The session the event belongs to (`None` = browser session).
    pub session_id: Option<SessionId>,
    /// The whole raw message; decode `params` with [`CdpEvent::params`].
    pub raw: Utf8Bytes,
}

impl CdpEvent {
    /// Decodes the event parameters into `T`.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T> {
        #[derive(Deserialize)]
        struct Envelope<T> {
            params: T,
        }
        serde_json::from_str::<Envelope<T>>(self.raw.as_str())
            .map(|e| e.params)
            .map_err(|e| BrowserError::Decode {
                method: self.method.clone(),
                reason: e.to_string(),
            })
    }
}

/// The raw answer of one command, decoded on demand (possibly borrowing from it).
#[derive(Debug, Clone)]
pub struct RawResponse {
    method: String,
    text: Utf8Bytes,
}

impl RawResponse {
    /// Decodes the `result` object into `T`; `T` may borrow strings from the answer.
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
        #[derive(Deserialize)]
        struct Envelope<T> {
            result: T,
        }
        serde_json::from_str::<Envelope<T>>(self.text.as_str())
            .map(|e| e.result)
            .map_err(|e| BrowserError::Decode {
                method: self.method.clone(),
                reason: e.to_string(),
            })
    }

    /// Size of the raw answer in bytes.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// True if the answer is empty (never the case for a valid answer).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The raw JSON text of the whole answer.
    pub fn as_str(&self) -> &str {
        self.text.as_str()
    }
}

struct Shared {
    /// This connection's number, unique in the process ([`CdpConnection::id`]).
    id: u64,
    next_id: AtomicU64,
    pending: Mutex<Pending>,
    /// Sessions whose target's renderer died ([`CdpConnection::fail_session`]).
    dead_sessions: Mutex<HashSet<SessionId>>,
    closed: AtomicBool,
    events: broadcast::Sender<Arc<CdpEvent>>,
    /// Sessions whose events go to a [`CdpConnection::browser_session`]'s channel instead of
    /// `events`: each such browser session and every session attached through it.
    routes: Mutex<HashMap<SessionId, mpsc::UnboundedSender<Arc<CdpEvent>>>>,
    /// True once the connection is gone ([`CdpConnection::closed`]).
    closed_signal: watch::Sender<bool>,
}

/// The method of the one event a connection sends its subscribers when its socket is gone, so
/// that a wait for an event (a load, a navigation) ends at once instead of at its cap.
pub const CONNECTION_CLOSED_EVENT: &str = "browserd.connectionClosed";

impl Shared {
    fn fail_all(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.events.send(Arc::new(CdpEvent {
                method: CONNECTION_CLOSED_EVENT.to_owned(),
                session_id: None,
                raw: Utf8Bytes::from_static("{\"params\":{}}"),
            }));
        }
        let drained: Vec<_> = match self.pending.lock() {
            Ok(mut map) => map.drain().collect(),
            Err(poisoned) => poisoned.into_inner().drain().collect(),
        };
        for (_, call) in drained {
            let _ = call.answer.send(Err(BrowserError::ConnectionClosed));
        }
        // The routed sessions' channels end: their owners see the connection gone.
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.closed_signal.send_replace(true);
    }

    fn take(&self, id: u64) -> Option<PendingCall> {
        match self.pending.lock() {
            Ok(mut map) => map.remove(&id),
            Err(poisoned) => poisoned.into_inner().remove(&id),
        }
    }

    fn is_dead(&self, session: &str) -> bool {
        self.dead_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(session)
    }
}

/// One CDP connection to a Chrome's browser target, over its pipe or a WebSocket.
///
/// Cheap to clone; the reader/writer tasks stop when the last clone is dropped or Chrome
/// closes its end (then every pending and future call fails with `ConnectionClosed`).
#[derive(Clone)]
pub struct CdpConnection {
    shared: Arc<Shared>,
    outgoing: mpsc::UnboundedSender<String>,
    default_timeout: Duration,
    _guard: Arc<TaskGuard>,
}

struct TaskGuard {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for CdpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CdpConnection")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Extracts `"id":N` from the start of a message without parsing the rest (Chrome always
/// writes the id first in answers).
fn fast_answer_id(text: &str) -> Option<u64> {
    let rest = text.strip_prefix("{\"id\":")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

/// Chrome answers `{"id":N,"result":…}` or `{"id":N,"error":…}`; only the latter (or an
/// unusual key order) needs a decode to find out.
fn may_be_error(text: &str) -> bool {
    match text.strip_prefix("{\"id\":") {
        Some(rest) => {
            let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
            !rest.starts_with(",\"result\"")
        }
        None => true,
    }
}

#[derive(Deserialize)]
struct Head<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: i64,
    message: String,
}

impl CdpConnection {
    /// Opens a connection to `ws_url` (a `ws://…/devtools/browser/…` endpoint): a remote
    /// Chrome's.
    pub async fn connect(ws_url: &str, default_timeout: Duration) -> Result<Self> {
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let connect = tokio_tungstenite::connect_async_with_config(ws_url, Some(config), true);
        let (stream, _) = tokio::time::timeout(default_timeout, connect)
            .await
            .map_err(|_| BrowserError::Connect {
                endpoint: ws_url.to_owned(),
                reason: format!("no answer within {default_timeout:?}"),
            })?
            .map_err(|e| BrowserError::Connect {
                endpoint: ws_url.to_owned(),
                reason: e.to_string(),
            })?;
        let (mut sink, mut source) = stream.split();
        let (shared, outgoing, mut outgoing_rx) = Self::parts();

        let writer_shared = shared.clone();
        let writer = tokio::spawn(async move {
            while let Some(msg) = outgoing_rx.recv().await {
                if sink.send(Message::Text(msg.into())).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
            writer_shared.fail_all();
        });

        let reader_shared = shared.clone();
        let reader = tokio::spawn(async move {
            while let Some(msg) = source.next().await {
                let text = match msg {
                    Ok(Message::Text(text)) => text,
                    Ok(Message::Binary(bytes)) => match Utf8Bytes::try_from(bytes) {
                        Ok(text) => text,
                        Err(_) => continue,
                    },
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                dispatch(&reader_shared, text);
            }
            reader_shared.fail_all();
        });

        Ok(Self::assemble(
            shared,
            outgoing,
            default_timeout,
            vec![writer, reader],
        ))
    }

    /// A connection over Chrome's `--remote-debugging-pipe`: `to_chrome` is the write end of
    /// the pipe Chrome reads as its fd 3, `from_chrome` the read end of the one it writes as
    /// its fd 4. Each message is one JSON text ended by a NUL byte, both ways. Chrome's exit
    /// (or its closing its end) is the end of `from_chrome`: the connection closes then, as a
    /// WebSocket's does.
    pub fn over_pipe<R, W>(from_chrome: R, to_chrome: W, default_timeout: Duration) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (shared, outgoing, mut outgoing_rx) = Self::parts();

        let writer_shared = shared.clone();
        let mut to_chrome = to_chrome;
        let writer = tokio::spawn(async move {
            while let Some(mut msg) = outgoing_rx.recv().await {
                // serde_json escapes every control character in strings, so a message never
                // holds a NUL of its own.
                msg.push('\0');
                if to_chrome.write_all(msg.as_bytes()).await.is_err() {
                    break;
                }
            }
            let _ = to_chrome.shutdown().await;
            writer_shared.fail_all();
        });

        let reader_shared = shared.clone();
        let mut from_chrome = from_chrome;
        let reader = tokio::spawn(async move {
            let mut splitter = NulSplitter::default();
            let mut chunk = vec![0u8; PIPE_READ_CHUNK];
            loop {
                let n = match from_chrome.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for message in splitter.push(&chunk[..n]) {
                    match String::from_utf8(message) {
                        Ok(text) => dispatch(&reader_shared, Utf8Bytes::from(text)),
                        Err(err) => {
                            tracing::debug!(error = %err, "non-UTF-8 CDP message dropped");
                        }
                    }
                }
            }
            reader_shared.fail_all();
        });

        Self::assemble(shared, outgoing, default_timeout, vec![writer, reader])
    }

    fn parts() -> (
        Arc<Shared>,
        mpsc::UnboundedSender<String>,
        mpsc::UnboundedReceiver<String>,
    ) {
        let (events, _) = broadcast::channel(4096);
        static CONNECTION_IDS: AtomicU64 = AtomicU64::new(1);
        let shared = Arc::new(Shared {
            id: CONNECTION_IDS.fetch_add(1, Ordering::Relaxed),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            dead_sessions: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            events,
            routes: Mutex::new(HashMap::new()),
            closed_signal: watch::Sender::new(false),
        });
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel::<String>();
        (shared, outgoing, outgoing_rx)
    }

    fn assemble(
        shared: Arc<Shared>,
        outgoing: mpsc::UnboundedSender<String>,
        default_timeout: Duration,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    ) -> Self {
        Self {
            shared,
            outgoing,
            default_timeout,
            _guard: Arc::new(TaskGuard { tasks }),
        }
    }

    /// This connection's number, unique in the process and shared by its clones.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// True once the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Resolves once the connection is gone (Chrome exited or closed its end, the socket
    /// dropped). Holds nothing of the connection: waiting does not keep it open.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut signal = self.shared.closed_signal.subscribe();
        async move {
            let _ = signal.wait_for(|closed| *closed).await;
        }
    }

    /// The timeout used by [`CdpConnection::call`].
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// Subscribes to events arriving on this connection.
    pub fn events(&self) -> broadcast::Receiver<Arc<CdpEvent>> {
        self.shared.events.subscribe()
    }

    /// Sends `method` with `params` on `session` (None = browser) and waits up to `timeout`.
    pub async fn call_raw(
        &self,
        session: Option<&str>,
        method: &str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> Result<RawResponse> {
        if self.is_closed() {
            return Err(BrowserError::ConnectionClosed);
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = serde_json::json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = serde_json::Value::String(session.to_owned());
        }
        let (tx, rx) = oneshot::channel();
        let call = PendingCall {
            method: method.to_owned(),
            session: session.map(str::to_owned),
            answer: tx,
        };
        {
            // Under the pending lock, as in `fail_session`: a call cannot slip in between the
            // session's death and the failing of its calls.
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(session) = session
                && self.shared.is_dead(session)
            {
                return Err(BrowserError::TargetCrashed {
                    method: method.to_owned(),
                });
            }
            pending.insert(id, call);
        }
        if self.outgoing.send(message.to_string()).is_err() {
            self.shared.take(id);
            return Err(BrowserError::ConnectionClosed);
        }
        let answer = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer?,
            Ok(Err(_)) => return Err(BrowserError::ConnectionClosed),
            Err(_) => {
                self.shared.take(id);
                return Err(BrowserError::Timeout {
                    method: method.to_owned(),
                    timeout,
                });
            }
        };
        if may_be_error(answer.as_str())
            && let Ok(ErrorEnvelope { error: Some(err) }) =
                serde_json::from_str::<ErrorEnvelope>(answer.as_str())
        {
            return Err(BrowserError::Protocol {
                method: method.to_owned(),
                code: err.code,
                message: err.message,
            });
        }
        Ok(RawResponse {
            method: method.to_owned(),
            text: answer,
        })
    }

    /// Like [`CdpConnection::call_raw`] with the default timeout, decoding into `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        session: Option<&str>,
        method: &str,
        params: serde_json::Value,
    ) -> Result<T> {
        let raw = self
            .call_raw(session, method, params, self.default_timeout)
            .await?;
        raw.decode::<T>()
    }

    /// Marks `session` dead — its target's renderer died (`Target.targetCrashed`) — and fails
    /// its calls, those waiting and those to come, with [`BrowserError::TargetCrashed`]: Chrome
    /// holds a crashed target's commands until a new renderer takes it, which for a killed
    /// page is never, so they would otherwise end only at their timeouts.
    pub fn fail_session(&self, session: &str) {
        let failed: Vec<PendingCall> = {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared
                .dead_sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(session.to_owned());
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, call)| call.session.as_deref() == Some(session))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| pending.remove(&id))
                .collect()
        };
        for call in failed {
            let _ = call.answer.send(Err(BrowserError::TargetCrashed {
                method: call.method,
            }));
        }
    }

    /// Forgets a dead session (its tab is closed; Chrome never reuses a session id).
    pub fn forget_session(&self, session: &str) {
        self.shared
            .dead_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// Sends `method` on `session` without waiting for (or keeping) its answer: for a
    /// cleanup that must happen even where nothing can wait (a `Drop`).
    pub fn send_and_forget(&self, session: Option<&str>, method: &str, params: serde_json::Value) {
        if self.is_closed() {
            return;
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = serde_json::json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = serde_json::Value::String(session.to_owned());
        }
        let _ = self.outgoing.send(message.to_string());
    }

    /// Attaches a second session to the browser target (`Target.attachToBrowserTarget`): a
    /// browser-level client of its own on this connection, whose `Target` domain settings
    /// (auto-attach, discovery) are its own, as another connection's would be. The events of
    /// that session and of every session attached through it (its auto-attached targets,
    /// theirs in turn) arrive on the returned channel only, until the session is detached
    /// (`Target.detachFromTarget`) or the connection closes.
    pub async fn browser_session(
        &self,
        timeout: Duration,
    ) -> Result<(SessionId, mpsc::UnboundedReceiver<Arc<CdpEvent>>)> {
        #[derive(Deserialize)]
        struct Attached {
            #[serde(rename = "sessionId")]
            session_id: String,
        }
        let attached: Attached = self
            .call_raw(
                None,
                "Target.attachToBrowserTarget",
                serde_json::json!({}),
                timeout,
            )
            .await?
            .decode()?;
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut routes = self.shared.routes.lock().unwrap_or_else(|e| e.into_inner());
            if self.is_closed() {
                return Err(BrowserError::ConnectionClosed);
            }
            routes.insert(attached.session_id.clone(), tx);
        }
        Ok((attached.session_id, rx))
    }

    /// Attaches to `target_id` with the flattened protocol and returns the new session id.
    pub async fn attach(&self, target_id: &str) -> Result<SessionId> {
        #[derive(Deserialize)]
        struct Attached {
            #[serde(rename = "sessionId")]
            session_id: String,
        }
        let attached: Attached = self
            .call(
                None,
                "Target.attachToTarget",
                serde_json::json!({ "targetId": target_id, "flatten": true }),
            )
            .await?;
        Ok(attached.session_id)
    }
}

fn dispatch(shared: &Shared, text: Utf8Bytes) {
    let id = match fast_answer_id(text.as_str()) {
        Some(id) => Some(id),
        None => match serde_json::from_str::<Head<'_>>(text.as_str()) {
            Ok(head) => {
                if head.id.is_none()
                    && let Some(method) = head.method
                {
                    let event = Arc::new(CdpEvent {
                        method: method.into_owned(),
                        session_id: head.session_id.map(|s| s.into_owned()),
                        raw: text.clone(),
                    });
                    if !route(shared, &event) {
                        // No subscriber is fine: events are optional.
                        let _ = shared.events.send(event);
                    }
                }
                head.id
            }
            Err(err) => {
                tracing::debug!(error = %err, "undecodable CDP message dropped");
                None
            }
        },
    };
    if let Some(id) = id
        && let Some(call) = shared.take(id)
    {
        let _ = call.answer.send(Ok(text));
    }
}

/// Hands `event` to the [`CdpConnection::browser_session`] channel its session belongs to, and
/// keeps the routes up to date with the sessions attached and detached through it; false when
/// the event is no routed session's.
fn route(shared: &Shared, event: &CdpEvent) -> bool {
    #[derive(Deserialize)]
    struct Child {
        #[serde(rename = "sessionId")]
        session_id: String,
    }
    let mut routes = shared.routes.lock().unwrap_or_else(|e| e.into_inner());
    let Some(session) = event.session_id.as_deref() else {
        // A routed browser session detached (its owner let it go): it and every session
        // attached through it are forgotten. The event itself is the root's.
        if event.method == "Target.detachedFromTarget"
            && !routes.is_empty()
            && let Ok(child) = event.params::<Child>()
            && let Some(tx) = routes.remove(&child.session_id)
        {
            routes.retain(|_, other| !other.same_channel(&tx));
        }
        return false;
    };
    let Some(tx) = routes.get(session).cloned() else {
        return false;
    };
    match event.method.as_str() {
        // Before the child's own events, which Chrome sends after this one.
        "Target.attachedToTarget" => {
            if let Ok(child) = event.params::<Child>() {
                routes.insert(child.session_id, tx.clone());
            }
        }
        "Target.detachedFromTarget" => {
            if let Ok(child) = event.params::<Child>() {
                routes.remove(&child.session_id);
            }
        }
        _ => {}
    }
    if tx.send(Arc::new(event.clone())).is_err() {
        // Its owner is gone; nobody listens to this session any more.
        routes.remove(session);
    }
    true
}

/// How much one read from Chrome's pipe takes at most.
const PIPE_READ_CHUNK: usize = 256 * 1024;

/// Splits the byte stream of Chrome's pipe into its NUL-terminated messages.
#[derive(Default)]
struct NulSplitter {
    /// The start of a message whose end has not arrived yet.
    partial: Vec<u8>,
}

impl NulSplitter {
    /// The messages `bytes` completes, in order (their NULs dropped); keeps the rest.
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut messages = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == 0) {
            let message = if self.partial.is_empty() {
                rest[..end].to_vec()
            } else {
                let mut message = std::mem::take(&mut self.partial);
                message.extend_from_slice(&rest[..end]);
                message
            };
            if !message.is_empty() {
                messages.push(message);
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        messages
    }
}

impl From<tungstenite::Error> for BrowserError {
    fn from(err: tungstenite::Error) -> Self {
        BrowserError::Connect {
            endpoint: String::new(),
            reason: err.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
