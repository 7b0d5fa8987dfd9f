//! The hardened API edge, end to end: the real router served with connection info on
//! 127.0.0.1:0 over a fresh Postgres database per test (`#[sqlx::test]`), driven with reqwest and
//! tokio-tungstenite. Per-address limits before the database, request timeouts, WebSocket caps,
//! size limits, closes on revocation and deletion, tickets and the subprotocol convention, keys
//! in URLs, and screenshot ownership.

use std::num::NonZeroU32;
use std::time::Duration;

use browserd_api::{ApiConfig, RateLimit};
use browserd_store::{ArtifactContent, NewArtifact, NewStep, QuotaOverrides, Quotas};
use browserd_tasks::ModelCatalog;
use browserd_types::TaskId;
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(30);

mod support;

use support::TestServer as TestApp;

fn config() -> ApiConfig {
    ApiConfig {
        models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
        ..ApiConfig::default()
    }
}

fn limit(per_second: u32, burst: u32) -> Option<RateLimit> {
    Some(RateLimit::per_second(
        NonZeroU32::new(per_second).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    ))
}

/// A bucket that does not refill within a test, so what it lets through does not depend on
/// how fast the machine sends the requests.
fn burst_only(burst: u32) -> Option<RateLimit> {
    Some(RateLimit {
        replenish_every: Duration::from_secs(3600),
        burst: NonZeroU32::new(burst).unwrap(),
    })
}

impl TestApp {
    async fn start(pool: PgPool, config: ApiConfig) -> Self {
        TestApp::serve(pool, config, false).await
    }

    async fn task(&self) -> TaskId {
        let response = self
            .post("/v1/tasks")
            .json(&json!({"task": "t"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().parse().unwrap()
    }

    fn ws_request(
        &self,
        path_and_query: &str,
    ) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        format!("ws://{}{path_and_query}", self.addr)
            .into_client_request()
            .unwrap()
    }

    /// Opens `path_and_query` with the bearer header of `key`.
    async fn ws(&self, key: &str, task: TaskId) -> Ws {
        let mut request = self.ws_request(&format!("/v1/tasks/{task}/events"));
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        tokio_tungstenite::connect_async(request).await.unwrap().0
    }

    async fn ticket(&self, task: TaskId) -> Value {
        let response = self
            .post(&format!("/v1/tasks/{task}/events/ticket"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }
}

/// The status of a refused WebSocket handshake, and its JSON body.
async fn refused(
    request: tokio_tungstenite::tungstenite::handshake::client::Request,
) -> (u16, Value) {
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_ref()
                .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
                .unwrap_or(Value::Null);
            (status, body)
        }
        Err(other) => panic!("unexpected handshake error: {other}"),
        Ok(_) => panic!("the handshake was accepted"),
    }
}

/// The close frame the server sends (skipping events and pings).
async fn close_frame(ws: &mut Ws) -> (CloseCode, String) {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a close frame in time");
        match message {
            Some(Ok(Message::Close(Some(frame)))) => return (frame.code, frame.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => panic!("closed without a close frame"),
            Some(Ok(_)) => {}
            Some(Err(err)) => panic!("websocket error before the close frame: {err}"),
        }
    }
}

/// The next text frame as JSON.
async fn event(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("an event in time")
        {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(Message::Close(frame))) => panic!("closed: {frame:?}"),
            Some(Ok(_)) => {}
            other => panic!("websocket ended: {other:?}"),
        }
    }
}

async fn code_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON error body");
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

fn random_key() -> String {
    format!("bd_{}", uuid::Uuid::new_v4().simple())
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn invalid_keys_are_limited_per_address_before_the_database(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            unauthenticated_rate_limit: burst_only(10),
            rate_limit: limit(1000, 1000),
            // The valid key stays cached for the whole test, however long its loop takes.
            key_cache_ttl: Duration::from_secs(3600),
            ..config()
        },
    )
    .await;
    // A valid key seen once is served from the cache from then on; its one lookup took a
    // token of the client's pre-auth budget.
    assert_eq!(app.get("/v1/tasks").send().await.unwrap().status(), 200);
    let lookups_before = app.store.api_key_lookups();

    let (mut unauthorized, mut limited) = (0, 0);
    for _ in 0..100 {
        let response = app
            .http
            .get(app.url("/v1/tasks"))
            .bearer_auth(random_key())
            .header("x-forwarded-for", "203.0.113.7")
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            401 => unauthorized += 1,
            429 => {
                assert!(response.headers().contains_key("retry-after"));
                assert_eq!(code_of(response).await.1, "rate_limited");
                limited += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    let lookups = app.store.api_key_lookups() - lookups_before;
    // The rest of the burst (9) reached Postgres, nothing more.
    assert_eq!(unauthorized, 9, "{unauthorized} lookups got through");
    assert_eq!(limited, 91);
    assert_eq!(
        lookups, unauthorized,
        "every 401 was one lookup, every 429 none"
    );
    // Requests without any key pay from the same budget.
    let response = app.http.get(app.url("/v1/tasks")).send().await.unwrap();
    assert_eq!(code_of(response).await, (429, "rate_limited".to_owned()));
    // X-Forwarded-For from an untrusted peer is ignored: the client is still 127.0.0.1, and
    // its valid key still works (its own per-key budget).
    let response = app.get("/v1/tasks").send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn forwarded_for_separates_clients_behind_a_trusted_proxy(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            unauthenticated_rate_limit: burst_only(3),
            trusted_proxies: browserd_api::parse_trusted_proxies("127.0.0.0/8").unwrap(),
            ..config()
        },
    )
    .await;
    let attempt = |client: &'static str| {
        app.http
            .get(app.url("/v1/tasks"))
            .bearer_auth(random_key())
            .header("x-forwarded-for", format!("{client}, 127.0.0.2"))
            .send()
    };
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(attempt("203.0.113.1").await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429, 429, 429, 429]);
    // Another client behind the same proxy has its own budget.
    assert_eq!(attempt("203.0.113.2").await.unwrap().status(), 401);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn slow_requests_time_out_with_a_json_error(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            request_timeout: Duration::from_millis(500),
            ..config()
        },
    )
    .await;
    // A body that never finishes: the server gives up after the timeout.
    let body = reqwest::Body::wrap_stream(
        futures::stream::once(async { Ok::<_, std::io::Error>(bytes_of("{\"task\":")) })
            .chain(futures::stream::pending()),
    );
    let started = std::time::Instant::now();
    let response = app
        .post("/v1/tasks")
        .header("content-type", "application/json")
        .header("content-length", "100")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(code_of(response).await, (408, "request_timeout".to_owned()));
    assert!(started.elapsed() < Duration::from_secs(5));

    // A WebSocket stream outlives the request timeout.
    let task = app.task().await;
    let mut ws = app.ws(&app.key, task).await;
    assert_eq!(event(&mut ws).await["seq"], 1);
    let quiet = tokio::time::timeout(Duration::from_millis(1500), ws.next()).await;
    assert!(
        quiet.is_err(),
        "the stream stayed open and quiet: {quiet:?}"
    );
    let response = app
        .post(&format!("/v1/tasks/{task}/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(event(&mut ws).await["seq"], 2);
}

fn bytes_of(text: &str) -> Vec<u8> {
    text.as_bytes().to_vec()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn websockets_are_capped_per_key(pool: PgPool) {
    let app = TestApp::serve_with_quotas(
        pool,
        config(),
        false,
        Quotas {
            max_websockets: Some(2),
            ..Quotas::default()
        },
    )
    .await;
    let task = app.task().await;
    let mut first = app.ws(&app.key, task).await;
    let _second = app.ws(&app.key, task).await;
    let mut request = app.ws_request(&format!("/v1/tasks/{task}/events"));
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", app.key).parse().unwrap(),
    );
    let (status, body) = refused(request).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_websockets", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its quota `max_websockets` (2)"),
        "{body}"
    );

    // Another key is not affected, and its own quota (3) beats the default (2); live view
    // sockets count with event sockets.
    let own = QuotaOverrides {
        max_websockets: Some(3),
        ..QuotaOverrides::default()
    };
    let other = app
        .store
        .create_api_key_with_quotas("other", own)
        .await
        .unwrap();
    let other_key = secrecy::ExposeSecret::expose_secret(&other.key).to_owned();
    let other_task = {
        let response = app
            .http
            .post(app.url("/v1/tasks"))
            .bearer_auth(&other_key)
            .json(&json!({"task": "t"}))
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().parse::<TaskId>().unwrap()
    };
    let mut other_sockets = Vec::new();
    for _ in 0..3 {
        other_sockets.push(app.ws(&other_key, other_task).await);
    }
    let mut request = app.ws_request(&format!("/v1/tasks/{other_task}/live"));
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {other_key}").parse().unwrap(),
    );
    let (status, body) = refused(request).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its quota `max_websockets` (3)"),
        "{body}"
    );

    // Closing one frees its place (once the server has seen the close).
    first.close(None).await.unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let mut request = app.ws_request(&format!("/v1/tasks/{task}/events"));
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", app.key).parse().unwrap(),
        );
        if tokio_tungstenite::connect_async(request).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn revoking_a_key_closes_its_websockets_and_refuses_it(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let task = app.task().await;
    let mut ws = app.ws(&app.key, task).await;
    assert_eq!(event(&mut ws).await["seq"], 1);
    assert!(app.store.revoke_api_key(app.key_id).await.unwrap());
    assert_eq!(
        close_frame(&mut ws).await,
        (CloseCode::Policy, "api key revoked".to_owned())
    );
    // The cached lookup was evicted by the same notification.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let status = app.get("/v1/tasks").send().await.unwrap().status();
        if status == 401 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn deleting_a_task_closes_its_websockets(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let task = app.task().await;
    let mut ws = app.ws(&app.key, task).await;
    assert_eq!(event(&mut ws).await["seq"], 1);
    let response = app
        .http
        .delete(app.url(&format!("/v1/tasks/{task}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(
        close_frame(&mut ws).await,
        (CloseCode::Normal, "task deleted".to_owned())
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn oversized_client_messages_close_the_websocket(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            ws_max_message_bytes: 1024,
            ..config()
        },
    )
    .await;
    let task = app.task().await;
    let mut ws = app.ws(&app.key, task).await;
    assert_eq!(event(&mut ws).await["seq"], 1);
    // Small messages are fine (and ignored).
    ws.send(Message::text("x".repeat(512))).await.unwrap();
    ws.send(Message::text("x".repeat(4096))).await.unwrap();
    assert_eq!(
        close_frame(&mut ws).await,
        (CloseCode::Size, "message too big".to_owned())
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn tickets_open_the_websocket_once(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let task = app.task().await;
    let ticket = app.ticket(task).await;
    let value = ticket["ticket"].as_str().unwrap().to_owned();
    assert!(value.starts_with("bdt_"), "{ticket}");
    assert_eq!(
        ticket["url"],
        format!("/v1/tasks/{task}/events?ticket={value}")
    );
    assert!(ticket["expires_at"].is_string());

    // No Authorization header: the ticket alone.
    let (mut ws, _) =
        tokio_tungstenite::connect_async(app.ws_request(ticket["url"].as_str().unwrap()))
            .await
            .unwrap();
    assert_eq!(event(&mut ws).await["seq"], 1);
    // Single use.
    let (status, body) = refused(app.ws_request(ticket["url"].as_str().unwrap())).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("invalid_ticket"))
    );

    // Only for its own task.
    let other = app.task().await;
    let ticket = app.ticket(task).await;
    let (status, _) = refused(app.ws_request(&format!(
        "/v1/tasks/{other}/events?ticket={}",
        ticket["ticket"].as_str().unwrap()
    )))
    .await;
    assert_eq!(status, 401);

    // Expired.
    let expired = app
        .store
        .create_ws_ticket(app.key_id, task, Duration::ZERO)
        .await
        .unwrap();
    let (status, _) = refused(app.ws_request(&format!(
        "/v1/tasks/{task}/events?ticket={}",
        secrecy::ExposeSecret::expose_secret(&expired.ticket)
    )))
    .await;
    assert_eq!(status, 401);

    // Made up, and another key's task.
    let (status, _) = refused(app.ws_request(&format!(
        "/v1/tasks/{task}/events?ticket=bdt_{}",
        uuid::Uuid::new_v4().simple()
    )))
    .await;
    assert_eq!(status, 401);

    // A ticket of a key revoked since it was issued.
    let ticket = app.ticket(task).await;
    app.store.revoke_api_key(app.key_id).await.unwrap();
    let (status, _) = refused(app.ws_request(ticket["url"].as_str().unwrap())).await;
    assert_eq!(status, 401);
}

/// A ticket of `scope` for `task` (`None`: no body at all).
async fn scoped_ticket(app: &TestApp, task: TaskId, scope: Option<&str>) -> Value {
    let mut request = app.post(&format!("/v1/tasks/{task}/events/ticket"));
    if let Some(scope) = scope {
        request = request.json(&json!({ "scope": scope }));
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

/// The person inputs the task's event log holds.
async fn person_inputs(pool: &PgPool, task: TaskId) -> i64 {
    sqlx::query_scalar(
        "select count(*) from task_events where task_id = $1 and kind = 'person_input'",
    )
    .bind(task.0)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_view_ticket_watches_and_only_a_control_ticket_takes_over(pool: PgPool) {
    let app = TestApp::start(pool.clone(), config()).await;
    let task = app.task().await;
    // A worker holds the task's browser and the task is paused: take-over is open.
    app.store
        .claim_task("worker-1", Duration::from_secs(300))
        .await
        .unwrap()
        .unwrap();
    let paused = app
        .post(&format!("/v1/tasks/{task}/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), StatusCode::OK);

    // No body, and `{}`, are view tickets; an unknown scope is refused.
    let ticket = scoped_ticket(&app, task, None).await;
    assert_eq!(ticket["scope"], "view", "{ticket}");
    let value = ticket["ticket"].as_str().unwrap();
    assert_eq!(
        ticket["live_url"],
        format!("/v1/tasks/{task}/live?ticket={value}")
    );
    let empty = app
        .post(&format!("/v1/tasks/{task}/events/ticket"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.json::<Value>().await.unwrap()["scope"], "view");
    let unknown = app
        .post(&format!("/v1/tasks/{task}/events/ticket"))
        .json(&json!({"scope": "admin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // A view ticket opens the event stream…
    let view = scoped_ticket(&app, task, Some("view")).await;
    let (mut events, _) =
        tokio_tungstenite::connect_async(app.ws_request(view["url"].as_str().unwrap()))
            .await
            .unwrap();
    assert_eq!(event(&mut events).await["seq"], 1);
    drop(events);

    // …and the live view, where an input closes the socket and never reaches the task.
    let view = scoped_ticket(&app, task, Some("view")).await;
    let (mut live, _) =
        tokio_tungstenite::connect_async(app.ws_request(view["live_url"].as_str().unwrap()))
            .await
            .unwrap();
    live.send(Message::text(
        json!({"type": "type", "text": "mallory"}).to_string(),
    ))
    .await
    .unwrap();
    let (code, reason) = close_frame(&mut live).await;
    assert_eq!(code, CloseCode::Policy, "{reason}");
    assert_eq!(reason, browserd_api::VIEW_ONLY_CLOSE);
    assert!(reason.contains("control"), "{reason}");
    assert_eq!(
        person_inputs(&pool, task).await,
        0,
        "a view ticket's input was recorded"
    );

    // A control ticket's socket drives the page.
    let control = scoped_ticket(&app, task, Some("control")).await;
    assert_eq!(control["scope"], "control");
    let (mut live, _) =
        tokio_tungstenite::connect_async(app.ws_request(control["live_url"].as_str().unwrap()))
            .await
            .unwrap();
    live.send(Message::text(
        json!({"type": "click", "x": 10, "y": 20}).to_string(),
    ))
    .await
    .unwrap();
    let answer = loop {
        let answer = event(&mut live).await;
        if answer["type"] != "viewport" {
            break answer;
        }
    };
    assert_eq!(answer["type"], "input_accepted", "{answer}");
    assert_eq!(person_inputs(&pool, task).await, 1);

    // So does a socket opened with the key (the subprotocol convention).
    let mut request = app.ws_request(&format!("/v1/tasks/{task}/live"));
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("bearer, {}", app.key).parse().unwrap(),
    );
    let (mut live, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    live.send(Message::text(
        json!({"type": "keys", "keys": "Tab"}).to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(event(&mut live).await["type"], "input_accepted");
    assert_eq!(person_inputs(&pool, task).await, 2);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn the_bearer_subprotocol_authenticates_browsers(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let task = app.task().await;
    let mut request = app.ws_request(&format!("/v1/tasks/{task}/events"));
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("bearer, {}", app.key).parse().unwrap(),
    );
    let (mut ws, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(
        response.headers().get("sec-websocket-protocol").unwrap(),
        "bearer",
        "the server echoes `bearer`, never the key"
    );
    assert_eq!(event(&mut ws).await["seq"], 1);

    let mut request = app.ws_request(&format!("/v1/tasks/{task}/events"));
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("bearer, {}", random_key()).parse().unwrap(),
    );
    let (status, body) = refused(request).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("invalid_api_key"))
    );

    // Without any credential, the message names every way in.
    let (status, body) = refused(app.ws_request(&format!("/v1/tasks/{task}/events"))).await;
    assert_eq!(status, 401);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ticket"),
        "{body}"
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn keys_in_the_url_are_refused(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let task = app.task().await;
    for param in ["key", "api_key", "token", "access_token", "API_KEY"] {
        let (status, body) =
            refused(app.ws_request(&format!("/v1/tasks/{task}/events?{param}={}", app.key))).await;
        assert_eq!(status, 400, "{param}: {body}");
        assert_eq!(body["error"]["code"], "credential_in_url", "{body}");
        // Also on REST routes, and even with a valid header.
        let response = app
            .get(&format!("/v1/tasks/{task}?{param}={}", app.key))
            .send()
            .await
            .unwrap();
        assert_eq!(
            code_of(response).await,
            (400, "credential_in_url".to_owned())
        );
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn screenshots_are_served_only_through_their_own_task(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    let mine = app.task().await;
    let other = app.task().await;
    let artifact = app
        .store
        .insert_artifact(
            other,
            NewArtifact {
                kind: "screenshot",
                name: None,
                content_type: "image/png".into(),
                size_bytes: 3,
                content: ArtifactContent::Inline(vec![1, 2, 3]),
            },
        )
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    app.store
        .insert_step(
            mine,
            NewStep {
                number: 1,
                url: None,
                title: None,
                model_output: None,
                results: json!([]),
                usage: None,
                screenshot: Some(artifact),
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap();
    let response = app
        .get(&format!("/v1/tasks/{mine}/steps/1/screenshot"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        code_of(response).await,
        (404, "screenshot_not_found".to_owned())
    );
    let steps: Value = app
        .get(&format!("/v1/tasks/{mine}/steps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(steps["items"][0]["screenshot_url"].is_null(), "{steps}");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn signed_download_links_pay_the_pre_auth_limit(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            unauthenticated_rate_limit: burst_only(2),
            ..config()
        },
    )
    .await;
    let link = format!(
        "/api/v2/files/output-files/{}/content?expires=9999999999&signature=00",
        uuid::Uuid::new_v4()
    );
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(app.http.get(app.url(&link)).send().await.unwrap().status());
    }
    // Guessing links costs the address its budget like guessing keys.
    assert_eq!(
        statuses,
        [
            StatusCode::FORBIDDEN,
            StatusCode::FORBIDDEN,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_refusal_that_leaves_the_body_unread_closes_the_connection(pool: PgPool) {
    let app = TestApp::start(pool, config()).await;
    // The body is never read: the connection cannot carry another request, and says so.
    let response = app
        .http
        .post(app.url("/v1/tasks"))
        .bearer_auth(random_key())
        .json(&json!({"task": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()["connection"], "close");
    // Without a body the connection stays open for the next request.
    let response = app
        .http
        .get(app.url("/v1/tasks"))
        .bearer_auth(random_key())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get("connection").is_none());
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn metrics_can_require_a_token(pool: PgPool) {
    let app = TestApp::start(
        pool,
        ApiConfig {
            metrics_token: Some(secrecy::SecretString::from("m3trics-token".to_owned())),
            ..config()
        },
    )
    .await;
    let scrape = |token: Option<&'static str>| {
        let mut request = app.http.get(app.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let refused = scrape(None).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(code_of(refused).await.1, "invalid_metrics_token");
    assert_eq!(
        scrape(Some("wrong")).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let scraped = scrape(Some("m3trics-token")).await.unwrap();
    assert_eq!(scraped.status(), StatusCode::OK);
    assert!(scraped.text().await.unwrap().contains("# TYPE"));
    // The other ops routes stay open (probes).
    assert_eq!(
        app.http
            .get(app.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}
