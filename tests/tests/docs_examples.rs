//! The README's first task with curl, run as a newcomer would run it: its `sh` blocks, taken
//! from README.md as they stand, against a real `browserd serve` (real Postgres and Chromium;
//! the mock model ends every task at once). Only what a reader fills in is filled in: the
//! server's address in `B=`, the key in `$KEY`, and the `ID=…` line with the id the create call
//! printed. An example that stops working fails here.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{MockModel, Process, TestDb, create_key, done_reply, repo_root};
use serde_json::Value;

/// The fenced `sh` blocks of the README section under `heading`.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no `{heading}`"));
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```sh\n") {
        let body = &rest[open + "```sh\n".len()..];
        let close = body.find("```").expect("a closed code block");
        blocks.push(body[..close].to_owned());
        rest = &body[close + 3..];
    }
    blocks
}

/// Runs `script` with bash (`set -eu`: a failing command fails the example); its stdout.
async fn run_sh(script: &str, env: &[(&str, &str)], dir: &std::path::Path) -> String {
    let output = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -eu\n{script}"))
        .envs(env.iter().copied())
        .current_dir(dir)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("the example finished within a minute")
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the example failed ({}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The JSON documents curl printed one after another.
fn documents(stdout: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|err| panic!("not JSON documents ({err}):\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_first_task_with_curl_runs_as_written() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks: Vec<String> = sh_blocks(&readme, "## A first task with curl")
        .into_iter()
        // The curl calls; the WebSocket and CLI blocks need other tools.
        .filter(|b| b.contains("curl") && !b.contains("websocat") && !b.contains("scripts/run"))
        .collect();
    assert_eq!(blocks.len(), 2, "create, then follow: {blocks:#?}");

    let db = TestDb::create().await;
    let model = MockModel::start(
        Arc::new(|_: &str| done_reply("example done", true)),
        Duration::ZERO,
    )
    .await;
    let server = Process::start(&db, model.addr, "serve", &["--concurrency", "1"]).await;
    let key = create_key(&db).await;
    let base = format!("http://{}", server.address());
    let dir = tempfile::tempdir().unwrap();

    // Create: the reader's own address in `B=`, and the `ID=…` placeholder left to the next step.
    let create: String = blocks[0]
        .lines()
        .filter(|line| !line.starts_with("ID="))
        .map(|line| {
            if line.starts_with("B=") {
                format!("B={base}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let printed = documents(&run_sh(&create, &[("KEY", &key)], dir.path()).await);
    assert_eq!(printed.len(), 2, "{printed:?}");
    assert!(printed[0]["models"].is_array(), "{}", printed[0]);
    let task = &printed[1];
    assert_eq!(task["status"], "queued", "{task}");
    let id = task["id"]
        .as_str()
        .expect("the created task's id")
        .to_owned();

    // Follow it, with the id the reader copied.
    let printed = documents(
        &run_sh(
            &blocks[1],
            &[("KEY", &key), ("B", &base), ("ID", &id)],
            dir.path(),
        )
        .await,
    );
    // The task, its steps, then the stop's answer (the screenshot went to a file).
    assert_eq!(printed.len(), 3, "{printed:?}");
    assert_eq!(printed[0]["id"], id.as_str(), "{}", printed[0]);
    assert!(printed[1]["items"].is_array(), "{}", printed[1]);
    let stop = &printed[2];
    assert!(
        stop["status"] == "stopped" || stop["error"]["code"] == "illegal_transition",
        "stopped, or the 409 of a task that had ended: {stop}"
    );
    assert!(
        dir.path().join("step1.jpg").exists(),
        "curl -o wrote the screenshot (or the API's answer) to step1.jpg"
    );
    assert!(
        !server.logs().contains("panicked"),
        "no handler panicked:\n{}",
        server.logs()
    );
}
