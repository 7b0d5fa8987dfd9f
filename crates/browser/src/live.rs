//! The live view of a session: Chrome's screencast (`Page.startScreencast`) of the focused tab,
//! running only while someone watches.
//!
//! [`BrowserSession::live_view`] follows a `watched` flag: it starts the screencast when the
//! flag turns true, stops it when it turns false, and moves it to the new tab when the focus
//! changes, and starts over when the tab's main frame navigates (a new document may live in a
//! new renderer). Frames are throttled at the source: a frame is published, and acknowledged
//! (`Page.screencastFrameAck`), only once `1 / max_fps` has passed since the previous one; a
//! newer frame arriving meanwhile replaces it. Chrome keeps at most a couple of frames
//! unacknowledged, so a busy page costs it no encoding beyond the cap. The consumer's
//! channel holds only the newest frame.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::capture;
use crate::error::{BrowserError, Result};
use crate::session::BrowserSession;
use crate::types::ScreenshotFormat;

/// Stopping a screencast and acknowledging a frame are best effort (the tab may be closing):
/// they must not hold the live view up for a whole CDP timeout.
const BEST_EFFORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The first frame's screenshot is a courtesy: on a tab that is between documents it may not
/// come at all, and the screencast must not wait for it long.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(5);

/// How the screencast is encoded and how often frames may come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveViewSettings {
    /// Frames are scaled down to fit this box (CSS pixels of the viewport are kept otherwise).
    pub max_width: u32,
    pub max_height: u32,
    /// JPEG quality, 0–100.
    pub quality: u8,
    /// At most this many frames per second.
    pub max_fps: f64,
}

impl Default for LiveViewSettings {
    fn default() -> Self {
        Self {
            max_width: 1280,
            max_height: 800,
            quality: 60,
            max_fps: 2.0,
        }
    }
}

impl LiveViewSettings {
    fn min_interval(&self) -> Duration {
        if self.max_fps > 0.0 && self.max_fps.is_finite() {
            Duration::from_secs_f64(1.0 / self.max_fps)
        } else {
            Duration::from_secs(1)
        }
    }
}

/// One frame of the focused tab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScreencastFrame {
    pub jpeg: Vec<u8>,
    /// The page's viewport in CSS pixels when the frame was drawn.
    pub width: u32,
    pub height: u32,
}

/// The newest frame, for the consumer of [`BrowserSession::live_view`].
pub type FrameSender = watch::Sender<Option<Arc<ScreencastFrame>>>;

#[derive(Deserialize)]
struct FrameParams {
    data: String,
    #[serde(rename = "sessionId")]
    ack_id: i64,
}

#[derive(Deserialize)]
struct Navigated {
    frame: NavigatedFrame,
}

#[derive(Deserialize)]
struct NavigatedFrame {
    #[serde(rename = "parentId", default)]
    parent_id: Option<String>,
}

/// The newest frame waiting for its turn, and the acks of every frame it replaced.
struct Pending {
    frame: ScreencastFrame,
    acks: Vec<i64>,
}

/// The screencast currently running.
struct Running {
    target: String,
    session: String,
}

impl BrowserSession {
    /// Streams the focused tab's screencast into `frames` while `watched` is true; follows the
    /// focus to other tabs. Returns `Ok` when `watched`'s sender is gone (the screencast is
    /// stopped first) and an error when the browser connection is lost. Dropping the future
    /// leaves a running screencast to be ended with the context.
    pub async fn live_view(
        &self,
        settings: LiveViewSettings,
        mut watched: watch::Receiver<bool>,
        frames: FrameSender,
    ) -> Result<()> {
        let mut focus = self.focus.subscribe();
        let mut events = self.chrome.conn.events();
        let mut running: Option<Running> = None;
        // Frames received but not published yet (the newest wins) and the acks they owe.
        let mut pending: Option<Pending> = None;
        let mut last_published = Instant::now() - settings.min_interval();
        loop {
            let want = *watched.borrow_and_update();
            let focused = focus.borrow_and_update().clone();
            let target_now = running.as_ref().map(|r| r.target.clone());
            let target_wanted = focused.filter(|_| want);
            if target_now != target_wanted {
                if let Some(old) = running.take() {
                    self.stop_screencast(&old).await;
                    pending = None;
                }
                if let Some(target) = target_wanted {
                    match self.start_screencast(&target, &settings, &frames).await {
                        Ok(started) => {
                            running = Some(started);
                            last_published = Instant::now();
                        }
                        Err(err @ BrowserError::ConnectionClosed) => return Err(err),
                        // The tab may be closing; the focus change that follows retries.
                        Err(err) => tracing::debug!(%err, "screencast not started"),
                    }
                }
            }
            let publish_at = pending
                .as_ref()
                .map(|_| last_published + settings.min_interval());
            tokio::select! {
                changed = watched.changed() => {
                    if changed.is_err() {
                        if let Some(old) = running.take() {
                            self.stop_screencast(&old).await;
                        }
                        return Ok(());
                    }
                }
                changed = focus.changed() => {
                    if changed.is_err() {
                        return Err(BrowserError::ConnectionClosed);
                    }
                }
                () = sleep_until_some(publish_at) => {
                    if let (Some(run), Some(due)) = (&running, pending.take()) {
                        frames.send_replace(Some(Arc::new(due.frame)));
                        last_published = Instant::now();
                        for ack_id in due.acks {
                            self.ack_frame(run, ack_id).await;
                        }
                    }
                }
                event = events.recv() => match event {
                    Ok(event) => {
                        let Some(run) = &running else { continue };
                        if event.session_id.as_deref() != Some(run.session.as_str()) {
                            continue;
                        }
                        if event.method == "Page.frameNavigated"
                            && event
                                .params::<Navigated>()
                                .is_ok_and(|n| n.frame.parent_id.is_none())
                        {
                            // A new document, maybe in a new renderer, where the screencast
                            // may not carry over: start it over (with a frame of the new page
                            // at once).
                            if let Some(old) = running.take() {
                                self.stop_screencast(&old).await;
                            }
                            pending = None;
                            continue;
                        }
                        if event.method != "Page.screencastFrame" {
                            continue;
                        }
                        let Ok(params) = event.params::<FrameParams>() else { continue };
                        let frame = match decode_frame(&params, self.emulated_viewport()) {
                            Ok(frame) => frame,
                            Err(err) => {
                                tracing::debug!(%err, "undecodable screencast frame");
                                self.ack_frame(run, params.ack_id).await;
                                continue;
                            }
                        };
                        // Held until its turn; Chrome sends no more while its acks wait.
                        let acks = match pending.take() {
                            Some(older) => older.acks,
                            None => Vec::new(),
                        };
                        let mut acks = acks;
                        acks.push(params.ack_id);
                        pending = Some(Pending { frame, acks });
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // A frame (and so its ack) may have been missed, which would stall
                        // the screencast: start it over.
                        if let Some(old) = running.take() {
                            self.stop_screencast(&old).await;
                            pending = None;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        return Err(BrowserError::ConnectionClosed);
                    }
                },
            }
        }
    }

    async fn start_screencast(
        &self,
        target: &str,
        settings: &LiveViewSettings,
        frames: &FrameSender,
    ) -> Result<Running> {
        let session = self.session_for_target(target).await?;
        // A frame at once: Chrome's screencast only sends one when the page repaints.
        match capture::screenshot(
            &self.chrome.conn,
            &session,
            ScreenshotFormat::Jpeg {
                quality: settings.quality,
            },
            self.emulated_viewport(),
            Some((settings.max_width, settings.max_height)),
            FIRST_FRAME_TIMEOUT.min(self.timeout),
        )
        .await
        {
            Ok(shot) => {
                let viewport = self.emulated_viewport();
                frames.send_replace(Some(Arc::new(ScreencastFrame {
                    jpeg: shot.data,
                    width: viewport.width,
                    height: viewport.height,
                })));
            }
            Err(err) => tracing::debug!(%err, "first live frame not captured"),
        }
        self.chrome
            .conn
            .call_raw(
                Some(&session),
                "Page.startScreencast",
                json!({
                    "format": "jpeg",
                    "quality": settings.quality.min(100),
                    "maxWidth": settings.max_width,
                    "maxHeight": settings.max_height,
                    "everyNthFrame": 1,
                }),
                self.timeout,
            )
            .await?;
        Ok(Running {
            target: target.to_owned(),
            session,
        })
    }

    async fn stop_screencast(&self, running: &Running) {
        if let Err(err) = self
            .chrome
            .conn
            .call_raw(
                Some(&running.session),
                "Page.stopScreencast",
                json!({}),
                BEST_EFFORT_TIMEOUT.min(self.timeout),
            )
            .await
        {
            tracing::debug!(%err, "screencast not stopped (tab gone?)");
        }
    }

    async fn ack_frame(&self, running: &Running, ack_id: i64) {
        if let Err(err) = self
            .chrome
            .conn
            .call_raw(
                Some(&running.session),
                "Page.screencastFrameAck",
                json!({"sessionId": ack_id}),
                BEST_EFFORT_TIMEOUT.min(self.timeout),
            )
            .await
        {
            tracing::debug!(%err, "screencast frame not acknowledged");
        }
    }
}

/// A frame of a page whose viewport is `viewport` (CSS pixels): the screencast's metadata
/// gives the size of the (possibly scaled-down) frame instead, which is not where a click at
/// the frame's coordinates lands.
fn decode_frame(params: &FrameParams, viewport: crate::Viewport) -> Result<ScreencastFrame> {
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(params.data.as_bytes())
        .map_err(|e| BrowserError::Decode {
            method: "Page.screencastFrame".into(),
            reason: e.to_string(),
        })?;
    Ok(ScreencastFrame {
        jpeg,
        width: viewport.width,
        height: viewport.height,
    })
}

/// Resolves at `at`, never when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
