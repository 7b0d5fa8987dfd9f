//! OpenAI-compatible Chat Completions (OpenAI, Azure OpenAI, Ollama `/v1`, vLLM, llama.cpp
//! server, Groq, DeepSeek, Mistral, Cerebras, OpenRouter, LiteLLM, LM Studio…) and OpenAI's
//! Responses API (OpenAI and Azure).

use std::borrow::Cow;
use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::{ReplyBody, WireReply, finish};
use crate::config::{OpenAiApi, ProviderKind, ReasoningEffort};
use crate::http::{ProviderSettings, count};
use crate::request::{ContentPart, Role};
use crate::response::TokenUsage;
use crate::schema::openai_strict;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// How the output schema is enforced on an OpenAI-compatible server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputMode {
    /// `response_format: {type: json_schema, json_schema: {strict: true, …}}` (Responses API:
    /// `text.format`).
    #[default]
    JsonSchema,
    /// One function whose parameters are the schema, forced with `tool_choice` — for servers
    /// without `json_schema` support.
    Tools,
    /// `response_format: {type: json_object}` with the schema in the system prompt (JSON mode).
    JsonObject,
    /// No response format at all: the schema is in the system prompt and the reply is parsed
    /// from the text (browser-use's Cerebras client).
    Prompt,
}

impl StructuredOutputMode {
    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonSchema => "json_schema",
            Self::Tools => "tools",
            Self::JsonObject => "json_object",
            Self::Prompt => "prompt",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        [
            Self::JsonSchema,
            Self::Tools,
            Self::JsonObject,
            Self::Prompt,
        ]
        .into_iter()
        .find(|m| m.as_str() == text.trim())
    }
}

const ALL_MODES: &[StructuredOutputMode] = &[
    StructuredOutputMode::JsonSchema,
    StructuredOutputMode::Tools,
    StructuredOutputMode::JsonObject,
    StructuredOutputMode::Prompt,
];

/// Defaults and quirks of one OpenAI-compatible host, as browser-use's clients for it have them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenAiPreset {
    /// The kind this preset belongs to.
    pub kind: ProviderKind,
    /// API root used when the configuration gives none.
    pub base_url: &'static str,
    /// Structured-output mode used when the configuration gives none.
    pub default_mode: StructuredOutputMode,
    /// Modes the host accepts (others are refused at configuration time).
    pub accepted_modes: &'static [StructuredOutputMode],
    /// Whether `json_schema` / `tools` are sent with `strict: true` (when the schema allows it).
    pub strict: bool,
    /// Whether images are sent by default.
    pub vision: bool,
    /// Retries when the configuration gives none.
    pub max_retries: u32,
    /// JSON Schema keywords the host rejects; removed from the sent schema (never from the one
    /// replies are validated against).
    pub unsupported_schema_keywords: &'static [&'static str],
}

impl OpenAiPreset {
    /// The preset of `kind`, if it speaks the OpenAI wire with a fixed default base URL.
    pub fn of(kind: ProviderKind) -> Option<Self> {
        use StructuredOutputMode as M;
        let base = Self {
            kind,
            base_url: "https://api.openai.com/v1",
            default_mode: M::JsonSchema,
            accepted_modes: ALL_MODES,
            strict: true,
            vision: true,
            max_retries: 5,
            unsupported_schema_keywords: &[],
        };
        Some(match kind {
            ProviderKind::OpenAi => base,
            // browser-use's ChatOpenRouter: json_schema strict, 10 retries.
            ProviderKind::OpenRouter => Self {
                base_url: "https://openrouter.ai/api/v1",
                max_retries: 10,
                ..base
            },
            // browser-use's ChatGroq: json_schema without `strict` (tools for the kimi-k2
            // models, see `default_mode_for`), 10 retries; 30 s timeout by base URL.
            ProviderKind::Groq => Self {
                base_url: "https://api.groq.com/openai/v1",
                strict: false,
                max_retries: 10,
                ..base
            },
            // browser-use's ChatDeepSeek: function calling; the agent turns vision off.
            ProviderKind::DeepSeek => Self {
                base_url: "https://api.deepseek.com/v1",
                default_mode: M::Tools,
                accepted_modes: &[M::Tools, M::JsonObject, M::Prompt],
                strict: false,
                vision: false,
                ..base
            },
            // browser-use's ChatMistral: json_schema strict without the keywords Mistral rejects.
            ProviderKind::Mistral => Self {
                base_url: "https://api.mistral.ai/v1",
                unsupported_schema_keywords: &["minLength", "maxLength", "pattern", "format"],
                ..base
            },
            // browser-use's ChatCerebras: the schema in the prompt, no response_format; text only.
            ProviderKind::Cerebras => Self {
                base_url: "https://api.cerebras.ai/v1",
                default_mode: M::Prompt,
                vision: false,
                ..base
            },
            ProviderKind::Ollama => Self {
                base_url: "http://127.0.0.1:11434/v1",
                ..base
            },
            // browser-use's ChatLiteLLM: json_schema strict, 3 retries; the proxy's default port.
            ProviderKind::LiteLlm => Self {
                base_url: "http://127.0.0.1:4000",
                max_retries: 3,
                ..base
            },
            _ => return None,
        })
    }

    /// The mode used for `model_id` when the configuration names none.
    pub fn default_mode_for(&self, model_id: &str) -> StructuredOutputMode {
        // browser-use's Groq client calls the kimi-k2 models through tools.
        if self.kind == ProviderKind::Groq && model_id.to_ascii_lowercase().contains("kimi-k2") {
            StructuredOutputMode::Tools
        } else {
            self.default_mode
        }
    }

    /// Whether the host accepts `mode`.
    pub fn accepts(&self, mode: StructuredOutputMode) -> bool {
        self.accepted_modes.contains(&mode)
    }

    pub(crate) fn accepted_names(&self) -> String {
        self.accepted_modes
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where the requests go: a plain OpenAI-compatible root, or an Azure OpenAI resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenAiHost {
    /// `{base_url}/chat/completions`, `{base_url}/responses`.
    Standard,
    /// Azure OpenAI: `base_url` is the resource endpoint, the model id the deployment name.
    Azure {
        /// `api-version`; `None` = `2024-12-01-preview` for chat completions (browser-use's
        /// default) and the v1 API for Responses; `v1` = the v1 API for both.
        api_version: Option<String>,
    },
}

/// Azure's default `api-version` for chat completions (browser-use's default).
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-12-01-preview";

/// Everything that shapes requests of an OpenAI-wire model besides [`ProviderSettings`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiOptions {
    /// Structured-output mode.
    pub mode: StructuredOutputMode,
    /// Chat completions or Responses.
    pub api: OpenAiApi,
    /// Plain or Azure.
    pub host: OpenAiHost,
    /// `strict: true` when the schema allows it.
    pub strict: bool,
    /// Send images (otherwise image parts are left out).
    pub vision: bool,
    /// Reasoning effort (then no temperature is sent).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Schema keywords removed from the sent schema.
    pub unsupported_schema_keywords: &'static [&'static str],
    /// The credential header: `authorization` with `Bearer `, or Azure's `api-key`.
    pub key_header: (&'static str, &'static str),
}

impl OpenAiOptions {
    /// Plain OpenAI chat completions with `mode`.
    pub fn new(mode: StructuredOutputMode) -> Self {
        Self {
            mode,
            api: OpenAiApi::ChatCompletions,
            host: OpenAiHost::Standard,
            strict: true,
            vision: true,
            reasoning_effort: None,
            unsupported_schema_keywords: &[],
            key_header: ("authorization", "Bearer "),
        }
    }
}

/// An OpenAI-compatible model (chat completions or Responses API).
#[derive(Debug)]
pub struct OpenAiModel {
    settings: ProviderSettings,
    options: OpenAiOptions,
}

impl OpenAiModel {
    /// A chat-completions model speaking to `settings.base_url` + `/chat/completions`.
    pub fn new(settings: ProviderSettings, mode: StructuredOutputMode) -> Self {
        Self::with_options(settings, OpenAiOptions::new(mode))
    }

    /// A model with every option spelled out (Azure, Responses API, presets).
    pub fn with_options(settings: ProviderSettings, options: OpenAiOptions) -> Self {
        Self { settings, options }
    }

    /// OpenAI itself and Azure want `max_completion_tokens` (their reasoning models reject
    /// `max_tokens`); every other compatible server understands `max_tokens`.
    fn max_tokens_field(&self) -> &'static str {
        if self.options.api == OpenAiApi::Responses {
            "max_output_tokens"
        } else if self.settings.base_url.host_str() == Some("api.openai.com")
            || matches!(self.options.host, OpenAiHost::Azure { .. })
        {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }

    /// The URL of one call.
    pub(crate) fn url(&self) -> Url {
        let responses = self.options.api == OpenAiApi::Responses;
        match &self.options.host {
            OpenAiHost::Standard => self.settings.endpoint(if responses {
                "responses"
            } else {
                "chat/completions"
            }),
            OpenAiHost::Azure { api_version } => {
                let version = api_version.as_deref();
                let (path, query) = match (responses, version) {
                    (true, None | Some("v1")) => ("openai/v1/responses".to_owned(), None),
                    (true, Some(v)) => ("openai/responses".to_owned(), Some(v)),
                    (false, Some("v1")) => ("openai/v1/chat/completions".to_owned(), None),
                    (false, v) => (
                        format!(
                            "openai/deployments/{}/chat/completions",
                            path_segment(&self.settings.model_id)
                        ),
                        Some(v.unwrap_or(AZURE_DEFAULT_API_VERSION)),
                    ),
                };
                let mut url = self.settings.endpoint(&path);
                if let Some(version) = query {
                    url.query_pairs_mut().append_pair("api-version", version);
                }
                url
            }
        }
    }

    /// The schema as sent (strict rewrite when possible, host keyword removal) and whether it
    /// is strict.
    fn wire_schema(&self, request: &ChatRequest) -> (Value, bool) {
        let schema = &request.output_schema.schema;
        let strict = if self.options.strict {
            openai_strict(schema)
        } else {
            None
        };
        let (mut wire, is_strict) = match strict {
            Some(s) => (s, true),
            None => (schema.clone(), false),
        };
        if !self.options.unsupported_schema_keywords.is_empty() {
            strip_keywords(&mut wire, self.options.unsupported_schema_keywords);
        }
        (wire, is_strict)
    }

    /// Messages as sent: images dropped without vision; the schema added to the system prompt
    /// in the modes that do not send it as a format.
    fn effective_messages<'a>(
        &self,
        request: &'a ChatRequest,
        wire_schema: &Value,
    ) -> Cow<'a, [crate::Message]> {
        let schema_in_prompt = matches!(
            self.options.mode,
            StructuredOutputMode::JsonObject | StructuredOutputMode::Prompt
        );
        if self.options.vision && !schema_in_prompt {
            return Cow::Borrowed(&request.messages);
        }
        let mut messages: Vec<crate::Message> = request.messages.clone();
        if !self.options.vision {
            for message in &mut messages {
                message
                    .content
                    .retain(|p| !matches!(p, ContentPart::Image(_)));
            }
        }
        if schema_in_prompt {
            let instruction = schema_instruction(&request.output_schema.name, wire_schema);
            match messages.iter_mut().find(|m| m.role == Role::System) {
                Some(system) => system.content.push(ContentPart::Text(instruction)),
                None => messages.insert(0, crate::Message::system(instruction)),
            }
        }
        Cow::Owned(messages)
    }

    pub(crate) fn request_body(&self, request: &ChatRequest) -> Value {
        let (wire_schema, is_strict) = self.wire_schema(request);
        let messages = self.effective_messages(request, &wire_schema);
        let mut body = match self.options.api {
            OpenAiApi::ChatCompletions => {
                self.chat_body(request, &messages, wire_schema, is_strict)
            }
            OpenAiApi::Responses => self.responses_body(request, &messages, wire_schema, is_strict),
        };
        if let Some(max_tokens) = request.options.max_tokens.or(self.settings.max_tokens) {
            body[self.max_tokens_field()] = json!(max_tokens);
        }
        match self.options.reasoning_effort {
            Some(effort) => match self.options.api {
                OpenAiApi::ChatCompletions => body["reasoning_effort"] = json!(effort.as_str()),
                OpenAiApi::Responses => body["reasoning"] = json!({"effort": effort.as_str()}),
            },
            None => {
                if let Some(temperature) = request.options.temperature.or(self.settings.temperature)
                {
                    body["temperature"] = crate::http::temperature_json(temperature);
                }
            }
        }
        body
    }

    fn chat_body(
        &self,
        request: &ChatRequest,
        messages: &[crate::Message],
        wire_schema: Value,
        is_strict: bool,
    ) -> Value {
        let schema = &request.output_schema;
        let messages: Vec<Value> = messages.iter().map(message_json).collect();
        let mut body = json!({
            "model": self.settings.model_id,
            "messages": messages,
        });
        match self.options.mode {
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
            StructuredOutputMode::JsonObject => {
                body["response_format"] = json!({"type": "json_object"});
            }
            StructuredOutputMode::Prompt => {}
        }
        body
    }

    fn responses_body(
        &self,
        request: &ChatRequest,
        messages: &[crate::Message],
        wire_schema: Value,
        is_strict: bool,
    ) -> Value {
        let schema = &request.output_schema;
        let input: Vec<Value> = messages.iter().map(responses_message_json).collect();
        let mut body = json!({
            "model": self.settings.model_id,
            "input": input,
        });
        match self.options.mode {
            StructuredOutputMode::JsonSchema => {
                let mut format = json!({
                    "type": "json_schema",
                    "name": schema.name,
                    "strict": is_strict,
                    "schema": wire_schema,
                });
                if let Some(description) = &schema.description {
                    format["description"] = json!(description);
                }
                body["text"] = json!({"format": format});
            }
            StructuredOutputMode::Tools => {
                body["tools"] = json!([{
                    "type": "function",
                    "name": schema.name,
                    "description": schema.tool_description(),
                    "parameters": wire_schema,
                    "strict": is_strict,
                }]);
                body["tool_choice"] = json!({"type": "function", "name": schema.name});
            }
            StructuredOutputMode::JsonObject => {
                body["text"] = json!({"format": {"type": "json_object"}});
            }
            StructuredOutputMode::Prompt => {}
        }
        body
    }
}

/// `text` as one URL path segment (deployment names are plain, but never trust that).
fn path_segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The schema as an instruction, for the modes that do not send it as a response format.
fn schema_instruction(name: &str, schema: &Value) -> String {
    format!(
        "Reply with one JSON object ({name}) that matches this JSON Schema, and nothing else:\n\
         <json_schema>\n{schema}\n</json_schema>"
    )
}

/// Removes `keywords` from every schema node (property names are left alone).
fn strip_keywords(node: &mut Value, keywords: &[&str]) {
    match node {
        Value::Object(map) => {
            map.retain(|key, _| !keywords.contains(&key.as_str()));
            for (key, value) in map.iter_mut() {
                if matches!(key.as_str(), "properties" | "$defs" | "definitions")
                    && let Value::Object(children) = value
                {
                    for child in children.values_mut() {
                        strip_keywords(child, keywords);
                    }
                } else {
                    strip_keywords(value, keywords);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                strip_keywords(item, keywords);
            }
        }
        _ => {}
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

fn responses_message_json(message: &crate::Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let has_image = message
        .content
        .iter()
        .any(|p| matches!(p, ContentPart::Image(_)));
    if !has_image || message.role != Role::User {
        return json!({"role": role, "content": message.joined_text()});
    }
    let parts: Vec<Value> = message
        .content
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => json!({"type": "input_text", "text": text}),
            ContentPart::Image(image) => json!({
                "type": "input_image",
                "image_url": format!("data:{};base64,{}", image.media_type, image.base64()),
                "detail": image.detail.as_str(),
            }),
        })
        .collect();
    json!({"role": role, "content": parts})
}

/// A Responses API answer: `output[]` items (`reasoning`, `message` with `output_text` /
/// `refusal` parts, `function_call`), `status`, `incomplete_details`, `usage`.
fn parse_responses_response(body: &Value) -> WireReply {
    let usage_json = body.get("usage");
    let usage = TokenUsage {
        input_tokens: count(usage_json.and_then(|u| u.get("input_tokens"))),
        cached_input_tokens: count(
            usage_json
                .and_then(|u| u.get("input_tokens_details"))
                .and_then(|d| d.get("cached_tokens")),
        ),
        cache_creation_input_tokens: 0,
        output_tokens: count(usage_json.and_then(|u| u.get("output_tokens"))),
    };
    let status = body.get("status").and_then(Value::as_str);
    let incomplete_reason = body
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let stop_reason = incomplete_reason.or(status).map(str::to_owned);
    let truncated = incomplete_reason == Some("max_output_tokens");
    let items = body
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let function_arguments = items
        .iter()
        .find(|item| item.get("type").and_then(Value::as_str) == Some("function_call"))
        .and_then(|item| item.get("arguments"))
        .cloned();
    let mut text = String::new();
    let mut refusal = None;
    for item in &items {
        if item.get("type").and_then(Value::as_str) != Some("message") {
            continue;
        }
        for part in item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match part.get("type").and_then(Value::as_str) {
                Some("output_text") => {
                    text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                }
                Some("refusal") => {
                    refusal = part
                        .get("refusal")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                _ => {}
            }
        }
    }
    let reply_body = if let Some(arguments) = function_arguments {
        ReplyBody::Value(arguments)
    } else if !text.trim().is_empty() {
        ReplyBody::Text(text)
    } else if let Some(refusal) = refusal {
        ReplyBody::Missing(format!("the model refused: {refusal}"))
    } else if let Some(error) = body
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
    {
        ReplyBody::Missing(format!("the response failed: {error}"))
    } else {
        ReplyBody::Missing(format!(
            "the response has no output text (status {})",
            status.unwrap_or("missing")
        ))
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
        let (header, prefix) = self.options.key_header;
        if let Some((name, value)) = self.settings.key_header(header, prefix)? {
            headers.insert(name, value);
        }
        let body = self.request_body(request);
        let answer = self
            .settings
            .post_json(self.url(), headers, &body, request)
            .await?;
        let reply = match self.options.api {
            OpenAiApi::ChatCompletions => parse_response(&answer),
            OpenAiApi::Responses => parse_responses_response(&answer),
        };
        finish(&self.settings, reply, started)
    }
}
