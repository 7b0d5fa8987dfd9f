//! browser-use cloud's `/api/v2` shapes and rules against a real server on 127.0.0.1:0 over a
//! fresh Postgres database per test (`#[sqlx::test]`, needs DATABASE_URL). No worker runs here:
//! tasks stay `created` unless a test moves them. (The official SDK runs the whole flow against
//! a real `browserd serve` in tests/tests/api_v2.rs.)

use browserd_api::ApiConfig;
use browserd_store::Store;
use browserd_tasks::ModelCatalog;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

mod support;

use support::{TestServer as App, captured_logs};

impl App {
    async fn start(pool: PgPool) -> Self {
        Self::start_with(pool, |_| {}).await
    }

    async fn start_with(pool: PgPool, configure: impl FnOnce(&mut ApiConfig)) -> Self {
        let mut config = ApiConfig {
            models: ModelCatalog::new(["mock".to_owned()], Some("mock".to_owned())).unwrap(),
            ..ApiConfig::default()
        };
        configure(&mut config);
        App::serve(pool, config, true).await
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

    async fn v2_get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn v2_post(&self, path: &str, body: Value) -> (StatusCode, Value) {
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

    let (status, body) = app
        .v2_get(&format!("/tasks/{}", uuid::Uuid::new_v4()))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"detail": "Task not found"}))
    );
    let (status, body) = app.v2_get("/tasks/task_123").await;
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
            json!({"task": "t", "maxSteps": 10_001}),
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
        let (status, body) = app.v2_post("/tasks", request.clone()).await;
        assert_eq!(status, 422, "{request} → {body}");
        assert_eq!(loc(&body), field, "{request} → {body}");
        assert!(
            body["detail"][0]["msg"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (_, body) = app
        .v2_post("/tasks", json!({"task": "t", "maxSteps": 10_001}))
        .await;
    assert_eq!(
        body["detail"][0]["msg"],
        "Input should be between 1 and 10000"
    );
    let (status, body) = app
        .v2_post("/tasks", json!({"task": "t", "maxSteps": 10_000}))
        .await;
    assert_eq!(status, 202, "cloud's maximum is accepted: {body}");
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
    ] {
        let (status, body) = app.v2_post("/tasks", request.clone()).await;
        assert_eq!(status, 501, "{request} → {body}");
        assert!(body["detail"].is_string());
    }
    for path in ["/browsers", "/billing/account", "/marketplace/skills"] {
        let (status, body) = app.v2_get(path).await;
        assert_eq!(status, 501, "{path}");
        assert!(body["detail"].as_str().unwrap().contains("Not implemented"));
    }
    // Secrets are write-only in v2 too.
    let secret = "v2-s3cret-value";
    let (status, _) = app
        .v2_post(
            "/tasks",
            json!({"task": "t", "secrets": {"pw": secret}, "allowedDomains": ["bank.example"]}),
        )
        .await;
    assert_eq!(status, 202);
    let logs = captured_logs();
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
    let (status, task) = app.v2_get(&format!("/tasks/{v1_id}")).await;
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
        .v2_post(
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

    let (_, status_view) = app.v2_get(&format!("/tasks/{v2_id}/status")).await;
    assert_eq!(status_view["status"], "created");
    assert_eq!(status_view["id"], json!(v2_id));

    let (_, page) = app.v2_get("/tasks?pageSize=1&pageNumber=1").await;
    assert_eq!(page["totalItems"], 2);
    assert_eq!(page["pageSize"], 1);
    assert_eq!(page["items"][0]["id"], json!(v2_id), "newest first");
    assert!(page["items"][0].get("steps").is_none());
    let (_, page2) = app.v2_get("/tasks?pageSize=1&pageNumber=2").await;
    assert_eq!(page2["items"][0]["id"], json!(v1_id));
    let (_, none) = app.v2_get("/tasks?pageNumber=3&pageSize=1").await;
    assert_eq!(none["items"], json!([]));
    let (_, created_only) = app.v2_get("/tasks?filterBy=created").await;
    assert_eq!(created_only["totalItems"], 2);
    let (_, finished) = app.v2_get("/tasks?filterBy=finished").await;
    assert_eq!(finished["totalItems"], 0);
    let (status, body) = app.v2_get("/tasks?filterBy=running").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["query", "filterBy"]));
    let (status, body) = app.v2_get("/tasks?pageSize=101").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["query", "pageSize"]));
    let (_, after) = app.v2_get("/tasks?after=2999-01-01%2000:00:00").await;
    assert_eq!(after["totalItems"], 0);
    let (_, before) = app
        .v2_get("/tasks?before=2999-01-01T00:00:00%2B00:00")
        .await;
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
        .v2_post("/sessions", json!({"keepAlive": true, "ignored": 1}))
        .await;
    assert_eq!(status, 201, "{session}");
    assert_eq!(session["status"], "active");
    assert!(session["liveUrl"].is_null());
    assert_eq!(session["proxyCost"], "0");
    assert!(session["startedAt"].as_str().unwrap().ends_with('Z'));
    let sid = session["id"].as_str().unwrap().to_owned();

    let (status, first) = app
        .v2_post("/tasks", json!({"task": "one", "sessionId": sid}))
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["sessionId"], json!(sid));
    let (status, busy) = app
        .v2_post("/tasks", json!({"task": "two", "sessionId": sid}))
        .await;
    assert_eq!(status, 400, "{busy}");
    assert!(
        busy["detail"]
            .as_str()
            .unwrap()
            .contains("already has a running task")
    );
    let (status, missing) = app
        .v2_post(
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

    let (_, view) = app.v2_get(&format!("/sessions/{sid}")).await;
    assert_eq!(view["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(view["tasks"][0]["id"], first["id"]);
    assert_eq!(
        view["liveUrl"],
        json!(app.url(&format!("/#/tasks/{}", first["id"].as_str().unwrap()))),
        "while a task runs, liveUrl is its dashboard page"
    );
    let (_, listed) = app.v2_get(&format!("/tasks?sessionId={sid}")).await;
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
        .v2_post("/tasks", json!({"task": "three", "sessionId": sid}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["detail"],
        "Browser session is stopped. Please start a new session and try again."
    );
    let (_, active) = app.v2_get("/sessions?filterBy=active").await;
    assert_eq!(active["totalItems"], 0);
    let (_, all) = app.v2_get("/sessions").await;
    assert_eq!(all["totalItems"], 1);

    let response = app
        .http
        .delete(app.url(&format!("/api/v2/sessions/{sid}")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (status, _) = app.v2_get(&format!("/sessions/{sid}")).await;
    assert_eq!(status, 404);
    // The task outlives its session.
    let (status, task) = app
        .v2_get(&format!("/tasks/{}", first["id"].as_str().unwrap()))
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
        .json(&json!({"url": "https://93.184.215.14/in", "events": ["created", "stopped"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let (status, created) = app
        .v2_post("/tasks", json!({"task": "t", "metadata": {"k": "v"}}))
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

impl App {
    async fn register_webhook(&self, url: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .post(self.url("/v1/webhooks"))
            .bearer_auth(&self.key)
            .json(&json!({ "url": url }))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// Registration applies the delivery path's address rules (`browserd_domains::addr`): a target
/// that is, or resolves to, a non-public address is refused with a message naming its class;
/// loopback only passes when the operator allows it.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn webhook_targets_are_checked_at_registration(pool: PgPool) {
    let app = App::start(pool.clone()).await;
    for (url, says) in [
        (
            "http://169.254.169.254/latest/meta-data",
            "url host `169.254.169.254` is a cloud metadata endpoint; webhooks may not target it",
        ),
        ("http://10.1.2.3/hook", "is a private network address"),
        (
            "https://192.168.0.10:8443/hook",
            "is a private network address",
        ),
        ("http://169.254.10.1/hook", "is a link-local address"),
        ("http://[fe80::1]/hook", "is a link-local address"),
        ("http://[::ffff:169.254.169.254]/hook", "cloud metadata"),
        ("http://[fd00::1]/hook", "is a unique local IPv6 address"),
        ("http://0.0.0.0:9/hook", "is the unspecified address"),
        (
            "http://127.0.0.1:9/hook",
            "is a loopback address; webhooks may not target it unless the operator allows loopback",
        ),
        ("http://[::1]:9/hook", "is a loopback address"),
        (
            "http://localhost:9/hook",
            "url host `localhost` resolves to ",
        ),
        (
            "http://no-such-host.invalid/hook",
            "url host `no-such-host.invalid` could not be resolved",
        ),
    ] {
        let (status, body) = app.register_webhook(url).await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["error"]["code"], "validation_failed", "{body}");
        assert_eq!(body["error"]["field"], "url", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{url}: {message}");
    }
    // A name that resolves to a refused address (`localhost` → 127.0.0.1 / ::1): the 422 says
    // only that it resolves to an address that is not allowed, never which one (nor its class).
    let (status, body) = app.register_webhook("http://localhost:9/hook").await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("url host `localhost` resolves to an address that is not allowed"),
        "{message}"
    );
    assert!(!message.contains("loopback address"), "{message}");
    let text = body.to_string();
    let addresses: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == ':'))
        .flat_map(|token| [token, token.trim_matches(|c| c == '.' || c == ':')])
        .filter(|token| token.parse::<std::net::IpAddr>().is_ok())
        .collect();
    assert!(addresses.is_empty(), "the 422 names {addresses:?}: {text}");
    let (status, body) = app.register_webhook("https://93.184.215.14/hook").await;
    assert_eq!(status, 201, "a public address passes: {body}");
    drop(app);

    // The operator's switch (`--allow-loopback`, the one the delivery path obeys) opens
    // loopback, and only loopback.
    let app = App::start_with(pool, |config| config.webhook_allow_loopback = true).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://[::1]:9/hook",
        "http://localhost:9/hook",
    ] {
        let (status, body) = app.register_webhook(url).await;
        assert_eq!(status, 201, "{url}: {body}");
    }
    for url in [
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/",
    ] {
        let (status, body) = app.register_webhook(url).await;
        assert_eq!(status, 422, "{url}: {body}");
    }
}

/// Output files: `outputFiles` on the v2 task, the v2 file view with its signed `downloadUrl`
/// (no key; tampered or expired links refused), and the `/v1` listing and download, scoped to
/// the key that owns the task.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_download_streams_a_file_of_several_chunks_whole(pool: PgPool) {
    use browserd_store::NewOutputFile;

    let app = App::start(pool.clone()).await;
    let (status, created) = app
        .v2_post("/tasks", json!({"task": "write a big file"}))
        .await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, _) = app
        .patch(&format!("/tasks/{id}"), json!({"action": "stop"}))
        .await;
    assert_eq!(status, 200);
    // Three chunks and a bit: 256 KiB each, the last one partial; bytes that do not compress.
    let mut bytes = Vec::with_capacity(800_001);
    let mut x: u32 = 2_463_534_242;
    while bytes.len() < 800_001 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push((x & 0xff) as u8);
    }
    Store::from_pool(pool.clone())
        .save_output_files(
            id.parse().unwrap(),
            "worker-1",
            &[NewOutputFile {
                file_name: "big.bin".into(),
                content_type: "application/octet-stream".into(),
                size: bytes.len() as u64,
                content: Ok(bytes.clone()),
            }],
        )
        .await
        .unwrap();
    let storage: i8 = sqlx::query_scalar(
        "select attstorage from pg_attribute where attrelid = 'task_output_files'::regclass and attname = 'bytes'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(storage as u8, b'e', "stored uncompressed, read by chunk");

    let (_, task) = app.v2_get(&format!("/tasks/{id}")).await;
    let file_id = task["outputFiles"][0]["id"].as_str().unwrap().to_owned();
    let (_, view) = app
        .v2_get(&format!("/files/tasks/{id}/output-files/{file_id}"))
        .await;
    let response = app
        .http
        .get(view["downloadUrl"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-length"], "800001");
    let downloaded = response.bytes().await.unwrap();
    assert!(
        downloaded.as_ref() == bytes.as_slice(),
        "the download differs"
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn output_files_on_v2_and_v1(pool: PgPool) {
    use browserd_store::NewOutputFile;
    use hmac::Mac;

    let app = App::start(pool.clone()).await;
    let (status, created) = app.v2_post("/tasks", json!({"task": "write files"})).await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (_, task) = app.v2_get(&format!("/tasks/{id}")).await;
    assert_eq!(task["outputFiles"], json!([]));
    // The worker's side: the task was stopped (its lease ended) and its files are stored.
    let (status, _) = app
        .patch(&format!("/tasks/{id}"), json!({"action": "stop"}))
        .await;
    assert_eq!(status, 200);
    let store = Store::from_pool(pool.clone());
    let task_id: browserd_types::TaskId = id.parse().unwrap();
    store
        .save_output_files(
            task_id,
            "worker-1",
            &[
                NewOutputFile {
                    file_name: "report.md".into(),
                    content_type: "text/markdown; charset=utf-8".into(),
                    size: 8,
                    content: Ok(b"# Report".to_vec()),
                },
                NewOutputFile {
                    file_name: "page.html".into(),
                    content_type: "text/html; charset=utf-8".into(),
                    size: 28,
                    content: Ok(b"<script>alert(1)</script>ok".to_vec()),
                },
                NewOutputFile {
                    file_name: "huge.txt".into(),
                    content_type: "text/plain; charset=utf-8".into(),
                    size: 20_000_000,
                    content: Err("20000000 bytes: over the 10 MiB per-file cap".into()),
                },
            ],
        )
        .await
        .unwrap();

    let (_, task) = app.v2_get(&format!("/tasks/{id}")).await;
    let files = task["outputFiles"].as_array().unwrap().clone();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f["fileName"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["page.html", "report.md"],
        "skipped files are not v2 files"
    );
    let report_id = files[1]["id"].as_str().unwrap().to_owned();
    let (status, view) = app
        .v2_get(&format!("/files/tasks/{id}/output-files/{report_id}"))
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["id"], json!(report_id));
    assert_eq!(view["fileName"], "report.md");
    let url = view["downloadUrl"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!("http://{}/api/v2/files/output-files/", app.addr)),
        "absolute, on the public base URL (here the listen address): {url}"
    );

    // The signed link needs no key.
    let response = app.http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename=\"report.md\""
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(response.bytes().await.unwrap().as_ref(), b"# Report");
    // An agent-written HTML file is a download in a sandbox, never a page of this origin.
    let html_id = files[0]["id"].as_str().unwrap();
    let (_, html) = app
        .v2_get(&format!("/files/tasks/{id}/output-files/{html_id}"))
        .await;
    let response = app
        .http
        .get(html["downloadUrl"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-security-policy"],
        "sandbox; default-src 'none'"
    );
    assert!(
        response.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );

    // Tampered, other-file, expired and incomplete links are refused.
    let forbidden = |url: String| {
        let http = app.http.clone();
        async move {
            let response = http.get(&url).send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = forbidden(url.replace("signature=", "signature=00")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["detail"], "Download link is invalid");
    // An unknown file answers exactly as a wrong signature: the ids of files do not leak.
    let (status, unknown) =
        forbidden(url.replace(&report_id, &uuid::Uuid::new_v4().to_string())).await;
    assert_eq!((status, &unknown), (StatusCode::FORBIDDEN, &body));
    let (status, _) = forbidden(url.replace(&report_id, html_id)).await;
    assert_eq!(status, 403, "a signature is bound to its file");
    let expires: i64 = url.split("expires=").nth(1).unwrap()[..10].parse().unwrap();
    let (status, _) = forbidden(url.replace(
        &format!("expires={expires}"),
        &format!("expires={}", expires + 3600),
    ))
    .await;
    assert_eq!(status, 403, "the expiry is signed");
    let key: Vec<u8> =
        sqlx::query_scalar("select download_key from task_output_files where id = $1::uuid")
            .bind(&report_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    let past = time::OffsetDateTime::now_utc().unix_timestamp() - 1;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{report_id}.{past}").as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let (status, body) = forbidden(app.url(&format!(
        "/api/v2/files/output-files/{report_id}/content?expires={past}&signature={signature}"
    )))
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("Download link expired"),
        "{body}"
    );
    let (status, _) =
        forbidden(app.url(&format!("/api/v2/files/output-files/{report_id}/content"))).await;
    assert_eq!(status, 403);

    // 404s in the cloud's words.
    let (status, body) = app
        .v2_get(&format!(
            "/files/tasks/{id}/output-files/{}",
            uuid::Uuid::new_v4()
        ))
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"detail": "Output file not found"})
        )
    );
    let (_, other) = app.v2_post("/tasks", json!({"task": "other"})).await;
    let other_id = other["id"].as_str().unwrap();
    let (status, _) = app
        .v2_get(&format!("/files/tasks/{other_id}/output-files/{report_id}"))
        .await;
    assert_eq!(status, 404, "a file belongs to its task");

    // /v1: the listing (skipped files with the reason) and the download, with the key.
    let list: Value = app
        .http
        .get(app.url(&format!("/v1/tasks/{id}/files")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{list}");
    assert_eq!(items[0]["file_name"], "huge.txt");
    assert_eq!(items[0]["size"], 20_000_000);
    assert!(
        items[0]["skipped"]
            .as_str()
            .unwrap()
            .contains("per-file cap")
    );
    assert!(items[0]["download_url"].is_null());
    assert_eq!(items[2]["file_name"], "report.md");
    assert_eq!(items[2]["size"], 8);
    let path = items[2]["download_url"].as_str().unwrap();
    assert_eq!(path, format!("/v1/tasks/{id}/files/{report_id}"));
    let response = app
        .http
        .get(app.url(path))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap().as_ref(), b"# Report");
    let response = app.http.get(app.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 401, "the /v1 download needs the key");
    let skipped = items[0]["id"].as_str().unwrap();
    let response = app
        .http
        .get(app.url(&format!("/v1/tasks/{id}/files/{skipped}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        404,
        "a skipped file has nothing to download"
    );
    let other_key = store.create_api_key("other").await.unwrap();
    let response = app
        .http
        .get(app.url(path))
        .bearer_auth(secrecy::ExposeSecret::expose_secret(&other_key.key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "another key's task is not found");

    // Only the worker that holds the lease (or one whose task was stopped) may store files.
    let (_, running) = app.v2_post("/tasks", json!({"task": "queued"})).await;
    let err = store
        .save_output_files(
            running["id"].as_str().unwrap().parse().unwrap(),
            "worker-1",
            &[],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, browserd_store::StoreError::LeaseLost(_)),
        "{err}"
    );
}

/// The SDK's `profiles.create/list/get/update/delete` as it sends them, and a profile used by
/// a task (`sessionSettings.profileId`) and by a session (`profileId`).
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn profiles_answer_as_the_sdk_expects(pool: PgPool) {
    let app = App::start(pool.clone()).await;
    let (status, created) = app
        .v2_post("/profiles", json!({"name": "Shop login", "userId": "u-1"}))
        .await;
    assert_eq!(status, 201, "{created}");
    for field in [
        "id",
        "userId",
        "name",
        "lastUsedAt",
        "createdAt",
        "updatedAt",
        "cookieDomains",
    ] {
        assert!(created.get(field).is_some(), "{field} in {created}");
    }
    assert_eq!(created["name"], "Shop login");
    assert_eq!(created["userId"], "u-1");
    assert_eq!(created["cookieDomains"], json!([]));
    assert!(created["createdAt"].as_str().unwrap().ends_with('Z'));
    let id = created["id"].as_str().unwrap().to_owned();
    // An empty body (the SDK's `profiles.create()` without arguments).
    let response = app
        .http
        .post(app.url("/api/v2/profiles"))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);

    let (status, list) = app.v2_get("/profiles?pageSize=1&pageNumber=1").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["totalItems"], 2);
    assert_eq!(list["pageSize"], 1);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, found) = app.v2_get("/profiles?query=shop").await;
    assert_eq!(found["totalItems"], 1);
    assert_eq!(found["items"][0]["id"], id.as_str());
    let (_, none) = app.v2_get("/profiles?query=%25").await;
    assert_eq!(none["totalItems"], 0, "% is a literal character");
    let (status, body) = app.v2_get("/profiles?pageSize=0").await;
    assert_eq!(status, 422);
    assert_eq!(loc(&body), json!(["query", "pageSize"]));

    let (status, got) = app.v2_get(&format!("/profiles/{id}")).await;
    assert_eq!(
        (status, &got["name"]),
        (StatusCode::OK, &json!("Shop login"))
    );
    let (status, renamed) = app
        .patch(&format!("/profiles/{id}"), json!({"name": "Bank login"}))
        .await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["name"], "Bank login");
    assert_eq!(renamed["userId"], "u-1", "a field left out is kept");
    let (status, body) = app
        .patch(&format!("/profiles/{id}"), json!({"name": "x".repeat(201)}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(loc(&body), json!(["body", "name"]));

    // A task and a session that use it.
    let (status, task) = app
        .v2_post(
            "/tasks",
            json!({"task": "t", "sessionSettings": {"profileId": id}}),
        )
        .await;
    assert_eq!(status, 202, "{task}");
    let stored: Value = sqlx::query_scalar("select options from tasks where id = $1::uuid")
        .bind(task["id"].as_str().unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored["profile_id"], id.as_str());
    // The task's one-off session records the profile too.
    let session_profile: Option<uuid::Uuid> =
        sqlx::query_scalar("select profile_id from browser_sessions where id = $1::uuid")
            .bind(task["sessionId"].as_str().unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        session_profile.map(|p| p.to_string()).as_deref(),
        Some(id.as_str())
    );
    let (status, session) = app.v2_post("/sessions", json!({"profileId": id})).await;
    assert_eq!(status, 201, "{session}");
    let (status, task) = app
        .v2_post("/tasks", json!({"task": "t", "sessionId": session["id"]}))
        .await;
    assert_eq!(status, 202, "{task}");
    let stored: Value = sqlx::query_scalar("select options from tasks where id = $1::uuid")
        .bind(task["id"].as_str().unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored["profile_id"], id.as_str(), "the session's profile");

    let missing = uuid::Uuid::now_v7();
    for (status, body) in [
        app.v2_get(&format!("/profiles/{missing}")).await,
        app.v2_post(
            "/tasks",
            json!({"task": "t", "sessionSettings": {"profileId": missing}}),
        )
        .await,
        app.v2_post("/sessions", json!({"profileId": missing}))
            .await,
    ] {
        assert_eq!(status, 404, "{body}");
        assert_eq!(body, json!({"detail": "Profile not found"}));
    }
    let (status, body) = app
        .v2_post(
            "/tasks",
            json!({"task": "t", "sessionSettings": {"profileId": "p"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(loc(&body), json!(["body", "sessionSettings", "profileId"]));
    let (status, body) = app.v2_get("/profiles/p").await;
    assert_eq!(status, 422, "{body}");

    let response = app
        .http
        .delete(app.url(&format!("/api/v2/profiles/{id}")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
    let (status, body) = app.v2_get(&format!("/profiles/{id}")).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"detail": "Profile not found"})
        )
    );
}

/// The official SDK sends `secrets` flat: accepted with `allowedDomains` (bound to them), or
/// domain-bound as browser-use's `sensitive_data`; without either, a FastAPI 422 on
/// `body.secrets` that names both fixes in v2's field names; `allowSecretsOnAnyDomain` opts in.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn v2_flat_secrets_need_allowed_domains_or_the_opt_in(pool: PgPool) {
    let app = App::start(pool).await;
    let secret = "v2-flat-s3cret";
    let (status, body) = app
        .v2_post("/tasks", json!({"task": "t", "secrets": {"pw": secret}}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["detail"][0]["loc"],
        json!(["body", "secrets"]),
        "{body}"
    );
    let msg = body["detail"][0]["msg"].as_str().unwrap();
    assert!(
        msg.contains("allowedDomains") && msg.contains("allowSecretsOnAnyDomain: true"),
        "{msg}"
    );
    assert!(!body.to_string().contains(secret));
    for ok in [
        json!({"task": "t", "secrets": {"https://*.bank.example": {"pw": secret}}}),
        json!({"task": "t", "secrets": {"pw": secret}, "allowedDomains": ["bank.example"]}),
        json!({"task": "t", "secrets": {"pw": secret}, "allowSecretsOnAnyDomain": true}),
    ] {
        let (status, body) = app.v2_post("/tasks", ok.clone()).await;
        assert_eq!(status, 202, "{ok}: {body}");
    }
    let (status, body) = app
        .v2_post(
            "/tasks",
            json!({"task": "t", "secrets": {"bank.*": {"pw": secret}}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(!body.to_string().contains(secret));
}

/// URLs built for clients (`liveUrl`, the logs' and output files' `downloadUrl`) are on the
/// configured public base URL, whatever `Host` / `X-Forwarded-Host` / `X-Forwarded-Proto` the
/// request forges.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn client_urls_use_the_public_url_not_the_host(pool: PgPool) {
    let base = "https://browserd.example.com/prefix";
    let app = App::start_with(pool, |config| {
        config.public_url = Some(browserd_api::PublicUrl::parse(&format!("{base}/")).unwrap());
    })
    .await;
    let forged = |request: reqwest::RequestBuilder| {
        request
            .header("X-Browser-Use-API-Key", &app.key)
            .header(reqwest::header::HOST, "evil.example")
            .header("X-Forwarded-Host", "evil.example")
            .header("X-Forwarded-Proto", "http")
    };
    let response = forged(app.http.post(app.url("/api/v2/tasks")))
        .json(&json!({"task": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let created: Value = response.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let sid = created["sessionId"].as_str().unwrap().to_owned();

    let get = |path: String| {
        let request = forged(app.http.get(app.url(&format!("/api/v2{path}"))));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    let logs = get(format!("/tasks/{id}/logs")).await;
    let logs: Value = serde_json::from_str(&logs).unwrap();
    assert_eq!(
        logs["downloadUrl"],
        json!(format!("{base}/api/v2/tasks/{id}/history"))
    );
    let session = get(format!("/sessions/{sid}")).await;
    assert!(!session.contains("evil.example"), "{session}");
    let session: Value = serde_json::from_str(&session).unwrap();
    assert_eq!(session["liveUrl"], json!(format!("{base}/#/tasks/{id}")));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn skills_answer_as_the_sdk_expects(pool: PgPool) {
    let app = App::start(pool.clone()).await;
    let (status, created) = app
        .v2_post(
            "/skills",
            json!({"goal": "Report an order's status", "agentPrompt": "Find order {{order=1042}} and report its status", "title": "Order status"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    let (status, skill) = app.v2_get(&format!("/skills/{id}")).await;
    assert_eq!(status, 200, "{skill}");
    assert_eq!(
        skill["status"], "generating",
        "no worker runs its generation"
    );
    assert_eq!(skill["title"], "Order status");
    assert_eq!(skill["goal"], "Report an order's status");
    assert_eq!(skill["isEnabled"], true);
    assert_eq!(skill["isPublic"], false);
    assert_eq!(skill["parameters"][0]["name"], "order");
    assert_eq!(skill["parameters"][0]["type"], "number");
    for field in [
        "categories",
        "domains",
        "outputSchema",
        "createdAt",
        "updatedAt",
        "currentVersion",
    ] {
        assert!(skill.get(field).is_some(), "{field} in {skill}");
    }

    let (status, list) = app.v2_get("/skills?pageSize=10&pageNumber=1").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["totalItems"], 1);
    assert_eq!(list["items"][0]["id"], id.as_str());
    let (_, disabled) = app.v2_get("/skills?isEnabled=false").await;
    assert_eq!(disabled["totalItems"], 0);
    let (status, body) = app.v2_get("/skills?isEnabled=maybe").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(loc(&body), json!(["query", "isEnabled"]));

    // The cloud's limits, answered as FastAPI does.
    for (request, field) in [
        (
            json!({"goal": "g", "agentPrompt": "too short"}),
            "agentPrompt",
        ),
        (
            json!({"goal": "", "agentPrompt": "long enough prompt"}),
            "goal",
        ),
        (
            json!({"goal": "g", "agentPrompt": "long enough prompt", "title": "t".repeat(101)}),
            "title",
        ),
    ] {
        let (status, body) = app.v2_post("/skills", request.clone()).await;
        assert_eq!(status, 422, "{request} → {body}");
        assert_eq!(loc(&body), json!(["body", field]), "{body}");
    }
    let (status, body) = app
        .v2_post(
            "/skills",
            json!({"goal": "g", "agentPrompt": "Find {{order=1 and more"}),
        )
        .await;
    assert_eq!(status, 422, "an unclosed declaration: {body}");

    // Not runnable while it is generating; refine also waits for it.
    let (status, body) = app
        .v2_post(
            &format!("/skills/{id}/execute"),
            json!({"parameters": {"order": 2077}}),
        )
        .await;
    assert_eq!(status, 400, "a conflict is the cloud's 400: {body}");
    let (status, body) = app
        .v2_post(&format!("/skills/{id}/rollback"), json!({}))
        .await;
    assert_eq!(status, 400, "no earlier version: {body}");

    let (status, patched) = app
        .patch(
            &format!("/skills/{id}"),
            json!({"isEnabled": false, "categories": ["automation"]}),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["isEnabled"], false);

    let (status, executions) = app.v2_get(&format!("/skills/{id}/executions")).await;
    assert_eq!(status, 200, "{executions}");
    assert_eq!(executions["totalItems"], 0);

    // Another key sees none of it.
    let other = app.new_key().await;
    let response = app
        .http
        .get(app.url(&format!("/api/v2/skills/{id}")))
        .header("X-Browser-Use-API-Key", &other)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    let (status, cancelled) = app
        .v2_post(&format!("/skills/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let response = app
        .http
        .delete(app.url(&format!("/api/v2/skills/{id}")))
        .header("X-Browser-Use-API-Key", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (status, _) = app.v2_get(&format!("/skills/{id}")).await;
    assert_eq!(status, 404);
}
