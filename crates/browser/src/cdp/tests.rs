use super::{NulSplitter, fast_answer_id};

use super::{CONNECTION_CLOSED_EVENT, CdpConnection};
use crate::error::BrowserError;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A fake Chrome on the other end of an in-memory pipe: answers
/// `Target.attachToBrowserTarget` with session `B`, then sends events of `B`, of `C` (a
/// target `B` attached), of the root, and `B`'s detach; ends the pipe on `Browser.close`.
#[tokio::test]
async fn the_pipe_carries_calls_and_routes_a_browser_sessions_events() {
    let (worker, chrome) = tokio::io::duplex(1 << 16);
    let (from_chrome, to_chrome) = tokio::io::split(worker);
    let conn = CdpConnection::over_pipe(from_chrome, to_chrome, Duration::from_secs(5));
    let (chrome_reads, mut chrome_writes) = tokio::io::split(chrome);
    let fake = tokio::spawn(async move {
        let mut commands = BufReader::new(chrome_reads);
        loop {
            let mut command = Vec::new();
            if commands.read_until(0, &mut command).await.unwrap_or(0) == 0 {
                return;
            }
            assert_eq!(command.pop(), Some(0), "every command ends with a NUL");
            let command: serde_json::Value = serde_json::from_slice(&command).unwrap();
            let id = command["id"].as_u64().unwrap();
            let mut out = String::new();
            match command["method"].as_str().unwrap() {
                "Target.attachToBrowserTarget" => {
                    out.push_str(&format!(
                        "{{\"id\":{id},\"result\":{{\"sessionId\":\"B\"}}}}\0"
                    ));
                }
                "Go" => {
                    out.push_str(concat!(
                        "{\"method\":\"Target.attachedToTarget\",\"sessionId\":\"B\",",
                        "\"params\":{\"sessionId\":\"C\",\"waitingForDebugger\":true}}\0",
                        "{\"method\":\"Fetch.requestPaused\",\"sessionId\":\"C\",\"params\":{}}\0",
                        "{\"method\":\"Target.targetCreated\",\"params\":{}}\0",
                    ));
                    out.push_str(&format!("{{\"id\":{id},\"result\":{{\"went\":1}}}}\0"));
                }
                "Detach" => {
                    out.push_str(concat!(
                        "{\"method\":\"Target.detachedFromTarget\",",
                        "\"params\":{\"sessionId\":\"B\"}}\0",
                    ));
                    out.push_str(&format!("{{\"id\":{id},\"result\":{{}}}}\0"));
                }
                "Fail" => out.push_str(&format!(
                    "{{\"id\":{id},\"error\":{{\"code\":-32000,\"message\":\"no\"}}}}\0"
                )),
                "Browser.close" => return,
                other => panic!("unexpected {other}"),
            }
            // Byte by byte: messages are reassembled across reads.
            for byte in out.as_bytes() {
                chrome_writes.write_all(&[*byte]).await.unwrap();
            }
        }
    });
    let mut root = conn.events();
    let (session, mut routed) = conn.browser_session(Duration::from_secs(5)).await.unwrap();
    assert_eq!(session, "B");
    let went = conn
        .call_raw(None, "Go", serde_json::json!({}), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(went.as_str(), "{\"id\":2,\"result\":{\"went\":1}}");
    let attached = routed.recv().await.unwrap();
    assert_eq!(
        (attached.method.as_str(), attached.session_id.as_deref()),
        ("Target.attachedToTarget", Some("B"))
    );
    let paused = routed.recv().await.unwrap();
    assert_eq!(
        (paused.method.as_str(), paused.session_id.as_deref()),
        ("Fetch.requestPaused", Some("C"))
    );
    // The root sees only its own events.
    assert_eq!(root.recv().await.unwrap().method, "Target.targetCreated");
    assert!(root.try_recv().is_err());
    let failed = conn
        .call_raw(None, "Fail", serde_json::json!({}), Duration::from_secs(5))
        .await;
    assert!(
        matches!(failed, Err(BrowserError::Protocol { code: -32000, .. })),
        "{failed:?}"
    );
    // Once `B` detaches, it and `C` are no longer routed.
    conn.call_raw(
        None,
        "Detach",
        serde_json::json!({}),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(
        root.recv().await.unwrap().method,
        "Target.detachedFromTarget"
    );
    assert!(conn.shared.routes.lock().unwrap().is_empty());
    // Chrome's end of the pipe closing closes the connection: calls fail at once.
    conn.send_and_forget(None, "Browser.close", serde_json::json!({}));
    fake.await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("the connection closes at the pipe's end");
    assert_eq!(root.recv().await.unwrap().method, CONNECTION_CLOSED_EVENT);
    assert!(routed.recv().await.is_none(), "the routed channel ends");
    let after = conn
        .call_raw(None, "Go", serde_json::json!({}), Duration::from_secs(5))
        .await;
    assert!(
        matches!(after, Err(BrowserError::ConnectionClosed)),
        "{after:?}"
    );
}

#[test]
fn pipe_messages_are_split_on_nul_across_reads() {
    let mut splitter = NulSplitter::default();
    assert!(splitter.push(b"{\"id\":1,").is_empty());
    assert_eq!(
        splitter.push(b"\"result\":{}}\0{\"id\":2}\0{\"met"),
        vec![b"{\"id\":1,\"result\":{}}".to_vec(), b"{\"id\":2}".to_vec()]
    );
    assert_eq!(
        splitter.push(b"hod\":\"X\"}\0"),
        vec![b"{\"method\":\"X\"}".to_vec()]
    );
    assert!(splitter.push(b"").is_empty());
    assert!(splitter.partial.is_empty());
}

#[test]
fn fast_id_reads_leading_id_only() {
    assert_eq!(fast_answer_id(r#"{"id":42,"result":{}}"#), Some(42));
    assert_eq!(fast_answer_id(r#"{"method":"X","params":{"id":3}}"#), None);
    assert_eq!(fast_answer_id(r#"{"id":"#), None);
}
