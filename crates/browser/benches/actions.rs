//! Latency of an action step (the action plus the page capture that follows it) on a local
//! login page: a non-navigating click, a 20-character input and a scroll, against a bare
//! capture measured in the same run. For scale, Python browser-use needs 135–145 ms per such
//! step on this machine.
//!
//! Run: `cargo bench -p browserd-browser --bench actions`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use browserd_browser::{
    Action, ActionContext, BrowserSession, CaptureOptions, PageState,
    actions::{ClickParams, InputParams, ScrollParams},
};

const WARMUP: usize = 3;
const ITERATIONS: usize = 30;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn index_of(state: &PageState, id: &str) -> u32 {
    state
        .selector_map
        .values()
        .find(|e| e.attr("id") == Some(id))
        .map(|e| e.index)
        .unwrap_or_else(|| panic!("#{id} not indexed"))
}

/// Runs `action`, then captures the page (as the agent does before its next step).
async fn step(session: &BrowserSession, action: &Action) -> (Duration, Duration, PageState) {
    let ctx = ActionContext::default();
    let start = Instant::now();
    let result = session.execute(action, &ctx).await;
    let acted = start.elapsed();
    assert!(result.error.is_none(), "{result:?}");
    let state = session
        .capture(&CaptureOptions::default())
        .await
        .expect("capture");
    (acted, start.elapsed(), state)
}

fn main() {
    let guard = support::shared_pool();
    support::rt().block_on(async {
        let addr = support::server().await;
        let session = guard.pool().lease().await.expect("lease");
        session
            .navigate(&format!("http://{addr}/actions/login.html"))
            .await
            .expect("navigate");
        let options = CaptureOptions::default();

        let mut baseline = Vec::new();
        let mut samples: Vec<(&str, Vec<Duration>, Vec<Duration>)> = vec![
            ("click (non-navigating)", vec![], vec![]),
            ("input 20 chars", vec![], vec![]),
            ("scroll 0.5 page", vec![], vec![]),
        ];
        for i in 0..WARMUP + ITERATIONS {
            let start = Instant::now();
            let state = session.capture(&options).await.expect("capture");
            if i >= WARMUP {
                baseline.push(start.elapsed());
            }
            let actions = [
                Action::Click(ClickParams { index: Some(index_of(&state, "login")), coordinate_x: None, coordinate_y: None }),
                Action::Input(InputParams { index: index_of(&state, "email"), text: format!("user{:02}@example.org.uk", i % 100), clear: true }),
                Action::Scroll(ScrollParams { down: i % 2 == 0, pages: 0.5, index: None }),
            ];
            for (action, (_, acted, total)) in actions.iter().zip(samples.iter_mut()) {
                let (a, t, _) = step(&session, action).await;
                if i >= WARMUP {
                    acted.push(a);
                    total.push(t);
                }
            }
        }
        let base = median(baseline);
        println!("actions bench: {ITERATIONS} iterations after {WARMUP} warm-up, login page, one Chrome");
        println!("baseline: bare capture median {:.2} ms", ms(base));
        for (name, acted, total) in samples {
            let a = median(acted);
            let t = median(total);
            println!(
                "{name:<24} step median {:>7.2} ms (action {:>6.2} ms + capture); ratio to bare capture {:.2}; vs Python browser-use 135-145 ms: {:.1}x faster",
                ms(t),
                ms(a),
                t.as_secs_f64() / base.as_secs_f64(),
                140.0 / ms(t)
            );
        }
        session.release().await;
    });
}
