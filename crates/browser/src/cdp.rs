//! The raw CDP escape hatch: one websocket per Chrome, untyped commands on any session.
//!
//! chromiumoxide launches the process (and is told to stop discovering targets, so its handler
//! never attaches to a tab). Contexts, tabs, navigation, everything that observes a page
//! (DOMSnapshot, DOM, Accessibility, layout metrics, screenshots) and every action go through
//! this module instead: commands are `(session, method, JSON params)`, answers
//! are kept as the raw UTF-8 text Chrome sent and decoded straight into the caller's own
//! types, so a Chrome protocol change can only break the fields we actually read, and huge
//! answers (a DOMSnapshot of a 2 MB page) are parsed once, without an intermediate
//! `serde_json::Value`.

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
use tokio::sync::{broadcast, mpsc, oneshot};
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
    next_id: AtomicU64,
    pending: Mutex<Pending>,
    /// Sessions whose target's renderer died ([`CdpConnection::fail_session`]).
    dead_sessions: Mutex<HashSet<SessionId>>,
    closed: AtomicBool,
    events: broadcast::Sender<Arc<CdpEvent>>,
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

/// One websocket connection to a Chrome's browser endpoint.
///
/// Cheap to clone; the reader/writer tasks stop when the last clone is dropped or Chrome
/// closes the socket (then every pending and future call fails with `ConnectionClosed`).
#[derive(Clone)]
pub struct CdpConnection {
    shared: Arc<Shared>,
    outgoing: mpsc::UnboundedSender<Message>,
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
    /// Opens a connection to `ws_url` (a `ws://…/devtools/browser/…` endpoint).
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
        let (events, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            dead_sessions: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            events,
        });
        let (outgoing, mut outgoing_rx) = mpsc::unbounded_channel::<Message>();

        let writer_shared = shared.clone();
        let writer = tokio::spawn(async move {
            while let Some(msg) = outgoing_rx.recv().await {
                if sink.send(msg).await.is_err() {
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

        Ok(Self {
            shared,
            outgoing,
            default_timeout,
            _guard: Arc::new(TaskGuard {
                tasks: vec![writer, reader],
            }),
        })
    }

    /// True once the socket is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
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
        if self
            .outgoing
            .send(Message::Text(message.to_string().into()))
            .is_err()
        {
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
                    let event = CdpEvent {
                        method: method.into_owned(),
                        session_id: head.session_id.map(|s| s.into_owned()),
                        raw: text.clone(),
                    };
                    // No subscriber is fine: events are optional.
                    let _ = shared.events.send(Arc::new(event));
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

impl From<tungstenite::Error> for BrowserError {
    fn from(err: tungstenite::Error) -> Self {
        BrowserError::Connect {
            endpoint: String::new(),
            reason: err.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fast_answer_id;

    #[test]
    fn fast_id_reads_leading_id_only() {
        assert_eq!(fast_answer_id(r#"{"id":42,"result":{}}"#), Some(42));
        assert_eq!(fast_answer_id(r#"{"method":"X","params":{"id":3}}"#), None);
        assert_eq!(fast_answer_id(r#"{"id":"#), None);
    }
}
