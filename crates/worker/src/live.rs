//! The worker's half of the live view: while one of its tasks runs, it follows the task's
//! viewers in Postgres (`live_viewers`, announced on channel `live`) and tells the browser to
//! screencast while there is at least one; each frame the browser produces is stored as the
//! task's newest frame (`live_frames`) for the api processes that serve the viewers.
//!
//! An unwatched task costs one LISTEN subscription and nothing else. A viewer whose api process
//! died stops counting when its registration expires: the link wakes at the earliest expiry
//! and counts again.

use std::sync::Arc;
use std::time::Duration;

use browserd_browser::{FrameSender, LiveViewSettings, ScreencastFrame};
use browserd_store::{EventHub, LiveSignal, Store};
use browserd_types::TaskId;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::runner::LiveViewLink;

/// How long a failed viewer count waits before it is tried again.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(2);

/// The live view of one task: the browser's end ([`LiveViewLink`]) and the task that connects
/// it to Postgres. The returned future ends when the run drops its end of the link.
pub(crate) fn link(
    store: Store,
    hub: EventHub,
    task_id: TaskId,
    settings: LiveViewSettings,
) -> (LiveViewLink, impl std::future::Future<Output = ()>) {
    let (watched_tx, watched) = watch::channel(false);
    let frames: FrameSender = watch::Sender::new(None);
    let frames_rx = frames.subscribe();
    let link = LiveViewLink {
        settings,
        watched,
        frames,
    };
    (link, follow(store, hub, task_id, watched_tx, frames_rx))
}

async fn follow(
    store: Store,
    hub: EventHub,
    task_id: TaskId,
    watched: watch::Sender<bool>,
    mut frames: watch::Receiver<Option<Arc<ScreencastFrame>>>,
) {
    // Subscribe before counting so that no viewer change in between is missed.
    let mut signals = hub.subscribe_live(task_id);
    let mut seq: i64 = 0;
    let mut recount_at: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
    loop {
        tokio::select! {
            () = watched.closed() => break,
            () = sleep_until_some(recount_at) => {
                recount_at = match store.live_viewers(task_id).await {
                    Ok(viewers) => {
                        let on = viewers.count > 0;
                        watched.send_if_modified(|was| std::mem::replace(was, on) != on);
                        viewers.next_expiry.map(|at| {
                            let left = at - OffsetDateTime::now_utc();
                            let left = Duration::try_from(left).unwrap_or_default();
                            tokio::time::Instant::now() + left
                        })
                    }
                    Err(err) => {
                        tracing::warn!(%err, "could not count the task's live viewers");
                        Some(tokio::time::Instant::now() + RETRY_AFTER_ERROR)
                    }
                };
            }
            signal = signals.recv() => match signal {
                Some(LiveSignal::Viewers | LiveSignal::Resync) => {
                    recount_at = Some(tokio::time::Instant::now());
                }
                Some(LiveSignal::Frame { .. }) => {}
                None => break,
            },
            changed = frames.changed() => {
                if changed.is_err() {
                    break;
                }
                let frame = frames.borrow_and_update().clone();
                let Some(frame) = frame else { continue };
                if !*watched.borrow() {
                    continue;
                }
                seq += 1;
                let width = i32::try_from(frame.width).unwrap_or(i32::MAX);
                let height = i32::try_from(frame.height).unwrap_or(i32::MAX);
                if let Err(err) = store
                    .put_live_frame(task_id, seq, &frame.jpeg, width, height)
                    .await
                {
                    tracing::debug!(%err, "live frame not stored");
                } else {
                    metrics::counter!("browserd_live_frames_total").increment(1);
                }
            }
        }
    }
    watched.send_replace(false);
    if let Err(err) = store.clear_live_frame(task_id).await {
        tracing::debug!(%err, "live frame not cleared");
    }
}

/// Resolves at `at`, never when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
