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
//! A second scenario, "async" (`BENCH_SCENARIO=login|async`, default both), is a shop page whose
//! three "Add to cart" buttons call an API that answers after `BENCH_SERVER_DELAY_MS` (default
//! 300) and then update the page: the model adds the three items one per step, picking the
//! first button still labelled "Add to cart" (so a capture taken before the answer would make it
//! click the same button again, which fails the run), then calls done. Per click step it also
//! prints wall − model − the server's delay: what settling adds beyond the page's own latency.
//!
//! With `BENCH_BROWSER_USE_PYTHON=/path/to/python` (a Python with `browser-use` installed) each
//! mode also runs Python browser-use on the same page with the same scripted answers
//! (`browser_use_step.py`, its own Chrome per run, as it does by default) and prints the ratio.
//!
//! `prompt_prefix` lines: over one run's steps 2-4, the share of each step's prompt that is an
//! unchanged prefix of the previous step's (what a provider's prompt cache can reuse;
//! `browserd_llm::cache::PromptPrefix`), for browserd and, with the variable above, for Python
//! browser-use measured the same way on its own prompts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::response::Html;
use axum::routing::get;
use browserd_agent::{Agent, NoopSink, SecretEntry, SensitiveData, TaskConfig, VisionMode};
use browserd_browser::egress::EgressSettings;
use browserd_browser::{
    Action, ActionContext, BrowserPool, CaptureOptions, ContextOptions, PoolConfig,
    ScreenshotFormat, SettleSettings,
};
use browserd_llm::cache::PromptPrefix;
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
    let shop = shop_page();
    let items = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let app = axum::Router::new()
        .route("/login", get(move || async move { Html(page) }))
        .route("/shop", get(move || async move { Html(shop) }))
        .route(
            "/api/add",
            get(move || {
                let items = items.clone();
                async move {
                    tokio::time::sleep(server_delay()).await;
                    let n = items.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 3 + 1;
                    axum::Json(json!({"items": n}))
                }
            }),
        )
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

const SHOP: &str = r#"<!doctype html><html><head><title>Shop</title></head><body>
<h1>Monitors</h1><nav>{NAV}</nav>
<ul>
  <li>27-inch monitor A <button id="add-1">Add to cart</button></li>
  <li>27-inch monitor B <button id="add-2">Add to cart</button></li>
  <li>27-inch monitor C <button id="add-3">Add to cart</button></li>
</ul>
<p>Cart: <span id="cart">empty</span></p>
<script>
for (const button of document.querySelectorAll('button')) {
  button.addEventListener('click', async () => {
    const res = await fetch('/api/add?delay={DELAY}');
    const body = await res.json();
    button.textContent = 'Added';
    document.getElementById('cart').textContent = body.items + ' items';
  });
}
</script></body></html>"#;

/// The shop's API latency (`BENCH_SERVER_DELAY_MS`, default 300).
fn server_delay() -> Duration {
    Duration::from_millis(
        std::env::var("BENCH_SERVER_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    )
}

fn shop_page() -> String {
    let nav: String = (0..150)
        .map(|i| format!("<a href=\"/item/{i}\">Product number {i} with a description</a> "))
        .collect();
    SHOP.replace("{NAV}", &nav)
        .replace("{DELAY}", &server_delay().as_millis().to_string())
}

/// The first "Add to cart" button of the shop's state message (the label follows the tag).
fn first_add_button(page: &str) -> Option<u64> {
    let re = Regex::new(r"\[(\d+)\]<button id=add-\d[^\n]*\n\s*Add to cart").unwrap();
    re.captures(page).and_then(|c| c[1].parse().ok())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Login,
    Async,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Login => "login",
            Scenario::Async => "async",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Scenario::Login => "/login",
            Scenario::Async => "/shop",
        }
    }

    fn task(self) -> &'static str {
        match self {
            Scenario::Login => "Log in as alice and report the balance.",
            Scenario::Async => "Add the three monitors to the cart.",
        }
    }

    fn step_names(self) -> [&'static str; 4] {
        match self {
            Scenario::Login => ["input user", "input password", "click submit", "done"],
            Scenario::Async => ["click add 1", "click add 2", "click add 3", "done"],
        }
    }

    /// The action of model turn `turn` (1-based) on `page`; `None` = done. Panics when the
    /// page does not offer what the turn needs (a stale capture in the async scenario).
    fn action(self, turn: usize, page: &str, password: &str) -> Option<Value> {
        match (self, turn) {
            (Scenario::Login, 1) => Some(
                json!({"input": {"index": index_of(page, "input", "name=username"), "text": "alice"}}),
            ),
            (Scenario::Login, 2) => Some(
                json!({"input": {"index": index_of(page, "input", "type=password"), "text": password}}),
            ),
            (Scenario::Login, 3) => {
                Some(json!({"click": {"index": index_of(page, "button", "signin")}}))
            }
            (Scenario::Async, 1..=3) => {
                let added = page.matches("Added").count();
                assert_eq!(
                    added,
                    turn - 1,
                    "turn {turn}: the page must show the previous clicks' results:\n{page}"
                );
                let index = first_add_button(page).expect("an Add to cart button");
                Some(json!({"click": {"index": index}}))
            }
            _ => None,
        }
    }

    fn success(self, page: &str) -> bool {
        match self {
            Scenario::Login => page.contains("Welcome alice"),
            Scenario::Async => page.contains("3 items"),
        }
    }
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
    scenario: Scenario,
    /// Every request, for the prompt-prefix measure.
    requests: Mutex<Vec<ChatRequest>>,
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
        self.requests.lock().unwrap().push(request.clone());
        tokio::time::sleep(self.latency).await;
        let action = match self
            .scenario
            .action(turn, &page, "<secret>password</secret>")
        {
            Some(action) => json!([action]),
            None => {
                json!([{"done": {"text": "finished", "success": self.scenario.success(&page)}}])
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

fn egress() -> ContextOptions {
    ContextOptions {
        egress: Some(EgressSettings {
            allow_loopback: true,
            ..EgressSettings::default()
        }),
        ..ContextOptions::default()
    }
}

/// The same options with settling after actions switched off (the code before it existed).
fn egress_without_settle() -> ContextOptions {
    ContextOptions {
        settle: SettleSettings {
            cap: Duration::ZERO,
            ..SettleSettings::default()
        },
        ..egress()
    }
}

/// One agent run; returns each model step's (wall − model, capture, actions, settle) in ms.
async fn agent_run(
    pool: &BrowserPool,
    scenario: Scenario,
    url: &str,
    vision: bool,
    settle: bool,
) -> (Vec<(f64, f64, f64, f64)>, PromptPrefix) {
    let workspace = TaskWorkspace::open(None).unwrap();
    let mut options = if settle {
        egress()
    } else {
        egress_without_settle()
    };
    options.workspace_dir = Some(workspace.dir().to_path_buf());
    let session = pool.lease_with(options).await.unwrap();
    let browser = Arc::new(SessionBrowser::new(
        session,
        SessionBrowserOptions {
            sensitive_values: vec![("password".into(), "s3cret-pw".into())],
            ..SessionBrowserOptions::default()
        },
    ));
    let mut config = TaskConfig::new(scenario.task());
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
        scenario,
        requests: Mutex::new(Vec::new()),
    });
    let mut agent = Agent::new(config, browser.clone(), model.clone(), Arc::new(NoopSink)).unwrap();
    let history = agent.run().await;
    assert_eq!(
        history.is_successful(),
        Some(true),
        "the {} run must succeed",
        scenario.name()
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
                m.settle_ms as f64,
            )
        })
        .collect();
    if let Ok(browser) = Arc::try_unwrap(browser) {
        browser.into_session().release().await;
    }
    let requests = model.requests.lock().unwrap().clone();
    let prefix = requests
        .windows(2)
        .map(|pair| PromptPrefix::measure(Some(&pair[0]), &pair[1]))
        .fold(PromptPrefix::default(), PromptPrefix::plus);
    (steps, prefix)
}

/// The same browser work without the agent: per step a capture (with screenshot) + the action.
/// Returns each step's total, capture and action time in ms.
async fn bare_run(
    pool: &BrowserPool,
    scenario: Scenario,
    url: &str,
    vision: bool,
) -> Vec<(f64, f64, f64)> {
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
        let action = scenario.action(turn, &page.llm_text, "s3cret-pw");
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
    // `BENCH_BROWSERD_CHROME=/usr/bin/chromium` measures the full build instead of the
    // default headless shell (browser-use's Chrome is `BENCH_CHROME`).
    let chrome = std::env::var("BENCH_BROWSERD_CHROME")
        .unwrap_or_else(|_| browserd_browser::DEFAULT_CHROME_PATH.to_owned());
    println!("browserd's Chrome: {chrome}");
    let pool = BrowserPool::new(PoolConfig {
        chrome_path: chrome.into(),
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
    let scenarios: &[Scenario] = match std::env::var("BENCH_SCENARIO").as_deref() {
        Ok("login") => &[Scenario::Login],
        Ok("async") => &[Scenario::Async],
        _ => &[Scenario::Login, Scenario::Async],
    };
    for &scenario in scenarios {
        let url = format!("http://{addr}{}", scenario.path());
        for &vision in modes {
            measure(&pool, scenario, &url, vision).await;
        }
    }
    pool.shutdown().await;
}

async fn measure(pool: &BrowserPool, scenario: Scenario, url: &str, vision: bool) {
    // Warm up Chrome and both paths.
    let _ = agent_run(pool, scenario, url, vision, true).await;
    bare_run(pool, scenario, url, vision).await;
    // On the login page (where it is not needed) also the agent without settling, as the
    // code was before it: what settling costs a step that starts nothing.
    let unsettled = scenario == Scenario::Login;
    let mut agent_steps = Vec::new();
    let mut bare_steps = Vec::new();
    let mut unsettled_steps = Vec::new();
    let mut prefix = PromptPrefix::default();
    for _ in 0..runs() {
        let (steps, run_prefix) = agent_run(pool, scenario, url, vision, true).await;
        agent_steps.extend(steps);
        prefix = run_prefix;
        bare_steps.extend(bare_run(pool, scenario, url, vision).await);
        if unsettled {
            unsettled_steps.extend(agent_run(pool, scenario, url, vision, false).await.0);
        }
    }
    let unsettled_steps: Vec<f64> = unsettled_steps.iter().map(|s| s.0).collect();
    let by_step = |v: &[f64], k: usize| median(v.iter().skip(k).step_by(4).copied().collect());
    let agent_capture_ms: Vec<f64> = agent_steps.iter().map(|s| s.1).collect();
    let agent_action_ms: Vec<f64> = agent_steps.iter().map(|s| s.2).collect();
    let agent_settle_ms: Vec<f64> = agent_steps.iter().map(|s| s.3).collect();
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
        "step_overhead [{}]: {} runs × 4 steps, real Chromium, scripted model answering in {} ms (excluded), {vision_label}",
        scenario.name(),
        runs(),
        model_latency().as_millis()
    );
    for (k, name) in scenario.step_names().iter().enumerate() {
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
        "  settle per step (metadata.settle.ms summed over the step's actions), median: {:5.1} ms (by step {})",
        median(agent_settle_ms.clone()),
        (0..4)
            .map(|k| format!("{:.0}", by_step(&agent_settle_ms, k)))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    if !unsettled_steps.is_empty() {
        let before = median(unsettled_steps.clone());
        println!(
            "  agent without settling (as before it), median: {before:8.1} ms (by step {}); settling adds {:.1} ms per step",
            (0..4)
                .map(|k| format!("{:.0}", by_step(&unsettled_steps, k)))
                .collect::<Vec<_>>()
                .join(" / "),
            agent - before
        );
    }
    println!(
        "  agent-side overhead (median difference): {:.1} ms",
        agent - bare
    );
    if scenario == Scenario::Async {
        let delay = server_delay().as_secs_f64() * 1000.0;
        let clicks: Vec<f64> = (0..3)
            .flat_map(|k| agent_steps.iter().skip(k).step_by(4).copied())
            .collect();
        println!(
            "  click steps: wall − model − server delay ({delay:.0} ms), median: {:6.1} ms (what settling adds beyond the page's latency; target ≤ 60)",
            median(clicks.iter().map(|c| c - delay).collect())
        );
    }
    println!(
        "  prompt_prefix, browserd: {:.1}% of prompt chars in steps 2-4 are an unchanged prefix of the previous prompt; {:.1}% up to a cache breakpoint ({} of {} chars)",
        prefix.shared_share() * 100.0,
        prefix.breakpoint_share() * 100.0,
        prefix.shared_chars,
        prefix.total_chars
    );
    if let Some(python) = std::env::var_os("BENCH_BROWSER_USE_PYTHON") {
        let (steps, theirs) = browser_use_steps(python, scenario, url.to_owned(), vision).await;
        let share = |key: &str| {
            let part = theirs[key].as_f64().unwrap_or(0.0);
            let total = theirs["total"].as_f64().unwrap_or(0.0).max(1.0);
            part / total * 100.0
        };
        println!(
            "  prompt_prefix, Python browser-use: {:.1}% unchanged prefix; {:.1}% up to a cache breakpoint ({} of {} chars)",
            share("shared"),
            share("to_breakpoint"),
            theirs["shared"],
            theirs["total"]
        );
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
            "  ratio agent / Python browser-use: {:.2} (target ≤ 0.33)",
            agent / median(steps)
        );
    }
    if scenario == Scenario::Login {
        println!(
            "  target ≤ 60 ms per step (Python browser-use: 237 ms) → {}",
            if agent <= 60.0 { "met" } else { "NOT met" }
        );
    }
    println!();
}

/// Runs `browser_use_step.py` with `python` on `url` in one vision mode; its steps' wall −
/// model times in ms (4 per run, in run order).
async fn browser_use_steps(
    python: std::ffi::OsString,
    scenario: Scenario,
    url: String,
    vision: bool,
) -> (Vec<f64>, Value) {
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
        .env("BENCH_SCENARIO", scenario.name())
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
    (steps, result["prompt_prefix"].clone())
}
