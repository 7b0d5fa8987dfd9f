//! The `/v1` API end to end: a real server on 127.0.0.1:0 over a fresh Postgres database per
//! test (`#[sqlx::test]`, needs DATABASE_URL), driven with reqwest and tokio-tungstenite.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::time::Duration;

use browserd_api::{ApiConfig, RateLimit};
use browserd_store::{ArtifactContent, NewArtifact, NewStep, QuotaOverrides, Quotas};
use browserd_tasks::ModelCatalog;
use browserd_types::{TaskEvent, TaskId, Transition, event_kind};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

// ---------------------------------------------------------------------------------------------
// Harness

mod support;

use support::{TestServer as TestApp, captured_logs};

fn models() -> ModelCatalog {
    ModelCatalog::new(
        ["gpt-4.1-mini".to_owned(), "claude".to_owned()],
        Some("gpt-4.1-mini".to_owned()),
    )
    .unwrap()
}

impl TestApp {
    async fn start(pool: PgPool) -> Self {
        Self::start_with(
            pool,
            ApiConfig {
                models: models(),
                ..ApiConfig::default()
            },
        )
        .await
    }

    async fn start_with(pool: PgPool, config: ApiConfig) -> Self {
        TestApp::serve(pool, config, true).await
    }

    async fn create(&self, body: Value) -> Value {
        let response = self.post("/v1/tasks").json(&body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    async fn ws(
        &self,
        key: &str,
        task: &str,
        after_seq: i64,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let mut request = format!(
            "ws://{}/v1/tasks/{task}/events?after_seq={after_seq}",
            self.addr
        )
        .into_client_request()
        .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        tokio_tungstenite::connect_async(request).await.unwrap().0
    }
}

/// Asserts the `{"error":{"code","message"}}` shape and returns the body.
async fn error(response: reqwest::Response, status: StatusCode, code: &str) -> Value {
    let got = response.status();
    let body: Value = response.json().await.expect("error bodies are JSON");
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body
}

fn task_id(task: &Value) -> TaskId {
    task["id"].as_str().unwrap().parse().unwrap()
}

enum Frame {
    Event(TaskEvent),
    Closed(Option<CloseCode>),
}

async fn next_frame<S>(ws: &mut S) -> Frame
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("websocket frame within 20 s");
        match message {
            Some(Ok(Message::Text(text))) => {
                return Frame::Event(serde_json::from_str(text.as_str()).unwrap());
            }
            Some(Ok(Message::Close(frame))) => return Frame::Closed(frame.map(|f| f.code)),
            None => return Frame::Closed(None),
            Some(Ok(_)) => continue,
            Some(Err(err)) => panic!("websocket error: {err}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Ops and auth

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn ops_endpoints_need_no_key(pool: PgPool) {
    let app = TestApp::start(pool).await;
    for path in ["/healthz", "/readyz"] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.json::<Value>().await.unwrap()["status"], "ok");
    }
    // Generate traffic on a matched route, then read the metrics. Without a metrics token the
    // api port does not serve them (404, saying where they are); the metrics listener
    // (`metrics_router`, what `--metrics-listen` serves) does, without a key.
    app.get("/v1/tasks").send().await.unwrap();
    let public = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(public.status(), StatusCode::NOT_FOUND);
    let body: Value = public.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--metrics-listen"),
        "{body}"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = listener.local_addr().unwrap();
    let router = browserd_api::metrics_router(
        browserd_tasks::TaskCore::new(app.store.clone(), browserd_store::EventHub::default()),
        None,
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let metrics = app
        .http
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("browserd_http_requests_total")
                && l.contains("path=\"/v1/tasks\"")
                && l.contains("status=\"200\"")),
        "{text}"
    );
    assert!(
        text.contains("browserd_http_request_duration_seconds_bucket"),
        "{text}"
    );
    let spec = app.http.get(app.url("/openapi.yaml")).send().await.unwrap();
    assert_eq!(spec.status(), StatusCode::OK);
    assert!(spec.text().await.unwrap().contains("/v1/tasks/{id}/events"));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn v1_requires_a_valid_bearer_key(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let url = app.url("/v1/tasks");
    let response = app.http.get(&url).send().await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    error(response, StatusCode::UNAUTHORIZED, "missing_api_key").await;
    for header in [
        "Basic abc".to_owned(),
        "Bearer ".to_owned(),
        "Bearer bd_not-a-real-key".to_owned(),
        format!("Token {}", app.key),
    ] {
        let response = app
            .http
            .get(&url)
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        error(response, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    }
    // Also on POST with a body and on the WebSocket route.
    let response = app
        .http
        .post(&url)
        .json(&json!({"task": "x"}))
        .send()
        .await
        .unwrap();
    error(response, StatusCode::UNAUTHORIZED, "missing_api_key").await;
    let response = app
        .http
        .get(app.url(&format!("/v1/tasks/{}/events", TaskId::new())))
        .send()
        .await
        .unwrap();
    error(response, StatusCode::UNAUTHORIZED, "missing_api_key").await;
    assert_eq!(
        app.get("/v1/tasks").send().await.unwrap().status(),
        StatusCode::OK
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn unknown_routes_methods_and_ids_get_json_errors(pool: PgPool) {
    let app = TestApp::start(pool).await;
    error(
        app.get("/v2/nothing").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "route_not_found",
    )
    .await;
    let response = app
        .http
        .put(app.url("/v1/tasks"))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    error(
        response,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
    error(
        app.get("/v1/tasks/not-a-uuid").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_task_id",
    )
    .await;
    let missing = TaskId::new();
    error(
        app.get(&format!("/v1/tasks/{missing}"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "task_not_found",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Create

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn create_task_applies_defaults(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "find the price"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let task: Value = response.json().await.unwrap();
    assert_eq!(
        location,
        format!("/v1/tasks/{}", task["id"].as_str().unwrap())
    );
    assert_eq!(task["status"], "queued");
    assert_eq!(task["task"], "find the price");
    assert_eq!(task["max_steps"], 100);
    assert_eq!(task["max_actions_per_step"], 5);
    assert_eq!(task["max_failures"], 5);
    assert_eq!(task["use_vision"], true);
    assert_eq!(task["model"], "gpt-4.1-mini", "the configured default");
    assert_eq!(task["last_event_seq"], 1);
    assert_eq!(task["metadata"], json!({}));
    assert_eq!(task["viewport"], Value::Null, "the worker's default");
    assert_eq!(
        task["settle_timeout_ms"],
        Value::Null,
        "the worker's default"
    );
    assert!(task.get("secrets").is_none());
    uuid::Uuid::parse_str(task["id"].as_str().unwrap()).unwrap();

    let full = app
        .create(json!({
            "task": "t",
            "start_url": "https://example.com/a?b=c",
            "max_steps": 10_000,
            "model": "claude",
            "allowed_domains": ["example.com", "*.Example.org", "https://docs.rs", "https://Example.com/path"],
            "prohibited_domains": ["evil.test"],
            "output_schema": {"type": "object", "properties": {"price": {"type": "number"}}, "required": ["price"]},
            "use_vision": false,
            "max_actions_per_step": 1,
            "max_failures": 0,
            "timeout_s": 600,
            "metadata": {"team": "growth"},
            "viewport": {"width": 1280, "height": 720},
            "settle_timeout_ms": 0,
        }))
        .await;
    assert_eq!(full["settle_timeout_ms"], 0, "0 = do not wait");
    assert_eq!(full["model"], "claude");
    assert_eq!(full["viewport"], json!({"width": 1280, "height": 720}));
    assert_eq!(
        full["allowed_domains"],
        json!([
            "example.com",
            "*.example.org",
            "https://docs.rs",
            "https://example.com/path"
        ])
    );
    assert_eq!(full["output_schema"]["required"], json!(["price"]));
    assert_eq!(full["timeout_s"], 600);
    assert_eq!(full["use_vision"], false);
    let fetched: Value = app
        .get(&location)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fetched, task);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn create_task_rejects_every_invalid_field_with_422(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let metadata: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "task"),
        (json!({"task": ""}), "task"),
        (json!({"task": "   "}), "task"),
        (json!({"task": "x".repeat(20_001)}), "task"),
        (json!({"task": 5}), "task"),
        (json!({"task": "t", "surprise": true}), "surprise"),
        (json!({"task": "t", "max_steps": 0}), "max_steps"),
        (json!({"task": "t", "max_steps": 10_001}), "max_steps"),
        (json!({"task": "t", "max_steps": 1.5}), "max_steps"),
        (json!({"task": "t", "max_steps": "10"}), "max_steps"),
        (
            json!({"task": "t", "start_url": "ftp://example.com"}),
            "start_url",
        ),
        (json!({"task": "t", "start_url": "not a url"}), "start_url"),
        (json!({"task": "t", "model": "gpt-99"}), "model"),
        (
            json!({"task": "t", "allowed_domains": ["exa mple.com"]}),
            "allowed_domains[0]",
        ),
        (
            json!({"task": "t", "prohibited_domains": ["ok.com", "bad/path"]}),
            "prohibited_domains[1]",
        ),
        (
            json!({"task": "t", "allowed_domains": "example.com"}),
            "allowed_domains",
        ),
        // Patterns go through the egress policy's parser (browserd-domains' conformance table).
        (
            json!({"task": "t", "allowed_domains": ["ok.com", "fine.org", "example.*"]}),
            "allowed_domains[2]",
        ),
        (
            json!({"task": "t", "prohibited_domains": ["example.com:8080"]}),
            "prohibited_domains[0]",
        ),
        (
            json!({"task": "t", "start_url": "https://evil.test/", "allowed_domains": ["example.com"]}),
            "start_url",
        ),
        (
            json!({"task": "t", "start_url": "https://a.evil.test/", "prohibited_domains": ["*.evil.test"]}),
            "start_url",
        ),
        (
            json!({"task": "t", "secrets": {"bad name": "v"}}),
            "secrets",
        ),
        (json!({"task": "t", "secrets": {"pw": ""}}), "secrets.pw"),
        (json!({"task": "t", "secrets": {"pw": 5}}), "secrets.pw"),
        (
            json!({"task": "t", "output_schema": {"type": "nonsense"}}),
            "output_schema",
        ),
        (
            json!({"task": "t", "output_schema": {"$ref": "https://example.com/s.json"}}),
            "output_schema",
        ),
        (
            json!({"task": "t", "output_schema": "object"}),
            "output_schema",
        ),
        (json!({"task": "t", "use_vision": "yes"}), "use_vision"),
        (
            json!({"task": "t", "max_actions_per_step": 0}),
            "max_actions_per_step",
        ),
        (
            json!({"task": "t", "max_actions_per_step": 21}),
            "max_actions_per_step",
        ),
        (json!({"task": "t", "max_failures": -1}), "max_failures"),
        (json!({"task": "t", "timeout_s": 0}), "timeout_s"),
        (json!({"task": "t", "timeout_s": 86_401}), "timeout_s"),
        (json!({"task": "t", "metadata": metadata}), "metadata"),
        (json!({"task": "t", "metadata": {"k": 1}}), "metadata.k"),
        (
            json!({"task": "t", "metadata": {"k": "v".repeat(513)}}),
            "metadata.k",
        ),
        (
            json!({"task": "t", "viewport": {"width": 319, "height": 800}}),
            "viewport.width",
        ),
        (
            json!({"task": "t", "viewport": {"width": 1920, "height": 2161}}),
            "viewport.height",
        ),
        (
            json!({"task": "t", "viewport": {"width": 1920, "height": -1}}),
            "viewport.height",
        ),
        (json!({"task": "t", "viewport": "1920x1080"}), "viewport"),
        (
            json!({"task": "t", "viewport": {"width": 1920}}),
            "viewport.height",
        ),
        (
            json!({"task": "t", "settle_timeout_ms": -1}),
            "settle_timeout_ms",
        ),
        (
            json!({"task": "t", "settle_timeout_ms": 30001}),
            "settle_timeout_ms",
        ),
        (
            json!({"task": "t", "settle_timeout_ms": "2s"}),
            "settle_timeout_ms",
        ),
    ];
    for (body, field) in cases {
        let response = app.post("/v1/tasks").json(&body).send().await.unwrap();
        let error = error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        )
        .await;
        assert_eq!(error["error"]["field"], field, "{body:.200}: {error}");
        assert!(
            error["error"]["message"].as_str().unwrap().len() > field.len(),
            "the message states the rule: {error}"
        );
    }
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "t", "max_steps": 10_001}))
        .send()
        .await
        .unwrap();
    let body = error(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    )
    .await;
    assert_eq!(
        body["error"]["message"],
        "max_steps must be between 1 and 10000, got 10001"
    );
    let list: Value = app
        .get("/v1/tasks")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"], json!([]), "nothing was created");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn malformed_and_oversized_bodies_get_json_errors(pool: PgPool) {
    let app = TestApp::start_with(
        pool,
        ApiConfig {
            body_limit_bytes: 4096,
            ..ApiConfig::default()
        },
    )
    .await;
    let post = |body: &'static str, content_type: Option<&str>| {
        let mut request = app.post("/v1/tasks").body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request.send()
    };
    for body in [
        "{",
        "{\"task\": }",
        "",
        "[1, 2",
        "{\"task\":\"x\"} trailing",
    ] {
        let response = post(body, Some("application/json")).await.unwrap();
        error(response, StatusCode::BAD_REQUEST, "malformed_json").await;
    }
    error(
        post("{\"task\":\"x\"}", None).await.unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    error(
        post("{\"task\":\"x\"}", Some("text/plain")).await.unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    // A JSON body as such is fine with parameters in the content type.
    let response = post("{\"task\":\"x\"}", Some("application/json; charset=utf-8"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let big = json!({"task": "x".repeat(5000)});
    let response = app.post("/v1/tasks").json(&big).send().await.unwrap();
    error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    // Streamed (no Content-Length) oversized bodies too.
    let chunks = futures::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(bytes_of(&"y".repeat(1000)))),
    );
    let response = app
        .post("/v1/tasks")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
}

fn bytes_of(text: &str) -> Vec<u8> {
    text.as_bytes().to_vec()
}

// ---------------------------------------------------------------------------------------------
// Per-key quotas

impl TestApp {
    /// A server whose keys have `quotas` by default.
    async fn with_quotas(pool: PgPool, quotas: Quotas) -> Self {
        let config = ApiConfig {
            models: models(),
            ..ApiConfig::default()
        };
        TestApp::serve_with_quotas(pool, config, true, quotas).await
    }

    /// A key of this server with its own `quotas`.
    async fn key_with(&self, quotas: QuotaOverrides) -> String {
        let created = self
            .store
            .create_api_key_with_quotas("own quotas", quotas)
            .await
            .unwrap();
        secrecy::ExposeSecret::expose_secret(&created.key).to_owned()
    }

    /// `POST /v1/tasks` as `key`.
    async fn create_as(&self, key: &str) -> reqwest::Response {
        self.http
            .post(self.url("/v1/tasks"))
            .bearer_auth(key)
            .json(&json!({"task": "t"}))
            .send()
            .await
            .unwrap()
    }
}

/// A 429 `quota_exceeded` whose message has `names`; returns its `Retry-After`.
async fn over_quota(response: reqwest::Response, names: &str) -> u64 {
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .expect("a 429 says when to retry")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = error(response, StatusCode::TOO_MANY_REQUESTS, "quota_exceeded").await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(names), "{message}");
    retry_after
}

/// A step of `task` with `cost_usd`, as a worker writes it.
async fn spend(app: &TestApp, task: TaskId, number: i32, cost_usd: f64) {
    let now = time::OffsetDateTime::now_utc();
    app.store
        .insert_step(
            task,
            NewStep {
                number,
                url: None,
                title: None,
                model_output: None,
                results: json!([]),
                usage: Some(json!({"cost_usd": cost_usd})),
                screenshot: None,
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap();
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn max_queued_is_per_key_on_every_front_end(pool: PgPool) {
    let app = TestApp::with_quotas(
        pool,
        Quotas {
            max_queued: Some(2),
            ..Quotas::default()
        },
    )
    .await;
    for _ in 0..2 {
        assert_eq!(app.create_as(&app.key).await.status(), StatusCode::CREATED);
    }
    let retry_after = over_quota(
        app.create_as(&app.key).await,
        "this key has 2 queued tasks, its quota `max_queued` (2)",
    )
    .await;
    assert_eq!(retry_after, 5);

    // /api/v2: the same refusal in its own error shape.
    let response = app
        .http
        .post(app.url("/api/v2/tasks"))
        .header("X-Browser-Use-API-Key", &app.key)
        .json(&json!({"task": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "5");
    let body: Value = response.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("its quota `max_queued` (2)"),
        "{body}"
    );

    // MCP: a tool error with the same message.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (hub, _) = browserd_store::EventHub::start(&app.store, shutdown.clone())
        .await
        .unwrap();
    let core = browserd_tasks::TaskCore::with_settings(
        app.store.clone(),
        hub,
        browserd_tasks::TaskSettings {
            models: models(),
            ..browserd_tasks::TaskSettings::default()
        },
    );
    let mcp = browserd_mcp::TaskBackend::in_process(core, app.key_id, shutdown.clone());
    let refused = browserd_mcp::Backend::create_task(
        &mcp,
        &browserd_mcp::CallContext::default(),
        serde_json::from_value(json!({"task": "t"})).unwrap(),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code, "quota_exceeded");
    assert!(
        refused
            .message
            .contains("this key has 2 queued tasks, its quota `max_queued` (2)"),
        "{}",
        refused.message
    );
    shutdown.cancel();

    // Another key is not affected.
    let other = app.new_key().await;
    assert_eq!(app.create_as(&other).await.status(), StatusCode::CREATED);
    // A key's own quota beats the default: 3 for one, unlimited (0) for another.
    let three = app
        .key_with(QuotaOverrides {
            max_queued: Some(3),
            ..QuotaOverrides::default()
        })
        .await;
    for _ in 0..3 {
        assert_eq!(app.create_as(&three).await.status(), StatusCode::CREATED);
    }
    over_quota(app.create_as(&three).await, "its quota `max_queued` (3)").await;
    let unlimited = app
        .key_with(QuotaOverrides {
            max_queued: Some(0),
            ..QuotaOverrides::default()
        })
        .await;
    for _ in 0..4 {
        assert_eq!(
            app.create_as(&unlimited).await.status(),
            StatusCode::CREATED
        );
    }
    // A task that starts leaves the queue: the first key may queue one more.
    let claimed = app
        .store
        .claim_task("w", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.record.api_key_id, app.key_id);
    assert_eq!(app.create_as(&app.key).await.status(), StatusCode::CREATED);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn daily_step_and_cost_budgets_refuse_new_tasks_until_midnight_utc(pool: PgPool) {
    let app = TestApp::with_quotas(
        pool,
        Quotas {
            daily_steps: Some(3),
            daily_cost_usd: Some(1.0),
            ..Quotas::default()
        },
    )
    .await;
    let first = app.create(json!({"task": "t"})).await;
    for number in 1..=3 {
        spend(&app, task_id(&first), number, 0.1).await;
    }
    let retry_after = over_quota(
        app.create_as(&app.key).await,
        "this key's tasks took 3 steps today, its quota `daily_steps` (3 steps per UTC day); \
         it renews at 00:00 UTC",
    )
    .await;
    let until_midnight =
        browserd_store::seconds_until_utc_midnight(time::OffsetDateTime::now_utc());
    assert!(
        retry_after.abs_diff(until_midnight) <= 5,
        "{retry_after} vs {until_midnight}"
    );

    // A key without a step budget (its own 0) still has the default cost budget.
    let no_steps = app
        .key_with(QuotaOverrides {
            daily_steps: Some(0),
            ..QuotaOverrides::default()
        })
        .await;
    let response = app.create_as(&no_steps).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let task: Value = response.json().await.unwrap();
    for number in 1..=5 {
        spend(&app, task_id(&task), number, 0.25).await;
    }
    over_quota(
        app.create_as(&no_steps).await,
        "this key's tasks spent $1.2500 today, its quota `daily_cost_usd` ($1 per UTC day)",
    )
    .await;
    // A key with a larger own budget, and any other key, are not affected.
    let rich = app
        .key_with(QuotaOverrides {
            daily_steps: Some(0),
            daily_cost_usd: Some(10.0),
            ..QuotaOverrides::default()
        })
        .await;
    assert_eq!(app.create_as(&rich).await.status(), StatusCode::CREATED);
    let other = app.new_key().await;
    assert_eq!(app.create_as(&other).await.status(), StatusCode::CREATED);
}

// ---------------------------------------------------------------------------------------------
// Reads, tenancy, control, delete

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn tenants_cannot_see_each_others_tasks(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let task = app.create(json!({"task": "alice's"})).await;
    let id = task["id"].as_str().unwrap();
    let bob = app.new_key().await;
    let as_bob = |method: reqwest::Method, path: String| {
        app.http
            .request(method, app.url(&path))
            .bearer_auth(&bob)
            .send()
    };
    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/tasks/{id}")),
        (reqwest::Method::POST, format!("/v1/tasks/{id}/stop")),
        (reqwest::Method::POST, format!("/v1/tasks/{id}/pause")),
        (reqwest::Method::POST, format!("/v1/tasks/{id}/resume")),
        (reqwest::Method::GET, format!("/v1/tasks/{id}/steps")),
        (
            reqwest::Method::GET,
            format!("/v1/tasks/{id}/steps/1/screenshot"),
        ),
        (reqwest::Method::GET, format!("/v1/tasks/{id}/events")),
        (reqwest::Method::DELETE, format!("/v1/tasks/{id}")),
    ] {
        let response = as_bob(method.clone(), path.clone()).await.unwrap();
        error(response, StatusCode::NOT_FOUND, "task_not_found").await;
    }
    let list: Value = as_bob(reqwest::Method::GET, "/v1/tasks".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"], json!([]));
    // Alice's task is untouched.
    let fetched: Value = app
        .get(&format!("/v1/tasks/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fetched["status"], "queued");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn listing_paginates_across_inserts_and_filters(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let mut created = Vec::new();
    for i in 0..12 {
        created.push(app.create(json!({"task": format!("task {i}")})).await["id"].clone());
    }
    let app_ref = &app;
    let page = |query: String| async move {
        let response = app_ref
            .get(&format!("/v1/tasks?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()
    };
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &cursor {
            Some(cursor) => format!("limit=5&cursor={cursor}"),
            None => "limit=5".to_owned(),
        };
        let body = page(query).await;
        pages += 1;
        seen.extend(
            body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].clone()),
        );
        // Tasks created while paging must neither appear later nor shift pages.
        app.create(json!({"task": format!("late {pages}")})).await;
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    created.reverse();
    assert_eq!(seen, created, "every task exactly once, newest first");

    let first = page("limit=1".into()).await;
    assert_eq!(first["items"][0]["task"], "late 3");
    let default = page(String::new()).await;
    assert_eq!(default["items"].as_array().unwrap().len(), 15);
    assert!(default["next_cursor"].is_null());

    // Status filter.
    let victim = created[3].as_str().unwrap();
    app.post(&format!("/v1/tasks/{victim}/stop"))
        .send()
        .await
        .unwrap();
    let stopped = page("status=stopped".into()).await;
    assert_eq!(stopped["items"].as_array().unwrap().len(), 1);
    assert_eq!(stopped["items"][0]["id"], victim);
    assert_eq!(
        page("status=queued&limit=100".into()).await["items"]
            .as_array()
            .unwrap()
            .len(),
        14
    );

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("cursor=garbage", "cursor"),
        ("status=started", "status"),
        ("sort=asc", "sort"),
    ] {
        let response = app.get(&format!("/v1/tasks?{query}")).send().await.unwrap();
        let body = error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        )
        .await;
        assert_eq!(body["error"]["field"], field, "{query}");
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn control_endpoints_follow_the_status_machine(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let id = app.create(json!({"task": "t"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let act = |action: &'static str| app.post(&format!("/v1/tasks/{id}/{action}")).send();

    let conflict = error(
        act("resume").await.unwrap(),
        StatusCode::CONFLICT,
        "illegal_transition",
    )
    .await;
    assert_eq!(conflict["error"]["current_status"], "queued");
    assert!(
        conflict["error"]["message"]
            .as_str()
            .unwrap()
            .contains("queued")
    );

    let paused: Value = act("pause").await.unwrap().json().await.unwrap();
    assert_eq!(paused["status"], "paused");
    let conflict = error(
        act("pause").await.unwrap(),
        StatusCode::CONFLICT,
        "illegal_transition",
    )
    .await;
    assert_eq!(conflict["error"]["current_status"], "paused");
    let resumed: Value = act("resume").await.unwrap().json().await.unwrap();
    assert_eq!(
        resumed["status"], "queued",
        "never started, so back to the queue"
    );

    // A worker claims it: pause/resume now go running ⇄ paused.
    let claimed = app
        .store
        .claim_task("worker-1", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.record.id, task_id(&resumed));
    assert_eq!(
        act("pause").await.unwrap().json::<Value>().await.unwrap()["status"],
        "paused"
    );
    assert_eq!(
        act("resume").await.unwrap().json::<Value>().await.unwrap()["status"],
        "running"
    );

    let stopped: Value = act("stop").await.unwrap().json().await.unwrap();
    assert_eq!(stopped["status"], "stopped");
    assert!(stopped["finished_at"].is_string());
    for action in ["stop", "pause", "resume"] {
        let body = error(
            act(action).await.unwrap(),
            StatusCode::CONFLICT,
            "illegal_transition",
        )
        .await;
        assert_eq!(body["error"]["current_status"], "stopped", "{action}");
    }
    let events = app
        .store
        .events_after(task_id(&stopped), 0, 100)
        .await
        .unwrap();
    let statuses: Vec<&str> = events
        .iter()
        .map(|e| e.payload["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "queued", "paused", "queued", "running", "paused", "running", "stopped"
        ]
    );
}

/// Steps `0..count` of task `id`, written in one statement, with an AgentHistory record on
/// every step whose number is not a multiple of 10 (steps without one are not history items).
async fn insert_steps(pool: &PgPool, id: TaskId, from: i32, count: i32) {
    sqlx::query(
        "insert into task_steps (task_id, number, url, model_output, results, started_at,
             finished_at, record)
         select $1, n, 'http://127.0.0.1/page' || n, jsonb_build_object('memory', 'm' || n),
             '[]'::jsonb, now(), now(),
             case when n % 10 = 0 then null else jsonb_build_object('step', n) end
         from generate_series($2::int, $2::int + $3::int - 1) as n",
    )
    .bind(id.0)
    .bind(from)
    .bind(count)
    .execute(pool)
    .await
    .unwrap();
}

/// Follows `next_after_step` from the first page of `path` (with `query`), collecting
/// `field` of every page; answers the items and the number of pages.
async fn read_pages(app: &TestApp, path: &str, query: &str, field: &str) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut after: Option<i64> = None;
    loop {
        let url = match after {
            Some(after) => format!("{path}?{query}&after_step={after}"),
            None => format!("{path}?{query}"),
        };
        let response = app.get(&url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let page: Value = response.json().await.unwrap();
        pages += 1;
        let got = page[field].as_array().unwrap();
        assert!(
            !got.is_empty() || pages == 1,
            "no empty page after the first"
        );
        items.extend(got.iter().cloned());
        match page["next_after_step"].as_i64() {
            Some(next) => after = Some(next),
            None => return (items, pages),
        }
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn steps_and_history_are_read_page_by_page(pool: PgPool) {
    let app = TestApp::start(pool.clone()).await;
    let id = task_id(&app.create(json!({"task": "long"})).await);
    insert_steps(&pool, id, 0, 250).await;
    let steps_path = format!("/v1/tasks/{id}/steps");
    let history_path = format!("/v1/tasks/{id}/history");

    // The default page is 100 steps: 250 steps are three pages, every step once, in order.
    let (steps, pages) = read_pages(&app, &steps_path, "", "items").await;
    assert_eq!(pages, 3);
    let numbers: Vec<i64> = steps
        .iter()
        .map(|s| s["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, (0..250).collect::<Vec<i64>>());
    assert_eq!(steps[7]["model_output"]["memory"], "m7");

    // Small pages, and steps written while a reader pages: each step exactly once, in order.
    let mut seen = Vec::new();
    let mut after: Option<i64> = None;
    let mut written = 250;
    loop {
        let url = match after {
            Some(after) => format!("{steps_path}?limit=7&after_step={after}"),
            None => format!("{steps_path}?limit=7"),
        };
        let page: Value = app.get(&url).send().await.unwrap().json().await.unwrap();
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 7);
        seen.extend(items.iter().map(|s| s["number"].as_i64().unwrap()));
        if written < 260 {
            insert_steps(&pool, id, written, 1).await;
            written += 1;
        }
        match page["next_after_step"].as_i64() {
            Some(next) => {
                assert_eq!(
                    Some(&next),
                    seen.last(),
                    "the cursor is the page's last step"
                );
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(seen, (0..260).collect::<Vec<i64>>());
    // A page that ends exactly at the last step says so (no empty page to fetch).
    let page: Value = app
        .get(&format!("{steps_path}?limit=10&after_step=249"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 10);
    assert!(page["next_after_step"].is_null(), "{page}");

    // The history pages the same way over the steps that have a record (not 0, 10, 20, …).
    let (history, pages) = read_pages(&app, &history_path, "limit=100", "history").await;
    let expected: Vec<Value> = (0..260)
        .filter(|n| n % 10 != 0)
        .map(|n| json!({"step": n}))
        .collect();
    assert_eq!(history, expected);
    assert_eq!(pages, 3);
    let page: Value = app
        .get(&format!("{history_path}?limit=500"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["history"].as_array().unwrap().len(), 234);
    assert!(page["next_after_step"].is_null());
    assert_eq!(page["usage"]["invocations"], 0);

    // Bounds: a 422 naming the bound.
    for path in [&steps_path, &history_path] {
        for (query, field, says) in [
            ("limit=0", "limit", "limit must be between 1 and 500, got 0"),
            (
                "limit=501",
                "limit",
                "limit must be between 1 and 500, got 501",
            ),
            ("limit=ten", "limit", "limit must be an integer"),
            (
                "after_step=-1",
                "after_step",
                "after_step must be between 0 and 2147483647",
            ),
            (
                "after_step=x",
                "after_step",
                "after_step must be an integer",
            ),
            ("page=2", "page", "unknown query parameter `page`"),
        ] {
            let response = app.get(&format!("{path}?{query}")).send().await.unwrap();
            let body = error(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_failed",
            )
            .await;
            assert_eq!(body["error"]["field"], field, "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{query}: {message}");
        }
    }

    // /api/v2's history (the logs' download) is the whole document, streamed page by page
    // from the database: 1 300 steps are three of its pages.
    insert_steps(&pool, id, 260, 1040).await;
    let response = app
        .http
        .get(app.url(&format!("/api/v2/tasks/{id}/history")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let whole: Value = response.json().await.unwrap();
    let expected: Vec<Value> = (0..1300)
        .filter(|n| n % 10 != 0)
        .map(|n| json!({"step": n}))
        .collect();
    assert_eq!(whole["history"], Value::Array(expected));
    assert_eq!(whole["usage"], json!({}));
    // v2's task view lists every model step (the SDK's stream indexes them).
    let response = app
        .http
        .get(app.url(&format!("/api/v2/tasks/{id}")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    let view: Value = response.json().await.unwrap();
    let numbers: Vec<i64> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, (1..1300).collect::<Vec<i64>>());
    // An empty history streams as a document too.
    let empty = task_id(&app.create(json!({"task": "new"})).await);
    let whole: Value = app
        .http
        .get(app.url(&format!("/api/v2/tasks/{empty}/history")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(whole, json!({"history": [], "usage": {}}));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn steps_and_screenshots_are_served(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let task = app.create(json!({"task": "t"})).await;
    let id = task_id(&task);
    let steps: Value = app
        .get(&format!("/v1/tasks/{id}/steps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(steps["items"], json!([]));

    let png: Vec<u8> = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 7, 7, 7];
    let inline = app
        .store
        .insert_artifact(
            id,
            NewArtifact {
                kind: "screenshot",
                name: None,
                content_type: "image/png".into(),
                size_bytes: png.len() as i64,
                content: ArtifactContent::Inline(png.clone()),
            },
        )
        .await
        .unwrap();
    let jpeg_path = std::env::temp_dir().join(format!("browserd-test-{}.jpg", TaskId::new()));
    std::fs::write(&jpeg_path, b"\xff\xd8\xff jpeg bytes").unwrap();
    let on_disk = app
        .store
        .insert_artifact(
            id,
            NewArtifact {
                kind: "screenshot",
                name: Some("step2.jpg".into()),
                content_type: "image/jpeg".into(),
                size_bytes: 14,
                content: ArtifactContent::Path(jpeg_path.to_string_lossy().into_owned()),
            },
        )
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    for (number, screenshot) in [(1, Some(inline)), (2, Some(on_disk)), (3, None)] {
        app.store
            .insert_step(id, NewStep {
                number,
                url: Some(format!("http://127.0.0.1/page{number}")),
                title: Some(format!("Page {number}")),
                model_output: Some(json!({"memory": format!("m{number}"), "action": [{"click": {"index": number}}]})),
                results: json!([{"extracted_content": "ok"}]),
                usage: Some(json!({"input_tokens": 10})),
                screenshot,
                started_at: now,
                finished_at: now,
            })
            .await
            .unwrap();
    }
    let steps: Value = app
        .get(&format!("/v1/tasks/{id}/steps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = steps["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["number"], 1);
    assert_eq!(items[0]["model_output"]["memory"], "m1");
    assert_eq!(
        items[0]["screenshot_url"],
        format!("/v1/tasks/{id}/steps/1/screenshot")
    );
    assert!(items[2]["screenshot_url"].is_null());

    let shot = app
        .get(items[0]["screenshot_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(shot.status(), StatusCode::OK);
    assert_eq!(shot.headers()["content-type"], "image/png");
    assert_eq!(shot.bytes().await.unwrap().to_vec(), png);
    let shot = app
        .get(&format!("/v1/tasks/{id}/steps/2/screenshot"))
        .send()
        .await
        .unwrap();
    assert_eq!(shot.headers()["content-type"], "image/jpeg");
    assert_eq!(
        shot.bytes().await.unwrap().as_ref(),
        b"\xff\xd8\xff jpeg bytes"
    );

    error(
        app.get(&format!("/v1/tasks/{id}/steps/3/screenshot"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "screenshot_not_found",
    )
    .await;
    error(
        app.get(&format!("/v1/tasks/{id}/steps/9/screenshot"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "screenshot_not_found",
    )
    .await;
    error(
        app.get(&format!("/v1/tasks/{id}/steps/0/screenshot"))
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_step_number",
    )
    .await;
    error(
        app.get(&format!("/v1/tasks/{id}/steps/x/screenshot"))
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_step_number",
    )
    .await;

    // Deleting the task removes its artifacts, including files on disk.
    let response = app
        .http
        .delete(app.url(&format!("/v1/tasks/{id}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(!jpeg_path.exists(), "artifact file removed");
    let artifacts: i64 = sqlx::query_scalar("select count(*) from artifacts")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(artifacts, 0);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn delete_removes_the_task_but_not_while_running(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let delete = |id: String| {
        app.http
            .delete(app.url(&format!("/v1/tasks/{id}")))
            .bearer_auth(&app.key)
            .send()
    };
    let queued = app.create(json!({"task": "q"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        delete(queued.clone()).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    error(
        app.get(&format!("/v1/tasks/{queued}"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "task_not_found",
    )
    .await;
    error(
        delete(queued).await.unwrap(),
        StatusCode::NOT_FOUND,
        "task_not_found",
    )
    .await;

    let running = app.create(json!({"task": "r"})).await;
    app.store
        .transition_task(
            None,
            task_id(&running),
            Transition::Start,
            Default::default(),
        )
        .await
        .unwrap();
    let id = running["id"].as_str().unwrap().to_owned();
    let body = error(
        delete(id.clone()).await.unwrap(),
        StatusCode::CONFLICT,
        "task_active",
    )
    .await;
    assert_eq!(body["error"]["current_status"], "running");
    app.post(&format!("/v1/tasks/{id}/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(delete(id).await.unwrap().status(), StatusCode::NO_CONTENT);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn rate_limit_is_per_key_with_retry_after(pool: PgPool) {
    let app = TestApp::start_with(
        pool,
        ApiConfig {
            // No refill within the test: what gets through does not depend on its speed.
            rate_limit: Some(RateLimit {
                replenish_every: Duration::from_secs(3600),
                burst: NonZeroU32::new(3).unwrap(),
            }),
            ..ApiConfig::default()
        },
    )
    .await;
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..6 {
        let response = app.get("/v1/tasks").send().await.unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS && limited.is_none() {
            limited = Some(response);
        }
    }
    assert_eq!(&statuses[..3], &[StatusCode::OK; 3], "{statuses:?}");
    assert_eq!(
        &statuses[3..],
        &[StatusCode::TOO_MANY_REQUESTS; 3],
        "{statuses:?}"
    );
    let limited = limited.expect("the burst is exhausted");
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Retry-After: the seconds until the next token, rounded up.
    assert!((3500..=3600).contains(&retry_after), "{retry_after}");
    error(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Another key has its own budget; unauthenticated ops routes are not limited.
    let other = app.new_key().await;
    let response = app
        .http
        .get(app.url("/v1/tasks"))
        .bearer_auth(other)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.http
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn secret_values_never_leave_the_database(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let secret = format!("hunter2-{}", TaskId::new());
    let response = app
        .post("/v1/tasks")
        .json(&json!({
            "task": "log in with <secret>password</secret>",
            "secrets": {"https://*.bank.example": {"password": secret}},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let mut seen = response.text().await.unwrap();
    let id: TaskId = serde_json::from_str::<Value>(&seen).unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // The value is stored sealed (the worker needs it, nobody else may read it) ...
    let stored: Option<Vec<u8>> =
        sqlx::query_scalar("select secrets_sealed from tasks where id = $1")
            .bind(id.0)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    let stored = stored.expect("sealed secrets are stored");
    assert!(!stored.windows(secret.len()).any(|w| w == secret.as_bytes()));
    // ... but appears in no response, event or log line.
    for path in [
        format!("/v1/tasks/{id}"),
        "/v1/tasks".to_owned(),
        format!("/v1/tasks/{id}/steps"),
    ] {
        seen.push_str(&app.get(&path).send().await.unwrap().text().await.unwrap());
    }
    seen.push_str(
        &app.post(&format!("/v1/tasks/{id}/stop"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let mut ws = app.ws(&app.key, &id.to_string(), 0).await;
    while let Frame::Event(event) = next_frame(&mut ws).await {
        seen.push_str(&serde_json::to_string(&event).unwrap());
    }
    // An invalid request carrying a secret does not echo it either.
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "t", "secrets": {"pw": secret, "bad name": secret}}))
        .send()
        .await
        .unwrap();
    seen.push_str(&response.text().await.unwrap());
    assert!(
        seen.contains("\"stopped\""),
        "the stop and its event were checked too"
    );
    assert!(
        !seen.contains(&secret),
        "secret leaked into API output: {seen}"
    );
    let logs = captured_logs();
    assert!(
        logs.contains("create task"),
        "request logging is on, so the check is meaningful"
    );
    assert!(!logs.contains(&secret), "secret leaked into logs");
    // Terminal status wiped it.
    let stored: Option<Vec<u8>> =
        sqlx::query_scalar("select secrets_sealed from tasks where id = $1")
            .bind(id.0)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert!(stored.is_none());
}

/// The secrets a worker opens for a task, as `(pattern, name, value)`.
async fn claimed_secrets(app: &TestApp) -> Vec<(Option<String>, String, String)> {
    let claimed = app
        .store
        .claim_task("w", Duration::from_secs(60))
        .await
        .unwrap()
        .expect("a queued task");
    assert_eq!(claimed.secrets_error, None);
    claimed
        .secrets
        .entries()
        .map(|(pattern, name, value)| {
            (
                pattern.map(str::to_owned),
                name.to_owned(),
                secrecy::ExposeSecret::expose_secret(value).to_owned(),
            )
        })
        .collect()
}

/// Secrets are bound to domains: given so (browser-use's `sensitive_data` shape), or flat with
/// `allowed_domains` (then bound to those). Flat ones without allowed domains are refused with
/// a 422 naming both fixes and never the value, unless the task opts in explicitly (logged by
/// name). Invalid patterns are refused with the egress policy's reason.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn secrets_are_bound_to_domains_or_refused(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let value = format!("pw-{}", TaskId::new());
    let refuse = |body: Value| {
        let app = &app;
        async move {
            let response = app.post("/v1/tasks").json(&body).send().await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{body}"
            );
            response.json::<Value>().await.unwrap()["error"].clone()
        }
    };
    // Flat, no allowed_domains: refused, saying how to bind it.
    let err = refuse(json!({"task": "log in", "secrets": {"pw": value}})).await;
    assert_eq!(err["field"], "secrets", "{err}");
    let message = err["message"].as_str().unwrap();
    for needle in [
        "`pw`",
        "bound to no domain",
        r#"{"https://*.bank.example": {"pw": "…"}}"#,
        "set allowed_domains",
        "allow_secrets_on_any_domain: true",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    assert!(!err.to_string().contains(&value));
    // An empty allow list is no allow list; a bad pattern is refused with its reason.
    refuse(json!({"task": "t", "secrets": {"pw": value}, "allowed_domains": []})).await;
    let err = refuse(json!({"task": "t", "secrets": {"bank.*": {"pw": value}}})).await;
    assert!(
        err["message"].as_str().unwrap().contains("domain pattern"),
        "{err}"
    );
    assert!(!err.to_string().contains(&value));
    refuse(json!({"task": "t", "secrets": {"bank.example": {}}})).await;
    refuse(json!({"task": "t", "secrets": {"bank.example": {"bad name": "v"}}})).await;

    // Bound: stored as given.
    app.create(json!({
        "task": "t",
        "secrets": {"https://*.bank.example": {"pw": value}},
    }))
    .await;
    assert_eq!(
        claimed_secrets(&app).await,
        [(
            Some("https://*.bank.example".to_owned()),
            "pw".to_owned(),
            value.clone()
        )]
    );
    // Flat with allowed_domains: bound to each of them (a bound value of the same name wins).
    app.create(json!({
        "task": "t",
        "allowed_domains": ["bank.example", "*.pay.example"],
        "secrets": {"pw": value, "bank.example": {"pw": "bank-own"}},
    }))
    .await;
    assert_eq!(
        claimed_secrets(&app).await,
        [
            (
                Some("*.pay.example".to_owned()),
                "pw".to_owned(),
                value.clone()
            ),
            (
                Some("bank.example".to_owned()),
                "pw".to_owned(),
                "bank-own".to_owned()
            ),
        ]
    );
    // The explicit opt-in: accepted unbound, and logged by name without the value.
    app.create(json!({
        "task": "t",
        "secrets": {"any_pw": value},
        "allow_secrets_on_any_domain": true,
    }))
    .await;
    assert_eq!(
        claimed_secrets(&app).await,
        [(None, "any_pw".to_owned(), value.clone())]
    );
    let logs = captured_logs();
    assert!(
        logs.contains("allow_secrets_on_any_domain") && logs.contains("any_pw"),
        "the opt-in is logged"
    );
    assert!(!logs.contains(&value), "the value is never logged");
}

// ---------------------------------------------------------------------------------------------
// WebSocket

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn websocket_replays_streams_live_and_closes_after_the_final_event(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let task = app.create(json!({"task": "t"})).await;
    let id = task_id(&task);
    app.store
        .append_event(id, event_kind::LOG, json!({"n": 1}))
        .await
        .unwrap();

    let mut ws = app.ws(&app.key, &id.to_string(), 0).await;
    let mut seqs = Vec::new();
    for _ in 0..2 {
        let Frame::Event(event) = next_frame(&mut ws).await else {
            panic!("closed early")
        };
        assert_eq!(event.task_id, id);
        seqs.push(event.seq);
    }
    assert_eq!(seqs, [1, 2], "replay");
    // Live: written after the client connected.
    let written = app
        .store
        .append_event(id, event_kind::LOG, json!({"n": 2}))
        .await
        .unwrap();
    let Frame::Event(live) = next_frame(&mut ws).await else {
        panic!("closed early")
    };
    assert_eq!(live, written, "same event on the wire as in the table");
    let raw: Value = serde_json::to_value(&live).unwrap();
    let keys: BTreeSet<&str> = raw
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["task_id", "seq", "kind", "payload", "created_at"])
    );

    app.post(&format!("/v1/tasks/{id}/stop"))
        .send()
        .await
        .unwrap();
    let Frame::Event(last) = next_frame(&mut ws).await else {
        panic!("closed early")
    };
    assert_eq!((last.seq, last.kind.as_str()), (4, "status"));
    assert_eq!(last.payload["status"], "stopped");
    assert!(matches!(
        next_frame(&mut ws).await,
        Frame::Closed(Some(CloseCode::Normal))
    ));

    // A finished task replays to its final event and closes; after it, closes at once.
    let mut ws = app.ws(&app.key, &id.to_string(), 2).await;
    let mut replay = Vec::new();
    while let Frame::Event(event) = next_frame(&mut ws).await {
        replay.push(event.seq);
    }
    assert_eq!(replay, [3, 4]);
    let mut ws = app.ws(&app.key, &id.to_string(), 4).await;
    assert!(matches!(
        next_frame(&mut ws).await,
        Frame::Closed(Some(CloseCode::Normal))
    ));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn websocket_reconnects_with_after_seq_without_gaps_or_duplicates(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let id = task_id(&app.create(json!({"task": "t"})).await);
    let writer_store = app.store.clone();
    let writer = tokio::spawn(async move {
        for i in 0..150 {
            writer_store
                .append_event(id, event_kind::LOG, json!({"i": i}))
                .await
                .unwrap();
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        writer_store
            .transition_task(None, id, Transition::Stop, Default::default())
            .await
            .unwrap();
    });

    let mut received: Vec<i64> = Vec::new();
    let mut connections = 0;
    let chunk_sizes = [5usize, 17, 1, 30, 3];
    'outer: loop {
        let after = received.last().copied().unwrap_or(0);
        let mut ws = app.ws(&app.key, &id.to_string(), after).await;
        let chunk = chunk_sizes[connections % chunk_sizes.len()];
        connections += 1;
        for _ in 0..chunk {
            match next_frame(&mut ws).await {
                Frame::Event(event) => {
                    let final_event = event.is_final();
                    received.push(event.seq);
                    if final_event {
                        assert!(matches!(
                            next_frame(&mut ws).await,
                            Frame::Closed(Some(CloseCode::Normal))
                        ));
                        break 'outer;
                    }
                }
                Frame::Closed(code) => panic!("closed before the final event: {code:?}"),
            }
        }
        // Hang up abruptly every other time, politely otherwise.
        if connections % 2 == 0 {
            ws.close(None).await.ok();
        }
        drop(ws);
    }
    writer.await.unwrap();
    assert!(connections > 5, "the test reconnected ({connections})");
    assert_eq!(received, (1..=152).collect::<Vec<_>>());
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn websocket_catches_up_after_the_listener_reconnects(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let id = task_id(&app.create(json!({"task": "t"})).await);
    let mut ws = app.ws(&app.key, &id.to_string(), 0).await;
    assert!(matches!(next_frame(&mut ws).await, Frame::Event(e) if e.seq == 1));
    // Kill the LISTEN connection behind the hub's back, then write while it reconnects.
    let killed: Vec<bool> = sqlx::query_scalar(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and query ilike 'listen%'",
    )
    .fetch_all(app.store.pool())
    .await
    .unwrap();
    assert_eq!(killed, [true], "exactly one listener connection");
    for i in 0..5 {
        app.store
            .append_event(id, event_kind::LOG, json!({"i": i}))
            .await
            .unwrap();
    }
    let mut seqs = Vec::new();
    for _ in 0..5 {
        let Frame::Event(event) = next_frame(&mut ws).await else {
            panic!("closed")
        };
        seqs.push(event.seq);
    }
    assert_eq!(seqs, [2, 3, 4, 5, 6]);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn websocket_route_rejects_bad_requests(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let id = app.create(json!({"task": "t"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Plain GET without upgrade headers.
    let response = app
        .get(&format!("/v1/tasks/{id}/events"))
        .send()
        .await
        .unwrap();
    error(
        response,
        StatusCode::BAD_REQUEST,
        "websocket_upgrade_required",
    )
    .await;
    for query in ["after_seq=-1", "after_seq=x", "from=3"] {
        let response = app
            .get(&format!("/v1/tasks/{id}/events?{query}"))
            .send()
            .await
            .unwrap();
        error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        )
        .await;
    }
    // Deleting a task ends its streams.
    let mut ws = app.ws(&app.key, &id, 1).await;
    let response = app
        .http
        .delete(app.url(&format!("/v1/tasks/{id}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(matches!(
        next_frame(&mut ws).await,
        Frame::Closed(Some(CloseCode::Normal))
    ));
}

// ---------------------------------------------------------------------------------------------
// OpenAPI

/// The committed document `file` (at the repository's root) is `generated`; with
/// `UPDATE_OPENAPI=1` it is rewritten instead. False when it was rewritten.
fn committed_spec_matches(file: &str, generated: &str) -> bool {
    let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(&path, generated).unwrap();
        return false;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{file} is stale; regenerate it with `UPDATE_OPENAPI=1 cargo test -p browserd-api --test api openapi`"
    );
    true
}

#[test]
fn openapi_yaml_is_up_to_date() {
    let generated = browserd_api::openapi_yaml();
    if !committed_spec_matches("openapi.yaml", &generated) {
        return;
    }
    for route in [
        "/v1/tasks:",
        "/v1/tasks/{id}:",
        "/v1/tasks/{id}/stop:",
        "/v1/tasks/{id}/pause:",
        "/v1/tasks/{id}/resume:",
        "/v1/tasks/{id}/steps:",
        "/v1/tasks/{id}/steps/{n}/screenshot:",
        "/v1/tasks/{id}/events:",
        "/healthz:",
        "/readyz:",
        "/metrics:",
    ] {
        assert!(generated.contains(route), "{route} missing from the spec");
    }
}

#[test]
fn openapi_v2_yaml_is_up_to_date() {
    committed_spec_matches("openapi-v2.yaml", &browserd_api::openapi_v2_yaml());
}

/// The route table is the router's: every route of it is served (not the fallbacks' 404 /
/// 501, nor 405), and the documents' operations are all in it.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn every_route_of_the_table_is_served(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let routes = browserd_api::routes();
    for expected in [
        ("GET", "/v1/tasks/{id}/steps"),
        ("GET", "/api/v2/tasks/{task_id}"),
        ("GET", "/api/v2/files/output-files/{file_id}/content"),
        ("ANY", "/mcp"),
        ("GET", "/"),
        ("GET", "/healthz"),
    ] {
        assert!(
            routes
                .iter()
                .any(|r| (r.method.as_str(), r.path.as_str()) == expected),
            "{expected:?} is not in the route table"
        );
    }
    for route in &routes {
        // Any value for each path parameter: the route matches whatever it is.
        let mut path = String::new();
        for segment in route.path.split('/').skip(1) {
            path.push('/');
            path.push_str(if segment.starts_with('{') {
                "1"
            } else {
                segment
            });
        }
        let method = if route.method == "ANY" {
            reqwest::Method::GET
        } else {
            route.method.parse().unwrap()
        };
        let response = app
            .http
            .request(method, app.url(&path))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED
                && status != StatusCode::NOT_IMPLEMENTED
                && !body.contains("route_not_found"),
            "{} {} is not served: {status} {body}",
            route.method,
            route.path
        );
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn tasks_name_an_operator_proxy_or_get_422(pool: PgPool) {
    let app = TestApp::start_with(
        pool,
        ApiConfig {
            models: models(),
            proxies: vec!["corp".to_owned(), "residential".to_owned()],
            ..ApiConfig::default()
        },
    )
    .await;
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "x", "proxy": "corp"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["proxy"], "corp");
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "x", "proxy": "http://user:pw@evil:3128"}))
        .send()
        .await
        .unwrap();
    let body = error(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    )
    .await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown proxy"), "{body}");
    assert!(message.contains("corp, residential"), "{body}");
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "x"}))
        .send()
        .await
        .unwrap();
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["proxy"], Value::Null);
}

/// `n` definitions, each referencing the next `fan_out` times (2^n nodes inlined for 2).
fn ref_chain(n: usize, fan_out: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let properties: serde_json::Map<String, Value> = (0..fan_out)
            .map(|j| {
                let target = if i + 1 < n {
                    json!({"$ref": format!("#/$defs/d{}", i + 1)})
                } else {
                    json!({"type": "string"})
                };
                (format!("p{j}"), target)
            })
            .collect();
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": properties}),
        );
    }
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn hostile_output_schemas_are_refused_at_the_edge_naming_the_limit(pool: PgPool) {
    let app = TestApp::start(pool).await;
    let mut deep = json!({"type": "string"});
    for _ in 0..40 {
        deep = json!({"type": "object", "properties": {"x": deep}});
    }
    let huge_enum: Vec<Value> = (0..5_000).map(|i| json!(format!("v{i}"))).collect();
    let many_refs: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/s"})))
        .collect();
    let corpus = [
        (
            "ref fan-out",
            ref_chain(30, 2),
            "expands to more than 20000 nodes",
        ),
        ("deep nesting", deep, "nests deeper than 64"),
        (
            "huge enum",
            json!({"enum": huge_enum}),
            "at most 1000 are accepted",
        ),
        (
            "many refs",
            json!({"properties": many_refs, "$defs": {"s": {"type": "string"}}}),
            "at most 256 are accepted",
        ),
        (
            "huge",
            json!({"type": "object", "description": "x".repeat(70_000)}),
            "at most 65536 are accepted",
        ),
    ];
    for (what, schema, limit) in corpus {
        let response = app
            .post("/v1/tasks")
            .json(&json!({"task": "t", "output_schema": schema}))
            .send()
            .await
            .unwrap();
        let body = error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        )
        .await;
        assert_eq!(body["error"]["field"], "output_schema", "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(limit), "{what}: {message}");
    }
    // The same bound on /api/v2's stringified schema.
    let response = app
        .http
        .post(app.url("/api/v2/tasks"))
        .header("X-Browser-Use-API-Key", &app.key)
        .json(&json!({"task": "t", "structuredOutput": ref_chain(30, 2).to_string()}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert!(body.to_string().contains("20000 nodes"), "{body}");
    // Recursion and a catastrophic-backtracking pattern are accepted: the providers' rewrites
    // stop at a recursive reference, and patterns run with a backtrack limit.
    let accepted = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^(a+)+$"},
            "tree": {"$ref": "#/$defs/node"}
        },
        "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}
    });
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "t", "output_schema": accepted}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// `/v1/profiles`: create, list (query, paging), get, rename, delete; a task names one with
/// `profile_id` (an unknown one is a 422 naming the field); the state the worker saves is
/// sealed at rest and only its cookie domains show.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn profiles_are_created_named_used_and_deleted(pool: PgPool) {
    let app = TestApp::start(pool.clone()).await;
    let response = app
        .post("/v1/profiles")
        .json(&json!({"name": "Shop login"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let profile: Value = response.json().await.unwrap();
    let id = profile["id"].as_str().unwrap().to_owned();
    assert_eq!(profile["version"], 0);
    assert_eq!(profile["cookie_domains"], json!([]));
    assert_eq!(profile["last_used_at"], Value::Null);
    for (body, field) in [
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"name": "a\u{0007}b"}), "name"),
        (json!({"nme": "typo"}), "nme"),
    ] {
        let response = app.post("/v1/profiles").json(&body).send().await.unwrap();
        assert_eq!(response.status(), 422, "{body}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
    app.post("/v1/profiles")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let list: Value = app
        .get("/v1/profiles?limit=1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["total"], 2);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let found: Value = app
        .get("/v1/profiles?query=SHOP")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(found["items"][0]["id"], id.as_str());
    let response = app.get("/v1/profiles?limit=0").send().await.unwrap();
    assert_eq!(response.status(), 422);

    let renamed: Value = app
        .http
        .patch(app.url(&format!("/v1/profiles/{id}")))
        .bearer_auth(&app.key)
        .json(&json!({"name": "Bank login"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(renamed["name"], "Bank login");

    // A task uses it; an unknown profile is refused naming the field.
    let task = app.create(json!({"task": "t", "profile_id": id})).await;
    assert_eq!(task["profile_id"], id.as_str());
    let missing = uuid::Uuid::now_v7();
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "t", "profile_id": missing}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        format!("profile_id {missing} names no profile of this API key")
    );
    let response = app
        .post("/v1/tasks")
        .json(&json!({"task": "t", "profile_id": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);

    // What a worker saves: sealed at rest (the store has the secrets key), the domains shown.
    let uuid = uuid::Uuid::parse_str(&id).unwrap();
    let secret = "sid-value-that-is-a-credential";
    let state = json!({"cookies": [{"name": "sid", "value": secret, "domain": ".shop.test",
        "path": "/"}], "origins": [{"origin": "https://shop.test",
        "localStorage": [{"name": "token", "value": secret}]}]});
    let saved = app
        .store
        .save_profile_state(app.key_id, uuid, 0, &state, &["shop.test".to_owned()])
        .await
        .unwrap();
    assert_eq!(saved, browserd_store::ProfileSave::Saved { version: 1 });
    let (plain, sealed): (Option<Value>, Option<Vec<u8>>) =
        sqlx::query_as("select state, state_sealed from profiles where id = $1")
            .bind(uuid)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(plain, None);
    let sealed = sealed.expect("sealed");
    assert!(
        !sealed.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the state is not in clear"
    );
    // A write based on version 0 now conflicts and answers the newer state.
    let conflict = app
        .store
        .save_profile_state(app.key_id, uuid, 0, &json!({}), &[])
        .await
        .unwrap();
    assert_eq!(
        conflict,
        browserd_store::ProfileSave::Conflict(browserd_store::ProfileState {
            version: 1,
            state: state.clone()
        })
    );
    let loaded = app
        .store
        .load_profile_state(app.key_id, uuid)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(loaded.state, state);
    let shown: Value = app
        .get(&format!("/v1/profiles/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["cookie_domains"], json!(["shop.test"]));
    assert_eq!(shown["version"], 1);
    assert!(shown["last_used_at"].is_string());
    assert!(!shown.to_string().contains(secret));

    let response = app
        .http
        .delete(app.url(&format!("/v1/profiles/{id}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let response = app.get(&format!("/v1/profiles/{id}")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "profile_not_found");
    assert_eq!(
        app.store
            .save_profile_state(app.key_id, uuid, 1, &json!({}), &[])
            .await
            .unwrap(),
        browserd_store::ProfileSave::Gone
    );
    let response = app.get("/v1/profiles/not-a-uuid").send().await.unwrap();
    assert_eq!(response.status(), 400);
}
