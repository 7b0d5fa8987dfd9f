//! Anthropic Messages against a mock server on 127.0.0.1.

mod common;

use std::time::{Duration, Instant};

use browserd_llm::{LlmError, Message, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PATH: &str = "/v1/messages";

fn config(server: &MockServer, extra: &str) -> String {
    format!(
        r#"
[models.claude]
provider = "anthropic"
base_url = "{}/v1"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
max_retries = 2
{extra}
[models.claude.price]
input = 3.0
cached_input = 0.3
cache_creation = 3.75
output = 15.0
"#,
        server.uri()
    )
}

fn tool_reply(input: Value) -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "text", "text": "Calling the tool."},
            {"type": "tool_use", "id": "toolu_1", "name": "AgentOutput", "input": input}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 50,
                  "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000}
    })
}

fn text_reply(text: &str) -> Value {
    json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5}
    })
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

#[tokio::test]
async fn forced_tool_call_success_with_cache_marks_image_and_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header("x-api-key", ANTHROPIC_KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ok(tool_reply(good_reply())))
        .expect(1)
        .mount(&server)
        .await;

    let model = build(&config(&server, ""), "claude");
    let response = model.complete(&agent_request()).await.expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.model, "claude");
    assert_eq!(response.provider_model, "claude-sonnet-4-5-20250929");
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 2400,
            cached_input_tokens: 2000,
            cache_creation_input_tokens: 300,
            output_tokens: 50
        }
    );
    let expected = (100.0 * 3.0 + 2000.0 * 0.3 + 300.0 * 3.75 + 50.0 * 15.0) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);

    let seen = received(&server).await;
    assert!(seen[0].headers.get("authorization").is_none());
    let body: Value = seen[0].body_json().unwrap();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 8192);
    // System prompt as a cached block.
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are a browser agent. Reply with AgentOutput JSON.",
                "cache_control": {"type": "ephemeral"}}])
    );
    // State message: text + base64 image, the last block carries the cache mark.
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let blocks = messages[0]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "text");
    assert!(blocks[0].get("cache_control").is_none());
    assert_eq!(
        blocks[1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64},
               "cache_control": {"type": "ephemeral"}})
    );
    // One tool, forced.
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "AgentOutput");
    assert_eq!(tools[0]["input_schema"], agent_schema().schema);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "AgentOutput"})
    );
}

#[tokio::test]
async fn nudges_after_the_state_message_keep_the_cache_mark_on_the_state() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(tool_reply(good_reply())))
        .mount(&server)
        .await;
    let mut request = text_request();
    request.messages[1] = Message::user("state").with_cache(true);
    request
        .messages
        .push(Message::user("Budget warning: 75% of steps used.").with_cache(false));
    request
        .messages
        .push(Message::assistant("previous").with_cache(false));
    build(&config(&server, ""), "claude")
        .complete(&request)
        .await
        .expect("success");
    let body = &received_bodies(&server).await[0];
    let messages = body["messages"].as_array().unwrap();
    // Consecutive user messages are merged into one turn.
    assert_eq!(messages.len(), 2);
    let blocks = messages[0]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0]["cache_control"], json!({"type": "ephemeral"}));
    assert!(blocks[1].get("cache_control").is_none());
    assert_eq!(messages[1]["role"], "assistant");
}

#[tokio::test]
async fn text_instead_of_tool_call_gets_one_corrective_retry() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(text_reply("I cannot decide yet.")))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(tool_reply(good_reply())))
        .mount(&server)
        .await;
    let response = build(&config(&server, ""), "claude")
        .complete(&text_request())
        .await
        .expect("corrected");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.usage.input_tokens, 10 + 2400);
    let bodies = received_bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"][0]["text"], "I cannot decide yet.");
    assert_eq!(messages[2]["role"], "user");
    // The corrective message is not a cache breakpoint; the state message still is.
    assert!(messages[2]["content"][0].get("cache_control").is_none());
    assert_eq!(
        messages[0]["content"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test]
async fn tool_input_stuffed_into_a_string_is_recovered() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(tool_reply(Value::String(good_reply().to_string()))))
        .expect(1)
        .mount(&server)
        .await;
    let response = build(&config(&server, ""), "claude")
        .complete(&text_request())
        .await
        .expect("recovered");
    assert_eq!(response.value, good_reply());
}

#[tokio::test]
async fn overloaded_529_then_rate_limit_with_retry_after_then_success() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(529).set_body_json(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Too many"}})),
        )
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(tool_reply(good_reply())))
        .with_priority(3)
        .mount(&server)
        .await;
    let started = Instant::now();
    let response = build(&config(&server, ""), "claude")
        .complete(&text_request())
        .await
        .expect("retried");
    assert_eq!(response.value, good_reply());
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(received(&server).await.len(), 3);
}

#[tokio::test]
async fn server_error_falls_back_to_another_provider() {
    let anthropic = MockServer::start().await;
    let openai = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(503).set_body_string("unavailable"))
        .mount(&anthropic)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ok(json!({
            "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": good_reply().to_string()}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}
        })))
        .mount(&openai)
        .await;
    let toml = format!(
        r#"
[models.claude]
provider = "anthropic"
base_url = "{}/v1"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
max_retries = 0
fallback = "gpt"
[models.gpt]
provider = "openai"
base_url = "{}/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
"#,
        anthropic.uri(),
        openai.uri()
    );
    let model = build(&toml, "claude");
    let response = model.complete(&text_request()).await.expect("fallback");
    assert_eq!(response.model, "gpt");
    assert_eq!(response.usage.input_tokens, 7);
    model
        .complete(&text_request())
        .await
        .expect("fallback again");
    assert_eq!(received(&anthropic).await.len(), 1);
    assert_eq!(received(&openai).await.len(), 2);
}

#[tokio::test]
async fn slow_server_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(tool_reply(good_reply())).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let error = build(&config(&server, "timeout_s = 0.3"), "claude")
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
        .respond_with(EchoCredentials { status: 403 })
        .expect(1)
        .mount(&server)
        .await;
    let error = build(&config(&server, ""), "claude")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(403));
    assert_no_secret(&error, ANTHROPIC_KEY);
}
