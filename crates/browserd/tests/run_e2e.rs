//! End-to-end runs of the real `browserd run` binary: real Chromium on local fixture apps, and a
//! mock OpenAI-compatible server (real HTTP on 127.0.0.1) whose scripted replies pick element
//! indices from the state message it received — so the whole loop (capture → prompt → model →
//! action → page) is exercised. Runs are serialised: one Chrome at a time on a 2-core machine.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::response::Html;
use axum::routing::{get, post};
use axum::{Json, Router};
use browserd_tests::{done_reply, index_of, message_texts, page_text, reply};
use regex::Regex;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

static ONE_CHROME_AT_A_TIME: Semaphore = Semaphore::const_new(1);

// ---------------------------------------------------------------- fixture apps

/// What the fixture app received (its server-side state).
#[derive(Default)]
struct AppLog {
    logins: Vec<(String, String)>,
    searches: Vec<String>,
    items_viewed: Vec<String>,
    orders: Vec<(String, String)>,
}

type Shared = Arc<Mutex<AppLog>>;

const LOGIN: &str = r#"<!doctype html><html><head><title>Bank login</title></head><body>
<h1>Sign in</h1>
<form method="post" action="/login">
  <label>User <input type="text" name="username"></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit" id="signin">Sign in</button>
</form></body></html>"#;

async fn login_submit(
    State(log): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Html<String> {
    let user = form.get("username").cloned().unwrap_or_default();
    let pass = form.get("password").cloned().unwrap_or_default();
    log.lock()
        .unwrap()
        .logins
        .push((user.clone(), pass.clone()));
    if user == "alice" && pass == "hunter2-xyz" {
        Html(format!(
            "<!doctype html><html><head><title>Account</title></head><body><h1>Welcome, {user}!</h1><p id=balance>Your balance is 42 EUR.</p></body></html>"
        ))
    } else {
        Html(format!(
            "<!doctype html><html><head><title>Bank login</title></head><body><p>Wrong password.</p>{LOGIN}</body></html>"
        ))
    }
}

const SEARCH: &str = r#"<!doctype html><html><head><title>Book shop</title></head><body>
<form method="get" action="/results"><input type="search" name="q" placeholder="Search books">
<button type="submit">Search</button></form></body></html>"#;

async fn results(
    State(log): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Html<String> {
    let query = q.get("q").cloned().unwrap_or_default();
    log.lock().unwrap().searches.push(query.clone());
    Html(format!(
        "<!doctype html><html><head><title>Results for {query}</title></head><body><h1>Results</h1><ul>\
<li><a href=\"/item/programming-rust\">Programming Rust</a></li>\
<li><a href=\"/item/rust-in-action\">Rust in Action</a></li>\
<li><a href=\"/item/zero-to-production\">Zero To Production</a></li></ul></body></html>"
    ))
}

async fn item(
    State(log): State<Shared>,
    axum::extract::Path(slug): axum::extract::Path<String>,
) -> Html<String> {
    log.lock().unwrap().items_viewed.push(slug.clone());
    let price = if slug == "rust-in-action" { "39" } else { "45" };
    Html(format!(
        "<!doctype html><html><head><title>{slug}</title></head><body><h1>{slug}</h1><p>Price: {price} USD</p></body></html>"
    ))
}

const ORDER: &str = r#"<!doctype html><html><head><title>Order a shirt</title></head><body>
<form method="post" action="/order">
  <label>Full name <input type="text" name="fullname"></label>
  <label>Colour <select name="color"><option value="">Choose…</option><option value="red">Red</option><option value="green">Green</option><option value="blue">Blue</option></select></label>
  <button type="submit">Place order</button>
</form></body></html>"#;

async fn order_submit(
    State(log): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Html<String> {
    let name = form.get("fullname").cloned().unwrap_or_default();
    let color = form.get("color").cloned().unwrap_or_default();
    log.lock()
        .unwrap()
        .orders
        .push((name.clone(), color.clone()));
    Html(format!(
        "<!doctype html><html><head><title>Thanks</title></head><body><p>Order placed for {name} in {color}.</p></body></html>"
    ))
}

const PRODUCT: &str = r#"<!doctype html><html><head><title>Widget Pro</title></head><body>
<h1 id="name">Widget Pro</h1><p>Price: <span id="price">19.99</span> USD</p><p>In stock.</p></body></html>"#;

/// "Remember me" sets a cookie and a localStorage token in the page; the page shows both.
const REMEMBER: &str = r#"<!doctype html><html><head><title>Remember</title></head><body>
<p id="state"></p><button id="remember" onclick="document.cookie = 'remember=yes; max-age=3600';
localStorage.setItem('token', 't-1'); show();">Remember me</button>
<script>function show() { document.getElementById('state').textContent = 'Cookie: ' +
(document.cookie || 'none') + ' Token: ' + (localStorage.getItem('token') || 'none'); }
show();</script></body></html>"#;

async fn start_app() -> (SocketAddr, Shared) {
    let log: Shared = Arc::default();
    let app = Router::new()
        .route("/login", get(|| async { Html(LOGIN) }).post(login_submit))
        .route("/search", get(|| async { Html(SEARCH) }))
        .route("/results", get(results))
        .route("/item/{slug}", get(item))
        .route("/order", get(|| async { Html(ORDER) }).post(order_submit))
        .route("/product", get(|| async { Html(PRODUCT) }))
        .route("/remember", get(|| async { Html(REMEMBER) }))
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, log)
}

// ---------------------------------------------------------------- mock model

/// One scripted turn: given the page text of the state message, the AgentOutput to return.
type Turn = Box<dyn Fn(&str) -> Value + Send + Sync>;

struct MockModel {
    script: Vec<Turn>,
    requests: Mutex<Vec<Value>>,
}

async fn completions(
    State(model): State<Arc<MockModel>>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let turn = {
        let mut requests = model.requests.lock().unwrap();
        requests.push(request.clone());
        requests.len() - 1
    };
    let page = page_text(&request);
    let output = match model.script.get(turn) {
        Some(script) => script(&page),
        None => done_reply("the script has no more turns", false),
    };
    Json(json!({
        "id": format!("chatcmpl-{turn}"),
        "object": "chat.completion",
        "model": "mock-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": output.to_string()}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
    }))
}

async fn start_model(script: Vec<Turn>) -> (SocketAddr, Arc<MockModel>) {
    let model = Arc::new(MockModel {
        script,
        requests: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(model.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, model)
}

/// A turn whose actions need element indices; when one is missing the model gives up (the
/// run then fails), showing what it saw.
fn with_indices(
    lookups: Vec<(&'static str, &'static str)>,
    build: impl Fn(&[u64]) -> Value + Send + Sync + 'static,
) -> Turn {
    Box::new(move |page: &str| {
        let mut found = Vec::new();
        for (tag, pattern) in &lookups {
            match index_of(page, tag, pattern) {
                Some(i) => found.push(i),
                None => {
                    return done_reply(
                        &format!("no <{tag}> matching {pattern} in:\n{page}"),
                        false,
                    );
                }
            }
        }
        build(&found)
    })
}

// ---------------------------------------------------------------- running the binary

struct RunOutput {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    history: Value,
}

async fn run_browserd(model: SocketAddr, dir: &Path, args: &[&str]) -> RunOutput {
    run_browserd_with_env(model, dir, args, &[]).await
}

/// `browserd run`'s command line in every scenario: `args`, then loopback allowed, no vision,
/// 8 steps at most, the history file and the workspace in `dir`.
fn run_args(dir: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["run".to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(
        ["--allow-loopback", "--no-vision", "--max-steps", "8"]
            .iter()
            .map(|a| a.to_string()),
    );
    all.push("--history-out".to_owned());
    all.push(dir.join("history.json").to_string_lossy().into_owned());
    all.push("--workspace".to_owned());
    all.push(dir.join("workspace").to_string_lossy().into_owned());
    all
}

/// The environment that points `browserd run` at the mock model listening on `model`.
fn model_env(model: SocketAddr) -> Vec<(&'static str, String)> {
    vec![
        ("BROWSERD_LLM_DEFAULT_MODEL", "mock".to_owned()),
        ("BROWSERD_LLM_MOCK_PROVIDER", "openai".to_owned()),
        ("BROWSERD_LLM_MOCK_BASE_URL", format!("http://{model}/v1")),
        ("BROWSERD_LLM_MOCK_MODEL", "mock-model".to_owned()),
        ("BROWSERD_LLM_MOCK_MAX_RETRIES", "0".to_owned()),
        ("RUST_LOG", "warn".to_owned()),
    ]
}

async fn run_browserd_with_env(
    model: SocketAddr,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> RunOutput {
    let _permit = ONE_CHROME_AT_A_TIME.acquire().await.unwrap();
    let history_path = dir.join("history.json");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args(run_args(dir, args))
        .envs(model_env(model))
        .envs(env.iter().copied())
        .env_remove("BROWSERD_CONFIG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output)
        .await
        .expect("browserd run took longer than 2 minutes")
        .expect("spawn browserd");
    let history = std::fs::read(&history_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    RunOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        history,
    }
}

fn action_names(history: &Value) -> Vec<String> {
    history["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["model_output"]["action"].as_array())
        .flatten()
        .filter_map(|a| a.as_object().and_then(|o| o.keys().next().cloned()))
        .collect()
}

fn last_result(history: &Value) -> Value {
    history["history"]
        .as_array()
        .and_then(|h| h.last())
        .and_then(|h| h["result"].as_array())
        .and_then(|r| r.last())
        .cloned()
        .unwrap_or(Value::Null)
}

// ---------------------------------------------------------------- scenarios

#[tokio::test]
async fn login_with_a_secret_password_succeeds_and_never_leaks_it() {
    let (app, log) = start_app().await;
    let script: Vec<Turn> = vec![
        with_indices(
            vec![("input", "name=username"), ("input", "type=password")],
            |i| {
                reply(
                    "fill in the login form",
                    json!([
                        {"input": {"index": i[0], "text": "alice"}},
                        {"input": {"index": i[1], "text": "<secret>password</secret>"}}
                    ]),
                )
            },
        ),
        with_indices(vec![("button", "signin")], |i| {
            reply("submit the form", json!([{"click": {"index": i[0]}}]))
        }),
        Box::new(|page: &str| {
            let re = Regex::new(r"balance is (\d+) EUR").unwrap();
            match re.captures(page) {
                Some(c) => done_reply(&format!("Logged in; the balance is {} EUR", &c[1]), true),
                None => done_reply(&format!("no balance on the page:\n{page}"), false),
            }
        }),
    ];
    let (model_addr, model) = start_model(script).await;
    let dir = tempfile::tempdir().unwrap();
    let start = format!("http://{app}/login");
    let out = run_browserd_with_env(
        model_addr,
        dir.path(),
        &[
            "Log in as alice with the password <secret>password</secret> and report the balance",
            "--start-url",
            &start,
            "--secret",
            "password",
            "--allowed-domain",
            "127.0.0.1",
        ],
        &[("BROWSERD_SECRET_PASSWORD", "hunter2-xyz")],
    )
    .await;
    assert_eq!(
        out.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains("the balance is 42 EUR"),
        "{}",
        out.stdout
    );
    // The app got the real credentials.
    assert_eq!(
        log.lock().unwrap().logins,
        [("alice".to_owned(), "hunter2-xyz".to_owned())]
    );
    // The history: initial navigation + 3 model steps, done with success.
    assert_eq!(out.history["history"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        action_names(&out.history)[1..],
        ["input", "input", "click", "done"]
    );
    let last = last_result(&out.history);
    assert_eq!(last["is_done"], true);
    assert_eq!(last["success"], true);
    // The secret never reached the model, the terminal or the history.
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), 3);
    for r in requests.iter() {
        assert!(!r.to_string().contains("hunter2-xyz"));
    }
    assert!(!out.stderr.contains("hunter2-xyz") && !out.stdout.contains("hunter2-xyz"));
    assert!(!out.history.to_string().contains("hunter2-xyz"));
    // The steps were shown live.
    assert!(out.stderr.contains("step 2"), "{}", out.stderr);
    assert!(
        out.stderr.contains("next goal: submit the form"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn search_and_click_a_result() {
    let (app, log) = start_app().await;
    let script: Vec<Turn> = vec![
        with_indices(vec![("input", "name=q"), ("button", "")], |i| {
            reply(
                "search for rust books",
                json!([
                    {"input": {"index": i[0], "text": "rust"}},
                    {"click": {"index": i[1]}}
                ]),
            )
        }),
        with_indices(vec![("a", r"/>\n\s*Rust in Action")], |i| {
            reply("open Rust in Action", json!([{"click": {"index": i[0]}}]))
        }),
        Box::new(|page: &str| {
            let re = Regex::new(r"Price: (\d+) USD").unwrap();
            match re.captures(page) {
                Some(c) if page.contains("rust-in-action") => {
                    done_reply(&format!("Rust in Action costs {} USD", &c[1]), true)
                }
                _ => done_reply(&format!("not on the item page:\n{page}"), false),
            }
        }),
    ];
    let (model_addr, model) = start_model(script).await;
    let dir = tempfile::tempdir().unwrap();
    let start = format!("http://{app}/search");
    let out = run_browserd(
        model_addr,
        dir.path(),
        &[
            "Find the price of the book Rust in Action",
            "--start-url",
            &start,
        ],
    )
    .await;
    assert_eq!(
        out.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("costs 39 USD"), "{}", out.stdout);
    {
        let log = log.lock().unwrap();
        assert_eq!(log.searches, ["rust"]);
        assert_eq!(log.items_viewed, ["rust-in-action"]);
    }
    assert_eq!(model.requests.lock().unwrap().len(), 3);
    let urls: Vec<&str> = out.history["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["state"]["url"].as_str())
        .collect();
    assert!(
        urls.iter().any(|u| u.contains("/results?q=rust")),
        "{urls:?}"
    );
    assert!(
        urls.last().unwrap().ends_with("/item/rust-in-action"),
        "{urls:?}"
    );
}

#[tokio::test]
async fn form_with_a_select_is_submitted() {
    let (app, log) = start_app().await;
    let script: Vec<Turn> = vec![
        with_indices(
            vec![("input", "name=fullname"), ("select", "name=color")],
            |i| {
                reply(
                    "fill in name and colour",
                    json!([
                        {"input": {"index": i[0], "text": "Bob Smith"}},
                        {"select_dropdown": {"index": i[1], "text": "Green"}}
                    ]),
                )
            },
        ),
        with_indices(vec![("button", "")], |i| {
            reply("place the order", json!([{"click": {"index": i[0]}}]))
        }),
        Box::new(|page: &str| {
            if page.contains("Order placed for Bob Smith in green") {
                done_reply("Order placed", true)
            } else {
                done_reply(&format!("no confirmation:\n{page}"), false)
            }
        }),
    ];
    let (model_addr, _model) = start_model(script).await;
    let dir = tempfile::tempdir().unwrap();
    let task = format!("Order a green shirt for Bob Smith at http://{app}/order");
    // No --start-url: the only URL of the task is opened first.
    let out = run_browserd(model_addr, dir.path(), &[&task]).await;
    assert_eq!(
        out.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(
        log.lock().unwrap().orders,
        [("Bob Smith".to_owned(), "green".to_owned())]
    );
    let first_step_results = &out.history["history"][1]["result"];
    assert!(
        first_step_results[1]["error"].is_null(),
        "{first_step_results}"
    );
}

#[tokio::test]
async fn structured_output_must_satisfy_the_schema() {
    let (app, _log) = start_app().await;
    let script: Vec<Turn> = vec![
        // Wrong type for price: the schema check must refuse it and tell the model why.
        Box::new(|_page: &str| {
            reply(
                "report the product",
                json!([{"done": {"data": {"name": "Widget Pro", "price": "cheap"}, "success": true}}]),
            )
        }),
        Box::new(|page: &str| {
            let name = Regex::new(r"Widget \w+")
                .unwrap()
                .find(page)
                .map(|m| m.as_str().to_owned());
            let price = Regex::new(r"Price:\s*(\d+\.\d+)")
                .unwrap()
                .captures(page)
                .and_then(|c| c[1].parse::<f64>().ok());
            match (name, price) {
                (Some(name), Some(price)) => reply(
                    "report the product",
                    json!([{"done": {"data": {"name": name, "price": price}, "success": true}}]),
                ),
                _ => reply(
                    "give up",
                    json!([{"done": {"data": {"name": "?", "price": 0}, "success": false}}]),
                ),
            }
        }),
    ];
    let (model_addr, model) = start_model(script).await;
    let dir = tempfile::tempdir().unwrap();
    let schema_path = dir.path().join("schema.json");
    std::fs::write(
        &schema_path,
        json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
            "required": ["name", "price"],
            "additionalProperties": false
        })
        .to_string(),
    )
    .unwrap();
    let start = format!("http://{app}/product");
    let out = run_browserd(
        model_addr,
        dir.path(),
        &[
            "Report the product name and price",
            "--start-url",
            &start,
            "--output-schema",
            schema_path.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(
        out.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    let printed: Value =
        serde_json::from_str(out.stdout.trim()).expect("stdout is the JSON result");
    assert_eq!(printed, json!({"name": "Widget Pro", "price": 19.99}));
    // The second request told the model what was wrong with the first answer.
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    let second = message_texts(&requests[1]).join("\n");
    assert!(
        second.contains("cheap") || second.contains("number"),
        "{second}"
    );
    let final_result = last_result(&out.history);
    assert_eq!(final_result["success"], true);
}

#[tokio::test]
async fn a_failed_task_exits_non_zero() {
    let (app, _log) = start_app().await;
    let script: Vec<Turn> = vec![Box::new(|_page: &str| {
        done_reply("The page has no such thing", false)
    })];
    let (model_addr, _model) = start_model(script).await;
    let dir = tempfile::tempdir().unwrap();
    let start = format!("http://{app}/product");
    let out = run_browserd(
        model_addr,
        dir.path(),
        &["Find the CEO's phone number", "--start-url", &start],
    )
    .await;
    assert_eq!(
        out.code,
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.contains("did not succeed"), "{}", out.stderr);
    assert_eq!(last_result(&out.history)["success"], false);
}

/// A model that never answers in time: Ctrl-C must stop the run mid-call and leave no Chrome.
#[tokio::test]
async fn ctrl_c_stops_the_run_and_closes_chrome() {
    let _permit = ONE_CHROME_AT_A_TIME.acquire().await.unwrap();
    let (app, _log) = start_app().await;
    let called = Arc::new(tokio::sync::Notify::new());
    let slow = Router::new().route(
        "/v1/chat/completions",
        post({
            let called = called.clone();
            move || async move {
                called.notify_one();
                tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, slow).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args([
            "run",
            "Report the product price",
            "--allow-loopback",
            "--no-vision",
        ])
        .arg("--start-url")
        .arg(format!("http://{app}/product"))
        .arg("--workspace")
        .arg(dir.path().join("workspace"))
        .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
        .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
        .env("BROWSERD_LLM_MOCK_BASE_URL", format!("http://{model}/v1"))
        .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
        .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
        .env("RUST_LOG", "warn")
        .env_remove("BROWSERD_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(60), called.notified())
        .await
        .expect("the model was never called");
    let chrome_pids = browserd_browser::pool::descendant_pids(pid);
    assert!(!chrome_pids.is_empty(), "no Chrome under browserd");
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("browserd did not stop within 30 s of Ctrl-C")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = err.read_to_string(&mut stderr).await;
    }
    assert!(stderr.contains("stopped by Ctrl-C"), "{stderr}");
    for chrome in chrome_pids {
        assert!(
            !browserd_browser::pool::pid_alive(chrome),
            "Chrome process {chrome} survived"
        );
    }
}

#[tokio::test]
async fn secrets_come_from_the_environment_never_the_command_line() {
    let (model_addr, model) = start_model(Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    // A value on the command line is refused before anything starts, naming the variable.
    let out = run_browserd(
        model_addr,
        dir.path(),
        &["Log in", "--secret", "bank-pin=1234"],
    )
    .await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("BROWSERD_SECRET_BANK_PIN"),
        "{}",
        out.stderr
    );
    // A named secret whose variable is unset is a clear error, not an empty secret.
    let out = run_browserd(model_addr, dir.path(), &["Log in", "--secret", "pin"]).await;
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("BROWSERD_SECRET_PIN"), "{}", out.stderr);
    // A secret bound to no domain needs --allowed-domain (it is then bound to those domains) or
    // the explicit opt-in: refused before anything starts, naming both, never the value.
    let out = run_browserd_with_env(
        model_addr,
        dir.path(),
        &["Log in", "--secret", "pin"],
        &[("BROWSERD_SECRET_PIN", "pin-value-5544")],
    )
    .await;
    assert_ne!(out.code, Some(0));
    for needle in ["`pin`", "--allowed-domain", "--allow-secrets-on-any-domain"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(!out.stderr.contains("pin-value-5544"), "{}", out.stderr);
    // A secrets file that is not the expected shape names the file, not its content.
    let file = dir.path().join("secrets.json");
    std::fs::write(&file, r#"{"pin": ["not-a-string-9876"]}"#).unwrap();
    let out = run_browserd(
        model_addr,
        dir.path(),
        &["Log in", "--secrets-file", file.to_str().unwrap()],
    )
    .await;
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("--secrets-file"), "{}", out.stderr);
    assert!(!out.stderr.contains("not-a-string-9876"), "{}", out.stderr);
    assert!(model.requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_profile_file_carries_cookies_and_local_storage_to_the_next_run() {
    let (app, _log) = start_app().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    let profile_arg = profile.to_str().unwrap().to_owned();
    let url = format!("http://{app}/remember");
    let report: fn(&str) -> Value = |page: &str| {
        let state = Regex::new(r"Cookie: \S+ Token: \S+").unwrap();
        done_reply(state.find(page).map_or("no state", |m| m.as_str()), true)
    };
    let (model, _) = start_model(vec![
        with_indices(vec![("button", r"/>\s*Remember me")], |i| {
            reply("remember me", json!([{"click": {"index": i[0]}}]))
        }),
        Box::new(report),
    ])
    .await;
    let out = run_browserd(
        model,
        dir.path(),
        &[
            "Remember me",
            "--start-url",
            &url,
            "--profile",
            &profile_arg,
        ],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("Cookie: remember=yes Token: t-1"),
        "{}",
        out.stdout
    );
    // Playwright's storageState layout.
    let saved: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    assert_eq!(saved["cookies"][0]["name"], "remember");
    assert_eq!(saved["origins"][0]["origin"], format!("http://{app}"));
    assert_eq!(
        saved["origins"][0]["localStorage"],
        json!([{"name": "token", "value": "t-1"}])
    );

    // The next run starts with both, before the page's script reads them.
    let (model, _) = start_model(vec![Box::new(report)]).await;
    let out = run_browserd(
        model,
        dir.path(),
        &["Report", "--start-url", &url, "--profile", &profile_arg],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("Cookie: remember=yes Token: t-1"),
        "{}",
        out.stdout
    );

    std::fs::write(&profile, "not json").unwrap();
    let (model, _) = start_model(vec![]).await;
    let out = run_browserd(model, dir.path(), &["x", "--profile", &profile_arg]).await;
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("--profile"), "{}", out.stderr);
}

#[tokio::test]
async fn ask_human_is_answered_at_the_terminal() {
    let _permit = ONE_CHROME_AT_A_TIME.acquire().await.unwrap();
    let site = browserd_tests::Site::start().await;
    let model = browserd_tests::MockModel::start_on_requests(
        browserd_tests::choosing_brain(),
        std::time::Duration::from_millis(20),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let start_url = site.url("/stairs/1?top=2");
    let args = run_args(
        dir.path(),
        &["Report the code the user picks", "--start-url", &start_url],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = model_env(model.addr);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut terminal = browserd_tests::Terminal::spawn(
        std::path::Path::new(env!("CARGO_BIN_EXE_browserd")),
        &args,
        &env,
    );
    let limit = std::time::Duration::from_secs(120);
    let shown = terminal
        .wait_for("answer (a number, or text): ", limit)
        .await;
    assert!(
        shown.contains("? the agent asks: Which code should I report?"),
        "{shown}"
    );
    assert!(shown.contains("1. A") && shown.contains("2. B"), "{shown}");
    // A blank line asks again; the number of a choice answers with that choice.
    terminal.type_line("").await;
    terminal.type_line("2").await;
    let (status, shown) = terminal.exit(limit).await;
    assert!(status.success(), "exit {status}:\n{shown}");
    assert!(shown.contains("the user chose B"), "{shown}");
    let history: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("history.json")).unwrap()).unwrap();
    let actions = action_names(&history);
    assert_eq!(
        actions[actions.len() - 2..],
        ["ask_human", "done"],
        "{actions:?}"
    );
    // The step that asked (after the start URL's navigation) has the answer as its result.
    let asked = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["model_output"]["action"][0].get("ask_human").is_some())
        .expect("the ask_human step");
    assert_eq!(
        asked["result"][0]["extracted_content"],
        "The user answered: B"
    );
}
