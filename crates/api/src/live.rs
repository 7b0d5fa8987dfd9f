//! `GET /v1/tasks/{id}/live`: a WebSocket carrying the running task's page as JPEG frames
//! (Chrome's screencast), for the dashboard's live view.
//!
//! While the socket is open this process keeps a viewer registration in Postgres
//! (`live_viewers`, refreshed every [`VIEWER_TTL`] / 3): the first viewer makes the task's
//! worker start the screencast, the last one leaving stops it. Frames reach this process as
//! `live` notifications; it reads the newest stored frame and sends it as one binary message,
//! so a slow viewer skips frames instead of queueing them. The socket closes with 1000
//! `task ended` when the task reaches a terminal status (or `task deleted`), 1008 when the key
//! is revoked, 1001 on shutdown. Authentication is the event WebSocket's: a key in the
//! `Authorization` header, the `bearer` subprotocol, or a ticket of the task.
//!
//! Take-over: while the task is paused on a worker, the viewer may drive its browser. Each
//! text message is one [`PersonInput`] (JSON); it is checked, rate limited per socket, and
//! recorded as the task's `person_input` event (`Store::record_person_input`), which the
//! worker holding the browser applies in order. Every input is answered with a text message:
//! `{"type": "input_accepted", "seq": N}` (N: its event) or `{"type": "input_refused",
//! "error": "…"}` (the socket stays open).

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocketUpgrade, close_code};
use axum::response::Response;
use browserd_tasks::records::{KeySignal, LiveSignal, LiveViewerId, Signal};
use browserd_tasks::{TaskCore, TaskError};
use browserd_types::dto::{ErrorBody, TicketScope};
use browserd_types::takeover::PersonInput;
use browserd_types::{ApiKeyId, TaskId};
use governor::{DefaultDirectRateLimiter, Quota};
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::events::{ClientSocket, PING_INTERVAL, StreamError, recheck, websocket_upgrade};
use crate::extract::{Caller, QueryParams, TaskPath};

/// A viewer registration lasts this long unless refreshed (a crashed api's viewers stop
/// counting after it).
pub const VIEWER_TTL: Duration = Duration::from_secs(30);

/// A viewer may send this many inputs per second (with twice as many at once): a person
/// clicking and typing sends far fewer; a script flooding the task's event log is cut off.
pub const PERSON_INPUTS_PER_SECOND: u32 = 20;
const INPUT_RATE: std::num::NonZeroU32 =
    std::num::NonZeroU32::new(PERSON_INPUTS_PER_SECOND).unwrap();
const INPUT_BURST: std::num::NonZeroU32 =
    std::num::NonZeroU32::new(2 * PERSON_INPUTS_PER_SECOND).unwrap();

/// The close reason of a `view` ticket's live socket that sent a take-over input (code 1008;
/// a close reason has at most 123 bytes).
pub const VIEW_ONLY_CLOSE: &str =
    "view-only ticket: take-over inputs need a ticket with {\"scope\": \"control\"} or the key";

/// Watch a running task's page live over a WebSocket.
///
/// Each binary message is one JPEG frame of the task's focused tab (the newest; frames are
/// throttled by the worker's `--live-view-fps` and skipped for slow viewers). The worker only
/// screencasts while at least one viewer is connected. The first frame arrives once the task
/// runs; a queued task's socket waits. The server closes with 1000 `task ended` after the
/// task ends (1000 `task deleted`, 1008 `api key revoked`, 1001 on shutdown, 1009 when the
/// client sends a message larger than allowed). Authentication as for the event WebSocket:
/// `Authorization: Bearer <key>`, the subprotocols `bearer` and the key, or `?ticket=`
/// (`POST /v1/tasks/{id}/events/ticket`; a ticket works once, for either WebSocket).
///
/// Before the first frame, and whenever the page's size changes, a text message
/// `{"type": "viewport", "width", "height"}` gives the CSS pixels the frames show (a frame may
/// be scaled down from them).
///
/// Take-over: while the task is `paused` (on a worker), each text message the client sends is
/// one input for the page — `{"type": "click", "x", "y", "button"?, "click_count"?}`,
/// `{"type": "scroll", "x", "y", "delta_x"?, "delta_y"?}`, `{"type": "type", "text",
/// "secret"?}` or `{"type": "keys", "keys": "Enter"}` (coordinates: CSS pixels of the task's
/// viewport) — recorded in the task's events as `person_input` (a secret text only by its
/// length) and applied in order before the agent resumes; the agent's next step is told a
/// person used the browser. Each is answered `{"type": "input_accepted", "seq"}` or
/// `{"type": "input_refused", "error"}`; at most 20 per second. Only a socket opened with the
/// key or a `control` ticket may send inputs: on a `view` ticket's socket (the default ticket)
/// any message closes it with 1008 `view-only ticket: …`, and nothing reaches the task.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/live",
    tag = "events",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("ticket" = Option<String>, Query, description = "A ticket from `POST /v1/tasks/{id}/events/ticket` (instead of a key)"),
    ),
    responses(
        (status = 101, description = "Switching to WebSocket; binary messages carry JPEG frames"),
        (status = 400, description = "Not a WebSocket upgrade request, or a credential in the URL", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key or ticket", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 422, description = "Unknown query parameter", body = ErrorBody),
        (status = 429, description = "Rate limited, or the key has its quota `max_websockets` of open task WebSockets (`too_many_websockets`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_live(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    query: QueryParams,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    query.only(&["ticket"])?;
    state.core.tasks().owned_task(&caller, id).await?;
    let (upgrade, slot) = websocket_upgrade(&state, &caller, upgrade).await?;
    let key_id = caller.key_id;
    let scope = caller.scope;
    Ok(upgrade.on_upgrade(move |socket| async move {
        metrics::gauge!("browserd_live_viewers").increment(1.0);
        let mut viewer = LiveStream {
            socket: ClientSocket(socket),
            store: state.core.clone(),
            task_id: id,
            scope,
            viewer: None,
            last_seq: None,
            last_size: None,
            inputs: DefaultDirectRateLimiter::direct(
                Quota::per_second(INPUT_RATE).allow_burst(INPUT_BURST),
            ),
        };
        let outcome = viewer.run(&state, key_id).await;
        if let Some(registration) = viewer.viewer.take()
            && let Err(err) = viewer.store.remove_live_viewer(registration).await
        {
            // It expires on its own.
            tracing::debug!(task_id = %id, %err, "live viewer not removed");
        }
        drop(slot);
        metrics::gauge!("browserd_live_viewers").decrement(1.0);
        match outcome {
            Ok(reason) => tracing::debug!(task_id = %id, reason, "live view closed"),
            Err(err) => tracing::warn!(task_id = %id, %err, "live view ended with an error"),
        }
    }))
}

struct LiveStream {
    socket: ClientSocket,
    store: TaskCore,
    task_id: TaskId,
    /// What the socket's credential allows: inputs only with `control`.
    scope: TicketScope,
    viewer: Option<LiveViewerId>,
    /// Seq of the frame sent last (the worker's numbering; "different" means "newer").
    last_seq: Option<i64>,
    /// The page size (CSS pixels) announced last.
    last_size: Option<(i32, i32)>,
    /// The take-over inputs this socket may still send.
    inputs: DefaultDirectRateLimiter,
}

impl LiveStream {
    /// Sends the newest stored frame unless it was sent already; before a frame whose page
    /// size differs from the previous one's, the size as a text message.
    async fn send_newest(&mut self) -> Result<(), StreamError> {
        if let Some(frame) = self.store.live_frame(self.task_id).await?
            && self.last_seq != Some(frame.seq)
        {
            self.last_seq = Some(frame.seq);
            let size = (frame.width, frame.height);
            if self.last_size != Some(size) {
                self.last_size = Some(size);
                let viewport = json!({"type": "viewport", "width": size.0, "height": size.1});
                self.socket
                    .send(Message::Text(viewport.to_string().into()))
                    .await?;
            }
            self.socket.send(Message::Binary(frame.jpeg.into())).await?;
        }
        Ok(())
    }

    /// Records one take-over input the client sent and answers it.
    async fn person_input(&mut self, key_id: ApiKeyId, text: &str) -> Result<(), StreamError> {
        let answer = match self.accept_person_input(key_id, text).await? {
            Ok(seq) => json!({"type": "input_accepted", "seq": seq}),
            Err(error) => json!({"type": "input_refused", "error": error}),
        };
        self.socket
            .send(Message::Text(answer.to_string().into()))
            .await
    }

    /// The input's event seq, or why it was refused.
    async fn accept_person_input(
        &mut self,
        key_id: ApiKeyId,
        text: &str,
    ) -> Result<Result<i64, String>, StreamError> {
        let input: PersonInput = match serde_json::from_str(text) {
            Ok(input) => input,
            Err(err) => return Ok(Err(format!("not a take-over input: {err}"))),
        };
        if let Err(err) = input.check() {
            return Ok(Err(err));
        }
        if self.inputs.check().is_err() {
            return Ok(Err(format!(
                "too many inputs: at most {PERSON_INPUTS_PER_SECOND} per second"
            )));
        }
        Ok(self
            .store
            .record_person_input(key_id, self.task_id, &input)
            .await?)
    }

    /// Whether the task has ended (or is gone): the reason to close with.
    async fn ended(&mut self) -> Result<Option<&'static str>, StreamError> {
        Ok(match self.store.get_task(None, self.task_id).await? {
            None => Some("task deleted"),
            Some(task) if task.status.is_terminal() => Some("task ended"),
            Some(_) => None,
        })
    }

    async fn run(&mut self, state: &AppState, key_id: ApiKeyId) -> Result<&'static str, TaskError> {
        let outcome = self.serve(state, key_id).await;
        self.socket.finish(outcome).await
    }

    async fn serve(
        &mut self,
        state: &AppState,
        key_id: ApiKeyId,
    ) -> Result<(u16, &'static str), StreamError> {
        // Subscribe before registering and reading, so nothing in between goes unsignalled.
        let mut live = state.core.subscribe_live(self.task_id);
        let mut task_signals = state.core.subscribe(self.task_id);
        let mut key_signals = state.core.key_signals();
        if !self.store.api_key_active(key_id).await? {
            return Ok((close_code::POLICY, "api key revoked"));
        }
        if let Some(reason) = self.ended().await? {
            return Ok((close_code::NORMAL, reason));
        }
        self.viewer = Some(self.store.add_live_viewer(self.task_id, VIEWER_TTL).await?);
        self.send_newest().await?;

        let mut refresh = tokio::time::interval(VIEWER_TTL / 3);
        refresh.reset();
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.reset();
        loop {
            tokio::select! {
                () = state.shutdown.cancelled() => {
                    return Ok((close_code::AWAY, "server shutting down"));
                }
                signal = live.recv() => match signal {
                    Some(LiveSignal::Frame { seq }) if Some(seq) == self.last_seq => {}
                    Some(LiveSignal::Frame { .. } | LiveSignal::Resync) => self.send_newest().await?,
                    Some(LiveSignal::Viewers) => {}
                    None => return Ok((close_code::AWAY, "live view unavailable")),
                },
                signal = task_signals.recv() => match signal {
                    Some(Signal::Appended { .. } | Signal::Resync) => {
                        if let Some(reason) = self.ended().await? {
                            return Ok((close_code::NORMAL, reason));
                        }
                    }
                    Some(Signal::Deleted) => return Ok((close_code::NORMAL, "task deleted")),
                    None => return Ok((close_code::AWAY, "live view unavailable")),
                },
                signal = key_signals.recv() => match signal {
                    Some(KeySignal::Revoked(revoked)) if revoked == key_id => {
                        return Ok((close_code::POLICY, "api key revoked"));
                    }
                    Some(KeySignal::Revoked(_)) => {}
                    Some(KeySignal::Resync) => {
                        if let Some(end) = recheck(&self.store, self.task_id, key_id).await? {
                            return Ok(end);
                        }
                    }
                    None => return Ok((close_code::AWAY, "live view unavailable")),
                },
                received = self.socket.receive_text() => {
                    if let Some(text) = received? {
                        if !self.scope.allows_input() {
                            metrics::counter!("browserd_person_inputs_refused_total", "reason" => "view_only")
                                .increment(1);
                            return Ok((close_code::POLICY, VIEW_ONLY_CLOSE));
                        }
                        self.person_input(key_id, &text).await?;
                    }
                }
                _ = refresh.tick() => {
                    let alive = match self.viewer {
                        Some(viewer) => self.store.refresh_live_viewer(viewer, VIEWER_TTL).await?,
                        None => false,
                    };
                    if !alive {
                        self.viewer =
                            Some(self.store.add_live_viewer(self.task_id, VIEWER_TTL).await?);
                    }
                }
                _ = ping.tick() => {
                    self.socket.send(Message::Ping(Default::default())).await?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_view_only_reason_fits_a_close_frame() {
        assert!(super::VIEW_ONLY_CLOSE.len() <= 123);
    }
}
