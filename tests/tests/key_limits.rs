//! Per-key counts of what a key keeps between tasks, on the real binary with small limits set by
//! its flags: `--max-profiles-per-key` (on `/v1/profiles` and `/api/v2/profiles`) and
//! `--max-sessions-per-key` (active `/api/v2` sessions). Over the limit: 429 `quota_exceeded`
//! with `Retry-After`; another key is not affected; deleting a profile, or stopping (or
//! deleting) a session, frees a slot.

use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, TestDb, create_key, done_reply};
use serde_json::{Value, json};

/// A request with the client's key, answering its status, `Retry-After` and body.
async fn send(
    client: &Client,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    let mut request = client
        .http
        .request(method, format!("{}{path}", client.base))
        .bearer_auth(&client.key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

async fn post(client: &Client, path: &str, body: Value) -> (u16, Option<String>, Value) {
    send(client, reqwest::Method::POST, path, Some(body)).await
}

async fn start(args: &[&str]) -> (MockModel, TestDb, Process) {
    let model = MockModel::start(
        std::sync::Arc::new(|_: &str| done_reply("unused", true)),
        Duration::ZERO,
    )
    .await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "api", args).await;
    (model, db, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_per_key_are_limited_on_both_apis() {
    let (_model, db, server) = start(&["--max-profiles-per-key", "2"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let other = Client::new(server.address(), &create_key(&db).await);

    let (status, _, first) = post(&client, "/v1/profiles", json!({"name": "a"})).await;
    assert_eq!(status, 201, "{first}");
    let (status, _, second) = post(&client, "/api/v2/profiles", json!({"name": "b"})).await;
    assert_eq!(status, 201, "{second}");

    // The third, on either api: 429 with the limit named and a Retry-After.
    let (status, retry_after, body) = post(&client, "/v1/profiles", json!({"name": "c"})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("60"));
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert_eq!(
        body["error"]["message"],
        "this key already has 2 profiles, its limit `max_profiles_per_key` (2); delete one first"
    );
    let (status, retry_after, body) = post(&client, "/api/v2/profiles", json!({})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("60"));
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("`max_profiles_per_key` (2)"),
        "{body}"
    );

    // Another key has its own count.
    let (status, _, body) = post(&other, "/v1/profiles", json!({})).await;
    assert_eq!(status, 201, "{body}");

    // Deleting one frees a slot.
    let id = first["id"].as_str().unwrap();
    let (status, _, _) = send(
        &client,
        reqwest::Method::DELETE,
        &format!("/v1/profiles/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, _, body) = post(&client, "/api/v2/profiles", json!({"name": "d"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, _, _) = post(&client, "/v1/profiles", json!({})).await;
    assert_eq!(status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_sessions_per_key_are_limited() {
    let (_model, db, server) = start(&["--max-sessions-per-key", "2"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let other = Client::new(server.address(), &create_key(&db).await);

    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, _, body) = post(&client, "/api/v2/sessions", json!({})).await;
        assert_eq!(status, 201, "{body}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let (status, retry_after, body) = post(&client, "/api/v2/sessions", json!({})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("60"));
    assert_eq!(
        body["detail"],
        "this key already has 2 active sessions, its limit `max_sessions_per_key` (2); \
         stop or delete one first"
    );

    let (status, _, body) = post(&other, "/api/v2/sessions", json!({})).await;
    assert_eq!(status, 201, "{body}");

    // A stopped session no longer counts; a deleted one neither.
    let (status, _, body) = send(
        &client,
        reqwest::Method::PATCH,
        &format!("/api/v2/sessions/{}", ids[0]),
        Some(json!({"action": "stop"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = post(&client, "/api/v2/sessions", json!({})).await;
    assert_eq!(status, 201, "{body}");
    let (status, _, _) = post(&client, "/api/v2/sessions", json!({})).await;
    assert_eq!(status, 429);
    let (status, _, _) = send(
        &client,
        reqwest::Method::DELETE,
        &format!("/api/v2/sessions/{}", ids[1]),
        None,
    )
    .await;
    assert!(matches!(status, 200 | 204), "{status}");
    let (status, _, body) = post(&client, "/api/v2/sessions", json!({})).await;
    assert_eq!(status, 201, "{body}");
}
