//! Per-step overhead of a whole agent step with the real browser, excluding the model: a 4-step
//! login (type user, type password from a secret, submit, done) on a local page with real
//! Chromium and an in-process scripted model that reads element indices from the state message
//! and answers after `BENCH_MODEL_MS` (default 200). Each step's wall time minus its model time
//! is measured; the baseline, from the same run, is the bare browser work of the same steps (a
//! capture — with a screenshot when vision is on — + the same actions called directly on the
//! session, no agent). Runs with vision on (browser-use's default: the model sees a screenshot
//! every step) and off (the step's history screenshot is taken while the model is asked).
//! Prints per-step and overall medians and the ratio. Target ≤ 60 ms per step (Python
//! browser-use: 237 ms).
//!
//! With `BENCH_BROWSER_USE_PYTHON=/path/to/python` (a Python with `browser-use` installed) each
//! mode also runs Python browser-use on the same page with the same scripted answers
//! (`browser_use_step.py`, its own Chrome per run, as it does by default) and prints the ratio.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::response::Html;
use axum::routing::get;
use browserd_agent::{Agent, NoopSink, SecretEntry, SensitiveData, TaskConfig, VisionMode};
use browserd_browser::egress::EgressSettings;
use browserd_browser::{
    Action, ActionContext, BrowserPool, CaptureOptions, PoolConfig, ScreenshotFormat, TaskOptions,
};
use browserd_llm::{ChatModel, ChatRequest, ChatResponse, ContentPart, LlmError, TokenUsage};
use browserd_worker::{SessionBrowser, SessionBrowserOptions, TaskWorkspace};
use regex::Regex;
use serde_json::{Value, json};

/// Runs per mode (`BENCH_RUNS`, default 15).
fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
}

const LOGIN: &str = r#"<!doctype html><html><head><title>Login</title></head><body>
<h1>Sign in</h1><nav>{NAV}</nav>
<form method="post" action="/welcome">
  <label>User <input type="text" name="username"></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit" id="signin">Sign in</button>
</form></body></html>"#;

fn login_page() -> String {
    // A realistically busy page: 150 links besides the form.
    let nav: String = (0..150)
        .map(|i| format!("<a href=\"/item/{i}\">Product number {i} with a description</a> "))
        .collect();
    LOGIN.replace("{NAV}", &nav)
}

async fn start_app() -> std::net::SocketAddr {
    let page = login_page();
    let app = axum::Router::new()
        .route("/login", get(move || async move { Html(page) }))
        .route(
            "/welcome",
            axum::routing::post(|| async {
                Html("<html><head><title>Welcome</title></head><body><h1>Welcome alice</h1><p>Balance 42</p></body></html>")
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn index_of(page: &str, tag: &str, pattern: &str) -> u64 {
    let re = Regex::new(&format!(r"\[(\d+)\]<{tag}\b[^\n]*{pattern}")).unwrap();
    re.captures(page)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or_else(|| panic!("no <{tag}> {pattern} in the page"))
}

/// Answers after a fixed latency, reading indices from the state message like a model would.
struct InstantModel {
    turn: Mutex<usize>,
    latency: Duration,
}

#[async_trait]
impl ChatModel for InstantModel {
    fn name(&self) -> &str {
        "instant"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let page = request
            .messages
            .iter()
            .rev()
            .flat_map(|m| m.content.iter())
            .find_map(|p| match p {
                ContentPart::Text(t) => t.rfind("<browser_state>").map(|i| t[i..].to_owned()),
                _ => None,
            })
            .unwrap_or_default();
        let turn = {
            let mut t = self.turn.lock().unwrap();
            *t += 1;
            *t
        };
        tokio::time::sleep(self.latency).await;
        let action = match turn {
            1 => {
                json!([{"input": {"index": index_of(&page, "input", "name=username"), "text": "alice"}}])
            }
            2 => {
                json!([{"input": {"index": index_of(&page, "input", "type=password"), "text": "<secret>password</secret>"}}])
            }
            3 => json!([{"click": {"index": index_of(&page, "button", "signin")}}]),
            _ => {
                json!([{"done": {"text": "Balance 42", "success": page.contains("Welcome alice")}}])
            }
        };
        Ok(ChatResponse {
            value: json!({
                "thinking": "t", "evaluation_previous_goal": "ok", "memory": "m",
                "next_goal": "g", "action": action
            }),
            usage: TokenUsage::default(),
            cost_usd: None,
            latency: Duration::ZERO,
            model: "instant".into(),
            provider_model: "instant".into(),
            stop_reason: Some("stop".into()),
        })
    }
}

/// Extra Chrome flags to compare (`BENCH_CHROME_ARGS="--flag-a --flag-b"`).
fn extra_chrome_args() -> Vec<String> {
    std::env::var("BENCH_CHROME_ARGS")
        .map(|v| v.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The scripted model's answer time (`BENCH_MODEL_MS`, default 200 ms — below any hosted
/// model's). It is excluded from the step time; it only gives work that overlaps the model
/// call (the history screenshot of a step whose model gets no image) room to overlap.
fn model_latency() -> Duration {
    Duration::from_millis(
        std::env::var("BENCH_MODEL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn egress() -> TaskOptions {
    TaskOptions {
        egress: Some(EgressSettings {
            allow_loopback: true,
            ..EgressSettings::default()
        }),
        workspace_dir: None,
        viewport: None,
    }
}

/// One agent run; returns each model step's (wall − model, capture, actions) in ms.
async fn agent_run(pool: &BrowserPool, url: &str, vision: bool) -> Vec<(f64, f64, f64)> {
    let workspace = TaskWorkspace::open(None).unwrap();
    let mut options = egress();
    options.workspace_dir = Some(workspace.dir().to_path_buf());
    let session = pool.lease_with(options).await.unwrap();
    let browser = Arc::new(SessionBrowser::new(
        session,
        SessionBrowserOptions {
            sensitive_values: vec![("password".into(), "s3cret-pw".into())],
            ..SessionBrowserOptions::default()
        },
    ));
    let mut config = TaskConfig::new("Log in as alice and report the balance.");
    config.start_url = Some(url.to_owned());
    config.use_vision = if vision {
        VisionMode::Always
    } else {
        VisionMode::Never
    };
    config.workspace_dir = Some(workspace.dir().to_path_buf());
    config.sensitive_data = SensitiveData(BTreeMap::from([(
        "password".to_owned(),
        SecretEntry::Value("s3cret-pw".into()),
    )]));
    let model = Arc::new(InstantModel {
        turn: Mutex::new(0),
        latency: model_latency(),
    });
    let mut agent = Agent::new(config, browser.clone(), model, Arc::new(NoopSink)).unwrap();
    let history = agent.run().await;
    assert_eq!(
        history.is_successful(),
        Some(true),
        "the login must succeed"
    );
    drop(agent);
    let steps = history
        .history
        .iter()
        .filter(|h| h.metadata.step_number >= 1)
        .map(|h| {
            let m = &h.metadata;
            (
                (m.step_end_time - m.step_start_time) * 1000.0 - m.model_ms as f64,
                m.capture_ms as f64,
                m.actions_ms as f64,
            )
        })
        .collect();
    if let Ok(browser) = Arc::try_unwrap(browser) {
        browser.into_session().release().await;
    }
    steps
}

/// The same browser work without the agent: per step a capture (with screenshot) + the action.
/// Returns each step's total, capture and action time in ms.
async fn bare_run(pool: &BrowserPool, url: &str, vision: bool) -> Vec<(f64, f64, f64)> {
    let session = pool.lease_with(egress()).await.unwrap();
    let ctx = ActionContext::default();
    let nav: Action = serde_json::from_value(json!({"navigate": {"url": url}})).unwrap();
    session.execute(&nav, &ctx).await;
    let options = CaptureOptions {
        screenshot: vision.then_some(ScreenshotFormat::Jpeg { quality: 80 }),
        ..CaptureOptions::default()
    };
    let mut steps = Vec::new();
    for turn in 1..=4 {
        let t = Instant::now();
        let page = session.capture(&options).await.unwrap();
        let captured = t.elapsed().as_secs_f64() * 1000.0;
        let action: Option<Value> = match turn {
            1 => Some(
                json!({"input": {"index": index_of(&page.llm_text, "input", "name=username"), "text": "alice"}}),
            ),
            2 => Some(
                json!({"input": {"index": index_of(&page.llm_text, "input", "type=password"), "text": "s3cret-pw"}}),
            ),
            3 => Some(json!({"click": {"index": index_of(&page.llm_text, "button", "signin")}})),
            _ => None,
        };
        if let Some(action) = action {
            let action: Action = serde_json::from_value(action).unwrap();
            let result = session.execute(&action, &ctx).await;
            assert!(result.error.is_none(), "{:?}", result.error);
        }
        let total = t.elapsed().as_secs_f64() * 1000.0;
        steps.push((total, captured, total - captured));
    }
    session.release().await;
    steps
}

#[tokio::main]
async fn main() {
    let addr = start_app().await;
    let url = format!("http://{addr}/login");
    let pool = BrowserPool::new(PoolConfig {
        extra_args: extra_chrome_args(),
        ..PoolConfig::default()
    })
    .unwrap();
    // `BENCH_VISION=on|off` measures one mode only.
    let modes: &[bool] = match std::env::var("BENCH_VISION").as_deref() {
        Ok("on") => &[true],
        Ok("off") => &[false],
        _ => &[true, false],
    };
    for &vision in modes {
        measure(&pool, &url, vision).await;
    }
    pool.shutdown().await;
}

async fn measure(pool: &BrowserPool, url: &str, vision: bool) {
    // Warm up Chrome and both paths.
    agent_run(pool, url, vision).await;
    bare_run(pool, url, vision).await;
    let mut agent_steps = Vec::new();
    let mut bare_steps = Vec::new();
    for _ in 0..runs() {
        agent_steps.extend(agent_run(pool, url, vision).await);
        bare_steps.extend(bare_run(pool, url, vision).await);
    }
    let by_step = |v: &[f64], k: usize| median(v.iter().skip(k).step_by(4).copied().collect());
    let agent_capture_ms: Vec<f64> = agent_steps.iter().map(|s| s.1).collect();
    let agent_action_ms: Vec<f64> = agent_steps.iter().map(|s| s.2).collect();
    let agent_steps: Vec<f64> = agent_steps.iter().map(|s| s.0).collect();
    let capture_ms: Vec<f64> = bare_steps.iter().map(|s| s.1).collect();
    let action_ms: Vec<f64> = bare_steps.iter().map(|s| s.2).collect();
    let bare_steps: Vec<f64> = bare_steps.iter().map(|s| s.0).collect();
    let vision_label = if vision {
        "vision on (JPEG screenshot every step, browser-use's default)"
    } else {
        "vision off (no screenshot)"
    };
    println!(
        "step_overhead: {} runs × 4 steps, real Chromium, scripted model answering in {} ms (excluded), {vision_label}",
        runs(),
        model_latency().as_millis()
    );
    for (k, name) in ["input user", "input password", "click submit", "done"]
        .iter()
        .enumerate()
    {
        println!(
            "  step {} ({name}): agent {:6.1} ms (capture {:5.1} + actions {:5.1}), baseline {:6.1} ms (capture {:5.1} + action {:5.1})",
            k + 1,
            by_step(&agent_steps, k),
            by_step(&agent_capture_ms, k),
            by_step(&agent_action_ms, k),
            by_step(&bare_steps, k),
            by_step(&capture_ms, k),
            by_step(&action_ms, k),
        );
    }
    let agent = median(agent_steps.clone());
    let bare = median(bare_steps.clone());
    println!(
        "  agent step (wall − model), median: {agent:8.1} ms   (n={})",
        agent_steps.len()
    );
    println!(
        "  baseline: bare capture + action, median: {bare:8.1} ms   (n={})",
        bare_steps.len()
    );
    println!("  ratio agent / baseline: {:.2}", agent / bare);
    println!(
        "  agent-side overhead (median difference): {:.1} ms",
        agent - bare
    );
    if let Some(python) = std::env::var_os("BENCH_BROWSER_USE_PYTHON") {
        let steps = browser_use_steps(python, url.to_owned(), vision).await;
        println!(
            "  Python browser-use, same page and answers, this run: median {:6.1} ms per step (n={}; by step {})",
            median(steps.clone()),
            steps.len(),
            (0..4)
                .map(|k| format!("{:.0}", by_step(&steps, k)))
                .collect::<Vec<_>>()
                .join(" / ")
        );
        println!(
            "  ratio agent / Python browser-use: {:.2}",
            agent / median(steps)
        );
    }
    println!(
        "  target ≤ 60 ms per step (Python browser-use: 237 ms) → {}\n",
        if agent <= 60.0 { "met" } else { "NOT met" }
    );
}

/// Runs `browser_use_step.py` with `python` on `url` in one vision mode; its steps' wall −
/// model times in ms (4 per run, in run order).
async fn browser_use_steps(python: std::ffi::OsString, url: String, vision: bool) -> Vec<f64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/browser_use_step.py");
    // browserd's flags and the bench's extra ones; browser-use adds headless and no-sandbox.
    let chrome_flags: Vec<String> = browserd_browser::CHROME_FLAGS
        .iter()
        .filter(|f| !matches!(**f, "--headless=new" | "--no-sandbox"))
        .map(|f| (*f).to_owned())
        .chain(extra_chrome_args())
        .collect();
    let output = tokio::process::Command::new(&python)
        .arg(script)
        .arg(&url)
        .env("BENCH_CHROME_FLAGS", chrome_flags.join(" "))
        .env("BENCH_VISION", if vision { "on" } else { "off" })
        .env("BENCH_RUNS", runs().to_string())
        .env("BENCH_MODEL_MS", model_latency().as_millis().to_string())
        .env("BROWSER_USE_LOGGING_LEVEL", "error")
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .expect("run the browser-use script");
    assert!(
        output.status.success(),
        "browser_use_step.py failed ({})",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("{\"vision\""))
        .expect("browser_use_step.py printed no result line");
    let result: Value = serde_json::from_str(line).expect("a JSON result line");
    let steps: Vec<f64> = result["steps_ms"]
        .as_array()
        .expect("steps_ms")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(steps.len(), 4 * runs(), "4 model steps per browser-use run");
    steps
}
