//! The egress proxy against real headless Chromium (through the pool, as tasks run): what the
//! CDP guard cannot see — WebSocket handshakes, preconnects, DNS rebinding between two
//! lookups — and what it can (fetch, images, iframes, redirects), asserting on the TCP
//! connections the servers accepted; and two tasks in one Chrome at once.
//!
//! One test function: the scenarios share one Chrome, the servers and the DNS server, and run
//! one after the other (the machine has two cores).

mod proxy_support;

use browserd_browser::CaptureOptions;
use browserd_browser::egress::{AddressRange, BlockedRequest, DenyReason, EgressSettings};
use proxy_support::{Env, FORBIDDEN, RT, js, wait_until, websocket};

fn allowed_only(hosts: &[&str]) -> EgressSettings {
    EgressSettings {
        allowed_domains: hosts.iter().map(|s| s.to_string()).collect(),
        ..EgressSettings::default()
    }
}

/// Collects the session's blocked entries until one matches `pred` (10 s cap).
async fn wait_blocked(
    session: &browserd_browser::BrowserSession,
    seen: &mut Vec<BlockedRequest>,
    pred: impl Fn(&BlockedRequest) -> bool,
) -> bool {
    wait_until(|| {
        seen.extend(session.drain_blocked());
        seen.iter().any(&pred)
    })
    .await
}

#[test]
fn egress_proxy_enforces_the_policy_at_the_network_level() {
    RT.block_on(async {
        let env = Env::start().await;
        preconnect(&env).await;
        websockets(&env).await;
        rebinding(&env).await;
        subresources_and_redirects(&env).await;
        two_contexts_at_once(&env).await;
        spare_contexts(&env).await;
        env.shutdown().await;
    });
}

/// `new WebSocket(...)`: to a forbidden host (by name, by address) it fails and the server
/// accepts no connection; to an allowed host it works, through the proxy.
async fn websockets(env: &Env) {
    let session = env.session(EgressSettings::default()).await;
    let page = env.allowed.url("http", "allowed.test", "/page/ws-host");
    session.navigate(&page).await.expect("page loads");
    let proxy = session.egress_proxy().expect("the context has a proxy");
    let tunnels = proxy.stats().tunnels;

    let ok = websocket(&session, &env.allowed.url("ws", "allowed.test", "/ws/ok")).await;
    assert_eq!(ok, "echo:hi");
    assert_eq!(env.allowed.hits.count("/ws/ok"), 1);
    assert!(
        proxy.stats().tunnels > tunnels,
        "the WebSocket went through the proxy: {:?}",
        proxy.stats()
    );

    let before = env.forbidden.accepts();
    for url in [
        env.forbidden.url("ws", "evil.test", "/ws/by-name"),
        env.forbidden
            .url("ws", &FORBIDDEN.to_string(), "/ws/by-address"),
        env.forbidden.url("wss", "evil.test", "/ws/secure"),
    ] {
        let outcome = websocket(&session, &url).await;
        assert!(outcome.starts_with("failed"), "{url}: {outcome}");
    }
    let mut seen = Vec::new();
    assert!(
        wait_blocked(&session, &mut seen, |b| b.target_type == "proxy"
            && b.url.starts_with("127.0.0.3:"))
        .await,
        "{seen:?}"
    );
    let by_name = seen
        .iter()
        .find(|b| b.url.starts_with("evil.test:"))
        .expect("the name was refused by the proxy");
    assert_eq!(by_name.resource_type.as_deref(), Some("CONNECT"));
    assert!(
        matches!(
            by_name.reason,
            DenyReason::ResolvesToBlockedAddress {
                range: AddressRange::BlockedNetwork,
                ..
            }
        ),
        "{by_name:?}"
    );
    assert!(
        by_name
            .message()
            .starts_with("Connection blocked by the egress policy: evil.test:")
    );
    assert_eq!(
        env.forbidden.accepts(),
        before,
        "the forbidden server saw a connection"
    );
    assert_eq!(env.forbidden.hits.count("/ws/"), 0);
    session.release().await;
}

/// `<link rel=preconnect>` to a forbidden host opens no TCP connection to it. (Chromium 156
/// opens no preconnect at all in a `Target.createBrowserContext` context, off the record, even
/// without the proxy — a default profile does — so there is no positive control here; any
/// connection it opens goes through the proxy, which judges it like the WebSockets above.)
async fn preconnect(env: &Env) {
    let session = env.session(EgressSettings::default()).await;
    let forbidden_before = env.forbidden.accepts();
    let links = [
        env.forbidden.url("https", "evil.test", ""),
        env.forbidden.url("http", "evil.test", ""),
        env.forbidden.url("https", &FORBIDDEN.to_string(), ""),
        env.forbidden.url("http", &FORBIDDEN.to_string(), ""),
    ]
    .join(" ");
    let page = format!(
        "{}?to={}",
        env.allowed.url("http", "allowed.test", "/preconnect"),
        url_encode(&links)
    );
    session.navigate(&page).await.expect("page loads");
    // A round trip through the page and the proxy after the load: preconnects start at
    // parse time, long before this answer.
    let echo = websocket(
        &session,
        &env.allowed
            .url("ws", "allowed.test", "/ws/after-preconnect"),
    )
    .await;
    assert_eq!(echo, "echo:hi");
    assert_eq!(
        env.forbidden.accepts(),
        forbidden_before,
        "a preconnect reached the forbidden server"
    );
    let seen = session.drain_blocked();
    assert!(
        seen.iter()
            .filter(|b| b.target_type == "proxy")
            .all(|b| b.url.starts_with("evil.test:") || b.url.starts_with("127.0.0.3:")),
        "{seen:?}"
    );
    session.release().await;
}

/// `rebind.test` answers 127.0.0.2 (allowed) to the first lookup and 127.0.0.3 (forbidden) to
/// every later one: the guard's lookup lets the fetch through, the proxy's own lookup sees the
/// forbidden address and refuses; nothing reaches 127.0.0.3. A WebSocket (which only the
/// proxy sees) connects to the address the proxy checked.
async fn rebinding(env: &Env) {
    let session = env.session(EgressSettings::default()).await;
    env.dns
        .set("rebind.test", &[proxy_support::ALLOWED, FORBIDDEN]);
    let page = env.allowed.url("http", "allowed.test", "/page/rebind-host");
    session.navigate(&page).await.expect("page loads");
    let forbidden_before = env.forbidden.accepts();
    let target = env.allowed.url("http", "rebind.test", "/api/rebound");
    let outcome = js(
        &session,
        &format!("fetch({target:?}).then(r => r.status + ':' + r.url, e => 'failed:' + e.message)"),
    )
    .await;
    let outcome = outcome.as_str().unwrap_or_default().to_string();
    assert!(
        env.dns.queries("rebind.test") >= 2,
        "the name was looked up twice (guard, proxy): {}",
        env.dns.queries("rebind.test")
    );
    let mut seen = Vec::new();
    assert!(
        wait_blocked(&session, &mut seen, |b| b.target_type == "proxy"
            && b.url.contains("rebind.test"))
        .await,
        "{outcome}; {seen:?}"
    );
    let entry = seen
        .iter()
        .find(|b| b.target_type == "proxy" && b.url.contains("rebind.test"))
        .expect("entry");
    assert!(
        matches!(entry.reason, DenyReason::ResolvesToBlockedAddress { ip, .. } if ip == FORBIDDEN),
        "{entry:?}"
    );
    assert!(!outcome.starts_with("200"), "{outcome}");
    assert_eq!(env.forbidden.accepts(), forbidden_before);
    assert_eq!(env.forbidden.hits.count("rebound"), 0);
    assert_eq!(
        env.allowed.hits.count("rebound"),
        0,
        "nothing was sent anywhere"
    );

    // A fresh rebinding name, first answer allowed: the proxy connects to exactly that address.
    env.dns
        .set("rebind2.test", &[proxy_support::ALLOWED, FORBIDDEN]);
    let ws = websocket(
        &session,
        &env.allowed.url("ws", "rebind2.test", "/ws/pinned"),
    )
    .await;
    assert_eq!(ws, "echo:hi");
    assert_eq!(env.dns.queries("rebind2.test"), 1, "looked up once");
    assert_eq!(env.allowed.hits.count("/ws/pinned"), 1);
    assert_eq!(env.forbidden.accepts(), forbidden_before);
    session.release().await;
}

/// fetch, images, iframes and redirects to a forbidden host are still refused (guard and
/// proxy), and allowed ones load through the proxy.
async fn subresources_and_redirects(env: &Env) {
    let session = env.session(allowed_only(&["allowed.test"])).await;
    let forbidden_before = env.forbidden.accepts();
    let third_before = env.third.accepts();
    let img = env.third.url("http", "third.test", "/img/not-allowed.png");
    let frame = env.forbidden.url("http", "evil.test", "/frame/evil");
    let page = format!(
        "{}?img={}&frame={}",
        env.allowed.url("http", "allowed.test", "/embed"),
        url_encode(&img),
        url_encode(&frame)
    );
    session.navigate(&page).await.expect("page loads");
    assert_eq!(env.allowed.hits.count("/embed"), 1);
    let mut seen = Vec::new();
    assert!(
        wait_blocked(&session, &mut seen, |b| b.url == img).await,
        "{seen:?}"
    );
    assert!(
        wait_blocked(&session, &mut seen, |b| b.url == frame).await,
        "{seen:?}"
    );

    let fetch = env
        .third
        .url("http", "third.test", "/api/fetch-not-allowed");
    let outcome = js(
        &session,
        &format!("fetch({fetch:?}).then(() => 'reached', e => 'failed')"),
    )
    .await;
    assert_eq!(outcome, "failed");
    let ok = env.allowed.url("http", "allowed.test", "/api/fetch-ok");
    let outcome = js(&session, &format!("fetch({ok:?}).then(r => r.text())")).await;
    assert_eq!(outcome, "hit");

    let landing = env
        .forbidden
        .url("http", "evil.test", "/page/redirect-landing");
    let start = format!(
        "{}?to={}",
        env.allowed.url("http", "allowed.test", "/redirect"),
        url_encode(&landing)
    );
    let _ = session.navigate(&start).await;
    assert!(
        wait_blocked(&session, &mut seen, |b| b.url == landing).await,
        "{seen:?}"
    );
    assert_eq!(env.allowed.hits.count("/redirect"), 1);

    // A name outside the allowed list that resolves to the allowed address: refused by name.
    let other = websocket(&session, &env.allowed.url("ws", "other.test", "/ws/other")).await;
    assert!(other.starts_with("failed"), "{other}");
    assert!(
        wait_blocked(&session, &mut seen, |b| b.url.starts_with("other.test:")
            && matches!(b.reason, DenyReason::NotInAllowedDomains { .. }))
        .await,
        "{seen:?}"
    );
    assert_eq!(env.allowed.hits.count("/ws/other"), 0);
    assert_eq!(env.forbidden.accepts(), forbidden_before);
    assert_eq!(env.third.accepts(), third_before);
    session.release().await;
}

/// Two tasks in the same Chrome at the same time, each with its own allowed list: neither
/// list leaks into the other context, and one context cannot use the other's listener.
async fn two_contexts_at_once(env: &Env) {
    let a = env.session(allowed_only(&["allowed.test"])).await;
    let b = env.session(allowed_only(&["third.test"])).await;
    a.navigate(&env.allowed.url("http", "allowed.test", "/page/a"))
        .await
        .expect("a loads");
    b.navigate(&env.third.url("http", "third.test", "/page/b"))
        .await
        .expect("b loads");
    let urls = [
        env.allowed.url("ws", "allowed.test", "/ws/a-own"),
        env.third.url("ws", "third.test", "/ws/b-own"),
        env.third.url("ws", "third.test", "/ws/a-other"),
        env.allowed.url("ws", "allowed.test", "/ws/b-other"),
    ];
    let (a_own, b_own, a_other, b_other) = tokio::join!(
        websocket(&a, &urls[0]),
        websocket(&b, &urls[1]),
        websocket(&a, &urls[2]),
        websocket(&b, &urls[3]),
    );
    assert_eq!(a_own, "echo:hi");
    assert_eq!(b_own, "echo:hi");
    assert!(a_other.starts_with("failed"), "{a_other}");
    assert!(b_other.starts_with("failed"), "{b_other}");
    assert_eq!(env.third.hits.count("/ws/a-other"), 0);
    assert_eq!(env.allowed.hits.count("/ws/b-other"), 0);
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    assert!(wait_blocked(&a, &mut seen_a, |e| e.url.starts_with("third.test:")).await);
    assert!(wait_blocked(&b, &mut seen_b, |e| e.url.starts_with("allowed.test:")).await);
    assert!(
        seen_a.iter().all(|e| !e.url.starts_with("allowed.test:")),
        "{seen_a:?}"
    );
    assert!(
        seen_b.iter().all(|e| !e.url.starts_with("third.test:")),
        "{seen_b:?}"
    );

    // A third task without domain lists aims at b's listener (loopback is open to it): refused
    // as the proxy itself, not proxied with b's policy.
    let c = env.session(EgressSettings::default()).await;
    c.navigate(&env.allowed.url("http", "allowed.test", "/page/c"))
        .await
        .expect("c loads");
    let b_proxy = b.egress_proxy().expect("proxy").addr();
    let c_loop = websocket(&c, &format!("ws://127.0.0.1:{}/", b_proxy.port())).await;
    assert!(c_loop.starts_with("failed"), "{c_loop}");
    let mut seen_c = Vec::new();
    assert!(
        wait_blocked(&c, &mut seen_c, |e| matches!(
            &e.reason,
            DenyReason::CheckFailed { detail } if detail.contains("egress proxy itself")
        ))
        .await,
        "{seen_c:?}"
    );
    a.release().await;
    b.release().await;
    c.release().await;
}

/// Contexts opened ahead of their tasks (the pool's spares): each lease that finds one gets it
/// bound to its own task's policy — the guard's and the listener's —, two in a row enforce
/// their own lists and not each other's (downloads and caps: `actions.rs`).
async fn spare_contexts(env: &Env) {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(60);
    let capture = CaptureOptions::default();
    assert!(env.pool.wait_for_spare(WITHIN).await, "a spare is opened");
    let a = env.session(allowed_only(&["allowed.test"])).await;
    assert!(a.opened_ahead(), "the first lease takes the spare");
    a.navigate(&env.allowed.url("http", "allowed.test", "/page/spare-a"))
        .await
        .expect("a loads its allowed page");
    // The next spare is opened once the lease has captured its first page.
    a.capture(&capture).await.expect("a's page is captured");
    assert!(
        env.pool.wait_for_spare(WITHIN).await,
        "the spare is refilled"
    );
    let b = env.session(allowed_only(&["third.test"])).await;
    assert!(b.opened_ahead(), "the second lease takes the new spare");
    assert_ne!(a.context_id(), b.context_id());
    b.navigate(&env.third.url("http", "third.test", "/page/spare-b"))
        .await
        .expect("b loads its allowed page");
    b.capture(&capture).await.expect("b's page is captured");
    assert!(
        a.navigate(&env.third.url("http", "third.test", "/page/spare-a-other"))
            .await
            .is_err(),
        "a's guard refuses b's host"
    );
    assert_eq!(env.third.hits.count("/page/spare-a-other"), 0);
    let forbidden_before = env.forbidden.accepts();
    let a_other_url = env.third.url("ws", "third.test", "/ws/spare-a-other");
    let b_own_url = env.third.url("ws", "third.test", "/ws/spare-b-own");
    let (a_other, b_own) = tokio::join!(websocket(&a, &a_other_url), websocket(&b, &b_own_url));
    assert!(a_other.starts_with("failed"), "{a_other}");
    assert_eq!(b_own, "echo:hi", "b's listener carries b's policy");
    assert_eq!(env.third.hits.count("/ws/spare-a-other"), 0);
    let mut seen_a = Vec::new();
    assert!(
        wait_blocked(&a, &mut seen_a, |e| e.url.starts_with("third.test:")).await,
        "a's listener refused b's host: {seen_a:?}"
    );
    assert_eq!(env.forbidden.accepts(), forbidden_before);

    // A task the spare does not fit (no egress settings: a spare is always guarded) opens a
    // context of its own and leaves the spare for the next one.
    assert!(env.pool.wait_for_spare(WITHIN).await);
    let unguarded = env.pool.lease().await.expect("lease without egress");
    assert!(!unguarded.opened_ahead());
    let c = env.session(allowed_only(&["allowed.test"])).await;
    assert!(
        c.opened_ahead(),
        "the spare is still there for a task that fits"
    );
    unguarded.release().await;
    c.release().await;
    a.release().await;
    b.release().await;
}

fn url_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
