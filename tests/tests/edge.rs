//! The API edge across real processes: `browserd keys list` / `keys revoke` run as commands
//! against two `browserd api` replicas on one Postgres. A revoked key is refused by both within
//! seconds and every WebSocket it holds, on either replica, closes saying why; a ticket issued
//! by one replica is redeemed on the other.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, TestDb, browserd_bin, create_key, done_reply};
use futures::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const WAIT: Duration = Duration::from_secs(30);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn keys(db: &TestDb, args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(browserd_bin())
        .arg("keys")
        .args(args)
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn open(address: &str, path: &str, key: Option<&str>) -> Ws {
    let mut request = format!("ws://{address}{path}")
        .into_client_request()
        .unwrap();
    if let Some(key) = key {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// The first text frame, then the close frame.
async fn first_event_then_close(ws: &mut Ws) -> (CloseCode, String) {
    let mut saw_event = false;
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
        {
            Some(Ok(Message::Text(_))) => saw_event = true,
            Some(Ok(Message::Close(Some(frame)))) => {
                assert!(saw_event, "the stream replayed before closing");
                return (frame.code, frame.reason.to_string());
            }
            Some(Ok(Message::Close(None))) | None => panic!("closed without a close frame"),
            Some(Ok(_)) => {}
            Some(Err(err)) => panic!("websocket error: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_on_the_command_line_reaches_every_api_replica() {
    let db = TestDb::create().await;
    let model = MockModel::start(Arc::new(|_: &str| done_reply("ok", true)), Duration::ZERO).await;
    let first = Process::start(&db, model.addr, "api", &[]).await;
    let second = Process::start(&db, model.addr, "api", &[]).await;
    let key = create_key(&db).await;
    let other_key = create_key(&db).await;
    let a = Client::new(first.address(), &key);
    let b = Client::new(second.address(), &key);
    let task = a.create_task(json!({"task": "stay queued"})).await;

    // `keys list` shows both keys by prefix, never the key.
    let (ok, listing, stderr) = keys(&db, &["list"]).await;
    assert!(ok, "{stderr}");
    assert!(listing.contains(&key[..11]), "{listing}");
    assert!(listing.contains(&other_key[..11]), "{listing}");
    assert!(!listing.contains(&key), "the key itself is never printed");

    // A ticket issued by one replica is redeemed by the other.
    let (status, ticket) = a
        .post(&format!("/v1/tasks/{task}/events/ticket"), json!({}))
        .await;
    assert_eq!(status, 201, "{ticket}");
    let mut by_ticket = open(second.address(), ticket["url"].as_str().unwrap(), None).await;
    let mut on_first = open(
        first.address(),
        &format!("/v1/tasks/{task}/events"),
        Some(&key),
    )
    .await;
    let mut on_second = open(
        second.address(),
        &format!("/v1/tasks/{task}/events"),
        Some(&key),
    )
    .await;
    // Both replicas have the key in their auth cache now.
    assert_eq!(a.get("/v1/tasks").await.0, 200);
    assert_eq!(b.get("/v1/tasks").await.0, 200);

    // Ambiguous or unknown selectors are refused with a reason.
    let (ok, _, stderr) = keys(&db, &["revoke", "bd_"]).await;
    assert!(!ok && stderr.contains("prefix"), "{stderr}");
    let (ok, _, stderr) = keys(&db, &["revoke", &uuid::Uuid::new_v4().to_string()]).await;
    assert!(!ok && stderr.contains("no key matches"), "{stderr}");

    let (ok, out, stderr) = keys(&db, &["revoke", &key[..11]]).await;
    assert!(ok, "{stderr}");
    assert!(out.contains("revoked key"), "{out}");

    for ws in [&mut on_first, &mut on_second, &mut by_ticket] {
        assert_eq!(
            first_event_then_close(ws).await,
            (CloseCode::Policy, "api key revoked".to_owned())
        );
    }
    for client in [&a, &b] {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, body) = client.get("/v1/tasks").await;
            if status == 401 {
                assert_eq!(body["error"]["code"], "invalid_api_key");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "still {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // The other key is untouched, and the list shows the revocation.
    assert_eq!(
        Client::new(second.address(), &other_key)
            .get("/v1/tasks")
            .await
            .0,
        200
    );
    let (_, listing, _) = keys(&db, &["list"]).await;
    let line = listing.lines().find(|l| l.contains(&key[..11])).unwrap();
    assert!(!line.contains("  -  "), "revoked time shown: {line}");
    // Revoking again says so.
    let (ok, _, stderr) = keys(&db, &["revoke", &key[..11]]).await;
    assert!(!ok && stderr.contains("already revoked"), "{stderr}");
}
