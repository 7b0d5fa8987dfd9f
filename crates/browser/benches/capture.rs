//! Capture benchmark on the Rust toolchain's HTML docs, served over local HTTP.
//!
//! Per page: median capture time, element count, serialized length, and — in the same run, on
//! the same tab — the median time of one bare `DOMSnapshot.captureSnapshot` (computed styles
//! display/visibility/opacity, DOM rects, paint order; answer received, not decoded), and the
//! ratio capture / bare snapshot. Captures and bare snapshots alternate so drift hits both.
//!
//! Then, per page, `highlight_elements`: the median time of drawing the boxes and indices onto
//! the model's screenshot (JPEG 80 scaled to fit 1280×800: decode, draw, encode), the
//! `highlight` line.
//!
//! `cargo bench -p browserd-browser` (env `BENCH_ROUNDS`, default 7; `BENCH_VIEWPORT=WxH`,
//! default browser-use's 1920x1080, to compare viewports in one sitting).

#[path = "support/corpus.rs"]
mod corpus;
#[path = "../tests/support/http.rs"]
mod http;

use std::time::{Duration, Instant};

use browserd_browser::{
    BrowserPool, CaptureOptions, PoolConfig, ScreenshotFormat, Viewport, bare_snapshot_params,
};

use corpus::{PAGES, median, ms};

fn main() {
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc --print sysroot");
    let root = std::path::PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("share/doc/rust/html");
    for page in PAGES {
        if !root.join(page).exists() {
            eprintln!("missing {page} under {root:?}: install the rust-docs component");
            std::process::exit(1);
        }
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let viewport = std::env::var("BENCH_VIEWPORT").map_or(Viewport::BROWSER_USE, |v| {
        let (w, h) = v.split_once('x').expect("BENCH_VIEWPORT=WIDTHxHEIGHT");
        Viewport::new(w.parse().expect("width"), h.parse().expect("height"))
    });
    println!("viewport {viewport}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let addr = http::serve_dir(&root).await;
        // `BENCH_CHROME=/usr/bin/chromium`: the full build instead of the headless shell.
        let chrome = std::env::var("BENCH_CHROME")
            .unwrap_or_else(|_| browserd_browser::DEFAULT_CHROME_PATH.to_owned());
        println!("Chrome: {chrome}");
        let pool = BrowserPool::new(PoolConfig {
            chrome_path: chrome.into(),
            processes: 1,
            contexts_per_process: 1,
            recycle_after_tasks: 0,
            cdp_timeout: Duration::from_secs(120),
            viewport,
            ..PoolConfig::default()
        })
        .expect("pool");
        println!(
            "{:<38} {:>9} {:>9} {:>8} {:>9} {:>9} {:>6}   breakdown (median ms: cdp build ax[n] frames serialize | listener probe done at)",
            "page", "first ms", "capture", "elements", "text len", "bare ms", "ratio"
        );
        let mut worst: f64 = 0.0;
        let mut highlights = Vec::new();
        for page in PAGES {
            let session = pool.lease().await.expect("lease");
            session
                .navigate(&format!("http://{addr}/{page}"))
                .await
                .expect("navigate");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let target = session.focused_target().await.expect("target");
            let options = CaptureOptions::default();
            let first = Instant::now();
            let warm = session.capture(&options).await.expect("capture");
            let first_ms = ms(first.elapsed());
            let (mut captures, mut bares) = (Vec::new(), Vec::new());
            let (mut cdp, mut build, mut ax, mut frames, mut ser, mut probe) = (
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
            );
            let mut last = warm;
            for _ in 0..rounds {
                let started = Instant::now();
                let state = session.capture(&options).await.expect("capture");
                captures.push(ms(started.elapsed()));
                cdp.push(ms(state.timings.cdp));
                build.push(ms(state.timings.build));
                ax.push(ms(state.timings.accessibility));
                frames.push(ms(state.timings.cross_origin_frames));
                ser.push(ms(state.timings.serialize));
                probe.push(ms(state.timings.listener_probe));
                last = state;
                let started = Instant::now();
                let raw = session
                    .cdp(Some(&target), "DOMSnapshot.captureSnapshot", bare_snapshot_params())
                    .await
                    .expect("bare snapshot");
                bares.push(ms(started.elapsed()));
                drop(raw);
            }
            let (capture, bare) = (median(captures), median(bares));
            let ratio = capture / bare;
            worst = worst.max(ratio);
            println!(
                "{:<38} {:>9.1} {:>9.1} {:>8} {:>9} {:>9.1} {:>6.2}   {:.0} {:.0} {:.0}[{}] {:.0} {:.0} | {:.0}",
                page,
                first_ms,
                capture,
                last.selector_map.len(),
                last.llm_text.len(),
                bare,
                ratio,
                median(cdp),
                median(build),
                median(ax),
                last.timings.ax_nodes,
                median(frames),
                median(ser),
                median(probe),
            );
            let lit = CaptureOptions {
                screenshot: Some(ScreenshotFormat::Jpeg { quality: 80 }),
                screenshot_max_size: Some((1280, 800)),
                highlight_elements: true,
                ..CaptureOptions::default()
            };
            let mut draws = Vec::new();
            for _ in 0..rounds {
                let state = session.capture(&lit).await.expect("capture");
                draws.push(ms(state.timings.highlight));
            }
            highlights.push((page, median(draws)));
            session.release().await;
        }
        println!("worst ratio: {worst:.2} (target ≤ 1.5)");
        for (page, draw) in &highlights {
            println!("highlight {page:<38} {draw:>6.1} ms (JPEG 80, 1280 px wide: decode + draw + encode)");
        }
        pool.shutdown().await;
    });
}
