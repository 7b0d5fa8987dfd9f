//! AWS Bedrock (Converse, Anthropic via InvokeModel) and Google Vertex AI (Gemini, Anthropic)
//! against mock servers on 127.0.0.1: URLs, bodies, SigV4 signatures checked by an independent
//! implementation, service-account tokens minted and cached, usage and cost.

mod common;

use browserd_llm::{LlmError, TokenUsage};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const CLAUDE_ON_BEDROCK: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";
const CONVERSE_PATH: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse";

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

fn converse_answer(input: &Value) -> Value {
    json!({
        "output": {"message": {"role": "assistant", "content": [
            {"text": "Clicking the first result."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "AgentOutput", "input": input}}
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 200, "outputTokens": 50, "totalTokens": 2250,
                  "cacheReadInputTokens": 1500, "cacheWriteInputTokens": 500},
        "metrics": {"latencyMs": 900}
    })
}

fn bedrock_toml(server: &MockServer, extra: &str) -> String {
    format!(
        r#"
[models.claude-bedrock]
provider = "bedrock"
base_url = "{}"
region = "eu-central-1"
model = "{CLAUDE_ON_BEDROCK}"
max_tokens = 2048
{extra}
[models.claude-bedrock.price]
input = 3.0
cached_input = 0.3
cache_creation = 3.75
output = 15.0
"#,
        server.uri()
    )
}

#[tokio::test]
async fn bedrock_converse_is_signed_and_forces_the_tool_with_cache_points() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(CONVERSE_PATH))
        .and(header("x-amz-security-token", AWS_SESSION_TOKEN))
        .and(header("content-type", "application/json"))
        .respond_with(ok(converse_answer(&good_reply())))
        .expect(1)
        .mount(&server)
        .await;
    let response = build(&bedrock_toml(&server, ""), "claude-bedrock")
        .complete(&agent_request())
        .await
        .expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(response.provider_model, CLAUDE_ON_BEDROCK);
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 2200,
            cached_input_tokens: 1500,
            cache_creation_input_tokens: 500,
            output_tokens: 50,
        }
    );
    let expected = (200.0 * 3.0 + 1500.0 * 0.3 + 500.0 * 3.75 + 50.0 * 15.0) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);

    let seen = &received(&server).await[0];
    let signed = verify_sigv4(
        seen,
        AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY,
        "eu-central-1",
        "bedrock",
    );
    assert!(
        signed.iter().any(|h| h == "x-amz-security-token"),
        "{signed:?}"
    );
    // The verifier can fail: another secret, region or body gives another signature.
    for (secret, region) in [
        ("not-the-secret", "eu-central-1"),
        (AWS_SECRET_ACCESS_KEY, "us-east-1"),
    ] {
        let check = std::panic::AssertUnwindSafe(|| {
            verify_sigv4(seen, AWS_ACCESS_KEY_ID, secret, region, "bedrock");
        });
        assert!(
            std::panic::catch_unwind(check).is_err(),
            "{secret} {region}"
        );
    }
    let mut tampered = seen.clone();
    tampered.body.push(b' ');
    let check = std::panic::AssertUnwindSafe(|| {
        verify_sigv4(
            &tampered,
            AWS_ACCESS_KEY_ID,
            AWS_SECRET_ACCESS_KEY,
            "eu-central-1",
            "bedrock",
        );
    });
    assert!(std::panic::catch_unwind(check).is_err());
    let body: Value = seen.body_json().unwrap();
    assert!(body.get("model").is_none());
    assert_eq!(body["inferenceConfig"], json!({"maxTokens": 2048}));
    let tool = &body["toolConfig"]["tools"][0]["toolSpec"];
    assert_eq!(tool["name"], "AgentOutput");
    assert_eq!(
        tool["inputSchema"]["json"]["required"],
        json!(["memory", "next_goal", "action"])
    );
    assert_eq!(
        body["toolConfig"]["toolChoice"],
        json!({"tool": {"name": "AgentOutput"}})
    );
    let cache_point = json!({"cachePoint": {"type": "default"}});
    let system = body["system"].as_array().unwrap();
    assert!(
        system[0]["text"]
            .as_str()
            .unwrap()
            .contains("browser agent")
    );
    assert_eq!(system[1], cache_point);
    let content = body["messages"][0]["content"].as_array().unwrap();
    assert_eq!(body["messages"][0]["role"], "user");
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .contains("browser_state")
    );
    assert_eq!(
        content[1]["image"],
        json!({"format": "png", "source": {"bytes": PNG_BASE64}})
    );
    assert_eq!(content[2], cache_point);
}

#[tokio::test]
async fn bedrock_models_without_tool_choice_or_caching_get_neither() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/model/meta.llama3-3-70b-instruct-v1%3A0/converse"))
        .respond_with(ok(converse_answer(&good_reply())))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        "[models.llama]\nprovider = \"bedrock\"\nbase_url = \"{}\"\nregion = \"us-west-2\"\n\
         model = \"meta.llama3-3-70b-instruct-v1:0\"\n",
        server.uri()
    );
    build(&toml, "llama")
        .complete(&text_request())
        .await
        .expect("success");
    let seen = &received(&server).await[0];
    verify_sigv4(
        seen,
        AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY,
        "us-west-2",
        "bedrock",
    );
    let body: Value = seen.body_json().unwrap();
    assert!(body["toolConfig"].get("toolChoice").is_none());
    assert!(!body.to_string().contains("cachePoint"));
}

#[tokio::test]
async fn bedrock_throttling_is_retried_and_errors_carry_no_credentials() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(CONVERSE_PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("x-amzn-errortype", "ThrottlingException")
                .set_body_json(
                    json!({"message": "Too many requests, please wait before trying again."}),
                ),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(CONVERSE_PATH))
        .respond_with(ok(converse_answer(&good_reply())))
        .mount(&server)
        .await;
    build(&bedrock_toml(&server, ""), "claude-bedrock")
        .complete(&text_request())
        .await
        .expect("retried after the throttle");
    let requests = received(&server).await;
    assert_eq!(requests.len(), 2);
    for request in &requests {
        verify_sigv4(
            request,
            AWS_ACCESS_KEY_ID,
            AWS_SECRET_ACCESS_KEY,
            "eu-central-1",
            "bedrock",
        );
    }

    let echo = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(EchoCredentials { status: 403 })
        .expect(1)
        .mount(&echo)
        .await;
    let error = build(&bedrock_toml(&echo, ""), "claude-bedrock")
        .complete(&text_request())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(403));
    assert_no_secret(&error, AWS_SESSION_TOKEN);
    assert_no_secret(&error, AWS_ACCESS_KEY_ID);
    assert_no_secret(&error, AWS_SECRET_ACCESS_KEY);
}

#[tokio::test]
async fn anthropic_on_bedrock_uses_invoke_with_the_bedrock_api_version() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"))
        .respond_with(ok(json!({
            "id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "tool_use", "id": "t1", "name": "AgentOutput", "input": good_reply()}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 1000,
                      "cache_creation_input_tokens": 0, "output_tokens": 20}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let toml = format!(
        "[models.c]\nprovider = \"bedrock_anthropic\"\nbase_url = \"{}\"\nregion = \"us-east-1\"\n\
         model = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n",
        server.uri()
    );
    let response = build(&toml, "c")
        .complete(&agent_request())
        .await
        .expect("success");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.usage.cached_input_tokens, 1000);
    assert_eq!(response.usage.input_tokens, 1010);
    let seen = &received(&server).await[0];
    verify_sigv4(
        seen,
        AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY,
        "us-east-1",
        "bedrock",
    );
    assert!(seen.headers.get("x-api-key").is_none());
    let body: Value = seen.body_json().unwrap();
    assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
    assert!(body.get("model").is_none());
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "AgentOutput"})
    );
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test]
async fn bedrock_container_credentials_are_fetched_once_and_used_to_sign() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/credentials/task-role"))
        .and(header("authorization", "container-auth-token"))
        .respond_with(ok(json!({
            "AccessKeyId": "ASIACONTAINERKEY0001",
            "SecretAccessKey": "container/secret+key0123456789",
            "Token": "container-session-token-0123456789",
            "Expiration": "2099-01-01T00:00:00Z"
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(CONVERSE_PATH))
        .and(header(
            "x-amz-security-token",
            "container-session-token-0123456789",
        ))
        .respond_with(ok(converse_answer(&good_reply())))
        .expect(2)
        .mount(&server)
        .await;
    let registry = registry_with_env(
        &bedrock_toml(&server, ""),
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                format!("{}/v2/credentials/task-role", server.uri()),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                "container-auth-token".to_owned(),
            ),
        ],
        false,
    );
    // Two tasks: the credentials are fetched for the first and reused by the second.
    for _ in 0..2 {
        registry
            .build("claude-bedrock")
            .unwrap()
            .complete(&text_request())
            .await
            .expect("success");
    }
    for request in received(&server)
        .await
        .iter()
        .filter(|r| r.method.as_str() == "POST")
    {
        verify_sigv4(
            request,
            "ASIACONTAINERKEY0001",
            "container/secret+key0123456789",
            "eu-central-1",
            "bedrock",
        );
    }
}

#[tokio::test]
async fn bedrock_without_credentials_or_region_fails_at_build_with_a_clear_error() {
    let toml = "[models.b]\nprovider = \"bedrock\"\nmodel = \"amazon.nova-pro-v1:0\"\n";
    let error = registry_with_env(toml, &[("AWS_REGION", "us-east-1".to_owned())], false)
        .build("b")
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("AWS_ACCESS_KEY_ID"), "{error}");
    let error = registry_with_env(toml, &[], true)
        .build("b")
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("AWS_REGION"), "{error}");
    // The region from the environment picks the regional endpoint.
    registry_with_env(
        toml,
        &[("AWS_DEFAULT_REGION", "ap-southeast-2".to_owned())],
        true,
    )
    .build("b")
    .expect("builds");
}

fn vertex_toml(server: &MockServer, credentials: &str) -> String {
    format!(
        r#"
[models.gemini-vertex]
provider = "vertex"
base_url = "{0}/v1"
region = "europe-west4"
model = "gemini-2.5-flash"
credentials_file = "{credentials}"
[models.gemini-vertex.price]
input = 0.3
cached_input = 0.03
output = 2.5

[models.claude-vertex]
provider = "vertex_anthropic"
base_url = "{0}/v1"
region = "us-east5"
project = "other-project"
model = "claude-sonnet-4-5@20250929"
credentials_file = "{credentials}"
"#,
        server.uri()
    )
}

#[tokio::test]
async fn vertex_gemini_and_anthropic_use_one_cached_service_account_token() {
    let server = MockServer::start().await;
    let token_uri = format!("{}/token", server.uri());
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(GoogleTokenEndpoint {
            audience: token_uri.clone(),
        })
        .expect(1)
        .mount(&server)
        .await;
    let bearer = format!("Bearer {VERTEX_ACCESS_TOKEN}");
    Mock::given(method("POST"))
        .and(path(
            "/v1/projects/browserd-test-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent",
        ))
        .and(header("authorization", bearer.as_str()))
        .respond_with(ok(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": good_reply().to_string()}]},
                            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5000, "cachedContentTokenCount": 4000,
                              "candidatesTokenCount": 100, "thoughtsTokenCount": 50},
            "modelVersion": "gemini-2.5-flash-001"
        })))
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(
            "/v1/projects/other-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
        ))
        .and(header("authorization", bearer.as_str()))
        .respond_with(ok(json!({
            "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": "t", "name": "AgentOutput", "input": good_reply()}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 900}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let registry = registry(&vertex_toml(&server, &service_account_file(&token_uri)));
    let gemini = registry.build("gemini-vertex").unwrap();
    let response = gemini.complete(&agent_request()).await.expect("gemini");
    assert_eq!(response.value, good_reply());
    assert_eq!(response.provider_model, "gemini-2.5-flash-001");
    assert_eq!(
        response.usage,
        TokenUsage {
            input_tokens: 5000,
            cached_input_tokens: 4000,
            cache_creation_input_tokens: 0,
            output_tokens: 150,
        }
    );
    let expected = (1000.0 * 0.3 + 4000.0 * 0.03 + 150.0 * 2.5) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12);
    // A second call and another model reuse the token (the endpoint expects one request).
    gemini
        .complete(&text_request())
        .await
        .expect("gemini again");
    let claude = registry.build("claude-vertex").unwrap();
    let response = claude.complete(&agent_request()).await.expect("claude");
    assert_eq!(response.usage.cache_creation_input_tokens, 900);

    let requests = received(&server).await;
    let gemini_body: Value = requests
        .iter()
        .find(|r| r.url.path().ends_with(":generateContent"))
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(
        gemini_body["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert_eq!(
        gemini_body["contents"][0]["parts"][1]["inlineData"]["mimeType"],
        "image/png"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.headers.get("x-goog-api-key").is_none())
    );
    let claude_body: Value = requests
        .iter()
        .find(|r| r.url.path().ends_with(":rawPredict"))
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(claude_body["anthropic_version"], "vertex-2023-10-16");
    assert!(claude_body.get("model").is_none());
    assert_eq!(claude_body["tool_choice"]["name"], "AgentOutput");
}

#[tokio::test]
async fn vertex_token_refusal_is_an_error_without_the_assertion_or_token() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "error": "invalid_grant", "error_description": "Invalid JWT Signature."
        })))
        .mount(&server)
        .await;
    let registry = registry(&vertex_toml(
        &server,
        &service_account_file(&format!("{}/token", server.uri())),
    ));
    let error = registry
        .build("gemini-vertex")
        .unwrap()
        .complete(&text_request())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(400));
    let text = error.to_string();
    assert!(
        text.contains("invalid_grant") && text.contains("Invalid JWT Signature"),
        "{text}"
    );
    assert!(!text.contains("eyJ"), "no JWT in the error: {text}");

    // A model call whose server echoes the bearer token does not leak it either.
    let echo = MockServer::start().await;
    let token_uri = format!("{}/token", echo.uri());
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(GoogleTokenEndpoint {
            audience: token_uri.clone(),
        })
        .mount(&echo)
        .await;
    Mock::given(method("POST"))
        .and(path(
            "/v1/projects/browserd-test-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent",
        ))
        .respond_with(EchoCredentials { status: 401 })
        .mount(&echo)
        .await;
    let error = registry_with_env(
        &vertex_toml(&echo, &service_account_file(&token_uri)),
        &[],
        true,
    )
    .build("gemini-vertex")
    .unwrap()
    .complete(&text_request())
    .await
    .unwrap_err();
    assert!(
        matches!(error, LlmError::Status { status: 401, .. }),
        "{error:?}"
    );
    assert_no_secret(&error, VERTEX_ACCESS_TOKEN);
}

#[tokio::test]
async fn vertex_configuration_errors_name_what_is_missing() {
    let toml = "[models.v]\nprovider = \"vertex\"\nmodel = \"gemini-2.5-pro\"\n";
    let error = registry(toml).build("v").err().unwrap().to_string();
    assert!(error.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{error}");
    let error = registry_with_env(
        toml,
        &[(
            "GOOGLE_APPLICATION_CREDENTIALS",
            "/nonexistent/key.json".to_owned(),
        )],
        true,
    )
    .build("v")
    .err()
    .unwrap()
    .to_string();
    assert!(
        error.contains("cannot read") && error.contains("/nonexistent/key.json"),
        "{error}"
    );
    // A file that is not a key is refused without quoting it.
    let dir = std::env::temp_dir().join(format!("browserd-vertex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        "{\"private_key\": \"SECRET-PEM-CONTENT\", \"client_email\": 5}",
    )
    .unwrap();
    let error = registry_with_env(
        toml,
        &[("GOOGLE_APPLICATION_CREDENTIALS", bad.display().to_string())],
        true,
    )
    .build("v")
    .err()
    .unwrap()
    .to_string();
    assert!(
        error.contains("service-account") && !error.contains("SECRET-PEM"),
        "{error}"
    );
    // Global region: the global endpoint; the project from the key file.
    registry_with_env(
        toml,
        &[(
            "GOOGLE_APPLICATION_CREDENTIALS",
            service_account_file("https://oauth2.googleapis.com/token"),
        )],
        true,
    )
    .build("v")
    .expect("builds");
    let _ = std::fs::remove_dir_all(dir);
}
