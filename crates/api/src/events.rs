//! `GET /v1/tasks/{id}/events?after_seq=N`: a WebSocket that replays stored events with
//! `seq > N`, then streams live ones, in order, without gaps or duplicates, and closes normally
//! (1000) right after the task's final event.
//!
//! Algorithm: subscribe to the process-wide [`EventHub`](browserd_store::EventHub) first, then
//! replay from `task_events`; afterwards every signal (`seq` committed, resync after a lag or a
//! listener reconnect) makes the connection read `seq > last_sent` from the database. Events are
//! therefore always sent from the table in seq order and the signals are only wake-ups: a lost
//! or duplicated notification cannot cause a gap or a duplicate.

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use browserd_store::{Signal, Store, StoreError};
use browserd_types::TaskId;
use browserd_types::dto::ErrorBody;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{Caller, QueryParams, TaskPath};
use crate::task_ops::owned_task;

/// Events read from the database per query while catching up.
const BATCH: i64 = 200;
/// A client that does not accept a frame within this time is disconnected.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Keep-alive ping interval.
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Stream a task's events over a WebSocket.
///
/// Each text frame is one event `{"task_id","seq","kind","payload","created_at"}`
/// (schema `TaskEvent`). Reconnect with `after_seq` = the last seq you received to resume
/// without gaps or duplicates. The server closes with code 1000 after the task's final event
/// (a `status` event with status finished, failed or stopped), and with 1001 on shutdown.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/events",
    tag = "events",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("after_seq" = Option<i64>, Query, description = "Replay events with seq greater than this (default 0: everything)", minimum = 0),
    ),
    responses(
        (status = 101, description = "Switching to WebSocket; text frames carry `TaskEvent` JSON"),
        (status = 400, description = "Not a WebSocket upgrade request", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 422, description = "Invalid after_seq", body = ErrorBody),
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
    query.only(&["after_seq"])?;
    let after_seq = query.int_in("after_seq", 0..=i64::MAX)?.unwrap_or(0);
    owned_task(&state, &caller, id).await?;
    let upgrade = upgrade.map_err(|rejection| ApiError::BadRequest {
        code: "websocket_upgrade_required",
        message: format!(
            "this endpoint needs a WebSocket upgrade: {}",
            rejection.body_text()
        ),
    })?;
    Ok(upgrade.on_upgrade(move |socket| async move {
        metrics::gauge!("browserd_websocket_subscribers").increment(1.0);
        let outcome = stream_events(socket, &state, id, after_seq).await;
        metrics::gauge!("browserd_websocket_subscribers").decrement(1.0);
        match outcome {
            Ok(reason) => tracing::debug!(task_id = %id, reason, "event stream closed"),
            Err(err) => tracing::warn!(task_id = %id, %err, "event stream ended with an error"),
        }
    }))
}

#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("client went away")]
    ClientGone,
}

/// Whether the final event has been sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    More,
    Final,
}

struct EventStream {
    socket: WebSocket,
    store: Store,
    task_id: TaskId,
    last_sent: i64,
}

impl EventStream {
    async fn send(&mut self, message: Message) -> Result<(), StreamError> {
        match tokio::time::timeout(SEND_TIMEOUT, self.socket.send(message)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(StreamError::ClientGone),
        }
    }

    async fn close(&mut self, code: u16, reason: &'static str) {
        let _ = self
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
    }

    /// Sends every stored event after `last_sent`, stopping after the final one.
    async fn catch_up(&mut self) -> Result<Progress, StreamError> {
        loop {
            let batch = self
                .store
                .events_after(self.task_id, self.last_sent, BATCH)
                .await?;
            let full = batch.len() as i64 == BATCH;
            for event in batch {
                let json = serde_json::to_string(&event)
                    .map_err(|err| StoreError::Corrupt(err.to_string()))?;
                self.send(Message::Text(json.into())).await?;
                self.last_sent = event.seq;
                if event.is_final() {
                    return Ok(Progress::Final);
                }
            }
            if !full {
                return Ok(Progress::More);
            }
        }
    }
}

async fn stream_events(
    socket: WebSocket,
    state: &AppState,
    task_id: TaskId,
    after_seq: i64,
) -> Result<&'static str, StreamError> {
    // Subscribe before reading so nothing committed meanwhile goes unsignalled.
    let mut subscription = state.hub.subscribe(task_id);
    let mut stream = EventStream {
        socket,
        store: state.store.clone(),
        task_id,
        last_sent: after_seq,
    };

    let result = async {
        if stream.catch_up().await? == Progress::Final {
            return Ok((close_code::NORMAL, "task ended"));
        }
        // A task that already ended and whose final event the client has seen.
        match stream.store.get_task(None, task_id).await? {
            None => return Ok((close_code::NORMAL, "task deleted")),
            Some(task) if task.status.is_terminal() && stream.last_sent >= task.last_event_seq => {
                return Ok((close_code::NORMAL, "task ended"));
            }
            Some(_) => {}
        }

        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.reset();
        loop {
            tokio::select! {
                () = state.shutdown.cancelled() => {
                    return Ok((close_code::AWAY, "server shutting down"));
                }
                signal = subscription.recv() => match signal {
                    Some(Signal::Appended { seq }) if seq <= stream.last_sent => {}
                    Some(Signal::Appended { .. } | Signal::Resync) => {
                        if stream.catch_up().await? == Progress::Final {
                            return Ok((close_code::NORMAL, "task ended"));
                        }
                    }
                    Some(Signal::Deleted) => return Ok((close_code::NORMAL, "task deleted")),
                    None => return Ok((close_code::AWAY, "event stream unavailable")),
                },
                message = stream.socket.recv() => match message {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {
                        return Err(StreamError::ClientGone);
                    }
                    Some(Ok(_)) => {}
                },
                _ = ping.tick() => {
                    stream.send(Message::Ping(Default::default())).await?;
                }
            }
        }
    }
    .await;

    match result {
        Ok((code, reason)) => {
            stream.close(code, reason).await;
            Ok(reason)
        }
        Err(StreamError::ClientGone) => Ok("client closed"),
        Err(err) => {
            stream.close(close_code::ERROR, "internal error").await;
            Err(err)
        }
    }
}
