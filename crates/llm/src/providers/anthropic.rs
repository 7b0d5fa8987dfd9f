//! Anthropic Messages API: the output is one forced tool call whose input is the schema.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::{ReplyBody, WireReply, finish};
use crate::aws::SigV4Signer;
use crate::google::VertexTarget;
use crate::http::{ProviderSettings, RequestAuth, count};
use crate::request::{ContentPart, Role};
use crate::response::TokenUsage;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// The API version header value this implementation speaks.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` is mandatory for Anthropic; used when neither request nor config sets it.
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Anthropic allows at most four cache breakpoints per request.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Where an Anthropic model is served.
#[derive(Debug)]
pub(crate) enum AnthropicHost {
    /// Anthropic's API: `{base_url}/messages`, `x-api-key`.
    Direct,
    /// AWS Bedrock InvokeModel: `{base_url}/model/{id}/invoke`, SigV4.
    Bedrock(Arc<SigV4Signer>),
    /// Vertex AI: `{base_url}/{model_path}:rawPredict`, OAuth bearer token.
    Vertex(Arc<VertexTarget>),
}

/// An Anthropic Messages model (on Anthropic's API, Bedrock or Vertex AI).
#[derive(Debug)]
pub struct AnthropicModel {
    settings: ProviderSettings,
    host: AnthropicHost,
}

impl AnthropicModel {
    /// A model speaking to `settings.base_url` + `/messages`.
    pub fn new(settings: ProviderSettings) -> Self {
        Self::on_host(settings, AnthropicHost::Direct)
    }

    pub(crate) fn on_host(settings: ProviderSettings, host: AnthropicHost) -> Self {
        Self { settings, host }
    }

    pub(crate) fn request_body(&self, request: &ChatRequest) -> Result<Value, LlmError> {
        let schema = &request.output_schema;
        let mut input_schema = schema.schema.clone();
        if input_schema.get("type").is_none() && input_schema.get("properties").is_some() {
            input_schema["type"] = json!("object");
        }
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(self.settings.invalid_request(
                "Anthropic tool input schemas must have `\"type\": \"object\"` at the root",
            ));
        }
        let breakpoints = limit_breakpoints(request.cache_breakpoints());
        let ephemeral = json!({"type": "ephemeral"});

        let mut system_blocks = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        for (message, cache) in request.messages.iter().zip(breakpoints) {
            let mut blocks: Vec<Value> = message
                .content
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => json!({"type": "text", "text": text}),
                    ContentPart::Image(image) => json!({
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": image.media_type,
                            "data": image.base64(),
                        }
                    }),
                })
                .collect();
            // Anthropic rejects empty text blocks.
            blocks.retain(|b| b.get("text").and_then(Value::as_str) != Some(""));
            if blocks.is_empty() {
                continue;
            }
            if cache && let Some(last) = blocks.last_mut() {
                last["cache_control"] = ephemeral.clone();
            }
            let role = match message.role {
                Role::System => {
                    system_blocks.extend(blocks);
                    continue;
                }
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            // Consecutive messages of one role are merged (the API wants alternating turns).
            match messages.last_mut() {
                Some(previous) if previous["role"] == role => {
                    if let Some(content) = previous["content"].as_array_mut() {
                        content.extend(blocks);
                    }
                }
                _ => messages.push(json!({"role": role, "content": blocks})),
            }
        }

        let mut body = json!({
            "model": self.settings.model_id,
            "max_tokens": request.options.max_tokens.or(self.settings.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
            "tools": [{
                "name": schema.name,
                "description": schema.tool_description(),
                "input_schema": input_schema,
            }],
            "tool_choice": {"type": "tool", "name": schema.name},
        });
        if !system_blocks.is_empty() {
            body["system"] = Value::Array(system_blocks);
        }
        if let Some(temperature) = request.options.temperature.or(self.settings.temperature) {
            body["temperature"] = crate::http::temperature_json(temperature);
        }
        // On the clouds the model is in the URL and the API version in the body.
        let cloud_version = match self.host {
            AnthropicHost::Direct => None,
            AnthropicHost::Bedrock(_) => Some(BEDROCK_ANTHROPIC_VERSION),
            AnthropicHost::Vertex(_) => Some(VERTEX_ANTHROPIC_VERSION),
        };
        if let Some(version) = cloud_version
            && let Some(object) = body.as_object_mut()
        {
            object.remove("model");
            object.insert("anthropic_version".into(), json!(version));
        }
        Ok(body)
    }
}

/// `anthropic_version` of Anthropic models on Bedrock.
pub(crate) const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";
/// `anthropic_version` of Anthropic models on Vertex AI.
pub(crate) const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Keeps at most four breakpoints: the first one (normally the system prompt) and the last ones.
/// Bedrock's Converse cache points follow the same rule (also four at most).
pub(super) fn limit_breakpoints(mut flags: Vec<bool>) -> Vec<bool> {
    let marked: Vec<usize> = flags
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.then_some(i))
        .collect();
    if marked.len() > MAX_CACHE_BREAKPOINTS {
        let keep_tail = MAX_CACHE_BREAKPOINTS - 1;
        for &i in &marked[1..marked.len() - keep_tail] {
            flags[i] = false;
        }
    }
    flags
}

fn parse_response(body: &Value, tool_name: &str) -> WireReply {
    let usage_json = body.get("usage");
    let field = |name: &str| count(usage_json.and_then(|u| u.get(name)));
    let cache_read = field("cache_read_input_tokens");
    let cache_creation = field("cache_creation_input_tokens");
    let usage = TokenUsage {
        input_tokens: field("input_tokens") + cache_read + cache_creation,
        cached_input_tokens: cache_read,
        cache_creation_input_tokens: cache_creation,
        output_tokens: field("output_tokens"),
    };
    let stop_reason = body
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let truncated = stop_reason.as_deref() == Some("max_tokens");
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tool_uses: Vec<&Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .collect();
    let tool_input = tool_uses
        .iter()
        .find(|b| b.get("name").and_then(Value::as_str) == Some(tool_name))
        .or_else(|| tool_uses.first())
        .and_then(|b| b.get("input"));
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let reply_body = match tool_input {
        Some(input) => ReplyBody::Value(input.clone()),
        None if !text.trim().is_empty() => ReplyBody::Text(text),
        None => ReplyBody::Missing("the reply has no tool call and no text".to_owned()),
    };
    WireReply {
        body: reply_body,
        usage,
        stop_reason,
        provider_model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        truncated,
    }
}

#[async_trait]
impl ChatModel for AnthropicModel {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        request
            .check()
            .map_err(|m| self.settings.invalid_request(m))?;
        let started = Instant::now();
        let body = self.request_body(request)?;
        let mut headers = HeaderMap::new();
        let (url, auth) = match &self.host {
            AnthropicHost::Direct => {
                headers.insert(
                    HeaderName::from_static("anthropic-version"),
                    HeaderValue::from_static(ANTHROPIC_VERSION),
                );
                if let Some((name, value)) = self.settings.key_header("x-api-key", "")? {
                    headers.insert(name, value);
                }
                (self.settings.endpoint("messages"), RequestAuth::None)
            }
            AnthropicHost::Bedrock(signer) => (
                super::bedrock::bedrock_model_url(&self.settings, "invoke"),
                RequestAuth::SigV4(signer.clone()),
            ),
            AnthropicHost::Vertex(target) => (
                self.settings
                    .endpoint(&format!("{}:rawPredict", target.model_path)),
                target
                    .bearer(&self.settings.name, self.settings.call_timeout(request))
                    .await?,
            ),
        };
        let answer = self
            .settings
            .post_json_with(url, headers, &body, request, &auth)
            .await?;
        finish(
            &self.settings,
            parse_response(&answer, &request.output_schema.name),
            started,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breakpoints_are_capped_at_four_keeping_first_and_last() {
        let flags = vec![true, true, false, true, true, true, true];
        assert_eq!(
            limit_breakpoints(flags),
            vec![true, false, false, false, true, true, true]
        );
        assert_eq!(
            limit_breakpoints(vec![true, false, true]),
            vec![true, false, true]
        );
    }
}
