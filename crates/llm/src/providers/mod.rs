//! The wire formats: OpenAI-compatible (chat completions and Responses; OpenAI, Azure and the
//! presets), Anthropic Messages (Anthropic, Bedrock, Vertex), Gemini (Google AI, Vertex) and
//! Bedrock Converse. Each provider sends one HTTP request per call and parses the reply into
//! JSON; retries, timeouts, fallback and schema validation are layers around them.

mod anthropic;
mod bedrock;
mod gemini;
mod openai;

use std::time::Instant;

use serde_json::Value;

pub(crate) use anthropic::AnthropicHost;
pub use anthropic::AnthropicModel;
pub use bedrock::BedrockModel;
pub(crate) use bedrock::bedrock_base_url;
pub use gemini::GeminiModel;
pub use openai::{
    AZURE_DEFAULT_API_VERSION, OpenAiHost, OpenAiModel, OpenAiOptions, OpenAiPreset,
    StructuredOutputMode,
};

use crate::error::truncate_chars;
use crate::http::ProviderSettings;
use crate::output::parse_json_reply;
use crate::response::TokenUsage;
use crate::{ChatResponse, LlmError};

/// Longest reply text kept in an [`LlmError::InvalidOutput`].
const MAX_RAW_OUTPUT_CHARS: usize = 8_000;

/// What a provider extracted from its wire response.
pub(crate) struct WireReply {
    /// Either an already-structured value (tool arguments as an object) or reply text.
    pub body: ReplyBody,
    pub usage: TokenUsage,
    pub stop_reason: Option<String>,
    pub provider_model: Option<String>,
    /// Whether the stop reason means the output hit the token limit.
    pub truncated: bool,
}

pub(crate) enum ReplyBody {
    Value(Value),
    Text(String),
    /// The provider returned nothing usable; the string says why.
    Missing(String),
}

/// Common tail of every provider: parse the reply, price it, build the response.
pub(crate) fn finish(
    settings: &ProviderSettings,
    reply: WireReply,
    started: Instant,
) -> Result<ChatResponse, LlmError> {
    let invalid = |reason: String, raw: String| LlmError::InvalidOutput {
        model: settings.name.clone(),
        reason,
        raw_output: truncate_chars(&raw, MAX_RAW_OUTPUT_CHARS),
        usage: reply.usage,
    };
    let truncation_note = if reply.truncated {
        " (the output hit the max_tokens limit and was cut off)"
    } else {
        ""
    };
    let value = match &reply.body {
        ReplyBody::Value(Value::String(text)) | ReplyBody::Text(text) => parse_json_reply(text)
            .map_err(|failure| {
                invalid(format!("{}{truncation_note}", failure.reason), text.clone())
            })?,
        ReplyBody::Value(value) => value.clone(),
        ReplyBody::Missing(why) => {
            return Err(invalid(format!("{why}{truncation_note}"), String::new()));
        }
    };
    Ok(ChatResponse {
        value,
        usage: reply.usage,
        cost_usd: settings.cost(&reply.usage),
        latency: started.elapsed(),
        model: settings.name.clone(),
        provider_model: reply
            .provider_model
            .unwrap_or_else(|| settings.model_id.clone()),
        stop_reason: reply.stop_reason,
    })
}
