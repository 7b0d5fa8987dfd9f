//! The egress guard against real headless Chromium and local servers: every policy rule of
//! issue 4 (allowed, prohibited, redirect, iframe, fetch(), popup, metadata encodings, loopback),
//! asserting on what the servers actually received.

mod egress_support;

use browserd_browser::egress::{AddressRange, BlockedRequest, DenyReason, EgressSettings};
use egress_support::{
    GuardedContext, RT, env, eval, goto, new_context, new_page, policy, query, wait_until,
};

fn named_hosts(allowed: &[&str], prohibited: &[&str]) -> EgressSettings {
    EgressSettings {
        allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
        prohibited_domains: prohibited.iter().map(|s| s.to_string()).collect(),
        // The *.test names resolve to 127.0.0.1: loopback must be open, the names still decide.
        allow_loopback: true,
        ..EgressSettings::default()
    }
}

/// Collects blocked entries until one matches `pred` (or 10 s pass).
async fn wait_blocked(
    ctx: &GuardedContext,
    seen: &mut Vec<BlockedRequest>,
    pred: impl Fn(&BlockedRequest) -> bool,
) -> bool {
    wait_until(|| {
        seen.extend(ctx.guard.drain_blocked());
        seen.iter().any(&pred)
    })
    .await
}

#[test]
fn allowed_domain_loads_and_other_hosts_are_blocked() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;

        let ok_url = env.app.url("allowed.test", "/page/allowed-1");
        goto(&ctx.page, &ok_url).await.expect("allowed page loads");
        assert_eq!(env.app.hits.count("/page/allowed-1"), 1);
        assert_eq!(eval(&ctx.page, "document.title").await, "page");
        assert!(ctx.guard.drain_blocked().is_empty());

        let bad_url = env.evil.url("evil.test", "/page/allowed-2");
        let _ = goto(&ctx.page, &bad_url).await;
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == bad_url).await,
            "no block recorded: {seen:?}"
        );
        let entry = seen.iter().find(|b| b.url == bad_url).expect("entry");
        assert!(entry.is_navigation);
        assert_eq!(entry.target_type, "page");
        assert_eq!(
            entry.reason,
            DenyReason::NotInAllowedDomains {
                host: "evil.test".into()
            }
        );
        assert!(entry.message().contains("not in allowed_domains"));
        assert_eq!(env.evil.hits.count("/page/allowed-2"), 0);
        // The page shows Chromium's error page, not the target.
        let href = eval(&ctx.page, "location.href").await;
        assert_ne!(href, bad_url.as_str());
        assert!(ctx.guard.stats().requests_blocked >= 1);
        ctx.dispose(env).await;
    });
}

#[test]
fn prohibited_domain_is_blocked_and_others_load() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&[], &["*.evil.test"]))).await;

        goto(
            &ctx.page,
            &env.app.url("allowed.test", "/page/prohibited-1"),
        )
        .await
        .expect("page loads");
        assert_eq!(env.app.hits.count("/page/prohibited-1"), 1);

        let bad_url = env.evil.url("www.evil.test", "/page/prohibited-2");
        let _ = goto(&ctx.page, &bad_url).await;
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == bad_url).await,
            "{seen:?}"
        );
        assert!(matches!(
            &seen.iter().find(|b| b.url == bad_url).expect("entry").reason,
            DenyReason::ProhibitedDomain { pattern, .. } if pattern == "*.evil.test"
        ));
        assert_eq!(env.evil.hits.count("/page/prohibited-2"), 0);
        ctx.dispose(env).await;
    });
}

#[test]
fn redirect_from_allowed_to_disallowed_host_is_blocked() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;

        let landing = env.evil.url("evil.test", "/page/redirect-landing");
        let start = env.app.url(
            "allowed.test",
            &format!("/redirect/1{}", query(&[("to", &landing)])),
        );
        let _ = goto(&ctx.page, &start).await;
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == landing).await,
            "{seen:?}"
        );
        assert_eq!(
            env.app.hits.count("/redirect/1"),
            1,
            "the allowed hop was requested"
        );
        assert_eq!(env.evil.hits.count("/page/redirect-landing"), 0);
        assert!(
            seen.iter().all(|b| b.url != start),
            "the first hop was allowed"
        );

        // A redirect that stays on allowed hosts still works.
        let inner = env.app.url("allowed.test", "/page/redirect-ok");
        let start = env.app.url(
            "allowed.test",
            &format!("/redirect/2{}", query(&[("to", &inner)])),
        );
        goto(&ctx.page, &start)
            .await
            .expect("allowed redirect loads");
        assert_eq!(env.app.hits.count("/page/redirect-ok"), 1);
        ctx.dispose(env).await;
    });
}

#[test]
fn iframe_and_fetch_to_disallowed_host_never_reach_it() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;

        let frame_src = env.evil.url("evil.test", "/page/iframe-evil");
        let page_url = env.app.url(
            "allowed.test",
            &format!("/iframe/1{}", query(&[("src", &frame_src)])),
        );
        goto(&ctx.page, &page_url).await.expect("host page loads");
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == frame_src).await,
            "{seen:?}"
        );
        let frame_block = seen.iter().find(|b| b.url == frame_src).expect("entry");
        assert!(
            frame_block.is_navigation,
            "iframe document: {frame_block:?}"
        );

        let fetch_url = env.evil.url("evil.test", "/api/fetch-evil");
        let outcome = eval(
            &ctx.page,
            &format!(
                "fetch({:?}).then(() => 'reached', e => 'failed: ' + e.message)",
                fetch_url
            ),
        )
        .await;
        assert!(
            outcome.as_str().is_some_and(|s| s.starts_with("failed")),
            "{outcome}"
        );
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == fetch_url).await,
            "{seen:?}"
        );
        let fetch_block = seen.iter().find(|b| b.url == fetch_url).expect("entry");
        assert!(
            matches!(fetch_block.resource_type.as_deref(), Some("Fetch" | "XHR")),
            "{fetch_block:?}"
        );
        assert!(!fetch_block.is_navigation);

        // A fetch to an allowed host goes through (the page is not simply broken).
        let ok_url = env.app.url("allowed.test", "/api/fetch-ok");
        let outcome = eval(
            &ctx.page,
            &format!("fetch({ok_url:?}).then(r => r.text(), e => 'failed: ' + e.message)"),
        )
        .await;
        assert_eq!(outcome, "hit");
        assert_eq!(env.evil.hits.count("iframe-evil"), 0);
        assert_eq!(
            env.evil.hits.count("fetch-evil"),
            0,
            "{:?}",
            env.evil.hits.all()
        );
        ctx.dispose(env).await;
    });
}

#[test]
fn cross_origin_iframe_requests_are_intercepted_in_their_own_target() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(
            env,
            policy(named_hosts(&["allowed.test", "other.test"], &[])),
        )
        .await;

        // other.test is another site: Chromium puts the frame in its own process and target.
        let ok = env.app.url("other.test", "/api/oopif-ok");
        let bad = env.evil.url("evil.test", "/api/oopif-bad");
        let frame = env.app.url(
            "other.test",
            &format!("/frame-fetch/1{}", query(&[("ok", &ok), ("bad", &bad)])),
        );
        let page_url = env.app.url(
            "allowed.test",
            &format!("/iframe/2{}", query(&[("src", &frame)])),
        );
        goto(&ctx.page, &page_url).await.expect("host page loads");

        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == bad).await,
            "{seen:?}"
        );
        assert_eq!(
            env.app.hits.count("/api/oopif-ok"),
            1,
            "the frame's script ran"
        );
        assert_eq!(env.evil.hits.count("oopif-bad"), 0);
        let entry = seen.iter().find(|b| b.url == bad).expect("entry");
        assert_eq!(
            entry.target_type, "iframe",
            "blocked inside the OOPIF target: {entry:?}"
        );
        assert!(
            ctx.guard
                .stats()
                .armed_targets
                .get("iframe")
                .copied()
                .unwrap_or(0)
                >= 1
        );
        ctx.dispose(env).await;
    });
}

#[test]
fn popup_to_disallowed_host_is_blocked_and_allowed_popup_loads() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;
        goto(&ctx.page, &env.app.url("allowed.test", "/page/opener"))
            .await
            .expect("opener loads");

        let ok = env.app.url("allowed.test", "/page/popup-ok");
        let opened = eval(&ctx.page, &format!("window.open({ok:?}) !== null")).await;
        assert_eq!(opened, true, "popup opened");
        assert!(
            wait_until(|| env.app.hits.count("/page/popup-ok") == 1).await,
            "allowed popup loads"
        );

        let bad = env.evil.url("evil.test", "/page/popup-bad");
        let opened = eval(&ctx.page, &format!("window.open({bad:?}) !== null")).await;
        assert_eq!(opened, true, "popup opened");
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == bad).await,
            "{seen:?}"
        );
        let entry = seen.iter().find(|b| b.url == bad).expect("entry");
        assert!(entry.is_navigation);
        assert_eq!(entry.target_type, "page");
        assert_ne!(
            entry.target_id,
            ctx.page.target_id().inner().as_str(),
            "a new tab"
        );
        assert_eq!(env.evil.hits.count("popup-bad"), 0);
        assert!(
            ctx.guard
                .stats()
                .armed_targets
                .get("page")
                .copied()
                .unwrap_or(0)
                >= 3
        );
        ctx.dispose(env).await;
    });
}

#[test]
fn metadata_address_and_its_encodings_are_blocked_by_default() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(EgressSettings::default())).await;
        let urls = [
            "http://169.254.169.254/latest/meta-data/a",
            "http://2852039166/latest/meta-data/b",
            "http://0xa9fea9fe/latest/meta-data/c",
            "http://0251.0376.0251.0376/latest/meta-data/d",
            "http://169.254.43518/latest/meta-data/e",
            "http://[::ffff:169.254.169.254]/latest/meta-data/f",
            "http://metadata.google.internal/computeMetadata/v1/g",
            "http://10.0.0.1/internal/h",
            "http://[fd00:ec2::254]/latest/meta-data/i",
        ];
        for url in urls {
            let _ = goto(&ctx.page, url).await;
        }
        let mut seen = Vec::new();
        for url in urls {
            let suffix = &url[url.rfind('/').expect("slash")..];
            assert!(
                wait_blocked(&ctx, &mut seen, |b| b.url.ends_with(suffix)).await,
                "{url} not blocked: {seen:?}"
            );
        }
        for entry in &seen {
            assert!(
                matches!(
                    entry.reason,
                    DenyReason::BlockedAddress { .. } | DenyReason::BlockedHostName { .. }
                ),
                "{entry:?}"
            );
        }
        assert!(seen.iter().any(|b| matches!(
            b.reason,
            DenyReason::BlockedAddress {
                range: AddressRange::CloudMetadata,
                ..
            }
        )));
        // Nothing went out through the proxy either.
        let leaked: Vec<_> = env
            .sink
            .hits
            .all()
            .into_iter()
            .filter(|(_, t)| t.contains("meta-data") || t.contains("internal"))
            .collect();
        assert!(leaked.is_empty(), "leaked: {leaked:?}");
        ctx.dispose(env).await;
    });
}

#[test]
fn loopback_is_blocked_by_default_and_allowed_with_the_setting() {
    RT.block_on(async {
        let env = env().await;
        let closed = GuardedContext::new(env, policy(EgressSettings::default())).await;
        let literal = env.app.url("127.0.0.1", "/page/loopback-literal");
        let named = env.app.url("localhost", "/page/loopback-named");
        let resolved = env.app.url("allowed.test", "/page/loopback-resolved");
        let decimal = format!("http://2130706433:{}/page/loopback-decimal", env.app.port);
        for url in [&literal, &named, &resolved, &decimal] {
            let _ = goto(&closed.page, url).await;
        }
        let mut seen = Vec::new();
        for path in [
            "loopback-literal",
            "loopback-named",
            "loopback-resolved",
            "loopback-decimal",
        ] {
            assert!(
                wait_blocked(&closed, &mut seen, |b| b.url.contains(path)).await,
                "{path}: {seen:?}"
            );
            assert_eq!(env.app.hits.count(path), 0, "{path} reached the server");
        }
        assert!(seen.iter().any(|b| matches!(
            b.reason,
            DenyReason::ResolvesToBlockedAddress {
                range: AddressRange::Loopback,
                ..
            }
        )));
        closed.dispose(env).await;

        let open = GuardedContext::new(
            env,
            policy(EgressSettings {
                allow_loopback: true,
                ..EgressSettings::default()
            }),
        )
        .await;
        let literal = env.app.url("127.0.0.1", "/page/loopback-open-literal");
        let named = env.app.url("localhost", "/page/loopback-open-named");
        goto(&open.page, &literal).await.expect("loopback loads");
        goto(&open.page, &named).await.expect("localhost loads");
        assert_eq!(env.app.hits.count("loopback-open-literal"), 1);
        assert_eq!(env.app.hits.count("loopback-open-named"), 1);
        // Everything else private stays closed.
        let _ = goto(&open.page, "http://192.168.0.1/private-open").await;
        let mut seen = Vec::new();
        assert!(wait_blocked(&open, &mut seen, |b| b.url.contains("private-open")).await);
        assert_eq!(env.sink.hits.count("private-open"), 0);
        open.dispose(env).await;
    });
}

#[test]
fn worker_requests_are_intercepted() {
    RT.block_on(async {
        let env = env().await;
        let ctx = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;
        let ok = env.app.url("allowed.test", "/api/worker-ok");
        let bad = env.evil.url("evil.test", "/api/worker-bad");
        let page_url = env.app.url(
            "allowed.test",
            &format!("/worker-page/1{}", query(&[("ok", &ok), ("bad", &bad)])),
        );
        goto(&ctx.page, &page_url).await.expect("page loads");
        let mut seen = Vec::new();
        assert!(
            wait_blocked(&ctx, &mut seen, |b| b.url == bad).await,
            "{seen:?}"
        );
        assert_eq!(env.app.hits.count("/api/worker-ok"), 1, "the worker ran");
        assert_eq!(env.evil.hits.count("worker-bad"), 0);
        ctx.dispose(env).await;
    });
}

#[test]
fn guard_only_acts_on_its_own_context() {
    RT.block_on(async {
        let env = env().await;
        let guarded = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;

        // A second context without a guard of its own: its pages are resumed, not held, and
        // its requests are not judged by the first context's policy.
        let other = new_context(env).await;
        let page = new_page(env, &other).await;
        let url = env.evil.url("evil.test", "/page/foreign-context");
        goto(&page, &url).await.expect("unguarded context loads");
        assert_eq!(env.evil.hits.count("foreign-context"), 1);
        assert!(guarded.guard.drain_blocked().is_empty());
        assert!(guarded.guard.is_active());

        let _ = page.close().await;
        let _ = env.browser.dispose_browser_context(other).await;
        guarded.dispose(env).await;
    });
}

/// The guards of two contexts of one Chrome share one connection, and each judges its own
/// context's requests by its own policy; closing one leaves the other enforcing.
#[test]
fn guards_of_two_contexts_share_a_connection_and_keep_their_own_policies() {
    RT.block_on(async {
        let env = env().await;
        let a = GuardedContext::new(env, policy(named_hosts(&["allowed.test"], &[]))).await;
        let b = GuardedContext::new(env, policy(named_hosts(&["evil.test"], &[]))).await;
        assert!(a.guard.shares_connection_with(&b.guard));

        let to_evil = env.evil.url("evil.test", "/page/shared-hub-evil");
        let to_app = env.app.url("allowed.test", "/page/shared-hub-app");
        // A may reach allowed.test only, B evil.test only.
        goto(&a.page, &to_app)
            .await
            .expect("A loads its allowed host");
        let _ = goto(&a.page, &to_evil).await;
        goto(&b.page, &to_evil)
            .await
            .expect("B loads its allowed host");
        let _ = goto(&b.page, &to_app).await;
        let mut seen_a = Vec::new();
        assert!(
            wait_blocked(&a, &mut seen_a, |x| x.url == to_evil).await,
            "{seen_a:?}"
        );
        let mut seen_b = Vec::new();
        assert!(
            wait_blocked(&b, &mut seen_b, |x| x.url == to_app).await,
            "{seen_b:?}"
        );
        assert!(seen_a.iter().all(|x| x.url != to_app), "{seen_a:?}");
        assert!(seen_b.iter().all(|x| x.url != to_evil), "{seen_b:?}");
        assert_eq!(
            env.app.hits.count("/page/shared-hub-app"),
            1,
            "only A's load"
        );
        assert_eq!(
            env.evil.hits.count("/page/shared-hub-evil"),
            1,
            "only B's load"
        );

        // A goes; B's guard goes on over the same connection, for a tab opened after.
        a.dispose(env).await;
        assert!(b.guard.is_active());
        let late = new_page(env, &b.context).await;
        let after = env.app.url("allowed.test", "/page/shared-hub-after");
        let _ = goto(&late, &after).await;
        let mut seen = Vec::new();
        assert!(
            wait_until(|| {
                seen.extend(b.guard.drain_blocked());
                seen.iter().any(|x| x.url == after)
            })
            .await,
            "{seen:?}"
        );
        assert_eq!(env.app.hits.count("/page/shared-hub-after"), 0);
        let _ = late.close().await;
        b.dispose(env).await;
    });
}

#[test]
fn attach_arms_pages_that_already_exist() {
    RT.block_on(async {
        let env = env().await;
        let context = new_context(env).await;
        let page = new_page(env, &context).await;
        let guard = browserd_browser::egress::EgressGuard::attach_to_browser(
            &env.browser,
            browserd_browser::egress::EgressScope::Context(context.inner().clone()),
            policy(named_hosts(&["allowed.test"], &[])),
            browserd_browser::egress::EgressGuardOptions::default(),
        )
        .await
        .expect("attach");
        assert!(
            guard
                .stats()
                .armed_targets
                .get("page")
                .copied()
                .unwrap_or(0)
                >= 1
        );
        let bad = env.evil.url("evil.test", "/page/existing-page");
        let _ = goto(&page, &bad).await;
        let mut seen = Vec::new();
        assert!(
            wait_until(|| {
                seen.extend(guard.drain_blocked());
                seen.iter().any(|b| b.url == bad)
            })
            .await,
            "{seen:?}"
        );
        assert_eq!(env.evil.hits.count("existing-page"), 0);
        let _ = page.close().await;
        guard.close().await;
        let _ = env.browser.dispose_browser_context(context).await;
    });
}

/// A guard attached before its task is known (a spare context's) blocks every request of its
/// context until the task's policy is bound, then enforces exactly that policy.
#[test]
fn an_unbound_guard_blocks_everything_until_its_task_is_bound() {
    RT.block_on(async {
        let env = env().await;
        let context = new_context(env).await;
        let guard = browserd_browser::egress::EgressGuard::attach_unbound(
            env.browser.websocket_address(),
            browserd_browser::egress::EgressScope::Context(context.inner().clone()),
            browserd_browser::egress::EgressGuardOptions::default(),
        )
        .await
        .expect("attach unbound");
        let page = new_page(env, &context).await;
        let early = env.app.url("allowed.test", "/page/unbound-early");
        let _ = goto(&page, &early).await;
        let mut seen = Vec::new();
        assert!(
            wait_until(|| {
                seen.extend(guard.drain_blocked());
                seen.iter().any(|b| b.url == early)
            })
            .await,
            "{seen:?}"
        );
        let entry = seen.iter().find(|b| b.url == early).expect("entry");
        assert_eq!(entry.reason, DenyReason::Unbound);
        assert_eq!(env.app.hits.count("/page/unbound-early"), 0);

        assert!(guard.bind(policy(named_hosts(&["allowed.test"], &[]))));
        let ok = env.app.url("allowed.test", "/page/unbound-bound");
        goto(&page, &ok).await.expect("allowed once bound");
        assert_eq!(env.app.hits.count("/page/unbound-bound"), 1);
        let bad = env.evil.url("evil.test", "/page/unbound-evil");
        let _ = goto(&page, &bad).await;
        assert!(
            wait_until(|| {
                seen.extend(guard.drain_blocked());
                seen.iter().any(|b| b.url == bad)
            })
            .await,
            "{seen:?}"
        );
        assert_eq!(env.evil.hits.count("/page/unbound-evil"), 0);
        assert!(
            !guard.bind(policy(named_hosts(&["evil.test"], &[]))),
            "a guard keeps its task's policy"
        );
        let _ = page.close().await;
        guard.close().await;
        let _ = env.browser.dispose_browser_context(context).await;
    });
}
