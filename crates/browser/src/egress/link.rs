//! A CDP connection of the egress guard's own, separate from chromiumoxide's `Handler`.
//!
//! Why a second connection: chromiumoxide resumes every auto-attached child target
//! (`Runtime.runIfWaitingForDebugger`) the moment it sees it and routes events of the sessions it
//! knows to its page objects. The guard must hold each new target until `Fetch.enable` is in
//! place, so it auto-attaches on a connection where nobody else answers. Chromium keeps a target
//! paused until every auto-attaching client has resumed it.
//!
//! The link is a small actor: one task owns the websocket ([`chromiumoxide::Connection`] with an
//! untyped event type, so protocol drift cannot drop the events we depend on), takes commands
//! over a channel and forwards every event to the guard.

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
    calls: mpsc::UnboundedSender<Call>,
    alive: Arc<AtomicBool>,
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
                calls: call_tx,
                alive,
            },
            event_rx,
            task,
        ))
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
        let (reply, rx) = oneshot::channel();
        self.calls
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
