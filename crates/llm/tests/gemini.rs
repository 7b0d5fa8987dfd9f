//! Gemini generateContent against a mock server on 127.0.0.1.

mod common;

use std::time::{Duration, Instant};

use browserd_llm::{LlmError, Message, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";

fn config(server: &MockServer, extra: &str) -> String {
    format!(
        r#"
[models."gemini-2.5-flash"]
provider = "gemini"
base_url = "{}/v1beta"
model = "gemini-2.5-flash"
api_key_env = "GEMINI_API_KEY"
max_retries = 2
max_tokens = 1024
temperature = 0.2
{extra}
[models."gemini-2.5-flash".price]
input = 0.3
cached_input = 0.075
output = 2.5
"#,
        server.uri()
    )
}

fn candidate(text: &str) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Thinking about the page", "thought": true},
            {"text": text}
        ]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1500, "candidatesTokenCount": 60,
                          "cachedContentTokenCount": 1024, "thoughtsTokenCount": 40,
                          "totalTokenCount": 1600},
        "modelVersion": "gemini-2.5-flash-001"
    })
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

#[tokio::test]
async fn response_schema_success_with_inline_image_and_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header("x-goog-api-key", GEMINI_KEY))
        .respond_with(ok(candidate(&good_reply().to_string())))
        .expect(1)
        .mount(&server)
        .await;

    let model = build(&config(&server, ""), "gemini-2.5-flash");
    let mut request = agent_request();
    request.messages.push(Message::assistant("earlier reply"));
    request.messages.push(Message::user("nudge"));
    let response = model.complete(&request).await.expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.model, "gemini-2.5-flash");
    assert_eq!(response.provider_model, "gemini-2.5-flash-001");
    assert_eq!(response.stop_reason.as_deref(), Some("STOP"));
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 1500,
            cached_input_tokens: 1024,
            cache_creation_input_tokens: 0,
            output_tokens: 100
        }
    );
    let expected = (476.0 * 0.3 + 1024.0 * 0.075 + 100.0 * 2.5) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);

    let seen = received(&server).await;
    // The key travels in the header only.
    assert!(seen[0].url.query().is_none(), "{}", seen[0].url);
    assert!(!seen[0].url.as_str().contains(GEMINI_KEY));
    let body: Value = seen[0].body_json().unwrap();
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are a browser agent. Reply with AgentOutput JSON."}]})
    );
    let contents = body["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(contents[0]["role"], "user");
    assert_eq!(
        contents[0]["parts"][1],
        json!({"inlineData": {"mimeType": "image/png", "data": PNG_BASE64}})
    );
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(contents[2]["role"], "user");
    let generation = &body["generationConfig"];
    assert_eq!(generation["responseMimeType"], "application/json");
    assert_eq!(generation["maxOutputTokens"], 1024);
    assert_eq!(generation["temperature"], json!(0.2));
    let schema = &generation["responseSchema"];
    let text = schema.to_string();
    for banned in ["additionalProperties", "$ref", "$defs"] {
        assert!(!text.contains(banned), "{banned} sent to Gemini: {text}");
    }
    assert_eq!(schema["type"], "OBJECT");
    assert_eq!(
        schema["propertyOrdering"],
        json!(["thinking", "memory", "next_goal", "action"])
    );
    let click = &schema["properties"]["action"]["items"]["anyOf"][1]["properties"]["click"];
    assert_eq!(click["properties"]["index"]["type"], "INTEGER");
}

#[tokio::test]
async fn placeholder_members_for_empty_objects_are_removed() {
    let server = MockServer::start().await;
    let reply =
        json!({"memory": "m", "next_goal": "g", "action": [{"go_back": {"_placeholder": ""}}]});
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&reply.to_string())))
        .expect(1)
        .mount(&server)
        .await;
    let response = build(&config(&server, ""), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .expect("valid after placeholder removal");
    assert_eq!(response.value["action"], json!([{"go_back": {}}]));
}

#[tokio::test]
async fn malformed_reply_gets_one_corrective_retry() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate("{\"memory\": \"m\", \"next_goal\": ")))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&good_reply().to_string())))
        .mount(&server)
        .await;
    let response = build(&config(&server, ""), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .expect("corrected");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.usage.input_tokens, 3000);
    let bodies = received_bodies(&server).await;
    let contents = bodies[1]["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(contents[2]["role"], "user");
}

#[tokio::test]
async fn rate_limit_with_retry_info_in_the_body_is_honoured() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({"error": {
            "code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]}})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&good_reply().to_string())))
        .mount(&server)
        .await;
    let started = Instant::now();
    build(&config(&server, ""), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .expect("retried");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(received(&server).await.len(), 2);
}

#[tokio::test]
async fn retry_after_longer_than_the_timeout_goes_straight_to_the_fallback() {
    let primary = MockServer::start().await;
    let backup = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "30")
                .set_body_json(json!({"error": {"code": 429, "message": "Quota exceeded"}})),
        )
        .mount(&primary)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&good_reply().to_string())))
        .mount(&backup)
        .await;
    let toml = format!(
        r#"
[models.primary]
provider = "gemini"
base_url = "{}/v1beta"
model = "gemini-2.5-flash"
api_key_env = "GEMINI_API_KEY"
timeout_s = 5
fallback = "backup"
[models.backup]
provider = "gemini"
base_url = "{}/v1beta"
model = "models/gemini-2.5-flash"
api_key_env = "GEMINI_API_KEY"
"#,
        primary.uri(),
        backup.uri()
    );
    let started = Instant::now();
    let response = build(&toml, "primary")
        .complete(&text_request())
        .await
        .expect("fallback");
    assert_eq!(response.model, "backup");
    assert_eq!(
        received(&primary).await.len(),
        1,
        "no 30 s wait inside a 5 s budget"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn server_error_then_fallback() {
    let primary = MockServer::start().await;
    let backup = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({"error": {"code": 500, "status": "INTERNAL", "message": "Internal error"}}),
        ))
        .mount(&primary)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&good_reply().to_string())))
        .mount(&backup)
        .await;
    let toml = format!(
        "[models.p]\nprovider = \"gemini\"\nbase_url = \"{}/v1beta\"\nmodel = \"gemini-2.5-flash\"\n\
         max_retries = 1\nfallback = \"b\"\n\
         [models.b]\nprovider = \"gemini\"\nbase_url = \"{}/v1beta\"\nmodel = \"gemini-2.5-flash\"\n",
        primary.uri(),
        backup.uri()
    );
    let model = build(&toml, "p");
    assert_eq!(model.complete(&text_request()).await.unwrap().model, "b");
    assert_eq!(model.complete(&text_request()).await.unwrap().model, "b");
    assert_eq!(received(&primary).await.len(), 2);
}

#[tokio::test]
async fn blocked_prompt_is_invalid_output_not_a_retry_storm() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(json!({"promptFeedback": {"blockReason": "SAFETY"},
                                "usageMetadata": {"promptTokenCount": 10}})))
        .expect(2)
        .mount(&server)
        .await;
    let error = build(&config(&server, ""), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::InvalidOutput { .. }), "{error:?}");
    assert!(error.to_string().contains("SAFETY"), "{error}");
}

#[tokio::test]
async fn slow_server_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(candidate(&good_reply().to_string())).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let error = build(&config(&server, "timeout_s = 0.3"), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::Timeout { .. }), "{error:?}");
}

#[tokio::test]
async fn api_key_echoed_by_the_server_never_reaches_the_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(EchoCredentials { status: 400 })
        .expect(1)
        .mount(&server)
        .await;
    let error = build(&config(&server, ""), "gemini-2.5-flash")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(400));
    assert_no_secret(&error, GEMINI_KEY);
}
