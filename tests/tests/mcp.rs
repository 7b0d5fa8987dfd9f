//! MCP end to end: the PyPI `mcp` client (tests/python/mcp/client.py, pinned in its
//! requirements.txt) against the real `browserd serve` (streamable HTTP at `/mcp`) and the real
//! `browserd mcp` (stdio, tasks in-process on the task core and the worker's claim loop), with
//! Postgres, headless Chromium, local pages and the mock model.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{
    Brain, MockModel, Process, Site, TestDb, browserd_bin, climb_task, create_key, done_reply,
    index_of, python_venv, reply, repo_root, stairs_brain,
};
use regex::Regex;
use serde_json::{Value, json};

const REQUIREMENTS: &str = "tests/python/mcp/requirements.txt";
/// Bound of one whole client conversation.
const CLIENT_LIMIT: Duration = Duration::from_secs(400);

/// Climbs the stairs fixture: the code at the top as text, or as JSON (`{"code","stairs"}`)
/// for the two-stair staircase that the structured-output task climbs.
fn brain() -> Brain {
    Arc::new(|page: &str| {
        let top = Regex::new(r"Top reached: (\w+)").unwrap();
        if let Some(c) = top.captures(page) {
            let code = c[1].to_owned();
            if code == "CODE2X" {
                return reply(
                    "report the code as JSON",
                    json!([{"done": {"data": {"code": code, "stairs": 2}, "success": true}}]),
                );
            }
            return done_reply(&format!("The code at the top is {code}"), true);
        }
        match index_of(page, "a", r"/>\s*Next") {
            Some(index) => reply("climb one stair", json!([{"click": {"index": index}}])),
            None => done_reply("no Next link", false),
        }
    })
}

/// Runs the Python client with `args`; its JSON report. `server` (when the client talks to
/// one) has its log shown if the client fails.
async fn run_client(
    python: &std::path::Path,
    args: Value,
    server: Option<&browserd_tests::Process>,
) -> Value {
    let script = repo_root().join("tests/python/mcp/client.py");
    let output = tokio::time::timeout(
        CLIENT_LIMIT,
        tokio::process::Command::new(python)
            .arg(script)
            .arg(args.to_string())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the MCP client finished in time")
    .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|err| panic!("client report is JSON ({err}):\n{stdout}\n{stderr}"));
    assert!(
        report.get("exception").is_none(),
        "client failed: {}\n{stderr}\n--- server log ---\n{}",
        report["exception"],
        server.map(|s| s.logs()).unwrap_or_default()
    );
    report
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What both transports must show.
fn check_conversation(report: &Value) {
    assert_eq!(report["server_name"], "browserd");
    assert_eq!(
        report["tools"],
        json!([
            "answer_task",
            "get_screenshot",
            "get_task",
            "list_skills",
            "list_tasks",
            "pause_task",
            "resume_task",
            "run_skill",
            "run_task",
            "stop_task"
        ])
    );
    // Schemas generated from the types: the REST fields, wait_s, the status enum.
    let schema = &report["run_task_schema"];
    for field in [
        "task",
        "start_url",
        "model",
        "max_steps",
        "allowed_domains",
        "output_schema",
        "timeout_s",
        "max_tokens",
        "max_cost_usd",
        "wait_s",
    ] {
        assert!(
            schema["properties"].get(field).is_some(),
            "{field}: {schema}"
        );
    }
    assert_eq!(schema["required"], json!(["task"]));
    let statuses = report["list_tasks_schema"].to_string();
    for status in [
        "queued", "running", "paused", "waiting", "finished", "failed", "stopped",
    ] {
        assert!(statuses.contains(status), "{statuses}");
    }

    // run_task to completion.
    let run = &report["run"];
    assert_eq!(run["is_error"], false, "{run}");
    let result = &run["structured"];
    assert_eq!(result["status"], "finished", "{run}");
    assert_eq!(result["success"], true);
    assert_eq!(result["output"], "The code at the top is CODE3X");
    assert_eq!(result["steps"], 3, "{run}");
    assert!(result["cost_usd"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
    assert!(
        text_of(run).starts_with("The code at the top is CODE3X"),
        "{run}"
    );
    // One progress notification per step, carrying its next goal, in order.
    let progress = report["progress"].as_array().expect("progress list");
    assert_eq!(progress.len(), 3, "{progress:?}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["progress"], json!((i + 1) as f64), "{p}");
        assert_eq!(p["total"], json!(100.0));
    }
    assert_eq!(progress[0]["message"], "step 1: climb one stair");
    assert_eq!(progress[2]["message"], "step 3: finish");

    // Structured output.
    let structured = &report["structured_run"];
    assert_eq!(structured["is_error"], false, "{structured}");
    assert_eq!(
        structured["structured"]["output"],
        json!({"code": "CODE2X", "stairs": 2}),
        "{structured}"
    );
    assert_eq!(structured["structured"]["success"], true);

    // get_task: the result and the last steps.
    let task = &report["get_task"]["structured"];
    assert_eq!(task["status"], "finished");
    let steps = task["last_steps"].as_array().expect("last_steps");
    let goals: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["next_goal"].as_str())
        .collect();
    // Step 0 is the initial navigation (no model call), then the agent's three steps.
    assert_eq!(
        goals,
        [
            "Initial navigation",
            "climb one stair",
            "climb one stair",
            "finish"
        ]
    );
    assert!(
        steps
            .iter()
            .any(|s| s["actions"] == json!(["click"]) && s["url"].as_str().is_some()),
        "{steps:?}"
    );

    // Screenshots are image content blocks.
    for key in ["screenshot", "screenshot_step_1"] {
        let shot = &report[key];
        assert_eq!(shot["is_error"], false, "{shot}");
        let image = &shot["content"][0];
        assert_eq!(image["type"], "image", "{shot}");
        assert!(
            image["mime_type"].as_str().unwrap().starts_with("image/"),
            "{shot}"
        );
        assert!(image["bytes"].as_u64().unwrap() > 1000, "{shot}");
    }
    let listed = report["list_tasks"]["structured"]["items"]
        .as_array()
        .expect("items");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|t| t["status"] == "finished"));

    // A long task paused, resumed and stopped while run_task waited for it.
    let stopped = &report["stopped"];
    assert_eq!(
        stopped["running_before"].as_array().map(Vec::len),
        Some(1),
        "{stopped}"
    );
    assert_eq!(
        stopped["pause"]["structured"]["status"], "paused",
        "{stopped}"
    );
    assert_eq!(
        stopped["resume"]["structured"]["status"], "running",
        "{stopped}"
    );
    assert_eq!(stopped["stop"]["is_error"], false, "{stopped}");
    assert_eq!(stopped["stop"]["structured"]["status"], "stopped");
    // Stopping twice is the REST API's 409.
    let again = &stopped["stop_again"];
    assert_eq!(again["is_error"], true, "{again}");
    assert_eq!(again["structured"]["error"]["code"], "illegal_transition");
    assert_eq!(
        again["structured"]["error"]["message"],
        "cannot stop a task that is stopped"
    );
    let long = &report["long_run"];
    assert_eq!(long["structured"]["status"], "stopped", "{long}");
    assert!(
        long["structured"]["steps"].as_u64().unwrap() < 100,
        "{long}"
    );
    assert!(
        !report["long_progress"].as_array().unwrap().is_empty(),
        "{report}"
    );

    // A budget: the failed task is a tool error naming it, with the task's summary.
    let budget = &report["budget_run"];
    assert_eq!(budget["is_error"], true, "{budget}");
    assert_eq!(budget["structured"]["status"], "failed", "{budget}");
    assert_eq!(budget["structured"]["error"]["code"], "budget_exceeded");
    assert!(
        budget["structured"]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("max_tokens: the task used 2100 tokens"),
        "{budget}"
    );
    assert_eq!(budget["structured"]["steps"], 2, "{budget}");

    // Errors: tool errors with the REST API's codes and messages.
    let errors = &report["errors"];
    let unknown = &errors["unknown_model"];
    assert_eq!(unknown["is_error"], true, "{unknown}");
    assert_eq!(unknown["structured"]["error"]["code"], "validation_failed");
    assert_eq!(unknown["structured"]["error"]["field"], "model");
    assert!(
        unknown["structured"]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("unknown model `no-such-model`"),
        "{unknown}"
    );
    let domain = &errors["bad_domain"];
    assert_eq!(domain["is_error"], true, "{domain}");
    assert_eq!(domain["structured"]["error"]["field"], "allowed_domains[0]");
    assert!(
        domain["structured"]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid domain pattern"),
        "{domain}"
    );
    assert_eq!(
        errors["not_found"]["structured"],
        json!({"error": {"code": "task_not_found", "message": "task not found"}})
    );
    assert_eq!(errors["not_found"]["is_error"], true);
    assert_eq!(
        errors["bad_id"]["structured"]["error"]["code"],
        "invalid_task_id"
    );
    assert_eq!(
        errors["bad_limit"]["structured"]["error"]["message"],
        "limit must be between 1 and 100, got 1000"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_streamable_http_against_the_server() {
    let python = python_venv(REQUIREMENTS);
    let db = TestDb::create().await;
    let model = MockModel::start(brain(), Duration::from_millis(20)).await;
    let site = Site::start().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let other_key = create_key(&db).await;
    let report = run_client(
        &python,
        json!({
            "transport": "http",
            "url": format!("http://{}/mcp", server.address()),
            "key": key,
            "other_key": other_key,
            "site": format!("http://{}", site.addr),
        }),
        Some(&server),
    )
    .await;

    // No valid key: the REST API's 401, and no MCP session.
    assert_eq!(report["wrong_key"]["status"], 401, "{report}");
    assert_eq!(
        report["wrong_key"]["body"]["error"]["code"],
        "invalid_api_key"
    );
    assert_eq!(report["wrong_key"]["session"], Value::Null);
    assert_eq!(report["missing_key"]["status"], 401);
    assert_eq!(
        report["missing_key"]["body"]["error"]["code"],
        "missing_api_key"
    );

    check_conversation(&report);

    // Another key sees none of it.
    let other = &report["other_tenant"];
    for call in ["get", "stop"] {
        assert_eq!(
            other[call]["structured"]["error"]["code"], "task_not_found",
            "{other}"
        );
    }
    assert_eq!(other["list"]["structured"]["items"], json!([]));

    // The key never shows in the server's logs.
    let logs = server.logs();
    assert!(!logs.contains(&key), "the API key leaked into the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_stdio_runs_tasks_in_process() {
    let python = python_venv(REQUIREMENTS);
    let db = TestDb::create().await;
    let model = MockModel::start(brain(), Duration::from_millis(20)).await;
    let site = Site::start().await;
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("browserd-mcp.log");
    let report = run_client(
        &python,
        json!({
            "transport": "stdio",
            "command": browserd_bin(),
            "args": ["mcp", "--allow-loopback"],
            "env": {
                "DATABASE_URL": db.url,
                "BROWSERD_LLM_DEFAULT_MODEL": "mock",
                "BROWSERD_LLM_MOCK_PROVIDER": "openai",
                "BROWSERD_LLM_MOCK_BASE_URL": format!("http://{}/v1", model.addr),
                "BROWSERD_LLM_MOCK_MODEL": "mock-model",
                "BROWSERD_LLM_MOCK_MAX_RETRIES": "0",
                "BROWSERD_LLM_MOCK_PRICE_INPUT": "1",
                "BROWSERD_LLM_MOCK_PRICE_OUTPUT": "2",
                "RUST_LOG": "info",
            },
            "site": format!("http://{}", site.addr),
            "stderr": stderr_path,
        }),
        None,
    )
    .await;
    check_conversation(&report);
    // Logs went to stderr (stdout is the protocol, which the client parsed).
    let logs = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(
        logs.contains("serving MCP on stdio, running tasks in this process"),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_stdio_proxies_to_a_server() {
    let python = python_venv(REQUIREMENTS);
    let db = TestDb::create().await;
    let model = MockModel::start(brain(), Duration::from_millis(20)).await;
    let site = Site::start().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("browserd-mcp.log");
    let report = run_client(
        &python,
        json!({
            "transport": "stdio",
            "command": browserd_bin(),
            "args": ["mcp", "--server", format!("http://{}", server.address()), "--key-env", "TEST_BROWSERD_KEY"],
            "env": {"TEST_BROWSERD_KEY": key, "RUST_LOG": "info"},
            "site": format!("http://{}", site.addr),
            "stderr": stderr_path,
        }),
        Some(&server),
    )
    .await;
    check_conversation(&report);
    let logs = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(logs.contains("proxying to the server"), "{logs}");
    assert!(!logs.contains(&key), "the API key leaked into the logs");
}

/// One JSON-RPC message to the stdio server (one line).
async fn send(stdin: &mut tokio::process::ChildStdin, message: Value) {
    use tokio::io::AsyncWriteExt;
    let mut line = message.to_string();
    line.push('\n');
    stdin.write_all(line.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
}

/// The answer to request `id` (notifications before it are skipped).
async fn answer(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    id: u64,
) -> Value {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the server answers");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
        }
    })
    .await
    .expect("an answer within 60 s")
}

/// The stdio MCP's tasks are rows of the configured database, owned by the local key, worked
/// by the worker's claim loop; when the client goes away, the tasks it started that still run
/// are stopped (and the process exits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tasks_are_rows_of_the_database_and_stop_on_disconnect() {
    let db = TestDb::create().await;
    // A staircase of 500 stairs, a slow model: the task runs until it is stopped.
    let model = MockModel::start(stairs_brain(), Duration::from_millis(200)).await;
    let site = Site::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(browserd_bin())
        .args(["mcp", "--allow-loopback"])
        .env("DATABASE_URL", &db.url)
        .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
        .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
        .env(
            "BROWSERD_LLM_MOCK_BASE_URL",
            format!("http://{}/v1", model.addr),
        )
        .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
        .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
        .env("RUST_LOG", "info")
        .env_remove("BROWSERD_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("mcp.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn browserd mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    let init = answer(&mut lines, 1).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "browserd", "{init}");
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let task = json!({
        "task": climb_task(&site, 500)["task"],
        "start_url": climb_task(&site, 500)["start_url"],
        "wait_s": 0,
    });
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_task", "arguments": task}}),
    )
    .await;
    let run = answer(&mut lines, 2).await;
    assert_eq!(run["result"]["isError"], false, "{run}");

    // The task is a row of the database, owned by the local key, and a worker runs it.
    let pool = db.pool().await;
    let (id, key): (uuid::Uuid, String) =
        sqlx::query_as("select t.id, k.name from tasks t join api_keys k on k.id = t.api_key_id")
            .fetch_one(&pool)
            .await
            .expect("one task row");
    assert_eq!(key, "mcp-local");
    let logs = || std::fs::read_to_string(dir.path().join("mcp.log")).unwrap_or_default();
    let running = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let (status, steps): (String, i64) = sqlx::query_as(
                "select t.status, (select count(*) from task_steps s where s.task_id = t.id)
                 from tasks t where t.id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
            if status == "running" && steps >= 2 {
                return;
            }
            assert!(status == "queued" || status == "running", "{status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(running.is_ok(), "the task did not run:\n{}", logs());

    // The client goes away: the task is stopped and the process ends.
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap_or_else(|_| panic!("browserd mcp did not exit:\n{}", logs()))
        .unwrap();
    assert!(status.success(), "{status}:\n{}", logs());
    let status: String = sqlx::query_scalar("select status from tasks where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "stopped", "{}", logs());
    assert!(
        logs().contains("task stopped: the MCP client went away"),
        "{}",
        logs()
    );
}
