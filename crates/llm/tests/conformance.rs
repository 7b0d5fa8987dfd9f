//! One agent scenario through every provider kind, each answered by a mock speaking that
//! provider's wire format: the same parsed values, usage and cost come out of all of them, the
//! retry and corrective-retry layers behave the same, and no credential reaches an error.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use browserd_llm::{ChatResponse, ProviderKind, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// `(model name, provider, extra TOML lines)`; every model's base URL is `{mock}/{name}` (plus
/// `/v1` where the provider's URL convention has it).
fn kinds(server: &MockServer, credentials_file: &str) -> Vec<(&'static str, String)> {
    let base = |name: &str| format!("{}/{name}", server.uri());
    vec![
        (
            "openai",
            format!(
                "provider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4.1-mini\"\napi_key_env = \"OPENAI_API_KEY\"",
                base("openai")
            ),
        ),
        (
            "openai-tools",
            format!(
                "provider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4.1-mini\"\nstructured_output = \"tools\"\napi_key_env = \"OPENAI_API_KEY\"",
                base("openai-tools")
            ),
        ),
        (
            "openai-responses",
            format!(
                "provider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-5-codex\"\napi = \"responses\"\nreasoning_effort = \"low\"\napi_key_env = \"OPENAI_API_KEY\"",
                base("openai-responses")
            ),
        ),
        (
            "anthropic",
            format!(
                "provider = \"anthropic\"\nbase_url = \"{}/v1\"\nmodel = \"claude-sonnet-4-5\"\napi_key_env = \"ANTHROPIC_API_KEY\"",
                base("anthropic")
            ),
        ),
        (
            "gemini",
            format!(
                "provider = \"gemini\"\nbase_url = \"{}/v1beta\"\nmodel = \"gemini-2.5-flash\"\napi_key_env = \"GEMINI_API_KEY\"",
                base("gemini")
            ),
        ),
        (
            "azure",
            format!(
                "provider = \"azure\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-deployment\"\napi_key_env = \"AZURE_OPENAI_API_KEY\"",
                base("azure")
            ),
        ),
        (
            "azure-responses",
            format!(
                "provider = \"azure\"\nbase_url = \"{}\"\nmodel = \"codex-deployment\"\napi = \"responses\"\nazure_ad_token_env = \"AZURE_AD_TOKEN\"",
                base("azure-responses")
            ),
        ),
        (
            "bedrock",
            format!(
                "provider = \"bedrock\"\nbase_url = \"{}\"\nregion = \"us-east-1\"\nmodel = \"anthropic.claude-3-5-sonnet-20240620-v1:0\"",
                base("bedrock")
            ),
        ),
        (
            "bedrock-anthropic",
            format!(
                "provider = \"bedrock_anthropic\"\nbase_url = \"{}\"\nregion = \"us-east-1\"\nmodel = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"",
                base("bedrock-anthropic")
            ),
        ),
        (
            "vertex",
            format!(
                "provider = \"vertex\"\nbase_url = \"{}/v1\"\nregion = \"us-central1\"\nmodel = \"gemini-2.5-flash\"\ncredentials_file = \"{credentials_file}\"",
                base("vertex")
            ),
        ),
        (
            "vertex-anthropic",
            format!(
                "provider = \"vertex_anthropic\"\nbase_url = \"{}/v1\"\nregion = \"us-east5\"\nmodel = \"claude-sonnet-4-5@20250929\"\ncredentials_file = \"{credentials_file}\"",
                base("vertex-anthropic")
            ),
        ),
        (
            "openrouter",
            format!(
                "provider = \"openrouter\"\nbase_url = \"{}/v1\"\nmodel = \"openai/gpt-4.1-mini\"\napi_key_env = \"PRESET_API_KEY\"",
                base("openrouter")
            ),
        ),
        (
            "groq",
            format!(
                "provider = \"groq\"\nbase_url = \"{}/v1\"\nmodel = \"meta-llama/llama-4-maverick-17b-128e-instruct\"\napi_key_env = \"PRESET_API_KEY\"",
                base("groq")
            ),
        ),
        (
            "deepseek",
            format!(
                "provider = \"deepseek\"\nbase_url = \"{}/v1\"\nmodel = \"deepseek-chat\"\napi_key_env = \"PRESET_API_KEY\"",
                base("deepseek")
            ),
        ),
        (
            "mistral",
            format!(
                "provider = \"mistral\"\nbase_url = \"{}/v1\"\nmodel = \"mistral-medium-latest\"\napi_key_env = \"PRESET_API_KEY\"",
                base("mistral")
            ),
        ),
        (
            "cerebras",
            format!(
                "provider = \"cerebras\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-oss-120b\"\napi_key_env = \"PRESET_API_KEY\"",
                base("cerebras")
            ),
        ),
        (
            "ollama",
            format!(
                "provider = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"qwen2.5vl:7b\"",
                base("ollama")
            ),
        ),
        (
            "litellm",
            format!(
                "provider = \"litellm\"\nbase_url = \"{}\"\nmodel = \"gpt-4o\"\napi_key_env = \"PRESET_API_KEY\"",
                base("litellm")
            ),
        ),
    ]
}

fn catalog(server: &MockServer, credentials_file: &str) -> String {
    let mut toml = String::new();
    for (name, lines) in kinds(server, credentials_file) {
        toml.push_str(&format!(
            "[models.{name}]\n{lines}\nmax_retries = 2\n[models.{name}.price]\n\
             input = 1.0\ncached_input = 0.1\ncache_creation = 1.25\noutput = 4.0\n\n"
        ));
    }
    toml
}

/// The answer in the wire format of the endpoint `path`, carrying `value` and the scenario's
/// usage: 1200 prompt tokens of which 1000 read from the cache, 80 output tokens.
fn answer(path: &str, body: &Value, value: &Value) -> Value {
    let text = value.to_string();
    if path.ends_with("/chat/completions") {
        let message = if body.get("tools").is_some() {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                   "function": {"name": "AgentOutput", "arguments": text}}]})
        } else {
            json!({"role": "assistant", "content": text})
        };
        json!({"model": body["model"], "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
               "usage": {"prompt_tokens": 1200, "completion_tokens": 80,
                         "prompt_tokens_details": {"cached_tokens": 1000}}})
    } else if path.ends_with("/responses") {
        json!({"status": "completed", "model": body["model"], "output": [{"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": text}]}],
               "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 80}})
    } else if path.ends_with("/messages")
        || path.ends_with(":rawPredict")
        || path.ends_with("/invoke")
    {
        json!({"type": "message", "role": "assistant", "model": "claude",
               "content": [{"type": "tool_use", "id": "t", "name": "AgentOutput", "input": value}],
               "stop_reason": "tool_use",
               "usage": {"input_tokens": 200, "cache_read_input_tokens": 1000,
                         "cache_creation_input_tokens": 0, "output_tokens": 80}})
    } else if path.ends_with(":generateContent") {
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 1200, "cachedContentTokenCount": 1000,
                                 "candidatesTokenCount": 80}})
    } else if path.ends_with("/converse") {
        json!({"output": {"message": {"role": "assistant", "content": [
                   {"toolUse": {"toolUseId": "t", "name": "AgentOutput", "input": value}}]}},
               "stopReason": "tool_use",
               "usage": {"inputTokens": 200, "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 0,
                         "outputTokens": 80}})
    } else {
        panic!("unexpected path {path}")
    }
}

/// Per endpoint: the first request gets a 503, the second a valid answer, the third a reply
/// that violates the schema, the fourth a valid answer again.
#[derive(Default)]
struct Scenario {
    seen: Mutex<BTreeMap<String, usize>>,
}

impl Respond for Scenario {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let path = request.url.path().to_owned();
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(path.clone()).or_default();
            *n += 1;
            *n
        };
        let body: Value = request.body_json().unwrap();
        match n {
            1 => ResponseTemplate::new(503)
                .set_body_json(json!({"error": {"message": "overloaded"}})),
            3 => ResponseTemplate::new(200).set_body_json(answer(
                &path,
                &body,
                &schema_violating_reply(),
            )),
            _ => ResponseTemplate::new(200).set_body_json(answer(&path, &body, &good_reply())),
        }
    }
}

#[tokio::test]
async fn every_kind_runs_the_same_scenario_to_the_same_values_usage_and_cost() {
    let server = MockServer::start().await;
    let token_uri = format!("{}/token", server.uri());
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(GoogleTokenEndpoint {
            audience: token_uri.clone(),
        })
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(Scenario::default())
        .mount(&server)
        .await;
    let credentials = service_account_file(&token_uri);
    let registry = registry(&catalog(&server, &credentials));
    let names: Vec<&str> = kinds(&server, &credentials)
        .iter()
        .map(|(n, _)| *n)
        .collect();

    // Every provider kind is in the table.
    let config = registry.config();
    for (kind_name, kind) in ProviderKind::ALL {
        assert!(
            config.models.values().any(|m| m.provider == kind),
            "no conformance row for `{kind_name}`"
        );
    }

    let expected_usage = TokenUsage {
        input_tokens: 1200,
        cached_input_tokens: 1000,
        cache_creation_input_tokens: 0,
        output_tokens: 80,
    };
    let expected_cost = (200.0 * 1.0 + 1000.0 * 0.1 + 80.0 * 4.0) / 1e6;
    for name in &names {
        let model = registry.build(name).unwrap();
        // Step 1: a 503 is retried, then the answer parses.
        let first: ChatResponse = model
            .complete(&agent_request())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(first.value, good_reply(), "{name}");
        assert_eq!(first.model, *name);
        assert_eq!(first.usage, expected_usage, "{name}");
        let cost = first.cost_usd.unwrap();
        assert!((cost - expected_cost).abs() < 1e-12, "{name}: {cost}");
        // Step 2: a schema violation gets one corrective retry; both calls are billed.
        let second = model
            .complete(&text_request())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(second.value, good_reply(), "{name}");
        assert_eq!(second.usage, expected_usage + expected_usage, "{name}");
    }
    // Each model's endpoint saw exactly its four requests (one path per kind).
    let requests = received(&server).await;
    for name in &names {
        let count = requests
            .iter()
            .filter(|r| r.url.path().starts_with(&format!("/{name}/")))
            .count();
        assert_eq!(count, 4, "{name}");
    }
    // The Vertex token was fetched once for both Vertex models.
    assert_eq!(
        requests.iter().filter(|r| r.url.path() == "/token").count(),
        1
    );
}

#[tokio::test]
async fn no_kind_lets_a_credential_reach_an_error() {
    let server = MockServer::start().await;
    let token_uri = format!("{}/token", server.uri());
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(GoogleTokenEndpoint {
            audience: token_uri.clone(),
        })
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(EchoCredentials { status: 401 })
        .mount(&server)
        .await;
    let credentials = service_account_file(&token_uri);
    let registry = registry(&catalog(&server, &credentials));
    let secrets = [
        OPENAI_KEY,
        ANTHROPIC_KEY,
        GEMINI_KEY,
        AZURE_KEY,
        AZURE_AD_TOKEN,
        PRESET_KEY,
        AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY,
        AWS_SESSION_TOKEN,
        VERTEX_ACCESS_TOKEN,
    ];
    for (name, _) in kinds(&server, &credentials) {
        let error = registry
            .build(name)
            .unwrap()
            .complete(&text_request())
            .await
            .unwrap_err();
        assert_eq!(error.status(), Some(401), "{name}: {error}");
        assert!(
            error.to_string().contains("Incorrect API key"),
            "{name}: {error}"
        );
        for secret in secrets {
            assert_no_secret(&error, secret);
        }
    }
    // The mock did see credentials (so the check above can fail).
    let requests = received(&server).await;
    let seen: String = requests
        .iter()
        .flat_map(|r| r.headers.iter())
        .map(|(_, v)| v.to_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>()
        .join(" ");
    for secret in [
        OPENAI_KEY,
        AZURE_KEY,
        AZURE_AD_TOKEN,
        PRESET_KEY,
        AWS_SESSION_TOKEN,
        VERTEX_ACCESS_TOKEN,
    ] {
        assert!(seen.contains(secret), "{secret} was never sent");
    }
}

#[tokio::test]
async fn fallback_crosses_provider_kinds() {
    let server = MockServer::start().await;
    let token_uri = format!("{}/token", server.uri());
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(GoogleTokenEndpoint {
            audience: token_uri.clone(),
        })
        .mount(&server)
        .await;
    // Bedrock is down, Azure is rate limited: each hands over to the next kind.
    Mock::given(method("POST"))
        .and(path(
            "/bedrock/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
        ))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"message": "internal"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(
            "/azure/openai/deployments/gpt-4o-deployment/chat/completions",
        ))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(json!({"error": {"message": "quota"}})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(Scenario::default())
        .mount(&server)
        .await;
    let credentials = service_account_file(&token_uri);
    let mut toml = catalog(&server, &credentials);
    toml = toml.replace(
        "[models.bedrock]\n",
        "[models.bedrock]\nfallback = \"azure\"\n",
    );
    toml = toml.replace(
        "[models.azure]\n",
        "[models.azure]\nfallback = \"vertex\"\n",
    );
    let registry = registry(&toml);
    let model = registry.build("bedrock").unwrap();
    // The Vertex scenario answers its first request with a 503 (retried), then succeeds.
    let response = model
        .complete(&agent_request())
        .await
        .expect("vertex answered");
    assert_eq!(response.model, "vertex");
    assert_eq!(response.value, good_reply());
    let requests = received(&server).await;
    let count = |prefix: &str| {
        requests
            .iter()
            .filter(|r| r.url.path().starts_with(prefix))
            .count()
    };
    assert_eq!(count("/bedrock/"), 3, "first try + max_retries = 2");
    assert_eq!(count("/azure/"), 3);
    assert_eq!(count("/vertex/"), 2);
    // The switch holds for the rest of the task: the next call goes to Vertex alone.
    model.complete(&text_request()).await.expect("vertex again");
    let requests = received(&server).await;
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.url.path().starts_with("/bedrock/"))
            .count(),
        3
    );
}
