//! A browser-level CDP client of the egress guard's own, separate from every other client of
//! the Chrome.
//!
//! Why a client of its own: another client may resume an auto-attached child target
//! (`Runtime.runIfWaitingForDebugger`) the moment it sees it (chromiumoxide does) or route its
//! events elsewhere. The guard must hold each new target until `Fetch.enable` is in place, so
//! it auto-attaches as a client where nobody else answers. Chromium keeps a target paused until
//! every auto-attaching client has resumed it.
//!
//! The client is one of two kinds:
//! - **a browser session on the Chrome's own connection** ([`CdpLink::on_connection`]): a
//!   second session attached to the browser target over the pool's [`CdpConnection`] (a
//!   launched Chrome's pipe, which nothing else can reach: there is no port to open a second
//!   connection on). Its events, and those of every session it attaches, come to the link
//!   alone. This is what the pool uses.
//! - **a websocket of its own** ([`CdpLink::connect`]), for a caller that has only a Chrome's
//!   `ws://` URL: one task owns the websocket ([`chromiumoxide::Connection`] with an untyped
//!   event type, so protocol drift cannot drop the events we depend on), takes commands over a
//!   channel and forwards every event to the guard.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chromiumoxide::Connection;
use chromiumoxide::types::{CallId, EventMessage, Message, Method, MethodId};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::cdp::CdpConnection;
use crate::error::BrowserError;

/// Failure of one CDP call on the link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The browser did not answer in time.
    #[error("CDP {method} timed out after {timeout_ms} ms")]
    Timeout {
        /// The method.
        method: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The browser answered with an error.
    #[error("CDP {method} failed: {message} ({code})")]
    Protocol {
        /// The method.
        method: String,
        /// CDP error code.
        code: i64,
        /// CDP error message.
        message: String,
    },
    /// The websocket is gone.
    #[error("the CDP connection of the egress guard is closed")]
    Closed,
    /// Connecting failed.
    #[error("cannot connect to the browser's CDP endpoint: {0}")]
    Connect(String),
}

/// An event with an untyped payload.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RawEvent {
    pub method: String,
    #[serde(rename = "sessionId")]
    pub session_id: Option<String>,
    #[serde(default)]
    pub params: Value,
}

impl Method for RawEvent {
    fn identifier(&self) -> MethodId {
        Cow::Owned(self.method.clone())
    }
}

impl EventMessage for RawEvent {
    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
}

struct Call {
    method: String,
    session: Option<String>,
    params: Value,
    reply: oneshot::Sender<Result<Value, LinkError>>,
}

/// Handle to the link; cheap to clone.
#[derive(Clone)]
pub(crate) struct CdpLink {
    backend: Backend,
    alive: Arc<AtomicBool>,
}

#[derive(Clone)]
enum Backend {
    /// The actor owning a websocket of the link's own.
    Socket(mpsc::UnboundedSender<Call>),
    /// A browser session on a shared connection: calls without a session go to it.
    Session {
        conn: CdpConnection,
        browser_session: String,
    },
}

impl std::fmt::Debug for CdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CdpLink")
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl CdpLink {
    /// Connects to a browser-level websocket URL and starts the actor. Events arrive on the
    /// returned receiver until the connection closes.
    pub async fn connect(
        ws_url: &str,
        timeout: Duration,
    ) -> Result<
        (
            Self,
            mpsc::UnboundedReceiver<RawEvent>,
            tokio::task::JoinHandle<()>,
        ),
        LinkError,
    > {
        let conn = tokio::time::timeout(timeout, Connection::<RawEvent>::connect(ws_url))
            .await
            .map_err(|_| LinkError::Connect(format!("timed out after {timeout:?}")))?
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        let (call_tx, call_rx) = mpsc::unbounded_channel();
        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let alive = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(run(conn, call_rx, event_tx, alive.clone()));
        Ok((
            Self {
                backend: Backend::Socket(call_tx),
                alive,
            },
            event_rx,
            task,
        ))
    }

    /// Attaches a browser session of the link's own on `conn`
    /// ([`CdpConnection::browser_session`]). Its events arrive on the returned receiver (those
    /// of the browser session itself without a session id, as on a connection of its own)
    /// until the connection closes or the link is [detached](Self::detach).
    pub async fn on_connection(
        conn: &CdpConnection,
        timeout: Duration,
    ) -> Result<
        (
            Self,
            mpsc::UnboundedReceiver<RawEvent>,
            tokio::task::JoinHandle<()>,
        ),
        LinkError,
    > {
        let (browser_session, mut routed) = conn
            .browser_session(timeout)
            .await
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let alive = Arc::new(AtomicBool::new(true));
        let task_alive = alive.clone();
        let own = browser_session.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = routed.recv().await {
                let params = match event.params::<Value>() {
                    Ok(params) => params,
                    Err(err) => {
                        tracing::warn!(error = %err, "egress link: unparsable CDP event dropped");
                        continue;
                    }
                };
                let session_id = event.session_id.clone().filter(|s| *s != own);
                let raw = RawEvent {
                    method: event.method.clone(),
                    session_id,
                    params,
                };
                if event_tx.send(raw).is_err() {
                    break;
                }
            }
            task_alive.store(false, Ordering::Release);
        });
        Ok((
            Self {
                backend: Backend::Session {
                    conn: conn.clone(),
                    browser_session,
                },
                alive,
            },
            event_rx,
            task,
        ))
    }

    /// Ends a link on a shared connection: its browser session is detached, and with it its
    /// auto-attach and the sessions it attached (a link of its own ends with its socket).
    pub fn detach(&self) {
        self.alive.store(false, Ordering::Release);
        if let Backend::Session {
            conn,
            browser_session,
        } = &self.backend
        {
            conn.send_and_forget(
                None,
                "Target.detachFromTarget",
                serde_json::json!({ "sessionId": browser_session }),
            );
        }
    }

    /// Whether the websocket is still open.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Sends one command and waits for its result, at most `timeout`.
    pub async fn call(
        &self,
        method: &str,
        session: Option<&str>,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, LinkError> {
        let calls = match &self.backend {
            Backend::Socket(calls) => calls,
            Backend::Session {
                conn,
                browser_session,
            } => {
                let session = session.unwrap_or(browser_session);
                let answer = conn
                    .call_raw(Some(session), method, params, timeout)
                    .await
                    .map_err(|err| link_error(method, timeout, err))?;
                return answer
                    .decode::<Value>()
                    .map_err(|err| link_error(method, timeout, err));
            }
        };
        let (reply, rx) = oneshot::channel();
        calls
            .send(Call {
                method: method.to_string(),
                session: session.map(str::to_string),
                params,
                reply,
            })
            .map_err(|_| LinkError::Closed)?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(LinkError::Timeout {
                method: method.to_string(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            Ok(Err(_)) => Err(LinkError::Closed),
            Ok(Ok(result)) => result,
        }
    }
}

/// The link's error for `err` of the shared connection.
fn link_error(method: &str, timeout: Duration, err: BrowserError) -> LinkError {
    match err {
        BrowserError::Timeout { .. } => LinkError::Timeout {
            method: method.to_owned(),
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
        BrowserError::Protocol {
            method,
            code,
            message,
        } => LinkError::Protocol {
            method,
            code,
            message,
        },
        BrowserError::ConnectionClosed => LinkError::Closed,
        other => LinkError::Protocol {
            method: method.to_owned(),
            code: 0,
            message: other.to_string(),
        },
    }
}

async fn run(
    mut conn: Connection<RawEvent>,
    mut calls: mpsc::UnboundedReceiver<Call>,
    events: mpsc::UnboundedSender<RawEvent>,
    alive: Arc<AtomicBool>,
) {
    let mut pending: HashMap<CallId, (String, oneshot::Sender<Result<Value, LinkError>>)> =
        HashMap::new();
    let mut submitted: u64 = 0;
    loop {
        tokio::select! {
            call = calls.recv() => {
                let Some(call) = call else { break };
                match conn.submit_command(
                    Cow::Owned(call.method.clone()),
                    call.session.map(Into::into),
                    call.params,
                ) {
                    Ok(id) => {
                        pending.insert(id, (call.method, call.reply));
                    }
                    Err(e) => {
                        let _ = call.reply.send(Err(LinkError::Protocol {
                            method: call.method,
                            code: 0,
                            message: e.to_string(),
                        }));
                    }
                }
                submitted += 1;
                if submitted.is_multiple_of(256) {
                    // Callers that timed out dropped their receiver; forget them.
                    pending.retain(|_, (_, tx)| !tx.is_closed());
                }
            }
            message = conn.next() => {
                match message {
                    None => break,
                    Some(Ok(Message::Response(resp))) => {
                        if let Some((method, reply)) = pending.remove(&resp.id) {
                            let result = match resp.error {
                                Some(err) => Err(LinkError::Protocol {
                                    method,
                                    code: err.code,
                                    message: err.message,
                                }),
                                None => Ok(resp.result.unwrap_or(Value::Null)),
                            };
                            let _ = reply.send(result);
                        }
                    }
                    Some(Ok(Message::Event(event))) => {
                        if events.send(event).is_err() {
                            break;
                        }
                    }
                    Some(Err(chromiumoxide::error::CdpError::InvalidMessage(msg, err))) => {
                        tracing::warn!(error = %err, len = msg.len(), "egress link: unparsable CDP message dropped");
                    }
                    Some(Err(err)) => {
                        tracing::error!(error = %err, "egress link: CDP connection failed");
                        break;
                    }
                }
            }
        }
    }
    alive.store(false, Ordering::Release);
    for (_, (_, reply)) in pending.drain() {
        let _ = reply.send(Err(LinkError::Closed));
    }
}
