//! Per-step overhead of the agent loop, excluding the model: a 4-step login (type user, type
//! password from a secret, submit, done) against the fake browser with an instant scripted model.
//! Baseline: the same browser calls made directly, without the agent. Prints medians and ratio,
//! and how much of each step's prompt is an unchanged prefix of the previous step's (what a
//! provider's prompt cache can reuse; `browserd_llm::cache::PromptPrefix`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use browserd_agent::{
    Agent, AgentBrowser, MarkdownOptions, NoopSink, SecretEntry, SensitiveData, TaskConfig,
};
use browserd_llm::cache::PromptPrefix;
use serde_json::json;
use support::{FakeBrowser, Page, ScriptedModel, done, login_pages, reply};

const RUNS: usize = 200;
const STEPS: u32 = 4;

/// The login site with a realistically large page (~25k chars of DOM text, 150 KB screenshot).
fn browser() -> Arc<FakeBrowser> {
    let filler: String = (0..400)
        .map(|i| {
            format!(
                "\t[{}]<a href=/item/{i} />\n\t\tProduct number {i} with a description\n",
                100 + i
            )
        })
        .collect();
    let pages = login_pages()
        .into_iter()
        .map(|(url, mut page): (&'static str, Page)| {
            page.text.push('\n');
            page.text.push_str(&filler);
            (url, page)
        });
    let mut b = FakeBrowser::build(pages);
    b.screenshot_bytes = 150 * 1024;
    Arc::new(b)
}

fn config() -> TaskConfig {
    let mut c = TaskConfig::new("Log in as alice and report the balance.");
    c.start_url = Some("http://app.test/login".into());
    c.sensitive_data = SensitiveData(BTreeMap::from([(
        "password".to_owned(),
        SecretEntry::Value("s3cret-pw".into()),
    )]));
    c
}

fn script() -> Arc<ScriptedModel> {
    ScriptedModel::json([
        reply(
            "type user",
            json!([{"input": {"index": 1, "text": "alice"}}]),
        ),
        reply(
            "type password",
            json!([{"input": {"index": 2, "text": "<secret>password</secret>"}}]),
        ),
        reply("submit", json!([{"click": {"index": 3}}])),
        done("Balance is 42", true),
    ])
}

async fn agent_run() -> Duration {
    agent_run_with(script()).await
}

async fn agent_run_with(model: Arc<ScriptedModel>) -> Duration {
    let b = browser();
    let mut agent = Agent::new(config(), b.clone(), model, Arc::new(NoopSink)).expect("config");
    let t = Instant::now();
    let history = agent.run().await;
    let took = t.elapsed();
    assert_eq!(
        history.is_successful(),
        Some(true),
        "the scenario must succeed"
    );
    assert_eq!(b.url(), "http://app.test/welcome");
    took
}

/// The browser calls the agent makes for this scenario, made directly.
async fn baseline_run() -> Duration {
    let b = browser();
    let t = Instant::now();
    b.execute(
        "navigate",
        &json!({"url": "http://app.test/login", "new_tab": false}),
    )
    .await
    .unwrap();
    let steps = [
        ("input", json!({"index": 1, "text": "alice"})),
        ("input", json!({"index": 2, "text": "s3cret-pw"})),
        ("click", json!({"index": 3})),
    ];
    for (name, params) in steps {
        let state = b.capture(true).await.unwrap();
        std::hint::black_box(&state);
        let _ = b.describe_element(params["index"].as_u64().unwrap()).await;
        b.execute(name, &params).await.unwrap();
    }
    std::hint::black_box(b.capture(true).await.unwrap());
    let _ = b.extract_markdown(&MarkdownOptions::default()).await;
    let took = t.elapsed();
    assert_eq!(b.url(), "http://app.test/welcome");
    took
}

/// The reusable prefix of every step's prompt after the first, summed over one run.
async fn prompt_prefix() -> (PromptPrefix, usize) {
    let model = script();
    agent_run_with(model.clone()).await;
    let requests = model.step_requests();
    let total = requests
        .windows(2)
        .map(|pair| PromptPrefix::measure(Some(&pair[0]), &pair[1]))
        .fold(PromptPrefix::default(), PromptPrefix::plus);
    (total, requests.len())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for _ in 0..20 {
            agent_run().await;
            baseline_run().await;
        }
        let mut agent = Vec::with_capacity(RUNS);
        let mut base = Vec::with_capacity(RUNS);
        // Interleaved so that machine noise hits both alike.
        for _ in 0..RUNS {
            agent.push(agent_run().await);
            base.push(baseline_run().await);
        }
        let a = median(agent) / STEPS;
        let b = median(base) / STEPS;
        println!("step_overhead: 4-step login, fake browser, instant scripted model, {RUNS} runs");
        println!(
            "  agent loop   median per step: {:>9.3} ms",
            a.as_secs_f64() * 1e3
        );
        println!(
            "  bare browser median per step: {:>9.3} ms (baseline)",
            b.as_secs_f64() * 1e3
        );
        println!(
            "  overhead     median per step: {:>9.3} ms; ratio agent/baseline: {:.2}x",
            a.saturating_sub(b).as_secs_f64() * 1e3,
            a.as_secs_f64() / b.as_secs_f64().max(1e-9)
        );
        println!("  target: <= 60 ms per step (browser-use: 237 ms)");
        let (prefix, calls) = prompt_prefix().await;
        println!(
            "  prompt_prefix: steps 2-{calls}: {:.1}% of prompt chars are an unchanged prefix of \
             the previous step's prompt (reusable by automatic prefix caches: OpenAI, Gemini); \
             {:.1}% up to a cache breakpoint (Anthropic, Bedrock); {} of {} chars",
            prefix.shared_share() * 100.0,
            prefix.breakpoint_share() * 100.0,
            prefix.shared_chars,
            prefix.total_chars
        );
    });
}
