//! The provider kinds, and the OpenAI API and reasoning effort a model may choose.

use serde::Deserialize;

/// Which provider a model is served by (and so which wire format and authentication it gets).
///
/// `openai`, `anthropic` and `gemini` are the three wire formats; `azure`, `bedrock`,
/// `bedrock_anthropic`, `vertex` and `vertex_anthropic` are the enterprise clouds (their own URLs
/// and credentials); `openrouter`, `groq`, `deepseek`, `mistral`, `cerebras`, `ollama` and
/// `litellm` are presets of the OpenAI-compatible wire with each host's defaults and quirks
/// ([`crate::providers::OpenAiPreset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI (chat completions or the Responses API) or any OpenAI-compatible server.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini generateContent (Google AI Studio).
    Gemini,
    /// Azure OpenAI: deployment URLs, `api-key` or an Entra ID token.
    Azure,
    /// AWS Bedrock Converse, SigV4-signed.
    Bedrock,
    /// Anthropic Messages on AWS Bedrock (InvokeModel), SigV4-signed.
    BedrockAnthropic,
    /// Gemini on Google Vertex AI, with a service-account OAuth token.
    Vertex,
    /// Anthropic Messages on Google Vertex AI (`rawPredict`).
    VertexAnthropic,
    /// OpenRouter (OpenAI-compatible preset).
    #[serde(rename = "openrouter")]
    OpenRouter,
    /// Groq (OpenAI-compatible preset).
    Groq,
    /// DeepSeek (OpenAI-compatible preset; no images).
    #[serde(rename = "deepseek")]
    DeepSeek,
    /// Mistral La Plateforme (OpenAI-compatible preset).
    Mistral,
    /// Cerebras (OpenAI-compatible preset; no images).
    Cerebras,
    /// Ollama's OpenAI-compatible endpoint (preset).
    Ollama,
    /// A LiteLLM proxy (OpenAI-compatible preset).
    #[serde(rename = "litellm")]
    LiteLlm,
}

impl ProviderKind {
    /// Every kind with its configuration name.
    pub const ALL: [(&'static str, Self); 15] = [
        ("openai", Self::OpenAi),
        ("anthropic", Self::Anthropic),
        ("gemini", Self::Gemini),
        ("azure", Self::Azure),
        ("bedrock", Self::Bedrock),
        ("bedrock_anthropic", Self::BedrockAnthropic),
        ("vertex", Self::Vertex),
        ("vertex_anthropic", Self::VertexAnthropic),
        ("openrouter", Self::OpenRouter),
        ("groq", Self::Groq),
        ("deepseek", Self::DeepSeek),
        ("mistral", Self::Mistral),
        ("cerebras", Self::Cerebras),
        ("ollama", Self::Ollama),
        ("litellm", Self::LiteLlm),
    ];

    /// The configuration name (`provider = "…"`).
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("openai", |(name, _)| name)
    }

    /// The OpenAI-compatible preset of this kind, if it speaks the OpenAI wire.
    pub fn openai_preset(self) -> Option<crate::providers::OpenAiPreset> {
        crate::providers::OpenAiPreset::of(self)
    }

    /// Base URL used when the configuration gives none; `None` when it depends on the rest of
    /// the configuration (Azure needs the resource endpoint; Bedrock and Vertex the region).
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::Anthropic => Some("https://api.anthropic.com/v1"),
            Self::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            Self::Azure
            | Self::Bedrock
            | Self::BedrockAnthropic
            | Self::Vertex
            | Self::VertexAnthropic => None,
            openai_wire => openai_wire.openai_preset().map(|p| p.base_url),
        }
    }

    /// Retries when the configuration gives none (browser-use's provider clients: OpenAI 5,
    /// Anthropic 10, Google 5, Groq and OpenRouter 10, LiteLLM 3).
    pub fn default_max_retries(self) -> u32 {
        match self {
            Self::Anthropic | Self::BedrockAnthropic | Self::VertexAnthropic => 10,
            Self::Gemini | Self::Vertex | Self::Azure | Self::Bedrock => 5,
            openai_wire => openai_wire.openai_preset().map_or(5, |p| p.max_retries),
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        let text = text.trim().to_ascii_lowercase();
        Self::ALL
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, kind)| *kind)
    }

    pub(super) fn names() -> String {
        Self::ALL
            .iter()
            .map(|(name, _)| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Which OpenAI API a model of kind `openai` or `azure` is called through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiApi {
    /// `POST …/chat/completions`.
    #[default]
    ChatCompletions,
    /// `POST …/responses` (reasoning models that need it, e.g. the codex family).
    Responses,
}

impl OpenAiApi {
    pub(super) fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "chat_completions" | "chat" => Some(Self::ChatCompletions),
            "responses" => Some(Self::Responses),
            _ => None,
        }
    }
}

/// Reasoning effort for OpenAI reasoning models (`reasoning_effort` in chat completions,
/// `reasoning.effort` in the Responses API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// `minimal`.
    Minimal,
    /// `low` (browser-use's default for its reasoning models).
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
}

impl ReasoningEffort {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "minimal" => Some(Self::Minimal),
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }
}
