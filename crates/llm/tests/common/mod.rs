//! Shared helpers for the mock-server tests: a browser-use-like output schema, a registry built
//! from TOML with injected keys and fast backoff, and access to what the mock received.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use browserd_llm::{
    ChatModel, ChatRequest, ImageData, ImageDetail, ImagePart, Message, ModelRegistry,
    ModelsConfig, OutputSchema,
};
use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

pub const OPENAI_KEY: &str = "sk-test-openai-0123456789abcdefXYZ";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-0123456789abcdefXYZ";
pub const GEMINI_KEY: &str = "AIzaTest0123456789abcdefXYZ";

/// 1×1 transparent PNG.
pub const PNG_BYTES: [u8; 67] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];
pub const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";

/// AgentOutput-like schema: optional `thinking`, required brain fields, an action union with a
/// no-parameter action and a `$ref`.
pub fn agent_schema() -> OutputSchema {
    OutputSchema::new(
        "AgentOutput",
        json!({
            "type": "object",
            "properties": {
                "thinking": {"type": "string"},
                "memory": {"type": "string"},
                "next_goal": {"type": "string"},
                "action": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/Action"}}
            },
            "required": ["memory", "next_goal", "action"],
            "additionalProperties": false,
            "$defs": {
                "Action": {"anyOf": [
                    {"type": "object", "properties": {"go_back": {"type": "object", "properties": {}, "additionalProperties": false}},
                     "required": ["go_back"], "additionalProperties": false},
                    {"type": "object", "properties": {"click": {"$ref": "#/$defs/Click"}},
                     "required": ["click"], "additionalProperties": false}
                ]},
                "Click": {"type": "object",
                    "properties": {"index": {"type": "integer", "minimum": 0}},
                    "required": ["index"], "additionalProperties": false}
            }
        }),
    )
}

/// A valid reply for [`agent_schema`].
pub fn good_reply() -> Value {
    json!({"memory": "on the search page", "next_goal": "open the first result",
           "action": [{"click": {"index": 12}}]})
}

/// The same reply as OpenAI strict mode would send it (optional members as null).
pub fn good_reply_strict() -> Value {
    json!({"thinking": null, "memory": "on the search page", "next_goal": "open the first result",
           "action": [{"click": {"index": 12}}]})
}

/// JSON that parses but violates the schema (index is a string, action missing).
pub fn schema_violating_reply() -> Value {
    json!({"memory": "m", "next_goal": "g", "actions": [{"click": {"index": "twelve"}}]})
}

/// `[system, state(user, with screenshot)]` as the agent sends it.
pub fn agent_request() -> ChatRequest {
    let screenshot = ImagePart {
        media_type: "image/png".to_owned(),
        data: ImageData::Bytes(PNG_BYTES.to_vec()),
        detail: ImageDetail::High,
    };
    ChatRequest::new(
        vec![
            Message::system("You are a browser agent. Reply with AgentOutput JSON."),
            Message::user("<browser_state>[12]<a>First result</a></browser_state>")
                .with_image(screenshot),
        ],
        agent_schema(),
    )
}

/// A request without images.
pub fn text_request() -> ChatRequest {
    ChatRequest::new(
        vec![
            Message::system("system prompt"),
            Message::user("state message"),
        ],
        agent_schema(),
    )
}

/// The keys the registry may read.
pub fn test_keys() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("OPENAI_API_KEY".to_owned(), OPENAI_KEY.to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), ANTHROPIC_KEY.to_owned()),
        ("GEMINI_API_KEY".to_owned(), GEMINI_KEY.to_owned()),
    ])
}

/// A registry from TOML with the test keys and 5–20 ms backoff.
pub fn registry(toml: &str) -> ModelRegistry {
    let config = ModelsConfig::from_toml_str(toml).expect("valid test config");
    let keys = test_keys();
    ModelRegistry::with_key_lookup(config, move |name| keys.get(name).cloned())
        .expect("registry")
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
}

/// Builds `name` from `toml`.
pub fn build(toml: &str, name: &str) -> Arc<dyn ChatModel> {
    registry(toml).build(name).expect("build")
}

/// Bodies of every request the mock received, as JSON.
pub async fn received_bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .expect("recording enabled")
        .iter()
        .map(|r| r.body_json::<Value>().expect("JSON request body"))
        .collect()
}

/// All received requests.
pub async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.expect("recording enabled")
}

/// Answers with a provider-style error body that echoes every credential header it got, like a
/// misbehaving proxy would.
pub struct EchoCredentials {
    pub status: u16,
}

impl Respond for EchoCredentials {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut seen = Vec::new();
        for header in ["authorization", "x-api-key", "x-goog-api-key"] {
            if let Some(value) = request.headers.get(header) {
                seen.push(format!("{header}: {}", value.to_str().unwrap_or("?")));
            }
        }
        let echoed = seen.join(", ");
        ResponseTemplate::new(self.status).set_body_json(json!({
            "error": {"message": format!("Incorrect API key provided. You sent {echoed}"),
                      "type": "invalid_request_error"}
        }))
    }
}

/// Asserts that neither Display nor Debug of `error` contains `secret`.
pub fn assert_no_secret(error: &browserd_llm::LlmError, secret: &str) {
    let display = error.to_string();
    let debug = format!("{error:?}");
    assert!(
        !display.contains(secret),
        "key leaked into Display: {display}"
    );
    assert!(!debug.contains(secret), "key leaked into Debug: {debug}");
    // Also a recognisable part of it.
    let middle = &secret[4..secret.len() - 4];
    assert!(
        !display.contains(middle) && !debug.contains(middle),
        "{display} / {debug}"
    );
}
