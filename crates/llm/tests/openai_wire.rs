//! The OpenAI wire beyond plain chat completions, against a mock server on 127.0.0.1: the
//! Responses API, Azure OpenAI (deployment URLs, `api-version`, `api-key` or Entra ID token)
//! and the presets of the OpenAI-compatible hosts.

mod common;

use browserd_llm::providers::{OpenAiPreset, StructuredOutputMode};
use browserd_llm::{LlmError, ModelsConfig, ProviderKind, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

/// A Responses API answer: a reasoning item, then the message with the JSON as output_text.
fn responses_answer(text: &str) -> Value {
    json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "model": "gpt-5-codex-2025-09-15",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}
        ],
        "usage": {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048},
                  "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 200},
                  "total_tokens": 3300}
    })
}

fn chat_answer(content: &str) -> Value {
    json!({
        "id": "chatcmpl-1", "model": "served-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10}
    })
}

fn tool_answer(arguments: &Value) -> Value {
    json!({
        "id": "chatcmpl-1", "model": "served-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "AgentOutput", "arguments": arguments.to_string()}}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10}
    })
}

#[tokio::test]
async fn responses_api_sends_text_format_reasoning_and_input_images() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .and(header(
            "authorization",
            format!("Bearer {OPENAI_KEY}").as_str(),
        ))
        .respond_with(ok(responses_answer(&good_reply_strict().to_string())))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        r#"
[models.codex]
provider = "openai"
base_url = "{}/v1"
model = "gpt-5-codex"
api = "responses"
reasoning_effort = "low"
api_key_env = "OPENAI_API_KEY"
max_tokens = 4096
temperature = 0.2
[models.codex.price]
input = 1.25
cached_input = 0.125
output = 10.0
"#,
        server.uri()
    );
    let response = build(&toml, "codex")
        .complete(&agent_request())
        .await
        .expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.provider_model, "gpt-5-codex-2025-09-15");
    assert_eq!(response.stop_reason.as_deref(), Some("completed"));
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 3000,
            cached_input_tokens: 2048,
            cache_creation_input_tokens: 0,
            output_tokens: 300,
        }
    );
    let expected = (952.0 * 1.25 + 2048.0 * 0.125 + 300.0 * 10.0) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);

    let body = &received_bodies(&server).await[0];
    assert_eq!(body["model"], "gpt-5-codex");
    assert_eq!(body["max_output_tokens"], 4096);
    assert_eq!(body["reasoning"], json!({"effort": "low"}));
    // Reasoning models take no temperature.
    assert!(body.get("temperature").is_none());
    assert!(body.get("messages").is_none() && body.get("response_format").is_none());
    let format = &body["text"]["format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["name"], "AgentOutput");
    assert_eq!(format["strict"], true);
    assert_eq!(
        format["schema"]["required"],
        json!(["thinking", "memory", "next_goal", "action"])
    );
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[0]["role"], "system");
    assert!(
        input[0]["content"]
            .as_str()
            .unwrap()
            .contains("browser agent")
    );
    assert_eq!(input[1]["role"], "user");
    let parts = input[1]["content"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "input_text");
    assert_eq!(parts[1]["type"], "input_image");
    assert_eq!(
        parts[1]["image_url"],
        format!("data:image/png;base64,{PNG_BASE64}")
    );
    assert_eq!(parts[1]["detail"], "high");
}

#[tokio::test]
async fn responses_api_incomplete_output_is_reported_as_truncated() {
    let server = MockServer::start().await;
    let mut answer = responses_answer("{\"memory\": \"cut");
    answer["status"] = json!("incomplete");
    answer["incomplete_details"] = json!({"reason": "max_output_tokens"});
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(ok(answer))
        .expect(2) // the corrective retry is billed and fails the same way
        .mount(&server)
        .await;
    let toml = format!(
        "[models.r]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"o3\"\napi = \"responses\"\n",
        server.uri()
    );
    let error = build(&toml, "r")
        .complete(&text_request())
        .await
        .unwrap_err();
    let LlmError::InvalidOutput { reason, usage, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(reason.contains("max_tokens"), "{reason}");
    assert_eq!(usage.cached_input_tokens, 4096);
}

#[tokio::test]
async fn azure_chat_completions_use_the_deployment_url_api_version_and_api_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/openai/deployments/gpt-4o-prod/chat/completions"))
        .and(query_param("api-version", "2024-12-01-preview"))
        .and(header("api-key", AZURE_KEY))
        .respond_with(ok(chat_answer(&good_reply_strict().to_string())))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        "[models.az]\nprovider = \"azure\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-prod\"\n\
         api_key_env = \"AZURE_OPENAI_API_KEY\"\nmax_tokens = 1000\n",
        server.uri()
    );
    let response = build(&toml, "az")
        .complete(&agent_request())
        .await
        .expect("success");
    assert_eq!(response.value, good_reply());
    let seen = &received(&server).await[0];
    assert!(seen.headers.get("authorization").is_none());
    let body: Value = seen.body_json().unwrap();
    assert_eq!(body["max_completion_tokens"], 1000);
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(body["messages"][1]["content"][1]["type"], "image_url");
}

#[tokio::test]
async fn azure_responses_api_paths_and_entra_id_token() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/openai/v1/responses"))
        .and(header(
            "authorization",
            format!("Bearer {AZURE_AD_TOKEN}").as_str(),
        ))
        .respond_with(ok(responses_answer(&good_reply().to_string())))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/openai/responses"))
        .and(query_param("api-version", "2025-04-01-preview"))
        .and(header("api-key", AZURE_KEY))
        .respond_with(ok(responses_answer(&good_reply().to_string())))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/openai/v1/chat/completions"))
        .respond_with(ok(chat_answer(&good_reply().to_string())))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        r#"
[models.v1]
provider = "azure"
base_url = "{0}"
model = "gpt-5-codex-dep"
api = "responses"
azure_ad_token_env = "AZURE_AD_TOKEN"
[models.preview]
provider = "azure"
base_url = "{0}"
model = "gpt-5-codex-dep"
api = "responses"
api_version = "2025-04-01-preview"
api_key_env = "AZURE_OPENAI_API_KEY"
[models.chat-v1]
provider = "azure"
base_url = "{0}"
model = "gpt-4o-dep"
api_version = "v1"
api_key_env = "AZURE_OPENAI_API_KEY"
"#,
        server.uri()
    );
    let registry = registry(&toml);
    for name in ["v1", "preview", "chat-v1"] {
        let response = registry
            .build(name)
            .unwrap()
            .complete(&text_request())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(response.value, good_reply(), "{name}");
    }
    for body in received_bodies(&server).await {
        // The deployment name travels as the model on the v1 paths.
        assert!(body["model"].as_str().unwrap().ends_with("-dep"), "{body}");
    }
}

#[tokio::test]
async fn azure_configuration_errors_are_clear() {
    let err = |toml: &str| ModelsConfig::from_toml_str(toml).unwrap_err().to_string();
    let e = err("[models.a]\nprovider = \"azure\"\nmodel = \"dep\"\n");
    assert!(
        e.contains("base_url") && e.contains("openai.azure.com"),
        "{e}"
    );
    let e = err(
        "[models.a]\nprovider = \"azure\"\nbase_url = \"https://r.openai.azure.com\"\nmodel = \"d\"\n\
         api_key_env = \"K\"\nazure_ad_token_env = \"T\"\n",
    );
    assert!(e.contains("not both"), "{e}");
    let e = err("[models.a]\nprovider = \"openai\"\nmodel = \"d\"\napi_version = \"v1\"\n");
    assert!(e.contains("api_version") && e.contains("azure"), "{e}");
    let e = err("[models.a]\nprovider = \"anthropic\"\nmodel = \"d\"\napi = \"responses\"\n");
    assert!(e.contains("`api`") && e.contains("openai"), "{e}");
}

/// One model per preset, all answering from one mock: what each sends.
#[tokio::test]
async fn presets_carry_each_hosts_quirks() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponderByMode)
        .mount(&server)
        .await;
    let mut toml = String::new();
    for (name, _) in PRESETS {
        toml.push_str(&format!(
            "[models.{name}]\nprovider = \"{name}\"\nbase_url = \"{}/v1\"\nmodel = \"{name}-model\"\n\
             api_key_env = \"PRESET_API_KEY\"\n",
            server.uri()
        ));
    }
    toml.push_str(&format!(
        "[models.groq-kimi]\nprovider = \"groq\"\nbase_url = \"{}/v1\"\n\
         model = \"moonshotai/kimi-k2-instruct\"\n",
        server.uri()
    ));
    let registry = registry(&toml);
    for (name, _) in PRESETS
        .iter()
        .chain([("groq-kimi", ProviderKind::Groq)].iter())
    {
        let response = registry
            .build(name)
            .unwrap()
            .complete(&agent_request())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(response.value, good_reply(), "{name}");
    }
    let bodies = received_bodies(&server).await;
    let requests = received(&server).await;
    let by_model = |model: &str| -> &Value {
        bodies
            .iter()
            .find(|b| b["model"] == model)
            .unwrap_or_else(|| panic!("no request for {model}"))
    };
    for request in requests
        .iter()
        .filter(|r| r.body_json::<Value>().unwrap()["model"] != "moonshotai/kimi-k2-instruct")
    {
        assert_eq!(
            request.headers.get("authorization").unwrap(),
            format!("Bearer {PRESET_KEY}").as_str()
        );
    }
    let has_image = |body: &Value| body.to_string().contains("image_url");

    // OpenRouter, Ollama, LiteLLM: json_schema strict, images.
    for model in ["openrouter-model", "ollama-model", "litellm-model"] {
        let body = by_model(model);
        assert_eq!(
            body["response_format"]["json_schema"]["strict"], true,
            "{model}"
        );
        assert!(has_image(body), "{model}");
    }
    // Groq: json_schema without strict; kimi-k2 through a forced tool.
    let groq = by_model("groq-model");
    assert_eq!(groq["response_format"]["type"], "json_schema");
    assert_eq!(groq["response_format"]["json_schema"]["strict"], false);
    assert!(has_image(groq));
    let kimi = by_model("moonshotai/kimi-k2-instruct");
    assert_eq!(kimi["tool_choice"]["function"]["name"], "AgentOutput");
    assert!(kimi.get("response_format").is_none());
    // DeepSeek: a forced function, and no images.
    let deepseek = by_model("deepseek-model");
    assert_eq!(deepseek["tools"][0]["function"]["name"], "AgentOutput");
    assert!(!has_image(deepseek), "DeepSeek gets no images");
    assert_eq!(
        deepseek["messages"][1]["content"],
        "<browser_state>[12]<a>First result</a></browser_state>"
    );
    // Mistral: strict json_schema without the keywords it rejects (the schema had `minimum`
    // and `minItems`, which stay).
    let mistral = by_model("mistral-model");
    let schema = &mistral["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["action"]["minItems"], 1);
    // Cerebras: no response format; the schema is in the system prompt; no images.
    let cerebras = by_model("cerebras-model");
    assert!(cerebras.get("response_format").is_none() && cerebras.get("tools").is_none());
    let system = cerebras["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("<json_schema>") && system.contains("next_goal"),
        "{system}"
    );
    assert!(!has_image(cerebras));
}

/// Answers a chat-completions request in the shape its structured-output mode expects.
struct ResponderByMode;

impl wiremock::Respond for ResponderByMode {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let body: Value = request.body_json().unwrap();
        if body.get("tools").is_some() {
            ok(tool_answer(&good_reply()))
        } else {
            ok(chat_answer(&good_reply_strict().to_string()))
        }
    }
}

const PRESETS: [(&str, ProviderKind); 7] = [
    ("openrouter", ProviderKind::OpenRouter),
    ("groq", ProviderKind::Groq),
    ("deepseek", ProviderKind::DeepSeek),
    ("mistral", ProviderKind::Mistral),
    ("cerebras", ProviderKind::Cerebras),
    ("ollama", ProviderKind::Ollama),
    ("litellm", ProviderKind::LiteLlm),
];

#[test]
fn preset_defaults_follow_browser_use() {
    let expected = [
        ("openrouter", "https://openrouter.ai/api/v1", 10, 75),
        ("groq", "https://api.groq.com/openai/v1", 10, 30),
        ("deepseek", "https://api.deepseek.com/v1", 5, 90),
        ("mistral", "https://api.mistral.ai/v1", 5, 75),
        ("cerebras", "https://api.cerebras.ai/v1", 5, 75),
        ("ollama", "http://127.0.0.1:11434/v1", 5, 75),
        ("litellm", "http://127.0.0.1:4000", 3, 75),
    ];
    for (name, base_url, retries, timeout_s) in expected {
        let config = ModelsConfig::from_toml_str(&format!(
            "[models.m]\nprovider = \"{name}\"\nmodel = \"some-model\"\n"
        ))
        .unwrap();
        let model = config.get("m").unwrap();
        assert_eq!(model.base_url_or_default(), Some(base_url), "{name}");
        assert_eq!(model.max_retries_or_default(), retries, "{name}");
        assert_eq!(model.timeout("m").as_secs(), timeout_s, "{name}");
    }
    let deepseek = OpenAiPreset::of(ProviderKind::DeepSeek).unwrap();
    assert!(!deepseek.vision && !deepseek.accepts(StructuredOutputMode::JsonSchema));
    let e = ModelsConfig::from_toml_str(
        "[models.m]\nprovider = \"deepseek\"\nmodel = \"deepseek-chat\"\nstructured_output = \"json_schema\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not accepted") && e.contains("tools"), "{e}");
    // Vision can be switched on or off per model.
    let config = ModelsConfig::from_toml_str(
        "[models.m]\nprovider = \"cerebras\"\nmodel = \"m\"\nvision = true\n",
    )
    .unwrap();
    assert_eq!(config.get("m").unwrap().vision, Some(true));
}

#[tokio::test]
async fn mistral_gets_the_schema_without_the_keywords_it_rejects() {
    let server = MockServer::start().await;
    let reply = json!({"format": "abc", "url": "https://example.com"});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ok(chat_answer(&reply.to_string())))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        "[models.m]\nprovider = \"mistral\"\nbase_url = \"{}/v1\"\nmodel = \"mistral-medium-latest\"\n",
        server.uri()
    );
    let mut request = text_request();
    request.output_schema.schema = json!({
        "type": "object",
        "properties": {
            "format": {"type": "string", "maxLength": 5, "pattern": "^a"},
            "url": {"type": "string", "format": "uri", "minLength": 1}
        },
        "required": ["format", "url"],
        "additionalProperties": false
    });
    let response = build(&toml, "m").complete(&request).await.expect("success");
    assert_eq!(response.value, reply);
    let body = &received_bodies(&server).await[0];
    let sent = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(
        sent["properties"],
        json!({"format": {"type": "string"}, "url": {"type": "string"}}),
        "a property named `format` stays; the keywords go"
    );
}
