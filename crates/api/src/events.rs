//! `GET /v1/tasks/{id}/events?after_seq=N`: a WebSocket that replays stored events with
//! `seq > N`, then streams live ones, in order, without gaps or duplicates, and closes normally
//! (1000) right after the task's final event.
//!
//! The events come from the task core's [`TaskFeed`](browserd_tasks::TaskFeed) (the one way the
//! api follows a task, also used by the MCP tools): it subscribes to the process-wide hub first, then reads `seq > last` from
//! `task_events` after every signal, so the signals are only wake-ups and a lost or duplicated
//! notification cannot cause a gap or a duplicate.
//!
//! Edge rules: a key has at most its quota `max_websockets` of open task streams (events and
//! live view together) in this process (429 `too_many_websockets`; the key's own quota, else
//! `--max-websockets-per-key`); client messages are capped (`ws_max_message_bytes`; larger ones close
//! the stream with 1009); the stream closes with 1008 `api key revoked` when the hub announces
//! its key's revocation (any process may revoke: `NOTIFY api_keys`), and with 1000
//! `task deleted` when the task is deleted. After a listener reconnect (notifications may
//! have been missed) both are re-checked in the database.
//!
//! `POST /v1/tasks/{id}/events/ticket` issues the single-use tickets browsers use instead of an
//! `Authorization` header (see [`crate::auth`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_tasks::records::{FeedItem, KeySignal};
use browserd_tasks::{TaskCore, TaskError};
use browserd_types::dto::{ErrorBody, TicketRequest, TicketScope};
use browserd_types::{ApiKeyId, TaskId};
use secrecy::ExposeSecret;
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::auth::BEARER_SUBPROTOCOL;
use crate::error::ApiError;
use crate::extract::{Caller, OptionalApiJson, QueryParams, TaskPath};
use crate::{AppState, WS_TICKET_TTL};

/// A client that does not accept a frame within this time is disconnected.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Keep-alive ping interval.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(30);
/// Close code 1009: a client message was larger than allowed.
const MESSAGE_TOO_BIG: u16 = 1009;

/// Open event WebSockets per key in this process.
#[derive(Clone, Default)]
pub(crate) struct WebSocketCounter {
    open: Arc<Mutex<HashMap<ApiKeyId, usize>>>,
}

/// One open WebSocket of a key; frees its place on drop.
pub(crate) struct WebSocketSlot {
    counter: WebSocketCounter,
    key: ApiKeyId,
}

impl WebSocketCounter {
    /// A place for one more WebSocket of `key`, unless it has `max` open already.
    pub(crate) fn acquire(
        &self,
        key: ApiKeyId,
        max: Option<i64>,
    ) -> Result<WebSocketSlot, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_default();
        if let Some(max) = max
            && i64::try_from(*count).unwrap_or(i64::MAX) >= max
        {
            return Err(ApiError::TooManyWebSockets { max });
        }
        *count += 1;
        Ok(WebSocketSlot {
            counter: self.clone(),
            key,
        })
    }
}

impl Drop for WebSocketSlot {
    fn drop(&mut self) {
        let mut open = self
            .counter
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A single-use ticket for one of a task's WebSockets (events, or the live view).
#[derive(Debug, Serialize, ToSchema)]
pub struct EventTicket {
    /// Pass it as `?ticket=` within its lifetime; it works once.
    pub ticket: String,
    /// When it stops working.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
    /// What it allows: `view` (the event stream and the live view's frames) or `control`
    /// (also take-over inputs on the live view).
    pub scope: TicketScope,
    /// The event WebSocket's path with the ticket, relative to the server (`ws://` or
    /// `wss://`).
    pub url: String,
    /// The live view WebSocket's path with the ticket (the ticket opens one of the two).
    pub live_url: String,
}

/// Get a single-use ticket for the task's WebSockets, for clients that cannot set an
/// `Authorization` header on a WebSocket (browsers).
///
/// Open `/v1/tasks/{id}/events?ticket=<ticket>` or `/v1/tasks/{id}/live?ticket=<ticket>`
/// within 30 s; the ticket works once, only for this task, and only while the key that asked
/// for it is active. Any api replica redeems it. The optional body names its scope: `view`
/// (the default; the event stream and the live view's frames, nothing else — safe to hand to
/// anyone who may watch) or `control` (also take-over inputs on the live view: ask for it only
/// when a person takes over). A take-over input on a live socket opened with a `view` ticket
/// closes the socket with 1008 `view-only ticket: …` and never reaches the task. Tickets never
/// authorize REST calls: answering a question, pausing or resuming needs the key.
/// (Alternatively, a browser offers the subprotocols `bearer` and its key:
/// `new WebSocket(url, ["bearer", key])`; the server answers `Sec-WebSocket-Protocol: bearer`;
/// a key may do everything a `control` ticket may.) The long-lived key is never accepted in a
/// URL.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/events/ticket",
    tag = "events",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    request_body(content = Option<TicketRequest>, description = "Optional; no body is `{\"scope\": \"view\"}`"),
    responses(
        (status = 201, description = "A ticket", body = EventTicket),
        (status = 400, description = "Malformed id or body", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 415, description = "A body that is not JSON", body = ErrorBody),
        (status = 422, description = "Unknown scope or field", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_ticket(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    OptionalApiJson(request): OptionalApiJson<TicketRequest>,
) -> Result<Response, ApiError> {
    state.core.tasks().owned_task(&caller, id).await?;
    let issued = state
        .core
        .create_scoped_ws_ticket(caller.key_id, id, request.scope, WS_TICKET_TTL)
        .await?;
    let ticket = issued.ticket.expose_secret().to_owned();
    let body = EventTicket {
        url: format!("/v1/tasks/{id}/events?ticket={ticket}"),
        live_url: format!("/v1/tasks/{id}/live?ticket={ticket}"),
        ticket,
        expires_at: issued.expires_at,
        scope: request.scope,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Stream a task's events over a WebSocket.
///
/// Each text frame is one event `{"task_id","seq","kind","payload","created_at"}`
/// (schema `TaskEvent`). Reconnect with `after_seq` = the last seq you received to resume
/// without gaps or duplicates. The server closes with code 1000 after the task's final event
/// (a `status` event with status finished, failed or stopped), with 1000 `task deleted` when
/// the task is deleted, with 1008 `api key revoked` when the key is revoked, with 1009 when the
/// client sends a message larger than the server allows, and with 1001 on shutdown.
///
/// Authentication: `Authorization: Bearer <key>`; or, from a browser, a ticket
/// (`?ticket=`, see `POST /v1/tasks/{id}/events/ticket`) or the subprotocols `bearer` and
/// the key (`new WebSocket(url, ["bearer", key])`, answered with
/// `Sec-WebSocket-Protocol: bearer`). A key in the URL (`?key=`, `?token=`, …) is refused.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/events",
    tag = "events",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("after_seq" = Option<i64>, Query, description = "Replay events with seq greater than this (default 0: everything)", minimum = 0),
        ("ticket" = Option<String>, Query, description = "A ticket from `POST /v1/tasks/{id}/events/ticket` (instead of a key)"),
    ),
    responses(
        (status = 101, description = "Switching to WebSocket; text frames carry `TaskEvent` JSON"),
        (status = 400, description = "Not a WebSocket upgrade request, or a credential in the URL", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key or ticket", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 422, description = "Invalid after_seq", body = ErrorBody),
        (status = 429, description = "Rate limited, or the key has its quota `max_websockets` of open task WebSockets (`too_many_websockets`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_events(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    query: QueryParams,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    query.only(&["after_seq", "ticket"])?;
    let after_seq = query.int_in("after_seq", 0..=i64::MAX)?.unwrap_or(0);
    state.core.tasks().owned_task(&caller, id).await?;
    let (upgrade, slot) = websocket_upgrade(&state, &caller, upgrade).await?;
    let key_id = caller.key_id;
    Ok(upgrade.on_upgrade(move |socket| async move {
        metrics::gauge!("browserd_websocket_subscribers").increment(1.0);
        let outcome = stream_events(ClientSocket(socket), &state, id, key_id, after_seq).await;
        drop(slot);
        metrics::gauge!("browserd_websocket_subscribers").decrement(1.0);
        match outcome {
            Ok(reason) => tracing::debug!(task_id = %id, reason, "event stream closed"),
            Err(err) => tracing::warn!(task_id = %id, %err, "event stream ended with an error"),
        }
    }))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    #[error("store: {0}")]
    Core(#[from] TaskError),
    #[error("client went away")]
    ClientGone,
    #[error("client sent a message larger than allowed")]
    MessageTooBig,
}

/// A task WebSocket's upgrade under the edge's rules: a precise 400 for a plain request, the
/// key's quota of open sockets, `max_websockets` (the slot frees its place on drop), the
/// `bearer` subprotocol answered, client messages capped.
pub(crate) async fn websocket_upgrade(
    state: &AppState,
    caller: &Caller,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<(WebSocketUpgrade, WebSocketSlot), ApiError> {
    let upgrade = upgrade.map_err(|rejection| ApiError::BadRequest {
        code: "websocket_upgrade_required",
        message: format!(
            "this endpoint needs a WebSocket upgrade: {}",
            rejection.body_text()
        ),
    })?;
    let max = state.core.key_quotas(caller.key_id).await?.max_websockets;
    let slot = state.edge.websockets.acquire(caller.key_id, max)?;
    let max_message = state.edge.ws_max_message_bytes;
    let upgrade = upgrade
        .protocols([BEARER_SUBPROTOCOL])
        .max_message_size(max_message)
        .max_frame_size(max_message);
    Ok((upgrade, slot))
}

/// A client's task WebSocket: sends time out (a client that does not read is gone), and
/// what the client sends is only checked for size and for leaving.
pub(crate) struct ClientSocket(pub(crate) WebSocket);

impl ClientSocket {
    pub(crate) async fn send(&mut self, message: Message) -> Result<(), StreamError> {
        match tokio::time::timeout(SEND_TIMEOUT, self.0.send(message)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(StreamError::ClientGone),
        }
    }

    /// Resolves with `Ok` when the client sent a message, with an error when it left or sent
    /// more than allowed.
    pub(crate) async fn receive(&mut self) -> Result<(), StreamError> {
        self.receive_text().await.map(drop)
    }

    /// As [`ClientSocket::receive`], answering the text of a text message (`None` for other
    /// messages: pings, pongs, binary).
    pub(crate) async fn receive_text(&mut self) -> Result<Option<String>, StreamError> {
        match self.0.recv().await {
            Some(Err(err)) if too_big(&err) => Err(StreamError::MessageTooBig),
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => Err(StreamError::ClientGone),
            Some(Ok(Message::Text(text))) => Ok(Some(text.as_str().to_owned())),
            Some(Ok(_)) => Ok(None),
        }
    }

    /// Closes the socket as `outcome` says: with its code and reason, 1009 for a message too
    /// big, 1011 for a server error; returns why the stream ended.
    pub(crate) async fn finish(
        &mut self,
        outcome: Result<(u16, &'static str), StreamError>,
    ) -> Result<&'static str, TaskError> {
        let (code, reason, result) = match outcome {
            Ok((code, reason)) => (code, reason, Ok(reason)),
            Err(StreamError::ClientGone) => return Ok("client closed"),
            Err(StreamError::MessageTooBig) => (
                MESSAGE_TOO_BIG,
                "message too big",
                Ok("client message too big"),
            ),
            Err(StreamError::Core(err)) => (close_code::ERROR, "internal error", Err(err)),
        };
        let _ = self
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
        result
    }
}

/// Whether a receive error is a client message over the size limit.
fn too_big(err: &axum::Error) -> bool {
    std::error::Error::source(err)
        .and_then(|inner| inner.downcast_ref::<tungstenite::Error>())
        .is_some_and(|inner| matches!(inner, tungstenite::Error::Capacity(_)))
}

/// Why a stream must end now that notifications may have been missed, if it must.
pub(crate) async fn recheck(
    store: &TaskCore,
    task_id: TaskId,
    key_id: ApiKeyId,
) -> Result<Option<(u16, &'static str)>, StreamError> {
    if !store.api_key_active(key_id).await? {
        return Ok(Some((close_code::POLICY, "api key revoked")));
    }
    if store.get_task(None, task_id).await?.is_none() {
        return Ok(Some((close_code::NORMAL, "task deleted")));
    }
    Ok(None)
}

async fn stream_events(
    mut socket: ClientSocket,
    state: &AppState,
    task_id: TaskId,
    key_id: ApiKeyId,
    after_seq: i64,
) -> Result<&'static str, TaskError> {
    // The feed subscribes before it reads, so nothing committed meanwhile goes unsignalled;
    // both subscriptions come before the key check, so a revocation in between is not missed.
    let mut feed = state.core.tasks().follow(task_id, after_seq);
    let mut key_signals = state.core.key_signals();
    let store = &state.core;

    let result = async {
        if !store.api_key_active(key_id).await? {
            return Ok((close_code::POLICY, "api key revoked"));
        }
        // A task that already ended and whose final event the client has seen.
        match store.get_task(None, task_id).await? {
            None => return Ok((close_code::NORMAL, "task deleted")),
            Some(task) if task.status.is_terminal() && after_seq >= task.last_event_seq => {
                return Ok((close_code::NORMAL, "task ended"));
            }
            Some(_) => {}
        }

        // Events stored from now on are live: their delivery time is measured.
        let opened = time::OffsetDateTime::now_utc();
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.reset();
        loop {
            tokio::select! {
                () = state.shutdown.cancelled() => {
                    return Ok((close_code::AWAY, "server shutting down"));
                }
                item = feed.next() => match item? {
                    FeedItem::Event(event) => {
                        let json = serde_json::to_string(&event)
                            .map_err(|err| TaskError::Internal(format!("encoding event: {err}")))?;
                        socket.send(Message::Text(json.into())).await?;
                        if event.created_at >= opened {
                            let took = time::OffsetDateTime::now_utc() - event.created_at;
                            metrics::histogram!("browserd_event_delivery_seconds")
                                .record(took.as_seconds_f64().max(0.0));
                        }
                        if event.is_final() {
                            return Ok((close_code::NORMAL, "task ended"));
                        }
                    }
                    FeedItem::Resync => {
                        if let Some(end) = recheck(store, task_id, key_id).await? {
                            return Ok(end);
                        }
                    }
                    FeedItem::Deleted => return Ok((close_code::NORMAL, "task deleted")),
                    FeedItem::Closed => return Ok((close_code::AWAY, "event stream unavailable")),
                },
                signal = key_signals.recv() => match signal {
                    Some(KeySignal::Revoked(revoked)) if revoked == key_id => {
                        return Ok((close_code::POLICY, "api key revoked"));
                    }
                    Some(KeySignal::Revoked(_)) => {}
                    Some(KeySignal::Resync) => {
                        if let Some(end) = recheck(store, task_id, key_id).await? {
                            return Ok(end);
                        }
                    }
                    None => return Ok((close_code::AWAY, "event stream unavailable")),
                },
                received = socket.receive() => received?,
                _ = ping.tick() => {
                    socket.send(Message::Ping(Default::default())).await?;
                }
            }
        }
    }
    .await;

    socket.finish(result).await
}
