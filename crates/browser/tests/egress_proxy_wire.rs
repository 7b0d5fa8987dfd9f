//! The egress proxy on the wire, without a browser: a raw client speaks `CONNECT` and
//! absolute-form HTTP to a context's listener; refusals are 403 with a body naming the
//! destination and the reason; allowed tunnels reach exactly the checked address; upstream
//! proxies (http CONNECT with Basic auth, SOCKS5 with username/password — small servers in this
//! test) carry the connection to the checked address, never the name.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browserd_browser::egress::{
    EgressPolicy, EgressProxy, EgressSettings, HostOverride, HostResolver, ProxyOptions,
    UpstreamProxy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CAP: Duration = Duration::from_secs(10);

/// A plain HTTP/1.1 server answering every request with `hello from <addr>` and closing.
async fn origin(ip: [u8; 4]) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::from((ip, 0)))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!("hello from {addr}");
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    addr
}

fn policy(settings: EgressSettings) -> Arc<EgressPolicy> {
    let resolver = HostResolver::system(Duration::from_secs(2))
        .with_override(HostOverride::new("allowed.test", "127.0.0.2".parse().unwrap()).unwrap())
        .with_override(HostOverride::new("evil.test", "127.0.0.3".parse().unwrap()).unwrap());
    Arc::new(
        EgressPolicy::new(settings)
            .expect("settings")
            .with_resolver(resolver),
    )
}

fn settings() -> EgressSettings {
    EgressSettings {
        allow_loopback: true,
        blocked_networks: vec!["127.0.0.3/32".into()],
        ..EgressSettings::default()
    }
}

/// Sends `head` to the proxy and reads until the connection closes (or 10 s).
async fn exchange(proxy: SocketAddr, head: &str) -> String {
    let mut s = TcpStream::connect(proxy).await.expect("connect proxy");
    s.write_all(head.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(CAP, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// CONNECT, then a GET through the tunnel; returns everything read.
async fn tunnel_get(proxy: SocketAddr, authority: &str) -> String {
    let head = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\nGET / HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    );
    exchange(proxy, &head).await
}

/// A listener opened ahead of its task (a spare context's) refuses every tunnel and request
/// until the task's policy is bound; then it applies that policy, and a second bind is refused.
#[tokio::test]
async fn an_unbound_listener_refuses_everything_until_its_task_is_bound() {
    let allowed = origin([127, 0, 0, 2]).await;
    let proxy = EgressProxy::new(ProxyOptions::default(), HashMap::new());
    let ctx = proxy.open_unbound().await.expect("open");
    assert!(ctx.policy().get().is_none());
    let authority = format!("allowed.test:{}", allowed.port());
    let refused = tunnel_get(ctx.addr(), &authority).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("not bound to a task"), "{refused}");
    assert!(!refused.contains("hello"), "{refused}");
    let get = format!(
        "GET http://{authority}/x HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    );
    let refused = exchange(ctx.addr(), &get).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(!refused.contains("hello"), "{refused}");
    assert_eq!(ctx.drain_blocked().len(), 2);

    assert!(ctx.bind(policy(settings())), "the first bind takes");
    let ok = tunnel_get(ctx.addr(), &authority).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(&format!("hello from {allowed}")), "{ok}");
    let strict = EgressSettings {
        allowed_domains: vec!["elsewhere.test".into()],
        ..settings()
    };
    assert!(
        !ctx.bind(policy(strict)),
        "a context keeps its task's policy"
    );
    let still = tunnel_get(ctx.addr(), &authority).await;
    assert!(still.starts_with("HTTP/1.1 200"), "{still}");
}

#[tokio::test]
async fn connect_and_absolute_form_are_checked_and_pinned() {
    let allowed = origin([127, 0, 0, 2]).await;
    let forbidden = origin([127, 0, 0, 3]).await;
    let proxy = EgressProxy::new(ProxyOptions::default(), HashMap::new());
    let ctx = proxy.open(policy(settings()), None).await.expect("open");
    assert!(ctx.proxy_server().starts_with("http://127.0.0.1:"));

    let ok = tunnel_get(ctx.addr(), &format!("allowed.test:{}", allowed.port())).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(&format!("hello from {allowed}")), "{ok}");

    let refused = tunnel_get(ctx.addr(), &format!("evil.test:{}", forbidden.port())).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("evil.test:"), "{refused}");
    assert!(refused.contains("blocked_networks"), "{refused}");
    assert!(!refused.contains("hello"), "{refused}");

    for authority in [
        format!("127.0.0.3:{}", forbidden.port()),
        format!("2130706435:{}", forbidden.port()),
        format!("[::ffff:127.0.0.3]:{}", forbidden.port()),
        "169.254.169.254:80".to_string(),
        "10.0.0.1:443".to_string(),
        "metadata.google.internal:80".to_string(),
    ] {
        let r = tunnel_get(ctx.addr(), &authority).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{authority}: {r}");
    }

    let get = exchange(
        ctx.addr(),
        &format!(
            "GET http://allowed.test:{}/x?y HTTP/1.1\r\nHost: allowed.test:{}\r\nProxy-Connection: keep-alive\r\nConnection: close\r\n\r\n",
            allowed.port(),
            allowed.port()
        ),
    )
    .await;
    assert!(get.starts_with("HTTP/1.1 200"), "{get}");
    assert!(get.contains(&format!("hello from {allowed}")), "{get}");
    let denied = exchange(
        ctx.addr(),
        &format!(
            "GET http://evil.test:{}/secret?token=1 HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
            forbidden.port()
        ),
    )
    .await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");

    let bad = exchange(
        ctx.addr(),
        "GET /relative HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    let no_port = exchange(
        ctx.addr(),
        "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    )
    .await;
    assert!(no_port.starts_with("HTTP/1.1 400"), "{no_port}");

    let blocked = ctx.drain_blocked();
    assert!(blocked.len() >= 7, "{blocked:?}");
    assert!(blocked.iter().all(|b| b.target_type == "proxy"));
    let http_entry = blocked
        .iter()
        .find(|b| b.resource_type.as_deref() == Some("HTTP"))
        .expect("http entry");
    assert!(http_entry.url.contains("/secret"), "{http_entry:?}");
    let stats = ctx.stats();
    assert!(
        stats.tunnels >= 1 && stats.requests >= 1 && stats.blocked >= 7,
        "{stats:?}"
    );

    // Closing the listener: new connections are refused.
    let addr = ctx.addr();
    ctx.close();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

#[tokio::test]
async fn domain_lists_apply_to_tunnels_by_origin() {
    let allowed = origin([127, 0, 0, 2]).await;
    let proxy = EgressProxy::new(ProxyOptions::default(), HashMap::new());
    let only = |list: &[&str]| {
        let mut s = settings();
        s.allowed_domains = list.iter().map(|p| p.to_string()).collect();
        policy(s)
    };
    let port = allowed.port();
    for (list, want_ok) in [
        (vec!["allowed.test"], true),
        (vec!["*.test"], true),
        (vec![&*format!("https://allowed.test:{port}/docs")], true),
        (vec![&*format!("ws://allowed.test:{port}")], true),
        (vec!["other.test"], false),
        (vec!["https://allowed.test/"], false),
    ] {
        let ctx = proxy.open(only(&list), None).await.expect("open");
        let r = tunnel_get(ctx.addr(), &format!("allowed.test:{port}")).await;
        assert_eq!(r.starts_with("HTTP/1.1 200"), want_ok, "{list:?}: {r}");
    }
    let mut s = settings();
    s.prohibited_domains = vec!["allowed.test".into()];
    let ctx = proxy.open(policy(s), None).await.expect("open");
    let r = tunnel_get(ctx.addr(), &format!("allowed.test:{port}")).await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("prohibited_domains"),
        "{r}"
    );
    // A prohibit pattern with a path cannot be judged on a tunnel: let through (the guard
    // judges the URLs it sees).
    let mut s = settings();
    s.prohibited_domains = vec![format!("https://allowed.test:{port}/private")];
    let ctx = proxy.open(policy(s), None).await.expect("open");
    let r = tunnel_get(ctx.addr(), &format!("allowed.test:{port}")).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// A CONNECT upstream that records what it was asked and the auth header, then connects.
async fn http_upstream(seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                seen.lock().unwrap().push(head.clone());
                let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                if !head.contains("Proxy-Authorization: Basic dXNlcjpwQHNz") {
                    let _ = s.write_all(b"HTTP/1.1 407 Auth\r\n\r\n").await;
                    return;
                }
                let Ok(mut out) = TcpStream::connect(&target).await else {
                    let _ = s.write_all(b"HTTP/1.1 502 Bad\r\n\r\n").await;
                    return;
                };
                let _ = s
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut s, &mut out).await;
            });
        }
    });
    addr
}

/// A SOCKS5 server (username/password auth, IPv4 CONNECT only) recording the targets.
async fn socks5_upstream(seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut greet = [0u8; 2];
                if s.read_exact(&mut greet).await.is_err() {
                    return;
                }
                let mut methods = vec![0u8; usize::from(greet[1])];
                let _ = s.read_exact(&mut methods).await;
                if !methods.contains(&2) {
                    let _ = s.write_all(&[5, 0xff]).await;
                    return;
                }
                let _ = s.write_all(&[5, 2]).await;
                let mut ver_ulen = [0u8; 2];
                let _ = s.read_exact(&mut ver_ulen).await;
                let mut user = vec![0u8; usize::from(ver_ulen[1])];
                let _ = s.read_exact(&mut user).await;
                let mut plen = [0u8; 1];
                let _ = s.read_exact(&mut plen).await;
                let mut pass = vec![0u8; usize::from(plen[0])];
                let _ = s.read_exact(&mut pass).await;
                let ok = user == b"user" && pass == b"p@ss";
                let _ = s.write_all(&[1, if ok { 0 } else { 1 }]).await;
                if !ok {
                    return;
                }
                let mut req = [0u8; 4];
                let _ = s.read_exact(&mut req).await;
                if req[3] != 1 {
                    seen.lock().unwrap().push(format!("atyp {}", req[3]));
                    let _ = s.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await;
                    return;
                }
                let mut ip_port = [0u8; 6];
                let _ = s.read_exact(&mut ip_port).await;
                let target = SocketAddr::from((
                    [ip_port[0], ip_port[1], ip_port[2], ip_port[3]],
                    u16::from_be_bytes([ip_port[4], ip_port[5]]),
                ));
                seen.lock().unwrap().push(target.to_string());
                let Ok(mut out) = TcpStream::connect(target).await else {
                    let _ = s.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await;
                    return;
                };
                let _ = s.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await;
                let _ = tokio::io::copy_bidirectional(&mut s, &mut out).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn upstream_proxies_get_the_checked_address_and_keep_credentials_secret() {
    let allowed = origin([127, 0, 0, 2]).await;
    let forbidden = origin([127, 0, 0, 3]).await;
    let http_seen = Arc::new(Mutex::new(Vec::new()));
    let socks_seen = Arc::new(Mutex::new(Vec::new()));
    let http_up = http_upstream(http_seen.clone()).await;
    let socks_up = socks5_upstream(socks_seen.clone()).await;
    let http = UpstreamProxy::parse(&format!("http://user:p%40ss@{http_up}")).expect("http");
    let socks = UpstreamProxy::parse(&format!("socks5://user:p%40ss@{socks_up}")).expect("socks");
    let debug = format!("{http:?} {socks:?}");
    assert!(
        !debug.contains("p@ss") && !debug.contains("p%40ss"),
        "{debug}"
    );
    assert!(debug.contains("<redacted>"), "{debug}");
    let wrong = UpstreamProxy::parse(&format!("http://user:wrong@{http_up}")).expect("wrong");
    let upstreams = HashMap::from([
        ("corp".to_string(), http),
        ("residential".to_string(), socks),
        ("wrong".to_string(), wrong),
    ]);
    let proxy = EgressProxy::new(ProxyOptions::default(), upstreams);
    assert_eq!(proxy.upstream_names(), vec!["corp", "residential", "wrong"]);
    let unknown = proxy
        .open(policy(settings()), Some("nope"))
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("unknown proxy \"nope\""),
        "{unknown}"
    );

    for (name, seen) in [("corp", &http_seen), ("residential", &socks_seen)] {
        let ctx = proxy
            .open(policy(settings()), Some(name))
            .await
            .expect("open");
        let ok = tunnel_get(ctx.addr(), &format!("allowed.test:{}", allowed.port())).await;
        assert!(
            ok.contains(&format!("hello from {allowed}")),
            "{name}: {ok}"
        );
        let get = exchange(
            ctx.addr(),
            &format!(
                "GET http://allowed.test:{}/p HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
                allowed.port()
            ),
        )
        .await;
        assert!(
            get.contains(&format!("hello from {allowed}")),
            "{name}: {get}"
        );
        let refused = tunnel_get(ctx.addr(), &format!("evil.test:{}", forbidden.port())).await;
        assert!(refused.starts_with("HTTP/1.1 403"), "{name}: {refused}");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{name}: {seen:?}");
        for entry in &seen {
            assert!(
                entry.contains(&allowed.to_string()),
                "{name}: pinned address: {entry}"
            );
            assert!(
                !entry.contains("allowed.test") && !entry.contains("127.0.0.3"),
                "{entry}"
            );
        }
    }
    let ctx = proxy
        .open(policy(settings()), Some("wrong"))
        .await
        .expect("open");
    let r = tunnel_get(ctx.addr(), &format!("allowed.test:{}", allowed.port())).await;
    assert!(r.starts_with("HTTP/1.1 502"), "{r}");
    assert!(r.contains("407") && !r.contains("wrong"), "{r}");
}

#[test]
fn upstream_urls_are_validated_without_echoing_credentials() {
    for (text, why) in [
        ("ftp://h:1", "unsupported proxy scheme"),
        ("http://h", "explicit port"),
        ("http://user:secret@h:1/path", "no path"),
        ("not a url", "not a proxy URL"),
    ] {
        let e = UpstreamProxy::parse(text).unwrap_err();
        assert!(e.contains(why), "{text}: {e}");
        assert!(!e.contains("secret"), "{e}");
    }
    let p = UpstreamProxy::parse("socks5://proxy.example:1080").expect("socks");
    assert_eq!(p.describe(), "socks5://proxy.example:1080");
}
