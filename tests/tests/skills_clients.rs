//! Skills from every client besides `/v1` (tests/tests/skills.rs covers `/v1` and the engine):
//! the official `browser-use-sdk` 3.12.1 (`client.skills.*`, tests/python/v2/test_skills_sdk.py),
//! the `browserd skills` command line, and the MCP tools `list_skills` / `run_skill` over the
//! streamable HTTP transport — against a real `browserd serve` with Postgres, headless Chromium,
//! the local orders app (its public desk: no access code) and the scripted model.

use std::process::Stdio;
use std::time::Duration;

use browserd_tests::orders_app::{OrdersApp, orders_brain};
use browserd_tests::{
    Client, MockModel, Process, TestDb, browserd_bin, create_key, python_venv, repo_root,
};
use serde_json::{Value, json};

/// Bound of one client (the SDK script, one CLI command, one MCP call).
const CLIENT_LIMIT: Duration = Duration::from_secs(400);

/// `browserd skills …args` against `server` with `key`: exit status and stdout.
async fn cli(server: &Process, key: &str, args: &[&str]) -> (bool, String) {
    let run = tokio::process::Command::new(browserd_bin())
        .arg("skills")
        .args(args)
        .args(["--server", &format!("http://{}", server.address())])
        .env("BROWSERD_API_KEY", key)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CLIENT_LIMIT, run)
        .await
        .expect("the command ends")
        .expect("browserd runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        !stdout.contains(key) && !String::from_utf8_lossy(&output.stderr).contains(key),
        "the key is never printed"
    );
    (output.status.success(), stdout)
}

/// One JSON-RPC message to `/mcp` (in session `session`); the answer's JSON (an SSE `data:`
/// line or a plain body) and the session header.
async fn mcp(
    http: &reqwest::Client,
    server: &Process,
    key: &str,
    session: Option<&str>,
    message: Value,
) -> (Option<Value>, Option<String>) {
    let mut request = http
        .post(format!("http://{}/mcp", server.address()))
        .bearer_auth(key)
        .header("Accept", "application/json, text/event-stream")
        .json(&message);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = tokio::time::timeout(CLIENT_LIMIT, request.send())
        .await
        .expect("the MCP call ends")
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.unwrap();
    let json = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .chain(std::iter::once(body.trim()))
        .find_map(|text| serde_json::from_str::<Value>(text).ok());
    (json, session)
}

/// A tool call's structured content.
async fn call_tool(
    http: &reqwest::Client,
    server: &Process,
    key: &str,
    session: &str,
    id: u64,
    name: &str,
    arguments: Value,
) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}});
    let (answer, _) = mcp(http, server, key, Some(session), message).await;
    let answer = answer.expect("a JSON-RPC answer");
    assert!(
        answer["result"]["isError"] != json!(true),
        "{name} failed: {answer}"
    );
    answer["result"]["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_work_from_the_official_sdk_the_cli_and_mcp() {
    let python = python_venv("tests/python/v2/requirements.txt");
    let (site, app) = OrdersApp::start().await;
    let model = MockModel::start_on_requests(orders_brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;

    // The official SDK, unchanged.
    let run = tokio::process::Command::new(&python)
        .arg(repo_root().join("tests/python/v2/test_skills_sdk.py"))
        .env(
            "BROWSERD_V2_URL",
            format!("http://{}/api/v2", server.address()),
        )
        .env("BROWSERD_KEY", &key)
        .env("SITE", format!("http://{site}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CLIENT_LIMIT, run)
        .await
        .expect("the SDK script ends")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all ok"),
        "SDK script failed ({}):\n{stdout}\n{}\n--- browserd logs ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        server.logs()
    );
    for check in [
        "ok skills.create + get (generated)",
        "ok skills.execute with another order",
        "ok skills.execute refuses an unknown parameter",
        "ok skills.executions + execution_output",
        "ok skills.list + update",
        "ok skills.refine + rollback",
        "ok skills.delete",
    ] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
    assert!(
        app.opened().contains(&"2077".to_owned()),
        "the execution opened order 2077: {:?}",
        app.opened()
    );

    // The command line: create (following the generation), list, run with a parameter.
    let prompt = format!(
        "Go to http://{site}/public and Find order {{{{order=1042}}}}, then report its status"
    );
    let (ok, out) = cli(
        &server,
        &key,
        &["create", "--prompt", &prompt, "--title", "Desk", "--follow"],
    )
    .await;
    assert!(ok, "skills create: {out}\n{}", server.logs());
    let skill = out.lines().next().unwrap().trim().to_owned();
    assert!(out.contains("finished") && out.contains("v1"), "{out}");
    let (ok, listed) = cli(&server, &key, &["list"]).await;
    assert!(
        ok && listed.contains(&skill) && listed.contains("order:number"),
        "{listed}"
    );
    let requests = model.requests().len();
    let (ok, out) = cli(
        &server,
        &key,
        &["run", &skill, "--param", "order=3150", "--follow"],
    )
    .await;
    assert!(ok, "skills run: {out}\n{}", server.logs());
    assert_eq!(
        model.requests().len(),
        requests,
        "a run of an unchanged site asks no model"
    );
    assert_eq!(app.opened().last().map(String::as_str), Some("3150"));
    let (ok, out) = cli(&server, &key, &["run", &skill, "--param", "nope=1"]).await;
    assert!(!ok, "an unknown parameter is refused: {out}");

    // MCP over streamable HTTP: list_skills, then run_skill waiting for the result.
    browserd_llm::install_tls_provider();
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "skills-test", "version": "1"}}});
    let (_, session) = mcp(&http, &server, &key, None, init).await;
    let session = session.expect("an MCP session id");
    mcp(
        &http,
        &server,
        &key,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let listed = call_tool(&http, &server, &key, &session, 2, "list_skills", json!({})).await;
    let items = listed["items"].as_array().expect("items");
    let entry = items
        .iter()
        .find(|s| s["id"] == skill.as_str())
        .expect("the CLI's skill");
    assert_eq!(entry["parameters"][0]["name"], "order");
    let requests = model.requests().len();
    let ran = call_tool(
        &http,
        &server,
        &key,
        &session,
        3,
        "run_skill",
        json!({"id": skill, "parameters": {"order": "4411"}, "wait_s": 300}),
    )
    .await;
    assert_eq!(ran["status"], "finished", "{ran}");
    assert_eq!(ran["output"], "Order 4411: Cancelled", "{ran}");
    assert_eq!(
        model.requests().len(),
        requests,
        "no model for an unchanged site"
    );

    // A schedule of the skill: each tick one execution of it, with no model.
    let client = Client::new(server.address(), &key);
    let requests = model.requests().len();
    let (status, schedule) = client
        .post(
            "/v1/schedules",
            json!({"cron": "* * * * * *",
                   "target": {"skill": {"skill_id": skill, "parameters": {"order": "1042"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let schedule = schedule["id"].as_str().unwrap().to_owned();
    // Polled until its first tick has made a task (ticks are every second; at most 30 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        let (status, runs) = client.get(&format!("/v1/schedules/{schedule}/runs")).await;
        assert_eq!(status, 200, "{runs}");
        if let Some(run) = runs["items"].as_array().and_then(|items| items.last()) {
            break run["task_id"].as_str().unwrap().to_owned();
        }
        let (_, view) = client.get(&format!("/v1/schedules/{schedule}")).await;
        assert!(view["last_error"].is_null(), "the tick failed: {view}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tick in 30 s: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (status, _) = client
        .patch(
            &format!("/v1/schedules/{schedule}"),
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(status, 200);
    client
        .events(&first, 0)
        .await
        .until_closed(CLIENT_LIMIT)
        .await;
    let task = client.task(&first).await;
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["output"], "Order 1042: Shipped", "{task}");
    let (_, runs) = client.get(&format!("/v1/skills/{skill}/runs")).await;
    assert!(
        runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == first.as_str()),
        "the scheduled task is an execution of the skill: {runs}"
    );
    assert_eq!(
        model.requests().len(),
        requests,
        "scheduled executions ask no model"
    );
    assert!(!server.logs().contains(&key), "the API key is not logged");
}
