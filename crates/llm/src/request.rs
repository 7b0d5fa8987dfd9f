//! What a caller sends to a [`ChatModel`](crate::ChatModel): messages, the output schema and options.

use std::time::Instant;

use base64::Engine as _;
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the model (the agent's system prompt).
    System,
    /// Input from the user or the agent loop (the state message, nudges).
    User,
    /// An earlier reply of the model.
    Assistant,
}

/// How much detail a provider should spend on an image (OpenAI's `detail`; ignored elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageDetail {
    /// Let the provider decide.
    #[default]
    Auto,
    /// Fewer tokens, coarser view.
    Low,
    /// More tokens, full resolution.
    High,
}

impl ImageDetail {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Low => "low",
            Self::High => "high",
        }
    }
}

/// The bytes of an image, either raw or already base64-encoded.
#[derive(Clone, PartialEq, Eq)]
pub enum ImageData {
    /// Standard base64 (a `data:` URL prefix is tolerated and removed).
    Base64(String),
    /// Raw bytes; encoded on the way out.
    Bytes(Vec<u8>),
}

impl std::fmt::Debug for ImageData {
    // Images can be megabytes; never dump them into logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Base64(s) => write!(f, "Base64({} chars)", s.len()),
            Self::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
        }
    }
}

/// An image content part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    /// MIME type, e.g. `image/png` or `image/jpeg`.
    pub media_type: String,
    /// The image itself.
    pub data: ImageData,
    /// OpenAI's `detail` hint.
    pub detail: ImageDetail,
}

impl ImagePart {
    /// The image as standard base64 without any `data:` prefix.
    pub fn base64(&self) -> String {
        match &self.data {
            ImageData::Bytes(bytes) => base64::engine::general_purpose::STANDARD.encode(bytes),
            ImageData::Base64(text) => {
                let text = match text.strip_prefix("data:") {
                    Some(rest) => rest.split_once(',').map_or(rest, |(_, data)| data),
                    None => text,
                };
                text.chars().filter(|c| !c.is_ascii_whitespace()).collect()
            }
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.media_type.starts_with("image/") || self.media_type.len() <= "image/".len() {
            return Err(format!(
                "image media type must look like `image/png`, got `{}`",
                self.media_type
            ));
        }
        let empty = match &self.data {
            ImageData::Base64(s) => s.trim().is_empty(),
            ImageData::Bytes(b) => b.is_empty(),
        };
        if empty {
            return Err("image data is empty".to_owned());
        }
        Ok(())
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    /// Plain text.
    Text(String),
    /// An image (screenshots).
    Image(ImagePart),
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text and image parts, in order.
    pub content: Vec<ContentPart>,
    /// Prompt-cache breakpoint hint. `None` follows the default rule (every system message and the
    /// last user message whose hint is `None` are breakpoints); `Some(_)` is explicit. Only
    /// Anthropic needs explicit marks; OpenAI and Gemini cache prefixes on their own.
    pub cache: Option<bool>,
}

impl Message {
    /// A message with one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![ContentPart::Text(text.into())],
            cache: None,
        }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// Appends an image part.
    #[must_use]
    pub fn with_image(mut self, image: ImagePart) -> Self {
        self.content.push(ContentPart::Image(image));
        self
    }

    /// Sets the prompt-cache hint explicitly.
    #[must_use]
    pub fn with_cache(mut self, cache: bool) -> Self {
        self.cache = Some(cache);
        self
    }

    /// All text parts joined by blank lines (for providers that take a plain string).
    pub(crate) fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text(t) => Some(t.as_str()),
                ContentPart::Image(_) => None,
            })
            .collect();
        texts.join("\n\n")
    }
}

/// The JSON Schema the model's reply must satisfy.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputSchema {
    /// Name used for the OpenAI `json_schema` / tool and the Anthropic tool: `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// Optional description (tool description).
    pub description: Option<String>,
    /// The schema (draft 2020-12 or earlier; `$defs`/`$ref` allowed). Replies are validated
    /// against this schema exactly as given.
    pub schema: Value,
}

impl OutputSchema {
    /// A schema without description.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            description: None,
            schema,
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(format!(
                "output schema name must match [A-Za-z0-9_-]{{1,64}}, got `{}`",
                self.name
            ));
        }
        if !self.schema.is_object() {
            return Err("output schema must be a JSON object".to_owned());
        }
        Ok(())
    }

    pub(crate) fn tool_description(&self) -> String {
        self.description
            .clone()
            .unwrap_or_else(|| format!("Reply in the format of {}", self.name))
    }
}

/// Per-request options.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOptions {
    /// Upper bound on output tokens; `None` uses the model's configured default.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; `None` uses the model's configured default (or the provider's).
    pub temperature: Option<f32>,
    /// Master switch for prompt-cache marks (see [`Message::cache`]).
    pub prompt_cache: bool,
    /// Absolute deadline for this call. Set by the timeout layer so that inner layers (retry
    /// sleeps, HTTP requests) never run past it; callers normally leave it `None`.
    pub deadline: Option<Instant>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        Self {
            max_tokens: None,
            temperature: None,
            prompt_cache: true,
            deadline: None,
        }
    }
}

/// A complete structured-output request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The conversation, in order.
    pub messages: Vec<Message>,
    /// The schema of the reply.
    pub output_schema: OutputSchema,
    /// Options.
    pub options: RequestOptions,
}

impl ChatRequest {
    /// A request with default options.
    pub fn new(messages: Vec<Message>, output_schema: OutputSchema) -> Self {
        Self {
            messages,
            output_schema,
            options: RequestOptions::default(),
        }
    }

    /// Checks what every provider needs; returns a human-readable reason on failure.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.output_schema.check()?;
        if self.messages.is_empty() {
            return Err("a request needs at least one message".to_owned());
        }
        if !self.messages.iter().any(|m| m.role != Role::System) {
            return Err("a request needs at least one user message".to_owned());
        }
        for message in &self.messages {
            for part in &message.content {
                if let ContentPart::Image(image) = part {
                    if message.role != Role::User {
                        return Err("images are only supported in user messages".to_owned());
                    }
                    image.check()?;
                }
            }
        }
        Ok(())
    }

    /// Effective cache-breakpoint flags, one per message (see [`Message::cache`]).
    pub(crate) fn cache_breakpoints(&self) -> Vec<bool> {
        if !self.options.prompt_cache {
            return vec![false; self.messages.len()];
        }
        let last_default_user = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::User && m.cache.is_none());
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| match m.cache {
                Some(explicit) => explicit,
                None => m.role == Role::System || Some(i) == last_default_user,
            })
            .collect()
    }

    /// Remaining time until the deadline, if one is set (zero when already past).
    pub(crate) fn remaining(&self) -> Option<std::time::Duration> {
        self.options
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}
