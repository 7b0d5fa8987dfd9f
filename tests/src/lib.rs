//! Support for browserd's whole-system tests: a fresh Postgres database per test, the real
//! `browserd` binary started as api / worker / serve child processes (logs captured, killable
//! with any signal), a mock model server speaking the OpenAI chat-completions wire format whose
//! answers are computed from the page text it is shown, local fixture pages, and a WebSocket
//! client of the task event stream.
//!
//! The only stand-in is the model; Postgres, Chromium and every browserd process are real.

pub mod cable_shop;
pub mod orders_app;
pub mod widgets;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::Html;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use regex::Regex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A secrets key for tests (32 bytes, base64).
pub const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The `browserd` binary built by `cargo test --workspace` (the browserd package has
/// integration tests, so cargo builds its binary before any test runs).
pub fn browserd_bin() -> PathBuf {
    if let Ok(path) = std::env::var("BROWSERD_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/browserd
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile> directory");
    let bin = profile_dir.join("browserd");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p browserd` (or the whole `cargo test --workspace`) first",
        bin.display()
    );
    bin
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository root")
        .to_path_buf()
}

/// A Python virtualenv holding exactly the pinned packages of `requirements` (a path relative to
/// the repository root), made once by `scripts/venv` and shared by every test that asks for the
/// same file. Returns the virtualenv's `bin/python`.
pub fn python_venv(requirements: &str) -> PathBuf {
    let root = repo_root();
    let output = std::process::Command::new(root.join("scripts/venv"))
        .arg(root.join(requirements))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/venv");
    assert!(
        output.status.success(),
        "scripts/venv {requirements} failed ({})",
        output.status
    );
    let dir = String::from_utf8(output.stdout).expect("venv path is UTF-8");
    PathBuf::from(dir.trim()).join("bin/python")
}

// ---------------------------------------------------------------- database

/// A database of its own for one test, dropped at the end.
pub struct TestDb {
    pub url: String,
    name: String,
    admin: String,
}

/// `url` (a TCP URL, or a Unix-socket one like `postgres:///browserd?host=/dir`, which the
/// private cluster's `browserd postgres url` prints) with its database replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let mut url = url::Url::parse(url).expect("DATABASE_URL is a URL");
    url.set_path(&format!("/{database}"));
    url.into()
}

impl TestDb {
    /// Creates an empty database on the server of `DATABASE_URL` (migrations are applied by
    /// the first browserd process).
    pub async fn create() -> Self {
        let base = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/browserd".to_owned());
        let name = format!("browserd_sys_{}", uuid::Uuid::new_v4().simple());
        let admin = with_database(&base, "postgres");
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .expect("connect to postgres");
        let create = format!("create database {name}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await
            .expect("create test database");
        Self {
            url: with_database(&base, &name),
            name,
            admin,
        }
    }

    pub async fn pool(&self) -> sqlx::PgPool {
        sqlx::PgPool::connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Best effort, off the test's runtime (which may be shutting down).
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Ok(mut conn) =
                    <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await
                {
                    let drop = format!("drop database if exists {name} with (force)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

// ---------------------------------------------------------------- processes

/// A running browserd child process.
pub struct Process {
    pub child: Child,
    pub logs: Arc<Mutex<String>>,
    /// The api address, for roles that listen.
    pub address: Option<String>,
    /// The metrics listener's address (`--metrics-listen`, the api roles' own), when it runs.
    pub metrics_address: Option<String>,
}

impl Process {
    /// Starts `browserd <role> args…` against `db` with the mock model `model`.
    pub async fn start(db: &TestDb, model: SocketAddr, role: &str, args: &[&str]) -> Self {
        Self::start_with_env(db, model, role, args, &[]).await
    }

    /// [`Process::start`] with extra environment variables; an empty value removes the variable
    /// (e.g. `("BROWSERD_RATE_LIMIT_PER_SECOND", "")`: the binary's default limit).
    pub async fn start_with_env(
        db: &TestDb,
        model: SocketAddr,
        role: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let listens = role == "api" || role == "serve";
        let mut command = Command::new(browserd_bin());
        command
            .arg(role)
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("BROWSERD_LISTEN", "127.0.0.1:0")
            // Not the fixed default port: tests run processes side by side.
            .env("BROWSERD_METRICS_LISTEN", "127.0.0.1:0")
            .env("BROWSERD_SECRETS_KEY", SECRETS_KEY)
            .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
            .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
            .env("BROWSERD_LLM_MOCK_BASE_URL", format!("http://{model}/v1"))
            .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
            .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
            .env("BROWSERD_LLM_MOCK_PRICE_INPUT", "1")
            .env("BROWSERD_LLM_MOCK_PRICE_OUTPUT", "2")
            // Whether a test's requests meet a limit would depend on how fast they come; the
            // limiters have tests of their own (crates/api/tests/{api,edge}.rs).
            .env("BROWSERD_RATE_LIMIT_PER_SECOND", "0")
            .env("BROWSERD_UNAUTH_RATE_LIMIT_PER_SECOND", "0")
            // Tests run one key's tasks side by side; the fair share of the slots by default
            // (`auto`) has its own test (tests/fair_limits.rs), which sets it back.
            .env("BROWSERD_MAX_RUNNING_PER_KEY", "0")
            // Per-key profile, session and schedule counts and the profile size: off unless a
            // test sets them (tests/key_limits.rs, tests/profiles.rs).
            .env("BROWSERD_MAX_PROFILES_PER_KEY", "0")
            .env("BROWSERD_MAX_SESSIONS_PER_KEY", "0")
            .env("BROWSERD_MAX_PROFILE_BYTES", "0")
            .env("BROWSERD_MAX_SCHEDULES_PER_KEY", "0")
            .env("RUST_LOG", "info,browserd_worker=debug")
            .env_remove("BROWSERD_CONFIG")
            .envs(env.iter().copied().filter(|(_, value)| !value.is_empty()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, _) in env.iter().filter(|(_, value)| value.is_empty()) {
            command.env_remove(name);
        }
        let mut child = command.spawn().expect("spawn browserd");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let logs = Arc::new(Mutex::new(String::new()));
        // Text logs (`listening address=…`) or JSON logs (`"address":"…"` on the listening line).
        let address_re = Regex::new(
            r#"listening address=(\S+)|"address":"([^"]+)"[^\n]*"message":"listening"|"message":"listening"[^\n]*"address":"([^"]+)""#,
        )
        .unwrap();
        // The metrics listener is bound (and logged) before the api's listening line.
        let metrics_re = Regex::new(
            r#"serving metrics address=(\S+)|"address":"([^"]+)"[^\n]*"message":"serving metrics"|"message":"serving metrics"[^\n]*"address":"([^"]+)""#,
        )
        .unwrap();
        let mut metrics_address = None;
        let ready_re = Regex::new(r"worker started").unwrap();
        let address = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let plain = strip_ansi(&line);
                {
                    let mut logs = logs.lock().unwrap();
                    logs.push_str(&plain);
                    logs.push('\n');
                }
                if listens
                    && metrics_address.is_none()
                    && let Some(c) = metrics_re.captures(&plain)
                {
                    let address = c.get(1).or(c.get(2)).or(c.get(3)).unwrap();
                    metrics_address = Some(address.as_str().to_owned());
                }
                if listens && let Some(c) = address_re.captures(&plain) {
                    let address = c.get(1).or(c.get(2)).or(c.get(3)).unwrap();
                    return Some(address.as_str().to_owned());
                }
                if !listens && ready_re.is_match(&plain) {
                    return None;
                }
            }
            panic!("browserd {role} exited:\n{}", logs.lock().unwrap());
        })
        .await
        .unwrap_or_else(|_| panic!("browserd {role} did not start within 60 s"));
        let sink = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut logs = sink.lock().unwrap();
                logs.push_str(&strip_ansi(&line));
                logs.push('\n');
            }
        });
        Self {
            child,
            logs,
            address,
            metrics_address,
        }
    }

    pub fn address(&self) -> &str {
        self.address.as_deref().expect("this role listens")
    }

    /// The metrics listener's address (`--metrics-listen`).
    pub fn metrics_address(&self) -> &str {
        self.metrics_address
            .as_deref()
            .expect("this process serves metrics on a listener of its own")
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).unwrap()
    }

    /// Sends `signal` (`KILL`, `TERM`, …) with kill(1).
    pub async fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; its exit code.
    pub async fn wait(&mut self, limit: Duration) -> Option<i32> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("browserd exited in time")
            .unwrap()
            .code()
    }
}

fn strip_ansi(line: &str) -> String {
    let re = Regex::new(r"\x1b\[[0-9;]*m").unwrap();
    re.replace_all(line, "").into_owned()
}

/// Creates an API key with the CLI.
pub async fn create_key(db: &TestDb) -> String {
    create_key_for(&db.url).await
}

/// Creates an API key with the CLI in the database at `database_url`; checks that the key is
/// printed on stdout alone.
pub async fn create_key_for(database_url: &str) -> String {
    let output = Command::new(browserd_bin())
        .args(["keys", "create", "--name", "system-test"])
        .env("DATABASE_URL", database_url)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("bd_"), "stdout is exactly the key: {key}");
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains(&key),
        "the key goes to stdout only"
    );
    key
}

// ---------------------------------------------------------------- api client

/// A client of one api process with one key.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub key: String,
    pub http: reqwest::Client,
}

impl Client {
    pub fn new(address: &str, key: &str) -> Self {
        browserd_llm::install_tls_provider();
        Self {
            base: format!("http://{address}"),
            key: key.to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.bearer_auth(&self.key).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get_bytes(&self, path: &str) -> (u16, String, Vec<u8>) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (
            status,
            content_type,
            response.bytes().await.unwrap().to_vec(),
        )
    }

    /// Creates a task; panics unless 201.
    pub async fn create_task(&self, body: Value) -> String {
        let (status, task) = self.post("/v1/tasks", body).await;
        assert_eq!(status, 201, "{task}");
        task["id"].as_str().unwrap().to_owned()
    }

    pub async fn task(&self, id: &str) -> Value {
        let (status, task) = self.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!(status, 200, "{task}");
        task
    }

    /// Polls until the task's status is one of `statuses` (at most `limit`).
    pub async fn wait_status(&self, id: &str, statuses: &[&str], limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let task = self.task(id).await;
            if statuses.iter().any(|s| task["status"] == *s) {
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task never reached {statuses:?}: {task}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens the event WebSocket after `after_seq`.
    pub async fn events(&self, id: &str, after_seq: i64) -> EventStream {
        let url = format!(
            "{}/v1/tasks/{id}/events?after_seq={after_seq}",
            self.base.replacen("http", "ws", 1)
        );
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.key).parse().unwrap(),
        );
        let (ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        EventStream { ws }
    }
}

impl Client {
    /// Opens the task's live view WebSocket (frames, and take-over inputs).
    pub async fn live(&self, id: &str) -> LiveSocket {
        let url = format!("{}/v1/tasks/{id}/live", self.base.replacen("http", "ws", 1));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.key).parse().unwrap(),
        );
        let (ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        LiveSocket { ws }
    }

    /// Opens the task's live view with a ticket of `scope` (`view`, `control`) alone, as a
    /// browser given a link does.
    pub async fn live_with_ticket(&self, id: &str, scope: &str) -> LiveSocket {
        let (status, ticket) = self
            .post(
                &format!("/v1/tasks/{id}/events/ticket"),
                serde_json::json!({ "scope": scope }),
            )
            .await;
        assert_eq!(status, 201, "{ticket}");
        let url = format!(
            "{}{}",
            self.base.replacen("http", "ws", 1),
            ticket["live_url"].as_str().unwrap()
        );
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        LiveSocket { ws }
    }
}

/// A task's live view socket.
pub struct LiveSocket {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl LiveSocket {
    /// The next text message (frames are skipped), `None` once the server closed the socket.
    pub async fn next_text(&mut self, limit: Duration) -> Option<Value> {
        loop {
            match tokio::time::timeout(limit, self.ws.next())
                .await
                .expect("a live view message in time")
            {
                Some(Ok(Message::Text(text))) => {
                    return Some(serde_json::from_str(text.as_str()).unwrap());
                }
                Some(Ok(Message::Close(_))) | None => return None,
                Some(Ok(_)) => {}
                Some(Err(err)) => panic!("websocket error: {err}"),
            }
        }
    }

    /// Sends `input` and answers the close frame's code and reason (text messages and frames
    /// before it are skipped).
    pub async fn send_until_closed(&mut self, input: Value) -> (u16, String) {
        use futures::SinkExt;
        self.ws
            .send(Message::Text(input.to_string().into()))
            .await
            .unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("the live view closed in time")
            {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(Message::Close(None))) | None => panic!("closed without a close frame"),
                Some(Ok(_)) => {}
                Some(Err(err)) => panic!("websocket error: {err}"),
            }
        }
    }

    /// Sends one take-over input and answers the server's reply to it.
    pub async fn send_input(&mut self, input: Value) -> Value {
        use futures::SinkExt;
        self.ws
            .send(Message::Text(input.to_string().into()))
            .await
            .unwrap();
        loop {
            let message = self
                .next_text(Duration::from_secs(30))
                .await
                .expect("the live view closed before answering an input");
            if message["type"] != "viewport" {
                return message;
            }
        }
    }
}

/// A task's live event stream.
pub struct EventStream {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl EventStream {
    /// The next event, `None` once the server closed the stream (after the final event).
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        loop {
            match tokio::time::timeout(limit, self.ws.next())
                .await
                .expect("an event in time")
            {
                Some(Ok(Message::Text(text))) => {
                    return Some(serde_json::from_str(text.as_str()).unwrap());
                }
                Some(Ok(Message::Close(_))) | None => return None,
                Some(Ok(_)) => {}
                Some(Err(err)) => panic!("websocket error: {err}"),
            }
        }
    }

    /// Every event until the stream closes.
    pub async fn until_closed(&mut self, limit: Duration) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next(limit).await {
            events.push(event);
        }
        events
    }
}

// ---------------------------------------------------------------- mock model

/// Computes the model's answer (an AgentOutput) from the page text it was shown.
pub type Brain = Arc<dyn Fn(&str) -> Value + Send + Sync>;

/// Computes the model's answer from the whole request body (its messages, its schema).
pub type RequestBrain = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// An OpenAI-compatible chat-completions server.
pub struct MockModel {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Value>>>,
}

#[derive(Clone)]
struct ModelState {
    brain: RequestBrain,
    delay: Duration,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl MockModel {
    /// Starts the server; each answer takes `delay` (a fixed model latency).
    pub async fn start(brain: Brain, delay: Duration) -> Self {
        Self::start_on_requests(
            Arc::new(move |request: &Value| brain(&page_text(request))),
            delay,
        )
        .await
    }

    /// As [`MockModel::start`], with a brain that reads the whole request.
    pub async fn start_on_requests(brain: RequestBrain, delay: Duration) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = ModelState {
            brain,
            delay,
            requests: requests.clone(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, requests }
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn completions(State(state): State<ModelState>, Json(request): Json<Value>) -> Json<Value> {
    state.requests.lock().unwrap().push(request.clone());
    tokio::time::sleep(state.delay).await;
    let output = (state.brain)(&request);
    Json(json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": "mock-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": output.to_string()}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
    }))
}

/// Text of every message of a chat-completions request, in order.
pub fn message_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `<browser_state>` part of the state message.
pub fn page_text(request: &Value) -> String {
    message_texts(request)
        .into_iter()
        .rev()
        .find_map(|t| t.rfind("<browser_state>").map(|i| t[i..].to_owned()))
        .unwrap_or_default()
}

/// An AgentOutput with `actions`.
pub fn reply(goal: &str, actions: Value) -> Value {
    json!({
        "thinking": format!("I will {goal}."),
        "evaluation_previous_goal": "Looks right.",
        "memory": format!("Working on: {goal}"),
        "next_goal": goal,
        "action": actions
    })
}

/// An AgentOutput calling `done`.
pub fn done_reply(text: &str, success: bool) -> Value {
    reply(
        "finish",
        json!([{"done": {"text": text, "success": success}}]),
    )
}

/// Index of the first `<tag …>` line of the page text matching `pattern`.
pub fn index_of(page: &str, tag: &str, pattern: &str) -> Option<u64> {
    let re = Regex::new(&format!(r"\[(\d+)\]<{tag}\b[^\n]*{pattern}")).unwrap();
    re.captures(page).and_then(|c| c[1].parse().ok())
}

/// The model that asks a person (`ask_human`) which code to report, offering the choices A and
/// B, then reports the answer it got (`the user chose X`).
pub fn choosing_brain() -> RequestBrain {
    Arc::new(|request: &Value| {
        let text = message_texts(request).join("\n");
        if let Some(at) = text.find("The user answered: ") {
            let answer: String = text[at + "The user answered: ".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .collect();
            return done_reply(&format!("the user chose {answer}"), true);
        }
        reply(
            "ask which code to report",
            json!([{"ask_human": {"question": "Which code should I report?", "choices": ["A", "B"]}}]),
        )
    })
}

/// The task [`choosing_brain`] works on: the stairs fixture's first stair, without vision.
pub fn choosing_task(site: &Site) -> Value {
    json!({
        "task": "Report the code the user picks",
        "start_url": site.url("/stairs/1?top=2"),
        "use_vision": false,
    })
}

/// A `browserd serve` whose task (one of a new key's) waits for a person's answer: the
/// [`choosing_task`] run by [`choosing_brain`], already asking "Which code should I report?".
pub struct WaitingTask {
    pub db: TestDb,
    pub model: MockModel,
    pub site: Site,
    pub server: Process,
    pub key: String,
    pub client: Client,
    pub id: String,
}

impl WaitingTask {
    pub async fn start() -> Self {
        let site = Site::start().await;
        let model = MockModel::start_on_requests(choosing_brain(), Duration::from_millis(20)).await;
        let db = TestDb::create().await;
        let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
        let key = create_key(&db).await;
        let client = Client::new(server.address(), &key);
        let id = client.create_task(choosing_task(&site)).await;
        client
            .wait_status(&id, &["waiting"], Duration::from_secs(90))
            .await;
        Self {
            db,
            model,
            site,
            server,
            key,
            client,
            id,
        }
    }
}

/// The model for the stairs fixture: click "Next" until the page says it is the top, then
/// report the number written there.
pub fn stairs_brain() -> Brain {
    Arc::new(|page: &str| {
        let top = Regex::new(r"Top reached: (\w+)").unwrap();
        if let Some(c) = top.captures(page) {
            return done_reply(&format!("The code at the top is {}", &c[1]), true);
        }
        match index_of(page, "a", r"/>\s*Next") {
            Some(index) => reply("climb one stair", json!([{"click": {"index": index}}])),
            None => done_reply(&format!("no Next link on:\n{page}"), false),
        }
    })
}

/// A task that climbs the stairs fixture from stair 1 to `top` and reports the code there
/// (`CODE{top}X`), without vision.
pub fn climb_task(site: &Site, top: u32) -> Value {
    json!({
        "task": "Climb to the top and report the code",
        "start_url": site.url(&format!("/stairs/1?top={top}")),
        "use_vision": false,
    })
}

/// Step numbers 0..=N, each once.
pub fn assert_steps_contiguous(steps: &[Value]) {
    let numbers: Vec<i64> = steps
        .iter()
        .map(|s| s["number"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = (0..numbers.len() as i64).collect();
    assert_eq!(
        numbers, expected,
        "steps are 0..N without gaps or duplicates"
    );
}

/// A task's stored steps (`GET /v1/tasks/{id}/steps`, every page).
pub async fn stored_steps(client: &Client, id: impl std::fmt::Display) -> Vec<Value> {
    let mut steps = Vec::new();
    let mut path = format!("/v1/tasks/{id}/steps?limit=500");
    loop {
        let (status, page) = client.get(&path).await;
        assert_eq!(status, 200, "{page}");
        steps.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_after_step"].as_i64() {
            Some(after) => path = format!("/v1/tasks/{id}/steps?limit=500&after_step={after}"),
            None => return steps,
        }
    }
}

/// A task's AgentHistory items (`GET /v1/tasks/{id}/history`, every page) and its usage: the
/// `{"history", "usage"}` document of `browserd run --history-out`.
pub async fn stored_history(client: &Client, id: impl std::fmt::Display) -> Value {
    let mut history = Vec::new();
    let mut path = format!("/v1/tasks/{id}/history?limit=500");
    loop {
        let (status, page) = client.get(&path).await;
        assert_eq!(status, 200, "{page}");
        history.extend(page["history"].as_array().cloned().unwrap_or_default());
        match page["next_after_step"].as_i64() {
            Some(after) => path = format!("/v1/tasks/{id}/history?limit=500&after_step={after}"),
            None => return serde_json::json!({"history": history, "usage": page["usage"]}),
        }
    }
}

/// A `serve` with the stairs site, a mock model answering with `brain`, a fresh database and a
/// client holding a key: the start of most whole-system scenarios. Keep `db` bound (`db: _db`)
/// when destructuring: dropping it drops the database.
pub struct Scenario {
    pub site: Site,
    pub model: MockModel,
    pub db: TestDb,
    pub server: Process,
    pub client: Client,
}

impl Scenario {
    /// `browserd serve --allow-loopback args…` with `env` on top of [`Process`]'s.
    pub async fn serve(brain: Brain, delay: Duration, args: &[&str], env: &[(&str, &str)]) -> Self {
        let site = Site::start().await;
        let model = MockModel::start(brain, delay).await;
        let db = TestDb::create().await;
        let mut all_args = vec!["--allow-loopback"];
        all_args.extend_from_slice(args);
        let server = Process::start_with_env(&db, model.addr, "serve", &all_args, env).await;
        let key = create_key(&db).await;
        let client = Client::new(server.address(), &key);
        Self {
            site,
            model,
            db,
            server,
            client,
        }
    }
}

// ---------------------------------------------------------------- fixture pages

/// Local pages: `/stairs/{n}?top=T` (a "Next" link to n+1 until T, where the page shows a code),
/// `/login` (a form whose password must be the task secret), `/ticker` (repaints on every
/// animation frame: a screencast always has a new frame).
pub struct Site {
    pub addr: SocketAddr,
    pub logins: Arc<Mutex<Vec<(String, String)>>>,
}

#[derive(Clone, Default)]
struct SiteState {
    logins: Arc<Mutex<Vec<(String, String)>>>,
}

impl Site {
    pub async fn start() -> Self {
        let state = SiteState::default();
        let app = Router::new()
            .route("/stairs/{n}", get(stairs))
            .route("/login", get(|| async { Html(LOGIN) }).post(login))
            .route("/ticker", get(|| async { Html(TICKER) }))
            .route("/takeover", get(|| async { Html(TAKEOVER) }))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            logins: state.logins,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// `/login`'s form at fixed places (CSS pixels): the name field around (120, 40), the password
/// field around (120, 100), the button around (120, 160); a long page below.
const TAKEOVER: &str = r#"<!doctype html><html><head><title>Sign in by hand</title>
<style>body { margin: 0; height: 3000px; } input, button { position: absolute; left: 20px;
width: 300px; height: 40px; box-sizing: border-box; }</style></head><body>
<form method="post" action="/login">
  <input type="text" name="username" aria-label="User" style="top: 20px">
  <input type="password" name="password" aria-label="Password" style="top: 80px">
  <button type="submit" style="top: 140px">Sign in</button>
</form></body></html>"#;

const TICKER: &str = "<!doctype html><html><head><title>Ticker</title></head><body>\
    <h1>Ticker</h1><p>Frame <span id=\"count\">0</span></p><button>Tick</button>\
    <script>let n = 0; (function tick() { n += 1; \
    document.getElementById('count').textContent = String(n); \
    requestAnimationFrame(tick); })();</script></body></html>";

async fn stairs(
    Path(n): Path<u32>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Html<String> {
    let top: u32 = query.get("top").and_then(|t| t.parse().ok()).unwrap_or(3);
    if n >= top {
        return Html(format!(
            "<!doctype html><html><head><title>Stair {n}</title></head><body>\
             <h1>Stair {n}</h1><p>Top reached: CODE{top}X</p></body></html>"
        ));
    }
    Html(format!(
        "<!doctype html><html><head><title>Stair {n}</title></head><body>\
         <h1>Stair {n} of {top}</h1><p><a href=\"/stairs/{}?top={top}\">Next</a></p></body></html>",
        n + 1
    ))
}

const LOGIN: &str = r#"<!doctype html><html><head><title>Login</title></head><body>
<form method="post" action="/login">
  <label>User <input type="text" name="username"></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit" id="signin">Sign in</button>
</form></body></html>"#;

async fn login(
    State(state): State<SiteState>,
    axum::extract::Form(form): axum::extract::Form<std::collections::HashMap<String, String>>,
) -> Html<String> {
    let user = form.get("username").cloned().unwrap_or_default();
    let pass = form.get("password").cloned().unwrap_or_default();
    state.logins.lock().unwrap().push((user.clone(), pass));
    Html(format!(
        "<!doctype html><html><head><title>Account</title></head><body><h1>Welcome, {user}!</h1>\
         <p>Balance: 42 EUR</p></body></html>"
    ))
}

/// A command run on a pseudo-terminal (util-linux `script`, in every Debian install), as at a
/// person's interactive terminal: its stdin is a terminal, what it prints (stdout, stderr and
/// the terminal's echo of what was typed) is read as it comes, and lines can be typed into it.
pub struct Terminal {
    child: Child,
    stdin: tokio::process::ChildStdin,
    output: tokio::sync::watch::Receiver<String>,
}

impl Terminal {
    /// Starts `program args…` on a new terminal, with `env` added to this process's
    /// environment (`BROWSERD_CONFIG` removed).
    pub fn spawn(program: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        // `script -c` takes one shell command line: each word single-quoted.
        let quote = |word: &str| format!("'{}'", word.replace('\'', r"'\''"));
        let line = std::iter::once(quote(&program.to_string_lossy()))
            .chain(args.iter().map(|a| quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = Command::new("script")
            .args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .envs(env.iter().copied())
            .env_remove("BROWSERD_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn script (util-linux)");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (sender, output) = tokio::sync::watch::channel(String::new());
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buffer = vec![0u8; 8192];
            while let Ok(n) = stdout.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                sender.send_modify(|all| all.push_str(&text));
            }
        });
        Self {
            child,
            stdin,
            output,
        }
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        self.output.borrow().clone()
    }

    /// Waits until the terminal shows `text` (at most `limit`), then returns what it shows.
    pub async fn wait_for(&mut self, text: &str, limit: Duration) -> String {
        let shown = tokio::time::timeout(limit, self.output.wait_for(|all| all.contains(text)))
            .await
            .map(|seen| seen.map(|all| all.clone()));
        match shown {
            Ok(Ok(all)) => all,
            _ => panic!(
                "the terminal never showed {text:?}; it shows:\n{}",
                self.output()
            ),
        }
    }

    /// Types `line` and Enter.
    pub async fn type_line(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{line}\r").as_bytes())
            .await
            .expect("type into the terminal");
        self.stdin.flush().await.unwrap();
    }

    /// Waits (at most `limit`) for the command to exit: its exit status and all it printed.
    pub async fn exit(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the command did not exit; it shows:\n{}", self.output()))
            .expect("wait for script");
        // The reader sees the end of the output once `script` has exited.
        let _ = tokio::time::timeout(limit, self.output.changed()).await;
        (status, self.output())
    }
}
