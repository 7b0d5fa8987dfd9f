//! OpenAI-compatible chat completions against a mock server on 127.0.0.1.

mod common;

use std::time::{Duration, Instant};

use browserd_llm::{LlmError, ModelRegistry, ModelsConfig, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PATH: &str = "/v1/chat/completions";

fn config(server: &MockServer, extra: &str) -> String {
    format!(
        r#"
default_model = "gpt-4.1-mini"
[models.gpt-4.1-mini]
provider = "openai"
base_url = "{}/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
max_retries = 2
max_tokens = 2048
{extra}
[models.gpt-4.1-mini.price]
input = 0.4
cached_input = 0.1
output = 1.6
"#,
        server.uri()
    )
}

fn completion(content: &str, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1-mini-2025-04-14",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
                  "prompt_tokens_details": {"cached_tokens": 1000}}
    })
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

#[tokio::test]
async fn json_schema_mode_success_with_image_usage_and_cost() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header(
            "authorization",
            format!("Bearer {OPENAI_KEY}").as_str(),
        ))
        .respond_with(ok(completion(&good_reply_strict().to_string(), "stop")))
        .expect(1)
        .mount(&server)
        .await;

    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let response = model.complete(&agent_request()).await.expect("success");

    // Strict-mode nulls for optional members are pruned before validation.
    assert_eq!(response.value, good_reply());
    assert_eq!(response.model, "gpt-4.1-mini");
    assert_eq!(response.provider_model, "gpt-4.1-mini-2025-04-14");
    assert_eq!(response.stop_reason.as_deref(), Some("stop"));
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 1200,
            cached_input_tokens: 1000,
            cache_creation_input_tokens: 0,
            output_tokens: 80
        }
    );
    // 200 uncached × 0.4 + 1000 cached × 0.1 + 80 × 1.6, per million.
    let expected = (200.0 * 0.4 + 1000.0 * 0.1 + 80.0 * 1.6) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);
    assert!(response.latency > Duration::ZERO);

    let bodies = received_bodies(&server).await;
    let body = &bodies[0];
    assert_eq!(body["model"], "gpt-4.1-mini");
    assert_eq!(body["max_tokens"], 2048);
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "AgentOutput");
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    assert_eq!(
        schema["required"],
        json!(["thinking", "memory", "next_goal", "action"])
    );
    assert_eq!(
        schema["properties"]["thinking"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(schema["additionalProperties"], false);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("browser agent")
    );
    assert_eq!(messages[1]["role"], "user");
    let parts = messages[1]["content"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "text");
    assert_eq!(parts[1]["type"], "image_url");
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{PNG_BASE64}")
    );
    assert_eq!(parts[1]["image_url"]["detail"], "high");
    assert!(body.get("tools").is_none());
}

#[tokio::test]
async fn tools_mode_forces_one_function_call() {
    let server = MockServer::start().await;
    let reply = json!({
        "id": "x", "model": "qwen2.5",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "AgentOutput", "arguments": good_reply().to_string()}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    });
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(reply))
        .expect(1)
        .mount(&server)
        .await;

    let model = build(
        &config(&server, "structured_output = \"tools\""),
        "gpt-4.1-mini",
    );
    let response = model.complete(&text_request()).await.expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage.cached_input_tokens, 0);

    let body = &received_bodies(&server).await[0];
    assert!(body.get("response_format").is_none());
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "AgentOutput");
    assert_eq!(tools[0]["function"]["parameters"]["type"], "object");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "AgentOutput"}})
    );
    // Text-only messages are sent as plain strings.
    assert_eq!(body["messages"][1]["content"], "state message");
}

#[tokio::test]
async fn think_blocks_and_code_fences_are_accepted_when_the_server_ignores_the_schema() {
    let server = MockServer::start().await;
    let content = format!(
        "<think>The user wants a click.</think>\nHere it is:\n```json\n{}\n```",
        good_reply()
    );
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(&content, "stop")))
        .expect(1)
        .mount(&server)
        .await;
    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let response = model.complete(&text_request()).await.expect("success");
    assert_eq!(response.value, good_reply());
}

#[tokio::test]
async fn malformed_reply_gets_one_corrective_retry_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(
            "Sure! I will click the first result.",
            "stop",
        )))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(&good_reply().to_string(), "stop")))
        .mount(&server)
        .await;

    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let response = model.complete(&text_request()).await.expect("corrected");
    assert_eq!(response.value, good_reply());
    // Both calls are billed.
    assert_eq!(response.usage.input_tokens, 2400);
    assert_eq!(response.usage.output_tokens, 160);

    let bodies = received_bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    let second = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4);
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second[2]["content"], "Sure! I will click the first result.");
    assert_eq!(second[3]["role"], "user");
    let correction = second[3]["content"].as_str().unwrap();
    assert!(correction.contains("not valid JSON"), "{correction}");
    assert!(correction.contains("AgentOutput"), "{correction}");
}

#[tokio::test]
async fn schema_violation_twice_is_a_clear_invalid_output_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(
            &schema_violating_reply().to_string(),
            "stop",
        )))
        .expect(2)
        .mount(&server)
        .await;
    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let error = model.complete(&text_request()).await.unwrap_err();
    let LlmError::InvalidOutput { reason, usage, .. } = &error else {
        panic!("expected InvalidOutput, got {error:?}");
    };
    assert!(reason.contains("after one corrective retry"), "{reason}");
    assert!(reason.contains("action"), "{reason}");
    assert_eq!(usage.input_tokens, 2400);
    // The corrective message names the violation.
    let bodies = received_bodies(&server).await;
    let correction = bodies[1]["messages"][3]["content"].as_str().unwrap();
    assert!(
        correction.contains("does not match the schema"),
        "{correction}"
    );
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(
                    json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
                ),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(&good_reply().to_string(), "stop")))
        .mount(&server)
        .await;

    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let started = Instant::now();
    let response = model.complete(&text_request()).await.expect("retried");
    // The configured backoff is 5–20 ms, so only Retry-After explains a ≥1 s wait.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(response.latency >= Duration::from_secs(1));
    assert_eq!(received(&server).await.len(), 2);
}

#[tokio::test]
async fn retries_are_bounded_and_429_surfaces_as_rate_limited() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after-ms", "10")
                .set_body_json(json!({"error": {"message": "slow down"}})),
        )
        .expect(3) // first attempt + max_retries = 2
        .mount(&server)
        .await;
    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let error = model.complete(&text_request()).await.unwrap_err();
    assert!(matches!(error, LlmError::RateLimited { .. }), "{error:?}");
    assert_eq!(error.retry_after(), Some(Duration::from_millis(10)));
    assert!(error.to_string().contains("slow down"));
}

#[tokio::test]
async fn server_error_switches_to_the_fallback_for_the_rest_of_the_task() {
    let primary = MockServer::start().await;
    let backup = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .mount(&primary)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(&good_reply().to_string(), "stop")))
        .mount(&backup)
        .await;
    let toml = format!(
        r#"
[models.primary]
provider = "openai"
base_url = "{}/v1"
model = "big-model"
api_key_env = "OPENAI_API_KEY"
max_retries = 1
fallback = "backup"
[models.backup]
provider = "openai"
base_url = "{}/v1"
model = "small-model"
"#,
        primary.uri(),
        backup.uri()
    );
    let registry = registry(&toml);
    let task_model = registry.build("primary").unwrap();
    assert_eq!(task_model.name(), "primary");

    let first = task_model
        .complete(&text_request())
        .await
        .expect("fallback answered");
    assert_eq!(first.model, "backup");
    assert_eq!(
        received(&primary).await.len(),
        2,
        "one try + one retry on the primary"
    );

    let second = task_model
        .complete(&text_request())
        .await
        .expect("fallback answered");
    assert_eq!(second.model, "backup");
    assert_eq!(
        received(&primary).await.len(),
        2,
        "primary not asked again in this task"
    );
    assert_eq!(received(&backup).await.len(), 2);
    // No key configured for the backup → no Authorization header sent.
    assert!(
        received(&backup).await[0]
            .headers
            .get("authorization")
            .is_none()
    );

    // A new task starts on the primary again.
    let other_task = registry.build("primary").unwrap();
    other_task
        .complete(&text_request())
        .await
        .expect("fallback");
    assert_eq!(received(&primary).await.len(), 4);
}

#[tokio::test]
async fn client_errors_do_not_trigger_fallback_or_retry() {
    let primary = MockServer::start().await;
    let backup = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"error": {"message": "Invalid schema for response_format", "type": "invalid_request_error"}}),
        ))
        .expect(1)
        .mount(&primary)
        .await;
    let toml = format!(
        "[models.p]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\nfallback = \"b\"\n\
         [models.b]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n",
        primary.uri(),
        backup.uri()
    );
    let error = build(&toml, "p")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(400));
    assert!(error.to_string().contains("Invalid schema"), "{error}");
    assert!(received(&backup).await.is_empty());
}

#[tokio::test]
async fn slow_server_times_out_with_the_configured_timeout() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ok(completion(&good_reply().to_string(), "stop")).set_delay(Duration::from_secs(5)),
        )
        .mount(&server)
        .await;
    let model = build(&config(&server, "timeout_s = 0.3"), "gpt-4.1-mini");
    let started = Instant::now();
    let error = model.complete(&text_request()).await.unwrap_err();
    let LlmError::Timeout { model: name, after } = &error else {
        panic!("expected Timeout, got {error:?}");
    };
    assert_eq!(name, "gpt-4.1-mini");
    assert!(*after <= Duration::from_millis(300));
    // Not retried for 5 s: the call ends at the timeout (generous bound for a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("timed out"));
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_after_retries() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let toml = format!(
        "[models.m]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\
         api_key_env = \"OPENAI_API_KEY\"\nmax_retries = 1\n"
    );
    let error = build(&toml, "m")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::Transport { .. }), "{error:?}");
    assert!(
        !error.to_string().contains(&port.to_string()),
        "no URL in the message: {error}"
    );
    assert_no_secret(&error, OPENAI_KEY);
}

#[tokio::test]
async fn api_key_echoed_by_the_server_never_reaches_the_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(EchoCredentials { status: 401 })
        .expect(1)
        .mount(&server)
        .await;
    let model = build(&config(&server, ""), "gpt-4.1-mini");
    let error = model.complete(&text_request()).await.unwrap_err();
    assert_eq!(error.status(), Some(401));
    assert!(error.to_string().contains("Incorrect API key"), "{error}");
    assert_no_secret(&error, OPENAI_KEY);
    // The mock really did see the key (so the test can fail).
    let seen = received(&server).await;
    assert_eq!(
        seen[0]
            .headers
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap(),
        format!("Bearer {OPENAI_KEY}")
    );
}

#[tokio::test]
async fn missing_key_variable_is_reported_by_name_at_build_time() {
    let config = ModelsConfig::from_toml_str(
        "[models.m]\nprovider = \"openai\"\nmodel = \"m\"\napi_key_env = \"BROWSERD_TEST_UNSET_KEY\"\n",
    )
    .unwrap();
    let registry = ModelRegistry::with_key_lookup(config, |_| None).unwrap();
    let error = registry.build("m").err().expect("missing key").to_string();
    assert!(error.contains("BROWSERD_TEST_UNSET_KEY"), "{error}");
    assert!(registry.check_api_keys().is_err());
    let unknown = registry.build("nope").err().unwrap().to_string();
    assert!(unknown.contains("unknown model `nope`") && unknown.contains("configured: m"));
}

#[tokio::test]
async fn truncated_output_is_reported_as_such() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion("{\"memory\": \"cut off", "length")))
        .expect(2)
        .mount(&server)
        .await;
    let error = build(&config(&server, ""), "gpt-4.1-mini")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("max_tokens"), "{error}");
}

#[tokio::test]
async fn an_invalid_output_schema_is_rejected_before_any_request() {
    let server = MockServer::start().await;
    let mut request = text_request();
    request.output_schema.schema =
        json!({"type": "object", "properties": {"a": {"type": "not-a-type"}}});
    let error = build(&config(&server, ""), "gpt-4.1-mini")
        .complete(&request)
        .await
        .unwrap_err();
    assert!(
        matches!(error, LlmError::InvalidRequest { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("not a valid JSON Schema"),
        "{error}"
    );
    let mut request = text_request();
    request.output_schema.name = "has spaces".into();
    let error = build(&config(&server, ""), "gpt-4.1-mini")
        .complete(&request)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("output schema name"), "{error}");
    assert!(received(&server).await.is_empty());
}

#[tokio::test]
async fn one_stack_serves_changing_schemas() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(
            "{\"done\": {\"text\": \"ok\", \"success\": true}}",
            "stop",
        )))
        .mount(&server)
        .await;
    let model = build(&config(&server, ""), "gpt-4.1-mini");
    // The agent's schema rejects this reply; a done-only schema accepts it.
    let error = model.complete(&text_request()).await.unwrap_err();
    assert!(matches!(error, LlmError::InvalidOutput { .. }));
    let mut done_only = text_request();
    done_only.output_schema.schema = json!({"type": "object", "properties": {"done": {
        "type": "object", "properties": {"text": {"type": "string"}, "success": {"type": "boolean"}},
        "required": ["text", "success"]}}, "required": ["done"]});
    let response = model
        .complete(&done_only)
        .await
        .expect("valid under the new schema");
    assert_eq!(response.value["done"]["success"], true);
}

#[tokio::test]
async fn default_model_selection() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ok(completion(&good_reply().to_string(), "stop")))
        .mount(&server)
        .await;
    // default_model set → used when the task names none.
    let with_default = registry(&config(&server, ""));
    let model = with_default.build_or_default(None).unwrap();
    assert_eq!(
        model.complete(&text_request()).await.unwrap().model,
        "gpt-4.1-mini"
    );
    // Two models, no default → a clear error; a named model still works.
    let two = registry(&format!(
        "[models.a]\nprovider = \"openai\"\nbase_url = \"{0}/v1\"\nmodel = \"x\"\n\
         [models.b]\nprovider = \"openai\"\nbase_url = \"{0}/v1\"\nmodel = \"y\"\n",
        server.uri()
    ));
    let error = two.build_or_default(None).err().unwrap().to_string();
    assert!(error.contains("default_model"), "{error}");
    let named = two.build_or_default(Some("b")).unwrap();
    assert_eq!(named.complete(&text_request()).await.unwrap().model, "b");
    assert_eq!(received_bodies(&server).await[1]["model"], "y");
}
