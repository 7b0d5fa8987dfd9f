//! Cost of the egress proxy: page loads of the capture corpus (the Rust toolchain's HTML docs,
//! served over local HTTP) in a context whose traffic goes through its egress proxy versus
//! one whose traffic goes direct, both with the same egress settings and CDP guard, in the
//! same run (two pools of one Chrome each, loads alternating so drift hits both); and the cost
//! per request: 100 sequential uncached `fetch()`es of a small file timed inside the page.
//!
//! `cargo bench -p browserd-browser --bench egress_proxy` (env `BENCH_ROUNDS`, default 9).
//! Needs the `rust-docs` rustup component. The HTTP cache is disabled in both contexts, so
//! every load fetches every subresource.

#[path = "support/corpus.rs"]
mod corpus;
#[path = "../tests/support/http.rs"]
mod http;

use std::time::{Duration, Instant};

use browserd_browser::egress::EgressSettings;
use browserd_browser::{BrowserPool, BrowserSession, ContextOptions, PoolConfig};

use corpus::{PAGES, median, ms};

fn pool(proxy: bool) -> BrowserPool {
    BrowserPool::new(PoolConfig {
        processes: 1,
        contexts_per_process: 1,
        recycle_after_tasks: 0,
        cdp_timeout: Duration::from_secs(120),
        egress_proxy: proxy,
        ..PoolConfig::default()
    })
    .expect("pool")
}

async fn session(pool: &BrowserPool) -> BrowserSession {
    let session = pool
        .lease_with(ContextOptions {
            egress: Some(EgressSettings {
                allow_loopback: true,
                ..EgressSettings::default()
            }),
            ..ContextOptions::default()
        })
        .await
        .expect("lease");
    let target = session.focused_target().await.expect("target");
    session
        .cdp(Some(&target), "Network.enable", serde_json::json!({}))
        .await
        .expect("Network.enable");
    session
        .cdp(
            Some(&target),
            "Network.setCacheDisabled",
            serde_json::json!({"cacheDisabled": true}),
        )
        .await
        .expect("cache off");
    session
}

/// Milliseconds of 100 sequential uncached fetches of `url`, measured in the page.
async fn fetch_loop(session: &BrowserSession, url: &str) -> f64 {
    let target = session.focused_target().await.expect("target");
    let expr = format!(
        "(async () => {{ const t = performance.now(); for (let i = 0; i < 100; i++) {{ \
         await (await fetch({url:?} + '?r=' + i, {{cache: 'no-store'}})).text(); }} \
         return performance.now() - t; }})()"
    );
    let raw = session
        .cdp(
            Some(&target),
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        )
        .await
        .expect("evaluate");
    let v: serde_json::Value = serde_json::from_str(raw.as_str()).expect("json");
    v["result"]["result"]["value"]
        .as_f64()
        .expect("fetch loop time")
}

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
        .unwrap_or(9);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let addr = http::serve_dir(&root).await;
        let (proxied_pool, direct_pool) = (pool(true), pool(false));
        let proxied = session(&proxied_pool).await;
        let direct = session(&direct_pool).await;
        assert!(proxied.egress_proxy().is_some() && direct.egress_proxy().is_none());
        println!(
            "{:<38} {:>10} {:>10} {:>7} {:>9}",
            "page load (cache off)", "proxy ms", "direct ms", "ratio", "requests"
        );
        let mut ratios = Vec::new();
        for page in PAGES {
            let url = format!("http://{addr}/{page}");
            let (mut through, mut straight, mut requests) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds + 1 {
                let stats = proxied.egress_proxy().expect("proxy").stats();
                let started = Instant::now();
                proxied.navigate(&url).await.expect("proxied load");
                let t = ms(started.elapsed());
                let after = proxied.egress_proxy().expect("proxy").stats();
                let started = Instant::now();
                direct.navigate(&url).await.expect("direct load");
                let d = ms(started.elapsed());
                // Leave the page so that the next load is a full one.
                proxied.navigate("about:blank").await.expect("blank");
                direct.navigate("about:blank").await.expect("blank");
                if round > 0 {
                    through.push(t);
                    straight.push(d);
                    requests.push((after.requests + after.tunnels - stats.requests - stats.tunnels) as f64);
                }
            }
            let (t, d) = (median(through), median(straight));
            ratios.push(t / d);
            println!(
                "{:<38} {:>10.1} {:>10.1} {:>7.2} {:>9.0}",
                page,
                t,
                d,
                t / d,
                median(requests)
            );
        }
        println!("median ratio over the pages: {:.2}", median(ratios.clone()));
        println!(
            "worst page ratio: {:.2}",
            ratios.iter().cloned().fold(0.0_f64, f64::max)
        );

        // Per request: 100 sequential uncached fetches of a small file, timed in the page.
        let small = format!("http://{addr}/std/index.html");
        for s in [&proxied, &direct] {
            s.navigate(&format!("http://{addr}/cargo/index.html"))
                .await
                .expect("page for fetches");
        }
        let (mut through, mut straight) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            through.push(fetch_loop(&proxied, &small).await / 100.0);
            straight.push(fetch_loop(&direct, &small).await / 100.0);
        }
        let (t, d) = (median(through), median(straight));
        println!(
            "per request (fetch of std/index.html, {} B): proxy {:.3} ms, direct {:.3} ms, cost {:.3} ms ({:.2}x)",
            std::fs::metadata(root.join("std/index.html")).map(|m| m.len()).unwrap_or(0),
            t,
            d,
            t - d,
            t / d
        );
        proxied.release().await;
        direct.release().await;
        proxied_pool.shutdown().await;
        direct_pool.shutdown().await;
    });
}
