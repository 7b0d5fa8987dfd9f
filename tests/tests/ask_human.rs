//! Ask a human (issue 31, part 2), end to end: real browserd processes, Postgres and Chromium
//! on local pages; the mock model asks `ask_human` and acts on the answer. The REST round trip
//! (with the `/api/v2` view's status, the 409 / 422 refusals and the `waiting_for_input`
//! webhook in the outbox), the MCP round trip (`run_task` returns with the question,
//! `answer_task` answers), a secret answer typed into a login form and found nowhere in the
//! database nor in any model request, a worker killed while its task waits (answered
//! meanwhile, resumed on another worker), the wait's timeout, and the action switched off by
//! the operator and by the task (absent from the model's schema).

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{
    Client, MockModel, Process, RequestBrain, Site, TestDb, choosing_brain, create_key, done_reply,
    index_of, message_texts, page_text, reply,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

static ONE_SCENARIO_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const LONG: Duration = Duration::from_secs(90);

/// The whole text the model was shown (every message).
fn all_text(request: &Value) -> String {
    message_texts(request).join("\n")
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = e["kind"].as_str().unwrap_or("").to_owned();
            if kind == "status" {
                format!("status:{}", e["payload"]["status"].as_str().unwrap_or(""))
            } else {
                kind
            }
        })
        .collect()
}

/// Every row of every table of the public schema, as text.
async fn every_row(db: &TestDb) -> String {
    let pool = db.pool().await;
    let tables: Vec<String> = sqlx::query_scalar(
        "select table_name::text from information_schema.tables
         where table_schema = 'public' and table_type = 'BASE TABLE'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut all = String::new();
    for table in tables {
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "select t::text from \"{table}\" t"
        )))
        .fetch_all(&pool)
        .await
        .unwrap();
        for row in rows {
            all.push_str(&row);
            all.push('\n');
        }
    }
    all
}

/// Webhook bodies a receiver accepted, in arrival order.
type Received = Arc<std::sync::Mutex<Vec<Value>>>;

/// A webhook receiver on loopback that keeps every body; its URL.
async fn hook_receiver(received: Received) -> String {
    async fn hook(
        axum::extract::State(received): axum::extract::State<Received>,
        body: axum::body::Bytes,
    ) -> axum::http::StatusCode {
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        received.lock().unwrap().push(body);
        axum::http::StatusCode::NO_CONTENT
    }
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(received);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

/// Whether `ask_human` is in the action schema of a model request.
fn offers_ask_human(request: &Value) -> bool {
    request["response_format"].to_string().contains("ask_human")
        || request["tools"].to_string().contains("ask_human")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_over_rest_and_the_agent_goes_on() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let received: Received = Arc::default();
    // A webhook asks for `waiting_for_input`: a local receiver keeps what it is sent.
    let hook_url = hook_receiver(received.clone()).await;
    let (status, hook) = client
        .post(
            "/v1/webhooks",
            json!({"url": hook_url, "events": ["waiting_for_input", "finished"]}),
        )
        .await;
    assert_eq!(status, 201, "{hook}");
    let id = client
        .create_task(json!({
            "task": "Report the code the user picks",
            "start_url": site.url("/stairs/1?top=2"),
            "use_vision": false,
            "metadata": {"order": "42"},
        }))
        .await;
    let waiting = client.wait_status(&id, &["waiting"], LONG).await;
    let question = &waiting["question"];
    assert_eq!(
        question["question"], "Which code should I report?",
        "{waiting}"
    );
    assert_eq!(question["choices"], json!(["A", "B"]));
    assert_eq!(question["question_id"], "s1a0");
    // The webhook reaches the receiver while the task still waits: the person is told.
    let deadline = tokio::time::Instant::now() + LONG;
    let delivered = loop {
        let first = received.lock().unwrap().first().cloned();
        if let Some(body) = first {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no webhook delivered while the task waits"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(delivered["type"], "task.waiting_for_input", "{delivered}");
    assert_eq!(delivered["payload"]["task_id"], json!(id), "{delivered}");
    assert_eq!(
        delivered["payload"]["question"]["choices"],
        json!(["A", "B"]),
        "{delivered}"
    );
    assert_eq!(question["secret"], false);
    assert!(question["timeout_s"].as_u64().unwrap() >= 1);
    // The v2 view (the SDK's) calls it started; a listing by status finds it.
    let (status, v2) = client.get(&format!("/api/v2/tasks/{id}")).await;
    assert_eq!(status, 200, "{v2}");
    assert_eq!(v2["status"], "started");
    let (_, listed) = client.get("/v1/tasks?status=waiting").await;
    assert_eq!(listed["items"][0]["id"], json!(id));

    // Refusals: a choice not offered, both fields, neither.
    let path = format!("/v1/tasks/{id}/input");
    let (status, body) = client.post(&path, json!({"choice": "C"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "choice");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("A, B"),
        "{body}"
    );
    let (status, _) = client
        .post(&path, json!({"choice": "A", "answer": "A"}))
        .await;
    assert_eq!(status, 422);
    let (status, _) = client.post(&path, json!({})).await;
    assert_eq!(status, 422);
    let (status, body) = client.post(&path, json!({"answer": "   "})).await;
    assert_eq!(status, 422, "{body}");

    let (status, answered) = client.post(&path, json!({"choice": "B"})).await;
    assert_eq!(status, 200, "{answered}");
    assert_ne!(answered["status"], "waiting");
    assert!(answered.get("question").is_none(), "{answered}");
    let done = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["output"], "the user chose B");
    // Answered already, and over: 409 with the status.
    let (status, body) = client.post(&path, json!({"answer": "again"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "not_waiting");
    assert_eq!(body["error"]["current_status"], "finished");

    // The event stream: waiting (ask) with the question, the answer, running again.
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    let kinds = kinds(&events);
    let at = kinds.iter().position(|k| k == "status:waiting").unwrap();
    assert_eq!(
        &kinds[at..at + 4],
        ["status:waiting", "question", "answered", "status:running"],
        "{kinds:?}"
    );
    assert_eq!(events[at]["payload"]["transition"], "ask");
    assert_eq!(events[at + 1]["payload"]["choices"], json!(["A", "B"]));
    assert_eq!(events[at + 2]["payload"]["answer"], "B");
    assert_eq!(events[at + 3]["payload"]["transition"], "answer");
    // The webhook outbox: `task.waiting_for_input` with the question, then `finished`.
    let pool = db.pool().await;
    let bodies: Vec<(String, Value)> = sqlx::query_as(
        "select event, body from webhook_deliveries where task_id = $1::uuid order by id",
    )
    .bind(&id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let events: Vec<&str> = bodies.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["waiting_for_input", "finished"]);
    let waiting_hook = &bodies[0].1;
    assert_eq!(waiting_hook["type"], "task.waiting_for_input");
    assert_eq!(waiting_hook["payload"]["status"], "waiting_for_input");
    assert_eq!(waiting_hook["payload"]["metadata"]["order"], "42");
    assert_eq!(
        waiting_hook["payload"]["question"]["question"],
        "Which code should I report?"
    );
    assert_eq!(bodies[1].1["type"], "agent.task.status_update");
    // The answer is the action's result the model saw on the next step.
    let requests = model.requests();
    assert!(offers_ask_human(&requests[0]));
    assert!(
        requests
            .iter()
            .any(|r| all_text(r).contains("The user answered: B")),
        "the model saw the answer"
    );
    // The step records the answer as the action's result.
    let (_, steps) = client.get(&format!("/v1/tasks/{id}/steps")).await;
    let first = &steps["items"][1];
    assert_eq!(
        first["results"][0]["extracted_content"],
        "The user answered: B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_answer_is_typed_but_never_stored_or_shown_to_the_model() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    const CODE: &str = "hunter2-581204";
    let site = Site::start().await;
    let brain: RequestBrain = Arc::new(|request: &Value| {
        let text = all_text(request);
        let page = page_text(request);
        if page.contains("Welcome, ada") {
            return done_reply("signed in", true);
        }
        if text.contains("<secret>answer_s1a0</secret>") {
            let user = index_of(&page, "input", "name=username").unwrap();
            let pass = index_of(&page, "input", "type=password").unwrap();
            let submit = index_of(&page, "button", "signin").unwrap();
            return reply(
                "sign in with the code",
                json!([
                    {"input": {"index": user, "text": "ada"}},
                    {"input": {"index": pass, "text": "<secret>answer_s1a0</secret>"}},
                    {"click": {"index": submit}}
                ]),
            );
        }
        reply(
            "ask for the one-time code",
            json!([{"ask_human": {"question": "What is the code we sent you?", "secret": true}}]),
        )
    });
    let model = MockModel::start_on_requests(brain, Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let id = client
        .create_task(json!({
            "task": "Sign in as ada with the code the user has",
            "start_url": site.url("/login"),
            "use_vision": false,
        }))
        .await;
    let waiting = client.wait_status(&id, &["waiting"], LONG).await;
    assert_eq!(waiting["question"]["secret"], true, "{waiting}");
    // While it waits, the sealed answer is in the database, never the code itself.
    let (status, answered) = client
        .post(
            &format!("/v1/tasks/{id}/input"),
            json!({"answer": CODE, "secret": true}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let sealed_while_running = every_row(&db).await;
    assert!(!sealed_while_running.contains(CODE));
    let done = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(done["status"], "finished", "{done}");
    // The page got the real code.
    assert_eq!(
        site.logins.lock().unwrap().clone(),
        [("ada".to_owned(), CODE.to_owned())]
    );
    // Nowhere in the database (every table, every row), nor in any model request.
    let rows = every_row(&db).await;
    assert!(!rows.contains(CODE), "the code is stored in clear");
    assert!(
        rows.contains("answer_s1a0"),
        "the placeholder is what is stored"
    );
    for request in model.requests() {
        assert!(
            !request.to_string().contains(CODE),
            "the model saw the code"
        );
    }
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    let answered = events.iter().find(|e| e["kind"] == "answered").unwrap();
    assert_eq!(answered["payload"]["secret"], true);
    assert_eq!(answered["payload"]["answer"], Value::Null);
    assert!(!server.logs().contains(CODE), "the code is in the logs");
    // The sealed answer is wiped with the task's end.
    let pool = db.pool().await;
    let sealed: Option<Vec<u8>> =
        sqlx::query_scalar("select answer_sealed from task_questions where task_id = $1::uuid")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(sealed.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_waiting_is_answered_and_the_task_resumes_elsewhere() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let api = Process::start(&db, model.addr, "api", &[]).await;
    let worker_args = [
        "--allow-loopback",
        "--lease-s",
        "3",
        "--poll-interval-ms",
        "300",
    ];
    let mut first = Process::start(&db, model.addr, "worker", &worker_args).await;
    let client = Client::new(api.address(), &create_key(&db).await);
    let id = client
        .create_task(browserd_tests::choosing_task(&site))
        .await;
    client.wait_status(&id, &["waiting"], LONG).await;
    first.signal("KILL").await;
    first.wait(Duration::from_secs(10)).await;
    // Nobody runs the task now; the answer is kept for whoever resumes it.
    let (status, body) = client
        .post(&format!("/v1/tasks/{id}/input"), json!({"choice": "A"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let second = Process::start(&db, model.addr, "worker", &worker_args).await;
    let done = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["output"], "the user chose A");
    assert_eq!(done["attempts"], 2, "{done}");
    assert!(
        second.logs().contains("the question was answered before"),
        "{}",
        second.logs()
    );
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    let kinds = kinds(&events);
    assert_eq!(
        kinds.iter().filter(|k| *k == "question").count(),
        1,
        "asked once: {kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "status:queued"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_question_times_out_and_the_action_can_be_switched_off() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let task = |extra: Value| {
        let mut body = json!({
            "task": "Report the code the user picks",
            "start_url": site.url("/stairs/1?top=2"),
            "use_vision": false,
            "max_steps": 2,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let id = client
        .create_task(task(json!({"ask_human_timeout_s": 1})))
        .await;
    let failed = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("nobody answered") && error.contains("within 1 s"),
        "{error}"
    );
    let (status, _) = client
        .post("/v1/tasks", task(json!({"ask_human_timeout_s": 0})))
        .await;
    assert_eq!(status, 422);

    // Off for this task: not in the model's schema (the model's call fails as unknown).
    let before = model.requests().len();
    let id = client.create_task(task(json!({"ask_human": false}))).await;
    client.wait_status(&id, &["finished", "failed"], LONG).await;
    let requests = model.requests();
    assert!(requests.len() > before);
    assert!(requests[before..].iter().all(|r| !offers_ask_human(r)));
    assert!(offers_ask_human(&requests[0]));
    drop(server);

    // Off for every task by the operator.
    let db = TestDb::create().await;
    let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--no-ask-human"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let id = client.create_task(task(json!({}))).await;
    let ended = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    let requests = model.requests();
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| !offers_ask_human(r)));
}

/// A minimal MCP client over streamable HTTP (`/mcp`): JSON-RPC requests, answers read from
/// the SSE stream.
struct Mcp {
    http: reqwest::Client,
    url: String,
    key: String,
    session: String,
    next: std::sync::atomic::AtomicU64,
}

impl Mcp {
    async fn connect(address: &str, key: &str) -> Self {
        browserd_llm::install_tls_provider();
        let mut mcp = Mcp {
            http: reqwest::Client::new(),
            url: format!("http://{address}/mcp"),
            key: key.to_owned(),
            session: String::new(),
            next: std::sync::atomic::AtomicU64::new(1),
        };
        let (session, answer) = mcp
            .rpc(
                "initialize",
                json!({"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "ask-human-test", "version": "0"}}),
            )
            .await;
        assert!(answer.get("result").is_some(), "{answer}");
        mcp.session = session.expect("an MCP session id");
        let response = mcp
            .request()
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
        mcp
    }

    fn request(&self) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("accept", "application/json, text/event-stream");
        if !self.session.is_empty() {
            request = request.header("mcp-session-id", &self.session);
        }
        request
    }

    async fn rpc(&self, method: &str, params: Value) -> (Option<String>, Value) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let response = self
            .request()
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.unwrap();
        let message = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .chain(serde_json::from_str::<Value>(&text).ok())
            .find(|message| message["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"));
        (session, message)
    }

    /// A tool call's structured content.
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        let (_, answer) = self
            .rpc("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        answer["result"]["structuredContent"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_over_mcp() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let mcp = Mcp::connect(server.address(), &key).await;
    // run_task returns as soon as the task asks, with the question.
    let asked = mcp
        .call(
            "run_task",
            json!({"task": "Report the code the user picks",
                   "start_url": site.url("/stairs/1?top=2"), "wait_s": 90}),
        )
        .await;
    assert_eq!(asked["status"], "waiting", "{asked}");
    assert_eq!(asked["question"]["question"], "Which code should I report?");
    assert_eq!(asked["question"]["choices"], json!(["A", "B"]));
    assert!(
        asked["message"].as_str().unwrap().contains("answer_task"),
        "{asked}"
    );
    let id = asked["id"].as_str().unwrap().to_owned();
    // A choice not offered: the REST API's 422 body.
    let refused = mcp
        .call("answer_task", json!({"id": id, "choice": "C", "wait_s": 0}))
        .await;
    assert_eq!(refused["error"]["code"], "validation_failed", "{refused}");
    // The answer, then the result.
    let done = mcp
        .call(
            "answer_task",
            json!({"id": id, "choice": "A", "wait_s": 90}),
        )
        .await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["output"], "the user chose A");
    assert_eq!(done["question"], Value::Null);
}
