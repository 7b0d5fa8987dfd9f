//! Property-based fuzzing of the whole HTTP API from `openapi.yaml` (`/v1` and ops) and
//! `openapi-v2.yaml` (the `/api/v2` subset browserd implements, served under its server URL
//! `/api/v2`) with schemathesis (PyPI, pinned with its dependencies in
//! `tests/python/schemathesis/requirements.txt`) against a running `browserd serve` (real
//! Postgres and Chromium; the mock model ends every task at once), with a valid key as header
//! (`Authorization: Bearer` for `/v1`, `X-Browser-Use-API-Key` for `/api/v2`). Every check must pass: no 5xx, status codes, content
//! types, headers and bodies as the spec says, invalid input refused, valid input accepted,
//! auth enforced, deleted resources gone (`tests/python/schemathesis/schemathesis.toml` widens
//! the accepted statuses of some operations, for rules a schema cannot state). Bounded: a few
//! examples per operation (about a minute or two per document on 2 cores). The two runs take
//! turns (each runs its own server), so they do not share the machine.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{MockModel, Process, TestDb, create_key, done_reply, python_venv, repo_root};
use tokio::sync::Mutex;

/// Test cases per API operation and phase.
const MAX_EXAMPLES: &str = "30";

/// One schemathesis run at a time.
static TURN: Mutex<()> = Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_conforms_to_its_openapi_document_under_fuzzing() {
    fuzz("openapi.yaml", "", "2", |key| {
        format!("Authorization: Bearer {key}")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v2_api_conforms_to_its_openapi_document_under_fuzzing() {
    // One worker: with two, hypothesis's threads sometimes parse lambda sources at the same
    // time, which CPython 3.11's `ast.parse` does not survive ("AST constructor recursion depth
    // mismatch", a runtime error of the fuzzer, not an answer of the server).
    fuzz("openapi-v2.yaml", "/api/v2", "1", |key| {
        format!("X-Browser-Use-API-Key: {key}")
    })
    .await;
}

/// Runs schemathesis on the document `spec` (in the repository's root) against a fresh
/// `serve`, at `base` under its address, with `workers` threads and the header `auth` makes of
/// a valid key.
async fn fuzz(spec: &str, base: &str, workers: &str, auth: impl Fn(&str) -> String) {
    let _turn = TURN.lock().await;

    let python = python_venv("tests/python/schemathesis/requirements.txt");
    let schemathesis = python.with_file_name("schemathesis");
    let db = TestDb::create().await;
    let model = MockModel::start(
        Arc::new(|_: &str| done_reply("fuzzed", true)),
        Duration::ZERO,
    )
    .await;
    // `Process` turns both rate limits off: each answers a documented 429, but whether it
    // does depends on how fast the requests come. The per-key one (20/s) would answer most of
    // the run, and the pre-auth one (per client address) the coverage phase's requests
    // without a key, where the auth checks expect 401. `crates/api/tests/{api,edge}.rs` test
    // the limiters themselves.
    let server = Process::start(&db, model.addr, "serve", &["--concurrency", "1"]).await;
    let key = create_key(&db).await;
    let workdir = std::env::temp_dir().join(format!("browserd-fuzz-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&workdir).unwrap();

    let run = tokio::process::Command::new(&schemathesis)
        .current_dir(&workdir)
        .arg("--config-file")
        .arg(repo_root().join("tests/python/schemathesis/schemathesis.toml"))
        .arg("run")
        .arg(repo_root().join(spec))
        .args(["--url", &format!("http://{}{base}", server.address())])
        .args(["--header", &auth(&key)])
        .args(["--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--workers", workers])
        // Above the server's own 30 s request timeout: a slow answer is the server's to give.
        .args(["--request-timeout", "40"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-failures", "20"])
        .arg("--no-color")
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("schemathesis finished within 10 minutes")
        .expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = std::fs::remove_dir_all(&workdir);
    assert!(
        output.status.success(),
        "schemathesis found problems ({}):\n{stdout}\n{stderr}\n--- server log ---\n{}",
        output.status,
        server.logs()
    );
    // The summary (phases, operations, test cases) for the CI log.
    let lines: Vec<&str> = stdout.lines().collect();
    println!("{}", lines[lines.len().saturating_sub(30)..].join("\n"));
    assert!(
        !stdout.contains(&key),
        "schemathesis output is sanitized (no key)"
    );
    // The run tested operations (not an empty schema or a skipped run).
    assert!(
        stdout.contains("passed") || stdout.contains("PASSED"),
        "{stdout}"
    );
    assert!(
        !server.logs().contains("panicked"),
        "no handler panicked:\n{}",
        server.logs()
    );
}
