//! What a [`ChatModel`](crate::ChatModel) returns: the parsed reply, token usage and cost.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts of one or more calls, normalised across providers.
///
/// `input_tokens` counts **all** prompt tokens, including those read from or written to a prompt
/// cache (OpenAI, Azure and Gemini report it that way; for Anthropic we add
/// `cache_read_input_tokens` and `cache_creation_input_tokens` to its `input_tokens`, for Bedrock
/// Converse `cacheReadInputTokens` and `cacheWriteInputTokens` to its `inputTokens`). `cached_input_tokens` and
/// `cache_creation_input_tokens` are subsets of it. `output_tokens` includes reasoning/thinking
/// tokens (billed as output everywhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// All prompt tokens.
    pub input_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the cache (Anthropic, also on Bedrock and Vertex; Bedrock
    /// Converse cache points).
    pub cache_creation_input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

impl std::ops::Add for TokenUsage {
    type Output = Self;

    /// Sum of two usages (a corrective retry is billed too).
    fn add(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens + other.input_tokens,
            cached_input_tokens: self.cached_input_tokens + other.cached_input_tokens,
            cache_creation_input_tokens: self.cache_creation_input_tokens
                + other.cache_creation_input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
        }
    }
}

impl std::ops::AddAssign for TokenUsage {
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Input read from the cache; defaults to `input`.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Input written to the cache (Anthropic, Bedrock); defaults to `input`.
    #[serde(default)]
    pub cache_creation: Option<f64>,
    /// Output.
    pub output: f64,
}

impl Price {
    /// Cost in USD of `usage` under this price table.
    pub fn cost_usd(&self, usage: &TokenUsage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let creation = usage
            .cache_creation_input_tokens
            .min(usage.input_tokens - cached);
        let uncached = usage.input_tokens - cached - creation;
        #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
        let usd = uncached as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + creation as f64 * self.cache_creation.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output;
        usd / 1_000_000.0
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        let all = [
            Some(self.input),
            self.cached_input,
            self.cache_creation,
            Some(self.output),
        ];
        if all.iter().flatten().all(|p| p.is_finite() && *p >= 0.0) {
            Ok(())
        } else {
            Err("prices must be finite and not negative".to_owned())
        }
    }
}

/// A successful structured reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The reply, parsed and (behind the validation layer) validated against the output schema.
    pub value: Value,
    /// Tokens used, summed over every billed call that produced this reply (incl. a corrective
    /// retry).
    pub usage: TokenUsage,
    /// Cost in USD from the model's price table; `None` when no price is configured.
    pub cost_usd: Option<f64>,
    /// Wall time of the whole call as seen by the outermost layer (retries included).
    pub latency: Duration,
    /// Configured name of the model that produced the reply (shows when a fallback was used).
    pub model: String,
    /// Model id the provider reported (or the configured id when it reports none).
    pub provider_model: String,
    /// The provider's raw stop reason (`stop`, `tool_calls`, `end_turn`, `tool_use`, `STOP`, …).
    pub stop_reason: Option<String>,
}
