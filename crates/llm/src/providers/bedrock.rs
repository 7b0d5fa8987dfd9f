//! AWS Bedrock Converse API (`POST /model/{modelId}/converse`), SigV4-signed: the output is one
//! tool call whose `inputSchema` is the schema (browser-use's `ChatAWSBedrock`), forced with
//! `toolChoice` where the model family supports it; prompt-cache points after the system prompt
//! and the state message for the families that have them (Anthropic Claude, Amazon Nova).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use url::Url;

use super::{ReplyBody, WireReply, finish};
use crate::aws::SigV4Signer;
use crate::http::{ProviderSettings, RequestAuth, count};
use crate::request::{ContentPart, Role};
use crate::response::TokenUsage;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// A Bedrock model called through Converse.
#[derive(Debug)]
pub struct BedrockModel {
    settings: ProviderSettings,
    signer: Arc<SigV4Signer>,
}

/// The default Bedrock runtime root of a region.
pub(crate) fn bedrock_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// `{base_url}/model/{modelId}/{action}` with the model id as one encoded path segment (ids
/// carry `:` and ARNs `/`).
pub(crate) fn bedrock_model_url(settings: &ProviderSettings, action: &str) -> Url {
    let id: String = url::form_urlencoded::byte_serialize(settings.model_id.as_bytes())
        .collect::<String>()
        .replace('+', "%20");
    settings.endpoint(&format!("model/{id}/{action}"))
}

impl BedrockModel {
    pub(crate) fn new(settings: ProviderSettings, signer: Arc<SigV4Signer>) -> Self {
        Self { settings, signer }
    }

    fn family(&self) -> String {
        self.settings.model_id.to_ascii_lowercase()
    }

    /// Anthropic, Amazon Nova and Mistral models on Bedrock accept a forced tool choice.
    fn forces_tool(&self) -> bool {
        let id = self.family();
        ["anthropic.", "nova", "mistral."]
            .iter()
            .any(|f| id.contains(f))
    }

    /// Anthropic Claude and Amazon Nova support prompt-cache points.
    fn caches(&self) -> bool {
        let id = self.family();
        id.contains("anthropic.") || id.contains("nova")
    }

    pub(crate) fn request_body(&self, request: &ChatRequest) -> Result<Value, LlmError> {
        let schema = &request.output_schema;
        let mut input_schema = schema.schema.clone();
        if input_schema.get("type").is_none() && input_schema.get("properties").is_some() {
            input_schema["type"] = json!("object");
        }
        let breakpoints = if self.caches() {
            super::anthropic::limit_breakpoints(request.cache_breakpoints())
        } else {
            vec![false; request.messages.len()]
        };
        let cache_point = json!({"cachePoint": {"type": "default"}});
        let mut system: Vec<Value> = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        for (message, cache) in request.messages.iter().zip(breakpoints) {
            let mut blocks = Vec::new();
            for part in &message.content {
                match part {
                    ContentPart::Text(text) if text.is_empty() => {}
                    ContentPart::Text(text) => blocks.push(json!({"text": text})),
                    ContentPart::Image(image) => {
                        let format = image_format(&image.media_type).ok_or_else(|| {
                            self.settings.invalid_request(format!(
                                "Bedrock takes png, jpeg, gif or webp images, got `{}`",
                                image.media_type
                            ))
                        })?;
                        blocks.push(json!({"image": {
                            "format": format,
                            "source": {"bytes": image.base64()}
                        }}));
                    }
                }
            }
            if blocks.is_empty() {
                continue;
            }
            if cache {
                blocks.push(cache_point.clone());
            }
            let role = match message.role {
                Role::System => {
                    system.extend(blocks);
                    continue;
                }
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            match messages.last_mut() {
                Some(previous) if previous["role"] == role => {
                    if let Some(content) = previous["content"].as_array_mut() {
                        content.extend(blocks);
                    }
                }
                _ => messages.push(json!({"role": role, "content": blocks})),
            }
        }
        let mut tool_config = json!({"tools": [{"toolSpec": {
            "name": schema.name,
            "description": schema.tool_description(),
            "inputSchema": {"json": input_schema},
        }}]});
        if self.forces_tool() {
            tool_config["toolChoice"] = json!({"tool": {"name": schema.name}});
        }
        let mut body = json!({"messages": messages, "toolConfig": tool_config});
        if !system.is_empty() {
            body["system"] = Value::Array(system);
        }
        let mut inference = serde_json::Map::new();
        if let Some(max_tokens) = request.options.max_tokens.or(self.settings.max_tokens) {
            inference.insert("maxTokens".into(), json!(max_tokens));
        }
        if let Some(temperature) = request.options.temperature.or(self.settings.temperature) {
            inference.insert(
                "temperature".into(),
                crate::http::temperature_json(temperature),
            );
        }
        if !inference.is_empty() {
            body["inferenceConfig"] = Value::Object(inference);
        }
        Ok(body)
    }
}

fn image_format(media_type: &str) -> Option<&'static str> {
    match media_type.to_ascii_lowercase().as_str() {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

/// Converse's answer: `output.message.content[]` (`toolUse` / `text`), `stopReason`, `usage`
/// with `inputTokens` (not read from or written to the cache), `cacheReadInputTokens`,
/// `cacheWriteInputTokens`, `outputTokens`.
fn parse_response(body: &Value, tool_name: &str) -> WireReply {
    let usage_json = body.get("usage");
    let field = |name: &str| count(usage_json.and_then(|u| u.get(name)));
    let cache_read = field("cacheReadInputTokens");
    let cache_write = field("cacheWriteInputTokens");
    let usage = TokenUsage {
        input_tokens: field("inputTokens") + cache_read + cache_write,
        cached_input_tokens: cache_read,
        cache_creation_input_tokens: cache_write,
        output_tokens: field("outputTokens"),
    };
    let stop_reason = body
        .get("stopReason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let truncated = stop_reason.as_deref() == Some("max_tokens");
    let blocks = body
        .get("output")
        .and_then(|o| o.get("message"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tool_uses: Vec<&Value> = blocks.iter().filter_map(|b| b.get("toolUse")).collect();
    let tool_input = tool_uses
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(tool_name))
        .or_else(|| tool_uses.first())
        .and_then(|t| t.get("input"));
    let text: String = blocks
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let reply_body = match tool_input {
        Some(input) => ReplyBody::Value(input.clone()),
        None if !text.trim().is_empty() => ReplyBody::Text(text),
        None => ReplyBody::Missing("the reply has no tool use and no text".to_owned()),
    };
    WireReply {
        body: reply_body,
        usage,
        stop_reason,
        provider_model: None,
        truncated,
    }
}

#[async_trait]
impl ChatModel for BedrockModel {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        request
            .check()
            .map_err(|m| self.settings.invalid_request(m))?;
        let started = Instant::now();
        let body = self.request_body(request)?;
        let url = bedrock_model_url(&self.settings, "converse");
        let answer = self
            .settings
            .post_json_with(
                url,
                HeaderMap::new(),
                &body,
                request,
                &RequestAuth::SigV4(self.signer.clone()),
            )
            .await?;
        finish(
            &self.settings,
            parse_response(&answer, &request.output_schema.name),
            started,
        )
    }
}
