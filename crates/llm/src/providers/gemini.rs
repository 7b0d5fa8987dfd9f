//! Gemini `generateContent` with `responseMimeType: application/json` and a translated
//! `responseSchema`. The key travels in the `x-goog-api-key` header, never in the URL.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{ReplyBody, WireReply, finish};
use crate::google::VertexTarget;
use crate::http::{ProviderSettings, RequestAuth, count};
use crate::request::{ContentPart, Role};
use crate::response::TokenUsage;
use crate::schema::{GEMINI_PLACEHOLDER, gemini_schema, remove_gemini_placeholders};
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// A Gemini model (Google AI, or Vertex AI when it has a [`VertexTarget`]).
#[derive(Debug)]
pub struct GeminiModel {
    settings: ProviderSettings,
    vertex: Option<Arc<VertexTarget>>,
}

impl GeminiModel {
    /// A model speaking to `settings.base_url` + `/models/{model}:generateContent`.
    pub fn new(settings: ProviderSettings) -> Self {
        Self {
            settings,
            vertex: None,
        }
    }

    /// A Gemini model on Vertex AI: `{base_url}/{model_path}:generateContent`, OAuth token.
    pub(crate) fn on_vertex(settings: ProviderSettings, target: Arc<VertexTarget>) -> Self {
        Self {
            settings,
            vertex: Some(target),
        }
    }

    pub(crate) fn request_body(&self, request: &ChatRequest) -> Value {
        let mut system_parts = Vec::new();
        let mut contents: Vec<Value> = Vec::new();
        for message in &request.messages {
            let parts: Vec<Value> = message
                .content
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => json!({"text": text}),
                    ContentPart::Image(image) => json!({
                        "inlineData": {"mimeType": image.media_type, "data": image.base64()}
                    }),
                })
                .collect();
            if parts.is_empty() {
                continue;
            }
            let role = match message.role {
                Role::System => {
                    system_parts.extend(parts);
                    continue;
                }
                Role::User => "user",
                Role::Assistant => "model",
            };
            match contents.last_mut() {
                Some(previous) if previous["role"] == role => {
                    if let Some(existing) = previous["parts"].as_array_mut() {
                        existing.extend(parts);
                    }
                }
                _ => contents.push(json!({"role": role, "parts": parts})),
            }
        }
        let mut generation_config = json!({
            "responseMimeType": "application/json",
            "responseSchema": gemini_schema(&request.output_schema.schema),
        });
        if let Some(max_tokens) = request.options.max_tokens.or(self.settings.max_tokens) {
            generation_config["maxOutputTokens"] = json!(max_tokens);
        }
        if let Some(temperature) = request.options.temperature.or(self.settings.temperature) {
            generation_config["temperature"] = crate::http::temperature_json(temperature);
        }
        let mut body = json!({
            "contents": contents,
            "generationConfig": generation_config,
        });
        if !system_parts.is_empty() {
            body["systemInstruction"] = json!({"parts": system_parts});
        }
        body
    }

    fn model_path(&self) -> String {
        let id = self.settings.model_id.trim_start_matches("models/");
        format!("models/{id}:generateContent")
    }
}

fn parse_response(body: &Value) -> WireReply {
    let meta = body.get("usageMetadata");
    let field = |name: &str| count(meta.and_then(|m| m.get(name)));
    let usage = TokenUsage {
        input_tokens: field("promptTokenCount"),
        cached_input_tokens: field("cachedContentTokenCount"),
        cache_creation_input_tokens: 0,
        output_tokens: field("candidatesTokenCount") + field("thoughtsTokenCount"),
    };
    let candidate = body
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let stop_reason = candidate
        .and_then(|c| c.get("finishReason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let truncated = stop_reason.as_deref() == Some("MAX_TOKENS");
    let text: String = candidate
        .and_then(|c| c.get("content"))
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let reply_body = if !text.trim().is_empty() {
        ReplyBody::Text(text)
    } else if let Some(reason) = body
        .get("promptFeedback")
        .and_then(|f| f.get("blockReason"))
        .and_then(Value::as_str)
    {
        ReplyBody::Missing(format!("the prompt was blocked ({reason})"))
    } else if candidate.is_none() {
        ReplyBody::Missing("the response has no candidates".to_owned())
    } else {
        ReplyBody::Missing(format!(
            "the candidate has no text (finishReason {})",
            stop_reason.as_deref().unwrap_or("missing")
        ))
    };
    WireReply {
        body: reply_body,
        usage,
        stop_reason,
        provider_model: body
            .get("modelVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        truncated,
    }
}

#[async_trait]
impl ChatModel for GeminiModel {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        request
            .check()
            .map_err(|m| self.settings.invalid_request(m))?;
        let started = Instant::now();
        let body = self.request_body(request);
        let mut headers = HeaderMap::new();
        let (url, auth) = match &self.vertex {
            None => {
                if let Some((name, value)) = self.settings.key_header("x-goog-api-key", "")? {
                    headers.insert(name, value);
                }
                (
                    self.settings.endpoint(&self.model_path()),
                    RequestAuth::None,
                )
            }
            Some(target) => (
                self.settings
                    .endpoint(&format!("{}:generateContent", target.model_path)),
                target
                    .bearer(&self.settings.name, self.settings.call_timeout(request))
                    .await?,
            ),
        };
        let answer = self
            .settings
            .post_json_with(url, headers, &body, request, &auth)
            .await?;
        let mut response = finish(&self.settings, parse_response(&answer), started)?;
        if !request
            .output_schema
            .schema
            .to_string()
            .contains(GEMINI_PLACEHOLDER)
        {
            remove_gemini_placeholders(&mut response.value);
        }
        Ok(response)
    }
}
