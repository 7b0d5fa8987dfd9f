//! OpenAI-compatible Chat Completions (OpenAI, Ollama `/v1`, vLLM, llama.cpp server, Groq,
//! DeepSeek, OpenRouter, LM Studio…).

use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ReplyBody, WireReply, finish};
use crate::http::{ProviderSettings, count};
use crate::request::{ContentPart, Role};
use crate::response::TokenUsage;
use crate::schema::openai_strict;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// How the output schema is enforced on an OpenAI-compatible server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputMode {
    /// `response_format: {type: json_schema, json_schema: {strict: true, …}}`.
    #[default]
    JsonSchema,
    /// One function whose parameters are the schema, forced with `tool_choice` — for servers
    /// without `json_schema` support.
    Tools,
}

/// An OpenAI-compatible chat-completions model.
#[derive(Debug)]
pub struct OpenAiModel {
    settings: ProviderSettings,
    mode: StructuredOutputMode,
}

impl OpenAiModel {
    /// A model speaking to `settings.base_url` + `/chat/completions`.
    pub fn new(settings: ProviderSettings, mode: StructuredOutputMode) -> Self {
        Self { settings, mode }
    }

    /// OpenAI itself wants `max_completion_tokens` (its reasoning models reject `max_tokens`);
    /// every other compatible server understands `max_tokens`.
    fn max_tokens_field(&self) -> &'static str {
        if self.settings.base_url.host_str() == Some("api.openai.com") {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }

    pub(crate) fn request_body(&self, request: &ChatRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        let schema = &request.output_schema;
        let strict = openai_strict(&schema.schema);
        let (wire_schema, is_strict) = match &strict {
            Some(s) => (s.clone(), true),
            None => (schema.schema.clone(), false),
        };
        let mut body = json!({
            "model": self.settings.model_id,
            "messages": messages,
        });
        match self.mode {
            StructuredOutputMode::JsonSchema => {
                let mut json_schema = json!({
                    "name": schema.name,
                    "strict": is_strict,
                    "schema": wire_schema,
                });
                if let Some(description) = &schema.description {
                    json_schema["description"] = json!(description);
                }
                body["response_format"] =
                    json!({"type": "json_schema", "json_schema": json_schema});
            }
            StructuredOutputMode::Tools => {
                body["tools"] = json!([{
                    "type": "function",
                    "function": {
                        "name": schema.name,
                        "description": schema.tool_description(),
                        "parameters": wire_schema,
                        "strict": is_strict,
                    }
                }]);
                body["tool_choice"] =
                    json!({"type": "function", "function": {"name": schema.name}});
            }
        }
        if let Some(max_tokens) = request.options.max_tokens.or(self.settings.max_tokens) {
            body[self.max_tokens_field()] = json!(max_tokens);
        }
        if let Some(temperature) = request.options.temperature.or(self.settings.temperature) {
            body["temperature"] = crate::http::temperature_json(temperature);
        }
        body
    }
}

fn message_json(message: &crate::Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let has_image = message
        .content
        .iter()
        .any(|p| matches!(p, ContentPart::Image(_)));
    // Plain string content when there are no images: older compatible servers accept only that.
    if !has_image || message.role != Role::User {
        return json!({"role": role, "content": message.joined_text()});
    }
    let parts: Vec<Value> = message
        .content
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => json!({"type": "text", "text": text}),
            ContentPart::Image(image) => json!({
                "type": "image_url",
                "image_url": {
                    "url": format!("data:{};base64,{}", image.media_type, image.base64()),
                    "detail": image.detail.as_str(),
                }
            }),
        })
        .collect();
    json!({"role": role, "content": parts})
}

fn parse_response(body: &Value) -> WireReply {
    let usage_json = body.get("usage");
    let usage = TokenUsage {
        input_tokens: count(usage_json.and_then(|u| u.get("prompt_tokens"))),
        cached_input_tokens: count(
            usage_json
                .and_then(|u| u.get("prompt_tokens_details"))
                .and_then(|d| d.get("cached_tokens")),
        ),
        cache_creation_input_tokens: 0,
        output_tokens: count(usage_json.and_then(|u| u.get("completion_tokens"))),
    };
    let provider_model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let stop_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let truncated = stop_reason.as_deref() == Some("length");
    let message = choice.and_then(|c| c.get("message"));
    let tool_arguments = message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .and_then(|calls| calls.first())
        .and_then(|call| call.get("function"))
        .and_then(|f| f.get("arguments"));
    let content = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty());
    let refusal = message
        .and_then(|m| m.get("refusal"))
        .and_then(Value::as_str);
    let body = if let Some(arguments) = tool_arguments {
        ReplyBody::Value(arguments.clone())
    } else if let Some(content) = content {
        ReplyBody::Text(content.to_owned())
    } else if let Some(refusal) = refusal {
        ReplyBody::Missing(format!("the model refused: {refusal}"))
    } else if choice.is_none() {
        ReplyBody::Missing("the response has no choices".to_owned())
    } else {
        ReplyBody::Missing("the reply has neither content nor a tool call".to_owned())
    };
    WireReply {
        body,
        usage,
        stop_reason,
        provider_model,
        truncated,
    }
}

#[async_trait]
impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        request
            .check()
            .map_err(|m| self.settings.invalid_request(m))?;
        let started = Instant::now();
        let mut headers = HeaderMap::new();
        if let Some((name, value)) = self.settings.key_header("authorization", "Bearer ")? {
            headers.insert(name, value);
        }
        let body = self.request_body(request);
        let url = self.settings.endpoint("chat/completions");
        let answer = self
            .settings
            .post_json(url, headers, &body, request)
            .await?;
        finish(&self.settings, parse_response(&answer), started)
    }
}
