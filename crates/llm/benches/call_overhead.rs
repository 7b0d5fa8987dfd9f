//! What the crate adds on top of a bare HTTP round trip, per call, against a local mock server.
//!
//! - `baseline`: reqwest POSTs an equivalent pre-built JSON body and parses the answer.
//! - `provider`: `OpenAiModel::complete` (request checks, strict-schema rewrite, body building,
//!   image encoding, reply parsing).
//! - `full stack`: what `ModelRegistry::build` returns (validation with `jsonschema`, fallback,
//!   timeout, retry around the provider).
//!
//! The request is agent-sized: a browser-use-like AgentOutput schema with 20 actions, a 20 kB
//! state message and a 150 kB screenshot. Prints medians, p90 and ratios to the baseline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use browserd_llm::providers::{OpenAiModel, StructuredOutputMode};
use browserd_llm::{
    ChatModel, ChatRequest, ImageData, ImageDetail, ImagePart, Message, ModelRegistry,
    ModelsConfig, OutputSchema, ProviderSettings, http_client,
};
use serde_json::{Map, Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const WARMUP: usize = 30;
const ITERATIONS: usize = 300;

fn agent_schema() -> OutputSchema {
    let mut actions = Vec::new();
    for i in 0..20 {
        let name = format!("action_{i}");
        actions.push(json!({
            "type": "object",
            "properties": {name.clone(): {
                "type": "object",
                "description": "Does something useful on the page with the given element.",
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "text": {"type": "string"},
                    "clear": {"type": "boolean", "default": true}
                },
                "required": ["index"],
                "additionalProperties": false
            }},
            "required": [name],
            "additionalProperties": false
        }));
    }
    OutputSchema::new(
        "AgentOutput",
        json!({
            "type": "object",
            "properties": {
                "thinking": {"type": "string"},
                "evaluation_previous_goal": {"type": "string"},
                "memory": {"type": "string"},
                "next_goal": {"type": "string"},
                "plan_update": {"type": "array", "items": {"type": "string"}},
                "action": {"type": "array", "minItems": 1, "items": {"anyOf": actions}}
            },
            "required": ["evaluation_previous_goal", "memory", "next_goal", "action"],
            "additionalProperties": false
        }),
    )
}

fn reply() -> Value {
    json!({
        "thinking": null,
        "evaluation_previous_goal": "Success: the search results are visible.",
        "memory": "Searched for laptops; result list loaded with 20 items.",
        "next_goal": "Open the first result.",
        "plan_update": null,
        "action": [{"action_3": {"index": 4512, "text": "laptop", "clear": true}}]
    })
}

fn request() -> ChatRequest {
    let state: String = (0..400)
        .map(|i| format!("[{i}]<a href=/item/{i}>Item number {i}</a>\n"))
        .collect::<String>()
        .chars()
        .take(20_000)
        .collect();
    let screenshot: Vec<u8> = (0..150_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    ChatRequest::new(
        vec![
            Message::system("You are a browser agent. ".repeat(200)),
            Message::user(state).with_image(ImagePart {
                media_type: "image/png".into(),
                data: ImageData::Bytes(screenshot),
                detail: ImageDetail::Auto,
            }),
        ],
        agent_schema(),
    )
}

fn completion() -> Value {
    json!({
        "model": "bench-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply().to_string()}}],
        "usage": {"prompt_tokens": 9000, "completion_tokens": 120,
                  "prompt_tokens_details": {"cached_tokens": 8000}}
    })
}

struct Stats {
    median: Duration,
    p90: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    Stats {
        median: samples[samples.len() / 2],
        p90: samples[samples.len() * 9 / 10],
    }
}

/// One call of a variant.
type Call<'a> = Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> + 'a>;

/// Runs the variants round-robin (so machine load hits them alike) and returns their stats.
async fn measure_interleaved(variants: &[Call<'_>]) -> Vec<Stats> {
    for _ in 0..WARMUP {
        for call in variants {
            call().await;
        }
    }
    let mut samples = vec![Vec::with_capacity(ITERATIONS); variants.len()];
    for _ in 0..ITERATIONS {
        for (i, call) in variants.iter().enumerate() {
            let started = Instant::now();
            call().await;
            samples[i].push(started.elapsed());
        }
    }
    samples.into_iter().map(stats).collect()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion()))
        .mount(&server)
        .await;
    let base_url = format!("{}/v1", server.uri());
    let request = request();

    // Baseline: the body our provider would send, built once; one POST and a JSON parse.
    let client = http_client().expect("client");
    let mut prebuilt = Map::new();
    prebuilt.insert("model".into(), json!("bench-model"));
    prebuilt.insert(
        "messages".into(),
        json!([{"role": "system", "content": "x".repeat(5000)},
               {"role": "user", "content": [{"type": "text", "text": "y".repeat(20_000)},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", "A".repeat(200_000))}}]}]),
    );
    prebuilt.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "AgentOutput", "strict": true,
               "schema": agent_schema().schema}}),
    );
    let prebuilt = Value::Object(prebuilt);
    let url = format!("{base_url}/chat/completions");

    let settings = ProviderSettings {
        name: "bench".into(),
        model_id: "bench-model".into(),
        base_url: url::Url::parse(&base_url).unwrap(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        price: None,
        max_tokens: None,
        temperature: None,
        client: client.clone(),
    };
    let provider: Arc<dyn ChatModel> =
        Arc::new(OpenAiModel::new(settings, StructuredOutputMode::JsonSchema));
    let config = ModelsConfig::from_toml_str(&format!(
        "[models.bench]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"bench-model\"\n\
         fallback = \"backup\"\n[models.backup]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"b\"\n"
    ))
    .expect("config");
    let registry = ModelRegistry::new(config).expect("registry");
    let stack = registry.build("bench").expect("build");

    let variants: Vec<Call<'_>> = vec![
        Box::new(|| {
            let client = client.clone();
            let url = url.clone();
            let body = &prebuilt;
            Box::pin(async move {
                let response = client.post(url).json(body).send().await.expect("send");
                let value: Value = response.json().await.expect("json");
                assert!(value.get("choices").is_some());
            })
        }),
        Box::new(|| {
            let provider = provider.clone();
            let request = &request;
            Box::pin(async move {
                provider.complete(request).await.expect("provider call");
            })
        }),
        Box::new(|| {
            let stack = stack.clone();
            let request = &request;
            Box::pin(async move {
                let response = stack.complete(request).await.expect("stack call");
                assert_eq!(response.model, "bench");
            })
        }),
    ];
    let mut results = measure_interleaved(&variants).await.into_iter();
    let (baseline, provider_stats, stack_stats) = (
        results.next().unwrap(),
        results.next().unwrap(),
        results.next().unwrap(),
    );

    let ratio = |s: &Stats| s.median.as_secs_f64() / baseline.median.as_secs_f64();
    println!(
        "call_overhead: {ITERATIONS} calls each, agent-sized request (20 actions, 20 kB text, 150 kB image)"
    );
    println!(
        "  baseline (bare reqwest POST + parse): median {:>8.3} ms  p90 {:>8.3} ms  ratio 1.00",
        baseline.median.as_secs_f64() * 1e3,
        baseline.p90.as_secs_f64() * 1e3
    );
    for (label, s) in [
        ("provider (OpenAiModel)", &provider_stats),
        ("full stack (registry.build)", &stack_stats),
    ] {
        println!(
            "  {label:<36} median {:>8.3} ms  p90 {:>8.3} ms  ratio {:.2}",
            s.median.as_secs_f64() * 1e3,
            s.p90.as_secs_f64() * 1e3,
            ratio(s)
        );
    }
    println!(
        "  layers over provider (validation, fallback, timeout, retry): {:+.3} ms median",
        (stack_stats.median.as_secs_f64() - provider_stats.median.as_secs_f64()) * 1e3
    );
}
