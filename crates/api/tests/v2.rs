//! browser-use cloud's `/api/v2` shapes and rules against a real server on 127.0.0.1:0 over a
//! fresh Postgres database per test (`#[sqlx::test]`, needs DATABASE_URL). No worker runs here:
//! tasks stay `created` unless a test moves them. (The official SDK runs the whole flow against
//! a real `browserd serve` in tests/tests/api_v2.rs.)

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use browserd_api::{ApiConfig, ModelCatalog};
use browserd_store::{EventHub, Store};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct App {
    addr: SocketAddr,
    key: String,
    http: reqwest::Client,
    shutdown: CancellationToken,
}

impl Drop for App {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl App {
    async fn start(pool: PgPool) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .try_init();
        let store = Store::from_pool(pool).with_secrets_keyring(
            browserd_store::SecretsKeyring::from_base64(
                "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                &[],
            )
            .unwrap(),
        );
        let shutdown = CancellationToken::new();
        let (hub, _) = EventHub::start(&store, shutdown.clone()).await.unwrap();
        let config = ApiConfig {
            models: ModelCatalog::new(["mock".to_owned()], Some("mock".to_owned())).unwrap(),
            ..ApiConfig::default()
        };
        let app = browserd_api::router(store.clone(), hub, config, shutdown.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .unwrap();
        });
        let created = store.create_api_key("test").await.unwrap();
        App {
            addr,
            key: secrecy::ExposeSecret::expose_secret(&created.key).to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            shutdown,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A v2 request with the SDK's header.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, self.url(&format!("/api/v2{path}")))
            .header("X-Browser-Use-API-Key", &self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }
}

/// FastAPI's 422 list: the first item's `loc`.
fn loc(body: &Value) -> Value {
    body["detail"][0]["loc"].clone()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn keys_errors_and_cloud_only_features(pool: PgPool) {
    let app = App::start(pool).await;
    let response = app.http.get(app.url("/api/v2/tasks")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"detail": "Missing X-Browser-Use-API-Key header"})
    );
    let response = app
        .http
        .get(app.url("/api/v2/tasks"))
        .header("X-Browser-Use-API-Key", "bd_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"detail": "Invalid API key"})
    );

    let (status, body) = app.get(&format!("/tasks/{}", uuid::Uuid::new_v4())).await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"detail": "Task not found"}))
    );
    let (status, body) = app.get("/tasks/task_123").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["path", "task_id"]));
    assert_eq!(body["detail"][0]["type"], "uuid_parsing");

    for (request, field) in [
        (json!({"other": 1}), json!(["body", "task"])),
        (json!({"task": ""}), json!(["body", "task"])),
        (
            json!({"task": "t", "maxSteps": 0}),
            json!(["body", "maxSteps"]),
        ),
        (
            json!({"task": "t", "maxSteps": "many"}),
            json!(["body", "maxSteps"]),
        ),
        (
            json!({"task": "t", "llm": "gpt-99"}),
            json!(["body", "llm"]),
        ),
        (
            json!({"task": "t", "startUrl": "file:///etc/passwd"}),
            json!(["body", "startUrl"]),
        ),
        (
            json!({"task": "t", "structuredOutput": "{not json"}),
            json!(["body", "structuredOutput"]),
        ),
        (
            json!({"task": "t", "vision": "sometimes"}),
            json!(["body", "vision"]),
        ),
        (
            json!({"task": "t", "allowedDomains": ["exa mple.com"]}),
            json!(["body", "allowedDomains", 0]),
        ),
        (
            json!({"task": "t", "sessionSettings": {"browserScreenWidth": 10, "browserScreenHeight": 10}}),
            json!(["body", "sessionSettings", "browserScreenWidth"]),
        ),
    ] {
        let (status, body) = app.post("/tasks", request.clone()).await;
        assert_eq!(status, 422, "{request} → {body}");
        assert_eq!(loc(&body), field, "{request} → {body}");
        assert!(
            body["detail"][0]["msg"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let response = app
        .http
        .post(app.url("/api/v2/tasks"))
        .header("X-Browser-Use-API-Key", &app.key)
        .header("content-type", "application/json")
        .body("{\"task\":")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        response.json::<Value>().await.unwrap()["detail"][0]["type"],
        "json_invalid"
    );
    // Too large: a JSON 413, not axum's plain text.
    let response = app
        .http
        .post(app.url("/api/v2/tasks"))
        .header("X-Browser-Use-API-Key", &app.key)
        .header("content-type", "application/json")
        .body(format!("{{\"task\": \"{}\"}}", "x".repeat(2 * 1024 * 1024)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"detail": "Request body is too large"})
    );

    for request in [
        json!({"task": "t", "opVaultId": "v"}),
        json!({"task": "t", "judge": true}),
        json!({"task": "t", "skillIds": ["*"]}),
        json!({"task": "t", "sessionSettings": {"profileId": "p"}}),
    ] {
        let (status, body) = app.post("/tasks", request.clone()).await;
        assert_eq!(status, 501, "{request} → {body}");
        assert!(body["detail"].is_string());
    }
    for path in [
        "/profiles",
        "/browsers",
        "/billing/account",
        "/skills",
        "/marketplace/skills",
    ] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, 501, "{path}");
        assert!(body["detail"].as_str().unwrap().contains("Not implemented"));
    }
    // Secrets are write-only in v2 too.
    let secret = "v2-s3cret-value";
    let (status, _) = app
        .post("/tasks", json!({"task": "t", "secrets": {"pw": secret}}))
        .await;
    assert_eq!(status, 202);
    let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
    assert!(!logs.contains(secret));
    assert!(
        !logs.contains(&app.key),
        "the X-Browser-Use-API-Key header is not logged"
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn v1_and_v2_are_two_views_of_the_same_tasks(pool: PgPool) {
    let app = App::start(pool).await;
    let v1: Value = app
        .http
        .post(app.url("/v1/tasks"))
        .bearer_auth(&app.key)
        .json(&json!({"task": "from v1", "metadata": {"a": "b"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let v1_id = v1["id"].as_str().unwrap().to_owned();
    let (status, task) = app.get(&format!("/tasks/{v1_id}")).await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["status"], "created");
    assert_eq!(
        task["sessionId"], task["id"],
        "a v1 task is alone in its session"
    );
    assert_eq!(task["llm"], "mock");
    assert_eq!(task["metadata"], json!({"a": "b"}));
    assert_eq!(task["steps"], json!([]));
    assert_eq!(task["outputFiles"], json!([]));
    assert_eq!(task["cost"], "0");
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z'), "{task}");
    for key in ["startedAt", "finishedAt", "output", "isSuccess"] {
        assert!(task[key].is_null(), "{key}");
    }

    let (status, created) = app
        .post(
            "/tasks",
            json!({"task": "from v2", "startUrl": "https://example.com", "maxSteps": 7,
                   "flashMode": true, "thinking": false, "vision": "auto",
                   "highlightElements": true, "systemPromptExtension": "Be brief.",
                   "someFutureField": {"x": 1}}),
        )
        .await;
    assert_eq!(status, 202, "{created}");
    let v2_id = created["id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(created["sessionId"].as_str().unwrap()).is_ok());
    let v1_view: Value = app
        .http
        .get(app.url(&format!("/v1/tasks/{v2_id}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v1_view["status"], "queued");
    assert_eq!(v1_view["max_steps"], 7);
    assert_eq!(v1_view["start_url"], "https://example.com");

    let (_, status_view) = app.get(&format!("/tasks/{v2_id}/status")).await;
    assert_eq!(status_view["status"], "created");
    assert_eq!(status_view["id"], json!(v2_id));

    let (_, page) = app.get("/tasks?pageSize=1&pageNumber=1").await;
    assert_eq!(page["totalItems"], 2);
    assert_eq!(page["pageSize"], 1);
    assert_eq!(page["items"][0]["id"], json!(v2_id), "newest first");
    assert!(page["items"][0].get("steps").is_none());
    let (_, page2) = app.get("/tasks?pageSize=1&pageNumber=2").await;
    assert_eq!(page2["items"][0]["id"], json!(v1_id));
    let (_, none) = app.get("/tasks?pageNumber=3&pageSize=1").await;
    assert_eq!(none["items"], json!([]));
    let (_, created_only) = app.get("/tasks?filterBy=created").await;
    assert_eq!(created_only["totalItems"], 2);
    let (_, finished) = app.get("/tasks?filterBy=finished").await;
    assert_eq!(finished["totalItems"], 0);
    let (status, body) = app.get("/tasks?filterBy=running").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["query", "filterBy"]));
    let (status, body) = app.get("/tasks?pageSize=101").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["query", "pageSize"]));
    let (_, after) = app.get("/tasks?after=2999-01-01%2000:00:00").await;
    assert_eq!(after["totalItems"], 0);
    let (_, before) = app.get("/tasks?before=2999-01-01T00:00:00%2B00:00").await;
    assert_eq!(before["totalItems"], 2);

    // Stop (twice: the second answers the stopped task), then an unknown action.
    let (status, stopped) = app
        .patch(&format!("/tasks/{v2_id}"), json!({"action": "stop"}))
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["status"], "stopped");
    assert!(
        stopped["liveUrl"].is_null(),
        "no live view once the task ended"
    );
    assert!(stopped["finishedAt"].as_str().unwrap().ends_with('Z'));
    let (status, again) = app
        .patch(&format!("/tasks/{v2_id}"), json!({"action": "stop"}))
        .await;
    assert_eq!(
        (status, &again["status"]),
        (StatusCode::OK, &json!("stopped"))
    );
    let (status, body) = app
        .patch(&format!("/tasks/{v2_id}"), json!({"action": "explode"}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["body", "action"]));
    // pause / resume: an extension; a paused task still reads `started` or `created`.
    let (status, paused) = app
        .patch(&format!("/tasks/{v1_id}"), json!({"action": "pause"}))
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["status"], "created");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn sessions_take_one_task_at_a_time_and_stop_with_their_tasks(pool: PgPool) {
    let app = App::start(pool).await;
    let (status, session) = app
        .post("/sessions", json!({"keepAlive": true, "ignored": 1}))
        .await;
    assert_eq!(status, 201, "{session}");
    assert_eq!(session["status"], "active");
    assert!(session["liveUrl"].is_null());
    assert_eq!(session["proxyCost"], "0");
    assert!(session["startedAt"].as_str().unwrap().ends_with('Z'));
    let sid = session["id"].as_str().unwrap().to_owned();

    let (status, first) = app
        .post("/tasks", json!({"task": "one", "sessionId": sid}))
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["sessionId"], json!(sid));
    let (status, busy) = app
        .post("/tasks", json!({"task": "two", "sessionId": sid}))
        .await;
    assert_eq!(status, 400, "{busy}");
    assert!(
        busy["detail"]
            .as_str()
            .unwrap()
            .contains("already has a running task")
    );
    let (status, missing) = app
        .post(
            "/tasks",
            json!({"task": "x", "sessionId": uuid::Uuid::new_v4()}),
        )
        .await;
    assert_eq!(
        (status, missing),
        (
            StatusCode::NOT_FOUND,
            json!({"detail": "Session not found"})
        )
    );

    let (_, view) = app.get(&format!("/sessions/{sid}")).await;
    assert_eq!(view["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(view["tasks"][0]["id"], first["id"]);
    assert_eq!(
        view["liveUrl"],
        json!(app.url(&format!("/#/tasks/{}", first["id"].as_str().unwrap()))),
        "while a task runs, liveUrl is its dashboard page"
    );
    let (_, listed) = app.get(&format!("/tasks?sessionId={sid}")).await;
    assert_eq!(listed["totalItems"], 1);
    assert_eq!(listed["items"][0]["id"], first["id"]);

    let (status, stopped) = app
        .patch(&format!("/sessions/{sid}"), json!({"action": "stop"}))
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["status"], "stopped");
    assert_eq!(
        stopped["tasks"][0]["status"], "stopped",
        "the session's task stopped too"
    );
    let (status, refused) = app
        .post("/tasks", json!({"task": "three", "sessionId": sid}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["detail"],
        "Browser session is stopped. Please start a new session and try again."
    );
    let (_, active) = app.get("/sessions?filterBy=active").await;
    assert_eq!(active["totalItems"], 0);
    let (_, all) = app.get("/sessions").await;
    assert_eq!(all["totalItems"], 1);

    let response = app
        .http
        .delete(app.url(&format!("/api/v2/sessions/{sid}")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (status, _) = app.get(&format!("/sessions/{sid}")).await;
    assert_eq!(status, 404);
    // The task outlives its session.
    let (status, task) = app
        .get(&format!("/tasks/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200, "{task}");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn webhook_events_are_queued_with_the_status_change_and_its_session(pool: PgPool) {
    let app = App::start(pool.clone()).await;
    let response = app
        .http
        .post(app.url("/v1/webhooks"))
        .bearer_auth(&app.key)
        .json(&json!({"url": "https://hooks.example.com/in", "events": ["created", "stopped"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let (status, created) = app
        .post("/tasks", json!({"task": "t", "metadata": {"k": "v"}}))
        .await;
    assert_eq!(status, 202);
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, _) = app
        .patch(&format!("/tasks/{id}"), json!({"action": "stop"}))
        .await;
    assert_eq!(status, 200);
    let rows: Vec<(String, Value)> = sqlx::query_as(
        "select event, body from webhook_deliveries where task_id = $1::uuid order by id",
    )
    .bind(&id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let events: Vec<&str> = rows.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["created", "stopped"]);
    for (event, body) in &rows {
        assert_eq!(body["type"], "agent.task.status_update");
        assert_eq!(body["payload"]["status"], json!(event));
        assert_eq!(body["payload"]["task_id"], json!(id));
        assert_eq!(
            body["payload"]["session_id"], created["sessionId"],
            "{body}"
        );
        assert_eq!(body["payload"]["metadata"], json!({"k": "v"}));
        assert!(body["timestamp"].as_str().unwrap().ends_with('Z'));
    }
}
