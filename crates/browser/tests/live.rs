//! The live view's screencast in real Chromium: nothing while unwatched, JPEG frames at most
//! `max_fps` while watched, nothing again after the last viewer, and it follows the focus to
//! another tab.

mod support;

use std::time::Duration;

use browserd_browser::{BrowserSession, FrameSender, LiveViewSettings};
use serde_json::Value;
use support::{open, rt, server, shared_pool};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

/// Evaluates `expr` in the focused tab, awaiting a promise.
async fn js(session: &BrowserSession, expr: &str) -> Value {
    let target = session.focused_target().await.expect("focused");
    let raw = session
        .cdp(
            Some(&target),
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        )
        .await
        .expect("evaluate");
    let v: Value = serde_json::from_str(raw.as_str()).expect("json");
    v["result"]["result"]["value"].clone()
}

/// Lets the page paint `count` more animation frames.
async fn paint(session: &BrowserSession, count: u32) {
    let painted = js(session, &format!("window.frames_later({count})")).await;
    assert!(
        painted.as_u64().is_some(),
        "the ticker page did not animate: {painted}"
    );
}

fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.len() > 4 && bytes.starts_with(&[0xFF, 0xD8]) && bytes.ends_with(&[0xFF, 0xD9])
}

#[test]
fn live_view_streams_only_while_watched_and_follows_the_focus() {
    let guard = shared_pool();
    rt().block_on(async {
        let session = open(&guard, "live_ticker.html").await;
        let first_tab = session.focused_target().await.unwrap();
        let (watched_tx, watched_rx) = watch::channel(false);
        let frames: FrameSender = watch::Sender::new(None);
        let mut rx = frames.subscribe();
        let settings = LiveViewSettings {
            max_width: 640,
            max_height: 400,
            quality: 50,
            max_fps: 5.0,
        };
        let live = session.live_view(settings, watched_rx, frames);
        let script = async {
            // Unwatched: the page animates, and no frame is made.
            paint(&session, 30).await;
            assert!(
                rx.borrow().is_none(),
                "a frame was made while nobody watched"
            );

            // Watched: a frame at once, then the screencast, throttled to 5 per second. The
            // clock starts before the first frame, so however late frames are delivered the
            // six of them span at least five intervals.
            let started = Instant::now();
            watched_tx.send_replace(true);
            timeout(Duration::from_secs(30), rx.changed())
                .await
                .expect("no first frame within 30 s")
                .unwrap();
            let first = rx.borrow_and_update().clone().expect("a frame");
            assert!(is_jpeg(&first.jpeg), "not a JPEG");
            assert!(first.width > 0 && first.height > 0);
            for _ in 0..5 {
                timeout(Duration::from_secs(30), rx.changed())
                    .await
                    .expect("the screencast stalled")
                    .unwrap();
                let frame = rx.borrow_and_update().clone().expect("a frame");
                assert!(is_jpeg(&frame.jpeg), "screencast frame is not a JPEG");
            }
            // Six frames at no more than 5 per second take at least 5 intervals.
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(980),
                "5 frames in {took:?}: the 5 fps cap was not applied"
            );

            // The last viewer left: no more frames while the page keeps animating.
            watched_tx.send_replace(false);
            paint(&session, 20).await;
            rx.borrow_and_update();
            paint(&session, 60).await;
            assert!(
                !rx.has_changed().unwrap(),
                "frames kept coming after the last viewer left"
            );

            // Watched again, and the focus moves to a new tab while the old one is closed.
            watched_tx.send_replace(true);
            timeout(Duration::from_secs(30), rx.changed())
                .await
                .expect("no frame after watching again")
                .unwrap();
            let url = format!("http://{}/live_ticker.html?second", server().await);
            let second_tab = session.new_tab(&url).await.unwrap();
            session.close_tab(&first_tab).await.unwrap();
            assert_eq!(session.focused_target().await.unwrap(), second_tab);
            rx.borrow_and_update();
            // Generous: the other tests of this binary share the Chrome and the machine.
            for _ in 0..2 {
                timeout(Duration::from_secs(30), rx.changed())
                    .await
                    .expect("the live view did not follow the focus to the new tab")
                    .unwrap();
                rx.borrow_and_update();
            }
            drop(watched_tx);
        };
        let (ended, ()) = tokio::join!(live, script);
        ended.expect("the live view ends cleanly when its viewers' sender is gone");
        session.release().await;
    });
}
