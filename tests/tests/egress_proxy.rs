//! A task routed through an operator's upstream proxy, end to end: `browserd serve --proxies
//! corp=http://user:pass@…` with a CONNECT proxy in this test, a task naming `"proxy": "corp"`
//! climbs the local stairs through its egress proxy and the upstream, which is asked only for
//! the checked address and gets the Basic credentials; an unknown name is a 422; the
//! credentials appear nowhere in the logs.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, Site, TestDb, create_key, stairs_brain};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PASSWORD: &str = "upstream-pw-7f3a";

/// A CONNECT proxy that records every request head and needs `user:PASSWORD`.
async fn upstream(seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let token = base64_basic(&format!("user:{PASSWORD}"));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            let token = token.clone();
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
                if !head.starts_with("CONNECT ")
                    || !head.contains(&format!("Proxy-Authorization: Basic {token}"))
                {
                    let _ = s.write_all(b"HTTP/1.1 407 Auth\r\n\r\n").await;
                    return;
                }
                let Ok(mut out) = TcpStream::connect(&target).await else {
                    let _ = s.write_all(b"HTTP/1.1 502 Bad\r\n\r\n").await;
                    return;
                };
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
                let _ = tokio::io::copy_bidirectional(&mut s, &mut out).await;
            });
        }
    });
    addr
}

fn base64_basic(text: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn a_task_routes_through_the_named_upstream_proxy() {
    assert_eq!(base64_basic("user:p@ss"), "dXNlcjpwQHNz");
    let site = Site::start().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(seen.clone()).await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let proxies = format!("corp=http://user:{PASSWORD}@{up}");
    let server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback"],
        &[("BROWSERD_PROXIES", proxies.as_str())],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);

    let (status, body) = client
        .post(
            "/v1/tasks",
            json!({"task": "climb", "start_url": site.url("/stairs/1?top=2"), "proxy": "nope"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("unknown proxy"), "{body}");

    let id = client
        .create_task(json!({
            "task": "Climb the stairs and report the code at the top.",
            "start_url": site.url("/stairs/1?top=2"),
            "proxy": "corp",
            "max_steps": 8
        }))
        .await;
    let task = client
        .wait_status(&id, &["finished", "failed"], Duration::from_secs(90))
        .await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(task["proxy"], "corp");
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the upstream carried the task's traffic");
    let checked = format!("CONNECT {} HTTP/1.1", site.addr);
    assert!(
        seen.iter().all(|h| h.starts_with(&checked)),
        "only the checked address, never a name: {seen:?}"
    );
    let logs = server.logs();
    assert!(!logs.contains(PASSWORD), "credentials in the logs");
}
