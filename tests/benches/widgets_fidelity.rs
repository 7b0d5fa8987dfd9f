//! browserd vs Python browser-use on the widget corpus (`browserd_tests::widgets`): each
//! scenario runs once with `browserd run` and once with browser-use's Agent
//! (`browser_use_task.py`, from `BENCH_BROWSER_USE_PYTHON`: a Python with `browser-use`
//! installed), both driven by the same brain through the same mock model, on the same page.
//! Prints a Markdown table: steps taken and whether the app received the expected value. Not a
//! CI test (it needs browser-use); `cargo bench -p browserd-tests --bench widgets_fidelity`.
//! `BENCH_WIDGETS=mui,feed` limits the scenarios (`gradio` and `streamlit` are among them).

use std::{path::PathBuf, time::Duration};

use browserd_tests::{
    Brain, MockModel, repo_root,
    widgets::{self, GradioApp, PythonApp, StreamlitApp},
};
use serde_json::Value;

/// One browser-use run: (model steps, whether browser-use called its run a success).
async fn browser_use(
    python: &PathBuf,
    url: &str,
    task: &str,
    brain: Brain,
    max_steps: u32,
) -> (usize, String) {
    let model = MockModel::start(brain, Duration::ZERO).await;
    let output = tokio::process::Command::new(python)
        .arg(repo_root().join("tests/benches/browser_use_task.py"))
        .args([url, task, &max_steps.to_string()])
        .arg(format!("http://{}/v1", model.addr))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), output)
        .await
        .expect("browser-use took longer than 5 minutes")
        .expect("run browser-use");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match line.and_then(|l| serde_json::from_str::<Value>(l).ok()) {
        Some(v) => {
            if v["success"] != Value::Bool(true) {
                let last = model.requests().last().map(browserd_tests::page_text);
                eprintln!(
                    "browser-use on {url}: {}; last page shown:\n{}",
                    v["final"].as_str().unwrap_or(""),
                    last.unwrap_or_default()
                );
            }
            (
                usize::try_from(v["steps"].as_u64().unwrap_or(0)).unwrap_or(0),
                v["success"].to_string(),
            )
        }
        None => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.lines().rev().take(15).collect::<Vec<_>>().join("\n");
            eprintln!("browser-use failed ({}):\n{tail}", output.status);
            (0, "crashed".to_owned())
        }
    }
}

/// The row of a Python app of the corpus: browserd, then browser-use, each on a fresh app.
async fn python_app_row<F>(
    python: &PathBuf,
    name: &str,
    start: fn() -> F,
    task: &str,
    brain: fn() -> Brain,
    expected: Vec<Value>,
) -> String
where
    F: std::future::Future<Output = PythonApp>,
{
    let app = start().await;
    let ours = widgets::run(task, &app.url, brain(), 12).await;
    let ours_state = verdict(&app.received(), &expected);
    if ours_state != "pass" {
        eprintln!("browserd on {}: {}", app.url, ours.explain());
    }
    drop(app);
    let app = start().await;
    let (theirs, theirs_success) = browser_use(python, &app.url, task, brain(), 12).await;
    let theirs_state = verdict(&app.received(), &expected);
    format!(
        "| {name} | {} | {ours_state} | {theirs} | {theirs_state} (success: {theirs_success}) |",
        ours.steps()
    )
}

fn verdict(received: &[Value], expected: &[Value]) -> String {
    match received {
        all if all == expected => "pass".to_owned(),
        [] => "fail (nothing received)".to_owned(),
        other => format!("fail (received {})", Value::Array(other.to_vec())),
    }
}

#[tokio::main]
async fn main() {
    let Some(python) = std::env::var_os("BENCH_BROWSER_USE_PYTHON").map(PathBuf::from) else {
        eprintln!(
            "BENCH_BROWSER_USE_PYTHON is not set (a Python with browser-use): nothing to compare"
        );
        return;
    };
    let only: Option<Vec<String>> = std::env::var("BENCH_WIDGETS")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name));
    let mut rows = Vec::new();
    for scenario in widgets::scenarios() {
        if !wanted(scenario.name) {
            continue;
        }
        let expected = (scenario.expected)();
        let (first, second, submitted) = widgets::start_server_pair().await;
        let url = scenario.url(first, second);
        let ours = widgets::run(scenario.task, &url, (scenario.brain)(), scenario.max_steps).await;
        let ours_state = verdict(&submitted.of(scenario.page), &expected);
        if ours_state != "pass" {
            eprintln!("browserd on {url}: {}", ours.explain());
        }
        let (first, second, submitted) = widgets::start_server_pair().await;
        let url = scenario.url(first, second);
        let (theirs, theirs_success) = browser_use(
            &python,
            &url,
            scenario.task,
            (scenario.brain)(),
            scenario.max_steps,
        )
        .await;
        let theirs_state = verdict(&submitted.of(scenario.page), &expected);
        rows.push(format!(
            "| {} | {} | {ours_state} | {theirs} | {theirs_state} (success: {theirs_success}) |",
            scenario.name,
            ours.steps()
        ));
    }
    if wanted("gradio") {
        rows.push(
            python_app_row(
                &python,
                "gradio",
                GradioApp::start,
                widgets::GRADIO_TASK,
                widgets::gradio_brain,
                vec![widgets::gradio_expected()],
            )
            .await,
        );
    }
    if wanted("streamlit") {
        rows.push(
            python_app_row(
                &python,
                "streamlit",
                StreamlitApp::start,
                widgets::STREAMLIT_TASK,
                widgets::streamlit_brain,
                vec![widgets::streamlit_expected()],
            )
            .await,
        );
    }
    println!(
        "| scenario | browserd steps | browserd: app state | browser-use steps | browser-use: app state |"
    );
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
