//! Chat model providers behind one [`ChatModel`] trait: this crate owns every byte browserd sends
//! to or receives from an LLM. It speaks four wire formats over `reqwest` — OpenAI-compatible
//! chat completions and OpenAI's Responses API (OpenAI, Azure OpenAI, Ollama, vLLM, Groq,
//! DeepSeek, Mistral, Cerebras, OpenRouter, LiteLLM…), Anthropic Messages (also on Bedrock and
//! Vertex AI), Gemini `generateContent` (also on Vertex AI) and Bedrock Converse — always asking
//! for structured JSON output described by a JSON Schema, and returns the parsed value with token
//! usage (prompt-cache reads and writes included), cost and latency.
//!
//! Layout:
//! - [`request`] / [`response`]: what goes in (messages with text and image parts, the output
//!   schema, options) and what comes out ([`ChatResponse`], [`TokenUsage`], [`Price`]).
//! - [`providers`]: the wire formats, one HTTP request per call; `aws` (SigV4, AWS credentials)
//!   and `google` (service-account OAuth tokens) authenticate the cloud ones.
//! - [`layers`]: retry with backoff, per-model timeout, fallback, schema validation with one
//!   corrective retry — each a `ChatModel` wrapping another.
//! - [`config`] / [`ModelRegistry`]: models configured by name (TOML + `BROWSERD_LLM_*` env),
//!   built into a layered `Arc<dyn ChatModel>` per task.
//! - [`schema`] / [`output`]: provider schema rewrites (OpenAI strict, Gemini subset) and reply
//!   parsing (`<think>` stripping, code-fence extraction).
//! - [`cache`]: how much of a prompt is an unchanged prefix of the previous one (what a prompt
//!   cache can reuse).
//!
//! Invariants: base URLs come only from configuration; API keys and tokens live in
//! [`secrecy::SecretString`] and are redacted from every error; every HTTP call has a timeout; redirects are not followed.

mod aws;
pub mod cache;
pub mod config;
mod error;
mod google;
mod http;
pub mod layers;
mod model;
pub mod output;
pub mod providers;
mod registry;
pub mod request;
pub mod response;
pub mod schema;

pub use config::{
    ConfigError, ModelConfig, ModelsConfig, OpenAiApi, ProviderKind, ReasoningEffort,
};
pub use error::LlmError;
pub use http::{ProviderSettings, http_client, install_tls_provider};
pub use model::ChatModel;
pub use registry::ModelRegistry;
pub use request::{
    ChatRequest, ContentPart, ImageData, ImageDetail, ImagePart, Message, OutputSchema,
    RequestOptions, Role,
};
pub use response::{ChatResponse, Price, TokenUsage};
