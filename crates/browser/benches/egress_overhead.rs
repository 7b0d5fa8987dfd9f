//! Cost of the egress policy: the static check per URL, and a page load with 20 subresources
//! in a guarded context versus an unguarded one (same browser, same run).
//!
//! Run: `cargo bench -p browserd-browser --bench egress_overhead`.

#[path = "../tests/egress_support/mod.rs"]
mod egress_support;

use std::time::{Duration, Instant};

use browserd_browser::egress::{EgressPolicy, EgressSettings};
use egress_support::{GuardedContext, RT, env, goto, new_context, new_page, policy};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench_static_check() {
    let policy = EgressPolicy::new(EgressSettings {
        allowed_domains: (0..200)
            .map(|i| format!("site{i}.example"))
            .chain([
                "*.docs.example".to_string(),
                "https://api.example/v1".to_string(),
            ])
            .collect(),
        ..EgressSettings::default()
    })
    .expect("policy");
    let urls: Vec<url::Url> = [
        "https://site150.example/path?q=1",
        "https://www.site3.example/",
        "https://a.b.docs.example/x",
        "https://api.example/v1/items",
        "https://evil.example/",
        "http://0xa9fea9fe/",
        "http://[::ffff:10.0.0.1]/",
        "data:text/html,x",
    ]
    .iter()
    .map(|u| url::Url::parse(u).expect("url"))
    .collect();
    let rounds = 2_000;
    let mut check_samples = Vec::new();
    let mut parse_samples = Vec::new();
    for _ in 0..15 {
        let start = Instant::now();
        for _ in 0..rounds {
            for u in &urls {
                std::hint::black_box(policy.check_url(std::hint::black_box(u)).is_ok());
            }
        }
        check_samples.push(start.elapsed() / (rounds * urls.len() as u32));
        let start = Instant::now();
        for _ in 0..rounds {
            for u in &urls {
                std::hint::black_box(url::Url::parse(std::hint::black_box(u.as_str())).is_ok());
            }
        }
        parse_samples.push(start.elapsed() / (rounds * urls.len() as u32));
    }
    let check = median(check_samples);
    let parse = median(parse_samples);
    println!(
        "static check_url: median {:?} per URL; baseline Url::parse {:?}; ratio {:.2}",
        check,
        parse,
        check.as_secs_f64() / parse.as_secs_f64()
    );
}

fn bench_page_load() {
    RT.block_on(async {
        let env = env().await;
        let settings = EgressSettings {
            allowed_domains: vec!["allowed.test".into()],
            allow_loopback: true,
            ..EgressSettings::default()
        };
        let guarded = GuardedContext::new(env, policy(settings)).await;
        let plain_context = new_context(env).await;
        let plain = new_page(env, &plain_context).await;
        let iterations = 15;
        let mut with_guard = Vec::new();
        let mut without = Vec::new();
        for i in 0..iterations + 2 {
            for (page, samples, label) in [
                (&plain, &mut without, "plain"),
                (&guarded.page, &mut with_guard, "guarded"),
            ] {
                let url = env.app.url(
                    "allowed.test",
                    &format!("/many/{label}/{i}?n=20&tag={label}{i}"),
                );
                let start = Instant::now();
                goto(page, &url).await.expect("page loads");
                if i >= 2 {
                    samples.push(start.elapsed());
                }
            }
        }
        let g = median(with_guard);
        let p = median(without);
        println!(
            "page load, 1 document + 20 subresources: guarded median {:?}; unguarded baseline {:?}; ratio {:.2} ({} iterations)",
            g,
            p,
            g.as_secs_f64() / p.as_secs_f64(),
            iterations
        );
        assert!(guarded.guard.drain_blocked().is_empty());
        let _ = plain.close().await;
        let _ = env.browser.dispose_browser_context(plain_context).await;
        guarded.dispose(env).await;
    });
}

fn main() {
    bench_static_check();
    bench_page_load();
}
