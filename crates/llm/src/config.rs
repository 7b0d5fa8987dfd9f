//! Models configured by name: TOML file, environment overrides, validation.
//!
//! ```toml
//! default_model = "gpt-4.1-mini"
//! [models."gpt-4.1-mini"]            # quoting is optional: [models.gpt-4.1-mini] works too
//! provider = "openai"                # see `ProviderKind::ALL`: openai, anthropic, gemini, azure,
//!                                    # bedrock, bedrock_anthropic, vertex, vertex_anthropic and the
//!                                    # presets openrouter, groq, deepseek, mistral, cerebras,
//!                                    # ollama, litellm
//! base_url = "https://api.openai.com/v1"   # optional; provider default otherwise
//! model = "gpt-4.1-mini"             # provider model id
//! api_key_env = "OPENAI_API_KEY"     # env var holding the key (never the key itself)
//! timeout_s = 75                     # optional; browser-use default by model name otherwise
//! structured_output = "json_schema"  # OpenAI wire: json_schema | tools | json_object | prompt
//! api = "chat_completions"           # openai / azure: chat_completions | responses
//! reasoning_effort = "low"           # OpenAI wire: minimal | low | medium | high
//! fallback = "other-model-name"      # optional
//! max_retries = 5                    # optional; provider default otherwise
//! max_tokens = 4096                  # optional default for requests
//! temperature = 0.2                  # optional default for requests
//! [models."gpt-4.1-mini".price]      # optional, USD per million tokens
//! input = 0.4
//! cached_input = 0.1                 # optional, defaults to input
//! cache_creation = 0.5               # optional (Anthropic cache writes), defaults to input
//! output = 1.6
//! ```
//!
//! Cloud kinds add `api_version` / `azure_ad_token_env` (Azure), `region` / `aws_profile`
//! (Bedrock) and `region` / `project` / `credentials_file` (Vertex AI); `vision = false` leaves
//! images out. docs/src/models.md has the table of what each kind needs.
//!
//! An unquoted dotted table name such as `[models.gpt-4.1-mini]` is, in TOML, a nested table
//! (`models` → `gpt-4` → `1-mini`); nested tables without a `provider` key are joined back
//! with dots, so both spellings name the model `gpt-4.1-mini`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::providers::StructuredOutputMode;
use crate::response::Price;

/// Prefix of every environment variable this module reads.
pub const ENV_PREFIX: &str = "BROWSERD_LLM_";

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

    fn parse(text: &str) -> Option<Self> {
        let text = text.trim().to_ascii_lowercase();
        Self::ALL
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, kind)| *kind)
    }

    fn names() -> String {
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
    fn parse(text: &str) -> Option<Self> {
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

    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "minimal" => Some(Self::Minimal),
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }
}

/// One configured model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Wire format.
    pub provider: ProviderKind,
    /// API root; the provider's public endpoint when absent.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Provider model id.
    pub model: String,
    /// Name of the environment variable holding the API key; `None` sends no key (local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Timeout of one call in seconds (retries included); browser-use's default by name otherwise.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// OpenAI only: how structured output is requested.
    #[serde(default)]
    pub structured_output: Option<StructuredOutputMode>,
    /// Name of the model to switch to after 401/402/429/5xx.
    #[serde(default)]
    pub fallback: Option<String>,
    /// Retries after the first attempt.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Default output-token cap.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Default temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Prices in USD per million tokens.
    #[serde(default)]
    pub price: Option<Price>,
    /// `openai` / `azure`: chat completions (default) or the Responses API.
    #[serde(default)]
    pub api: Option<OpenAiApi>,
    /// OpenAI-wire kinds: reasoning effort sent to reasoning models (then no temperature).
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// `azure`: the `api-version` query value; `v1` selects the v1 API (`/openai/v1/…`).
    #[serde(default)]
    pub api_version: Option<String>,
    /// `azure`: environment variable holding a Microsoft Entra ID access token (sent as
    /// `Authorization: Bearer`), instead of `api_key_env` (sent as `api-key`).
    #[serde(default)]
    pub azure_ad_token_env: Option<String>,
    /// `bedrock*` / `vertex*`: the region (`us-east-1`, `europe-west4`, `global`…); else
    /// `AWS_REGION` / `AWS_DEFAULT_REGION`, or `GOOGLE_CLOUD_LOCATION` (default `global`).
    #[serde(default)]
    pub region: Option<String>,
    /// `vertex*`: the Google Cloud project; else `GOOGLE_CLOUD_PROJECT`, else the service
    /// account's `project_id`.
    #[serde(default)]
    pub project: Option<String>,
    /// `vertex*`: path of a service-account JSON key; else `GOOGLE_APPLICATION_CREDENTIALS`.
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// `bedrock*`: profile of the shared credentials file; else `AWS_PROFILE`, else `default`.
    #[serde(default)]
    pub aws_profile: Option<String>,
    /// Whether screenshots are sent; the kind's default otherwise (no for `deepseek` and
    /// `cerebras`). Without vision, image parts are left out of the request.
    #[serde(default)]
    pub vision: Option<bool>,
}

impl ModelConfig {
    /// The effective timeout: `timeout_s`, else browser-use's default for the name.
    pub fn timeout(&self, name: &str) -> Duration {
        self.timeout_s.map_or_else(
            || default_timeout(&[name, &self.model, self.base_url_or_default().unwrap_or("")]),
            Duration::from_secs_f64,
        )
    }

    /// The configured base URL, else the kind's fixed default (`None` for Azure, Bedrock and
    /// Vertex, whose URL is derived from endpoint / region at build time).
    pub fn base_url_or_default(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .or(self.provider.default_base_url())
    }

    /// The effective retry count.
    pub fn max_retries_or_default(&self) -> u32 {
        self.max_retries
            .unwrap_or(self.provider.default_max_retries())
    }
}

/// browser-use's per-model LLM timeout, matched on lower-cased names (first hit wins):
/// `gemini` → 75 s (`3-pro` → 90 s); `groq` → 30 s; `o3`, `claude`, `sonnet`, `deepseek` → 90 s;
/// otherwise 75 s. Every given text (configured name, model id, base URL) is searched, so a Groq
/// endpoint counts even when the model id does not say "groq".
pub fn default_timeout(names: &[&str]) -> Duration {
    let text = names.join(" ").to_ascii_lowercase();
    let seconds = if text.contains("gemini") {
        if text.contains("3-pro") { 90 } else { 75 }
    } else if text.contains("groq") {
        30
    } else if ["o3", "claude", "sonnet", "deepseek"]
        .iter()
        .any(|n| text.contains(n))
    {
        90
    } else {
        75
    };
    Duration::from_secs(seconds)
}

/// What is wrong with a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML text does not parse or has the wrong shape.
    #[error("invalid models configuration: {message}")]
    Parse {
        /// Parser message (with line/column when TOML gives one).
        message: String,
    },
    /// The file could not be read.
    #[error("cannot read models configuration {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A name that is not configured.
    #[error("unknown model `{name}` (configured: {known})")]
    UnknownModel {
        /// The requested name.
        name: String,
        /// Comma-separated configured names.
        known: String,
    },
    /// No model was named and no default is configured.
    #[error("no model given and no `default_model` configured")]
    NoDefaultModel,
    /// A field has a bad value.
    #[error("model `{model}`: `{field}` {message}")]
    InvalidField {
        /// Model name.
        model: String,
        /// Field name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Fallbacks form a cycle.
    #[error("fallback cycle: {}", cycle.join(" -> "))]
    FallbackCycle {
        /// The names along the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
    /// The env var named by `api_key_env` is unset or empty.
    #[error("model `{model}`: environment variable `{env_var}` (api_key_env) is not set")]
    MissingApiKey {
        /// Model name.
        model: String,
        /// The variable's name.
        env_var: String,
    },
    /// An override variable has a bad value.
    #[error("environment variable `{var}`: {message}")]
    Env {
        /// The variable's name.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {message}")]
    Http {
        /// Why.
        message: String,
    },
}

/// All configured models.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelsConfig {
    /// Name used when a task names no model.
    pub default_model: Option<String>,
    /// Models by name.
    pub models: BTreeMap<String, ModelConfig>,
}

impl ModelsConfig {
    /// Parses and validates TOML text.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            message: e.to_string().trim().to_owned(),
        })?;
        let config = Self::from_toml_table(table)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// Builds from an already-parsed TOML table (e.g. a section of a larger file). Not validated.
    pub fn from_toml_table(mut table: toml::Table) -> Result<Self, ConfigError> {
        let default_model = match table.remove("default_model") {
            None => None,
            Some(toml::Value::String(name)) => Some(name),
            Some(other) => {
                return Err(ConfigError::Parse {
                    message: format!("`default_model` must be a string, got {}", other.type_str()),
                });
            }
        };
        let mut models = BTreeMap::new();
        match table.remove("models") {
            None => {}
            Some(toml::Value::Table(entries)) => flatten_models("", entries, &mut models)?,
            Some(other) => {
                return Err(ConfigError::Parse {
                    message: format!("`models` must be a table, got {}", other.type_str()),
                });
            }
        }
        if let Some(unknown) = table.keys().next() {
            return Err(ConfigError::Parse {
                message: format!(
                    "unknown top-level key `{unknown}` (expected `default_model` and `models`)"
                ),
            });
        }
        Ok(Self {
            default_model,
            models,
        })
    }

    /// Applies `BROWSERD_LLM_*` overrides from the process environment, then validates.
    pub fn apply_process_env(&mut self) -> Result<(), ConfigError> {
        self.apply_env(|name| std::env::var(name).ok())
    }

    /// Applies overrides read through `lookup`, then validates.
    ///
    /// - `BROWSERD_LLM_DEFAULT_MODEL` replaces `default_model`.
    /// - `BROWSERD_LLM_<NAME>_<FIELD>` replaces a field of model `<NAME>`, where `<NAME>` is the
    ///   model name upper-cased with every non-alphanumeric character turned into `_`
    ///   (`gpt-4.1-mini` → `GPT_4_1_MINI`) and `<FIELD>` is one of `PROVIDER`, `BASE_URL`,
    ///   `MODEL`, `API_KEY_ENV`, `TIMEOUT_S`, `STRUCTURED_OUTPUT`, `FALLBACK`, `MAX_RETRIES`,
    ///   `MAX_TOKENS`, `TEMPERATURE`, `PRICE_INPUT`, `PRICE_CACHED_INPUT`,
    ///   `PRICE_CACHE_CREATION`, `PRICE_OUTPUT`, `API`, `REASONING_EFFORT`, `API_VERSION`,
    ///   `AZURE_AD_TOKEN_ENV`, `REGION`, `PROJECT`, `CREDENTIALS_FILE`, `AWS_PROFILE`, `VISION`.
    /// - A default or fallback name that is not in the file is created from its variables when
    ///   at least `_PROVIDER` and `_MODEL` are set, so a single model can be configured from the
    ///   environment alone.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let lookup = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let Some(name) = lookup(&format!("{ENV_PREFIX}DEFAULT_MODEL")) {
            self.default_model = Some(name.trim().to_owned());
        }
        let names: Vec<String> = self.models.keys().cloned().collect();
        for name in &names {
            if let Some(model) = self.models.get_mut(name) {
                apply_model_env(name, model, &lookup)?;
            }
        }
        // Create referenced-but-missing models from the environment (default, then fallbacks).
        let mut pending: Vec<String> = self.default_model.iter().cloned().collect();
        while let Some(name) = pending.pop() {
            if !self.models.contains_key(&name)
                && let Some(model) = model_from_env(&name, &lookup)?
            {
                pending.extend(model.fallback.clone());
                self.models.insert(name, model);
            }
        }
        self.validate()
    }

    /// Checks every rule that does not need the environment: known provider (at parse time),
    /// sane fields, base URLs, known fallbacks without cycles, known default.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(default) = &self.default_model {
            self.get(default)?;
        }
        let mut normalised: BTreeMap<String, &str> = BTreeMap::new();
        for (name, model) in &self.models {
            validate_model(name, model)?;
            if let Some(fallback) = &model.fallback {
                if fallback == name {
                    return Err(ConfigError::FallbackCycle {
                        cycle: vec![name.clone(), name.clone()],
                    });
                }
                self.get(fallback)?;
            }
            if let Some(other) = normalised.insert(env_name(name), name) {
                return Err(ConfigError::InvalidField {
                    model: name.clone(),
                    field: "name",
                    message: format!(
                        "maps to the same environment variables as model `{other}` \
                         ({ENV_PREFIX}{}_*); rename one of them",
                        env_name(name)
                    ),
                });
            }
        }
        for start in self.models.keys() {
            let mut chain = vec![start.clone()];
            let mut current = start;
            while let Some(next) = self.models.get(current).and_then(|m| m.fallback.as_ref()) {
                if let Some(pos) = chain.iter().position(|n| n == next) {
                    let mut cycle = chain[pos..].to_vec();
                    cycle.push(next.clone());
                    return Err(ConfigError::FallbackCycle { cycle });
                }
                chain.push(next.clone());
                current = next;
            }
        }
        Ok(())
    }

    /// The model configured under `name`.
    pub fn get(&self, name: &str) -> Result<&ModelConfig, ConfigError> {
        self.models
            .get(name)
            .ok_or_else(|| ConfigError::UnknownModel {
                name: name.to_owned(),
                known: self.known_names(),
            })
    }

    pub(crate) fn known_names(&self) -> String {
        if self.models.is_empty() {
            "none".to_owned()
        } else {
            self.models.keys().cloned().collect::<Vec<_>>().join(", ")
        }
    }

    /// `name` and the models it falls back to, in order.
    pub fn fallback_chain(&self, name: &str) -> Result<Vec<String>, ConfigError> {
        let mut chain = vec![name.to_owned()];
        let mut seen = BTreeSet::from([name.to_owned()]);
        let mut current = self.get(name)?;
        while let Some(next) = &current.fallback {
            if !seen.insert(next.clone()) {
                let mut cycle = chain.clone();
                cycle.push(next.clone());
                return Err(ConfigError::FallbackCycle { cycle });
            }
            chain.push(next.clone());
            current = self.get(next)?;
        }
        Ok(chain)
    }
}

fn flatten_models(
    prefix: &str,
    entries: toml::Table,
    out: &mut BTreeMap<String, ModelConfig>,
) -> Result<(), ConfigError> {
    for (key, value) in entries {
        let name = if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        };
        let toml::Value::Table(table) = value else {
            return Err(ConfigError::Parse {
                message: format!(
                    "`models.{name}` must be a table of model settings, got {}",
                    value.type_str()
                ),
            });
        };
        if table.contains_key("provider") {
            if let Some(provider) = table.get("provider").and_then(toml::Value::as_str)
                && ProviderKind::parse(provider).is_none()
            {
                return Err(ConfigError::InvalidField {
                    model: name,
                    field: "provider",
                    message: format!("is `{provider}`, expected one of {}", ProviderKind::names()),
                });
            }
            let model: ModelConfig =
                toml::Value::Table(table)
                    .try_into()
                    .map_err(|e: toml::de::Error| ConfigError::Parse {
                        message: format!("model `{name}`: {}", e.message().trim()),
                    })?;
            if out.insert(name.clone(), model).is_some() {
                return Err(ConfigError::Parse {
                    message: format!("model `{name}` is defined twice"),
                });
            }
        } else if !table.is_empty() && table.values().all(toml::Value::is_table) {
            flatten_models(&name, table, out)?;
        } else {
            return Err(ConfigError::Parse {
                message: format!(
                    "model `{name}` has no `provider` ({})",
                    ProviderKind::names()
                ),
            });
        }
    }
    Ok(())
}

fn invalid(model: &str, field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::InvalidField {
        model: model.to_owned(),
        field,
        message: message.into(),
    }
}

fn validate_model(name: &str, model: &ModelConfig) -> Result<(), ConfigError> {
    if name.trim().is_empty() {
        return Err(invalid(name, "name", "must not be empty"));
    }
    if model.model.trim().is_empty() {
        return Err(invalid(name, "model", "must not be empty"));
    }
    if let Some(base_url) = model.base_url_or_default() {
        validate_base_url(base_url).map_err(|m| invalid(name, "base_url", m))?;
    } else if model.provider == ProviderKind::Azure {
        return Err(invalid(
            name,
            "base_url",
            "is required for provider `azure`: the resource endpoint, e.g. \
             `https://my-resource.openai.azure.com`",
        ));
    }
    for (field, var) in [
        ("api_key_env", &model.api_key_env),
        ("azure_ad_token_env", &model.azure_ad_token_env),
    ] {
        if let Some(var) = var
            && !is_env_var_name(var)
        {
            return Err(invalid(
                name,
                field,
                "must be the name of an environment variable (letters, digits, `_`), not a key",
            ));
        }
    }
    validate_kind_fields(name, model)?;
    if let Some(t) = model.timeout_s
        && !(t.is_finite() && t > 0.0 && t <= 3600.0)
    {
        return Err(invalid(
            name,
            "timeout_s",
            format!("must be in (0, 3600], got {t}"),
        ));
    }
    if let Some(r) = model.max_retries
        && r > 20
    {
        return Err(invalid(
            name,
            "max_retries",
            format!("must be at most 20, got {r}"),
        ));
    }
    if model.max_tokens == Some(0) {
        return Err(invalid(name, "max_tokens", "must be positive"));
    }
    if let Some(t) = model.temperature
        && !(t.is_finite() && (0.0..=2.0).contains(&t))
    {
        return Err(invalid(
            name,
            "temperature",
            format!("must be in [0, 2], got {t}"),
        ));
    }
    if let Some(price) = &model.price {
        price.check().map_err(|m| invalid(name, "price", m))?;
    }
    Ok(())
}

fn is_env_var_name(var: &str) -> bool {
    !var.is_empty()
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !var.starts_with(|c: char| c.is_ascii_digit())
}

/// Fields that only some kinds understand, and what each kind needs.
fn validate_kind_fields(name: &str, model: &ModelConfig) -> Result<(), ConfigError> {
    use ProviderKind as K;
    let kind = model.provider;
    let openai_wire = kind.openai_preset().is_some() || kind == K::Azure;
    let only = |field: &'static str, set: bool, allowed: bool, kinds: &str| {
        if set && !allowed {
            Err(invalid(
                name,
                field,
                format!("applies only to provider {kinds}"),
            ))
        } else {
            Ok(())
        }
    };
    only(
        "structured_output",
        model.structured_output.is_some(),
        openai_wire,
        "`openai`, `azure` and the OpenAI-compatible presets",
    )?;
    only(
        "reasoning_effort",
        model.reasoning_effort.is_some(),
        openai_wire,
        "`openai`, `azure` and the OpenAI-compatible presets",
    )?;
    only(
        "api",
        model.api.is_some(),
        matches!(kind, K::OpenAi | K::Azure),
        "`openai` and `azure`",
    )?;
    only(
        "api_version",
        model.api_version.is_some(),
        kind == K::Azure,
        "`azure`",
    )?;
    only(
        "azure_ad_token_env",
        model.azure_ad_token_env.is_some(),
        kind == K::Azure,
        "`azure`",
    )?;
    let aws = matches!(kind, K::Bedrock | K::BedrockAnthropic);
    let google = matches!(kind, K::Vertex | K::VertexAnthropic);
    only(
        "region",
        model.region.is_some(),
        aws || google,
        "`bedrock`, `bedrock_anthropic`, `vertex` and `vertex_anthropic`",
    )?;
    only(
        "aws_profile",
        model.aws_profile.is_some(),
        aws,
        "`bedrock` and `bedrock_anthropic`",
    )?;
    only(
        "project",
        model.project.is_some(),
        google,
        "`vertex` and `vertex_anthropic`",
    )?;
    only(
        "credentials_file",
        model.credentials_file.is_some(),
        google,
        "`vertex` and `vertex_anthropic`",
    )?;
    if (aws || google) && model.api_key_env.is_some() {
        return Err(invalid(
            name,
            "api_key_env",
            if aws {
                "does not apply to Bedrock: requests are signed with AWS credentials \
                 (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile or the container role)"
            } else {
                "does not apply to Vertex AI: set `credentials_file` or \
                 GOOGLE_APPLICATION_CREDENTIALS to a service-account key"
            },
        ));
    }
    if kind == K::Azure && model.api_key_env.is_some() && model.azure_ad_token_env.is_some() {
        return Err(invalid(
            name,
            "azure_ad_token_env",
            "set either `api_key_env` (api-key header) or `azure_ad_token_env` (Entra ID token), \
             not both",
        ));
    }
    if let Some(version) = &model.api_version {
        let ok = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !ok {
            return Err(invalid(
                name,
                "api_version",
                format!("must look like `2024-12-01-preview` or `v1`, got `{version}`"),
            ));
        }
    }
    for (field, value) in [("region", &model.region), ("project", &model.project)] {
        if let Some(value) = value {
            let ok = !value.is_empty()
                && value.chars().all(|c| {
                    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' || c == ':'
                });
            if !ok {
                return Err(invalid(
                    name,
                    field,
                    format!("must be letters, digits and `-`, got `{value}`"),
                ));
            }
        }
    }
    if let Some(preset) = kind.openai_preset()
        && let Some(mode) = model.structured_output
        && !preset.accepts(mode)
    {
        return Err(invalid(
            name,
            "structured_output",
            format!(
                "`{}` is not accepted by provider `{}` (accepted: {})",
                mode.as_str(),
                kind.as_str(),
                preset.accepted_names()
            ),
        ));
    }
    Ok(())
}

/// Checks a base URL: http(s), a host, no credentials, no query or fragment.
pub(crate) fn validate_base_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("must use http or https, got `{}`", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain credentials; use api_key_env".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".to_owned());
    }
    Ok(url)
}

/// A name as an environment-variable part: `gpt-4.1-mini` → `GPT_4_1_MINI`.
pub fn env_name(model_name: &str) -> String {
    model_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn env_var(model_name: &str, field: &str) -> String {
    format!("{ENV_PREFIX}{}_{field}", env_name(model_name))
}

fn parse_env<T: std::str::FromStr>(var: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ConfigError::Env {
        var: var.to_owned(),
        message: format!("cannot parse `{}`: {e}", value.trim()),
    })
}

fn apply_model_env(
    name: &str,
    model: &mut ModelConfig,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let get = |field: &str| {
        let var = env_var(name, field);
        lookup(&var).map(|value| (var, value))
    };
    if let Some((var, value)) = get("PROVIDER") {
        model.provider = ProviderKind::parse(&value).ok_or_else(|| ConfigError::Env {
            var,
            message: format!("unknown provider `{value}` ({})", ProviderKind::names()),
        })?;
    }
    if let Some((_, value)) = get("BASE_URL") {
        model.base_url = Some(value.trim().to_owned());
    }
    if let Some((_, value)) = get("MODEL") {
        model.model = value.trim().to_owned();
    }
    if let Some((_, value)) = get("API_KEY_ENV") {
        model.api_key_env = Some(value.trim().to_owned());
    }
    if let Some((var, value)) = get("TIMEOUT_S") {
        model.timeout_s = Some(parse_env(&var, &value)?);
    }
    if let Some((var, value)) = get("STRUCTURED_OUTPUT") {
        model.structured_output =
            Some(
                StructuredOutputMode::parse(&value).ok_or_else(|| ConfigError::Env {
                    var,
                    message: format!(
                        "unknown mode `{}` (json_schema, tools, json_object or prompt)",
                        value.trim()
                    ),
                })?,
            );
    }
    if let Some((var, value)) = get("API") {
        model.api = Some(OpenAiApi::parse(&value).ok_or_else(|| ConfigError::Env {
            var,
            message: format!(
                "unknown API `{}` (chat_completions or responses)",
                value.trim()
            ),
        })?);
    }
    if let Some((var, value)) = get("REASONING_EFFORT") {
        model.reasoning_effort =
            Some(
                ReasoningEffort::parse(&value).ok_or_else(|| ConfigError::Env {
                    var,
                    message: format!(
                        "unknown effort `{}` (minimal, low, medium or high)",
                        value.trim()
                    ),
                })?,
            );
    }
    for (field, slot) in [
        ("API_VERSION", &mut model.api_version),
        ("AZURE_AD_TOKEN_ENV", &mut model.azure_ad_token_env),
        ("REGION", &mut model.region),
        ("PROJECT", &mut model.project),
        ("CREDENTIALS_FILE", &mut model.credentials_file),
        ("AWS_PROFILE", &mut model.aws_profile),
    ] {
        if let Some((_, value)) = get(field) {
            *slot = Some(value.trim().to_owned());
        }
    }
    if let Some((var, value)) = get("VISION") {
        model.vision = Some(parse_env(&var, &value)?);
    }
    if let Some((_, value)) = get("FALLBACK") {
        model.fallback = Some(value.trim().to_owned());
    }
    if let Some((var, value)) = get("MAX_RETRIES") {
        model.max_retries = Some(parse_env(&var, &value)?);
    }
    if let Some((var, value)) = get("MAX_TOKENS") {
        model.max_tokens = Some(parse_env(&var, &value)?);
    }
    if let Some((var, value)) = get("TEMPERATURE") {
        model.temperature = Some(parse_env(&var, &value)?);
    }
    let input = get("PRICE_INPUT")
        .map(|(var, v)| parse_env::<f64>(&var, &v))
        .transpose()?;
    let cached = get("PRICE_CACHED_INPUT")
        .map(|(var, v)| parse_env::<f64>(&var, &v))
        .transpose()?;
    let creation = get("PRICE_CACHE_CREATION")
        .map(|(var, v)| parse_env::<f64>(&var, &v))
        .transpose()?;
    let output = get("PRICE_OUTPUT")
        .map(|(var, v)| parse_env::<f64>(&var, &v))
        .transpose()?;
    if input.is_some() || cached.is_some() || creation.is_some() || output.is_some() {
        let mut price = model.price.unwrap_or(Price {
            input: 0.0,
            cached_input: None,
            cache_creation: None,
            output: 0.0,
        });
        if let Some(input) = input {
            price.input = input;
        }
        if cached.is_some() {
            price.cached_input = cached;
        }
        if creation.is_some() {
            price.cache_creation = creation;
        }
        if let Some(output) = output {
            price.output = output;
        }
        model.price = Some(price);
    }
    Ok(())
}

fn model_from_env(
    name: &str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Option<ModelConfig>, ConfigError> {
    let provider_var = env_var(name, "PROVIDER");
    let (Some(_), Some(model_id)) = (lookup(&provider_var), lookup(&env_var(name, "MODEL"))) else {
        return Ok(None);
    };
    let mut model = ModelConfig {
        provider: ProviderKind::OpenAi,
        base_url: None,
        model: model_id,
        api_key_env: None,
        timeout_s: None,
        structured_output: None,
        fallback: None,
        max_retries: None,
        max_tokens: None,
        temperature: None,
        price: None,
        api: None,
        reasoning_effort: None,
        api_version: None,
        azure_ad_token_env: None,
        region: None,
        project: None,
        credentials_file: None,
        aws_profile: None,
        vision: None,
    };
    apply_model_env(name, &mut model, lookup)?;
    Ok(Some(model))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRIEF_EXAMPLE: &str = r#"
default_model = "gpt-4.1-mini"
[models.gpt-4.1-mini]
provider = "openai"
base_url = "https://api.openai.com/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
timeout_s = 75
structured_output = "json_schema"
fallback = "claude"
max_retries = 5
[models.gpt-4.1-mini.price]
input = 0.4
cached_input = 0.1
output = 1.6

[models.claude]
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"

[models."gemini-2.5-flash"]
provider = "gemini"
model = "gemini-2.5-flash"
api_key_env = "GEMINI_API_KEY"
"#;

    #[test]
    fn parses_the_documented_format_with_dotted_and_quoted_names() {
        let config = ModelsConfig::from_toml_str(BRIEF_EXAMPLE).unwrap();
        assert_eq!(config.default_model.as_deref(), Some("gpt-4.1-mini"));
        let names: Vec<&str> = config.models.keys().map(String::as_str).collect();
        assert_eq!(names, ["claude", "gemini-2.5-flash", "gpt-4.1-mini"]);
        let gpt = config.get("gpt-4.1-mini").unwrap();
        assert_eq!(gpt.provider, ProviderKind::OpenAi);
        assert_eq!(
            gpt.structured_output,
            Some(StructuredOutputMode::JsonSchema)
        );
        assert_eq!(gpt.timeout("gpt-4.1-mini"), Duration::from_secs(75));
        assert_eq!(gpt.price.unwrap().cached_input, Some(0.1));
        let claude = config.get("claude").unwrap();
        assert_eq!(claude.timeout("claude"), Duration::from_secs(90));
        assert_eq!(claude.max_retries_or_default(), 10);
        assert_eq!(
            config.fallback_chain("gpt-4.1-mini").unwrap(),
            ["gpt-4.1-mini", "claude"]
        );
    }

    #[test]
    fn default_timeouts_follow_browser_use() {
        let t = |names: &[&str]| default_timeout(names).as_secs();
        assert_eq!(t(&["gemini-2.5-flash"]), 75);
        assert_eq!(t(&["gemini-3-pro-preview"]), 90);
        assert_eq!(t(&["llama-3.3-70b", "https://api.groq.com/openai/v1"]), 30);
        assert_eq!(t(&["o3-mini"]), 90);
        assert_eq!(t(&["claude-sonnet-4-5"]), 90);
        assert_eq!(t(&["deepseek-chat"]), 90);
        assert_eq!(t(&["gpt-4.1-mini"]), 75);
    }

    fn expect_err(text: &str) -> String {
        ModelsConfig::from_toml_str(text).unwrap_err().to_string()
    }

    #[test]
    fn clear_errors_for_bad_configs() {
        let e = expect_err("[models.a]\nprovider = \"cohere\"\nmodel = \"x\"\n");
        assert!(
            e.contains("model `a`") && e.contains("cohere") && e.contains("anthropic"),
            "{e}"
        );
        let e =
            expect_err("[models.a]\nprovider = \"openai\"\nmodel = \"x\"\nfallback = \"nope\"\n");
        assert!(e.contains("unknown model `nope`"), "{e}");
        let e = expect_err(
            "[models.a]\nprovider = \"openai\"\nmodel = \"x\"\nfallback = \"b\"\n\
             [models.b]\nprovider = \"openai\"\nmodel = \"y\"\nfallback = \"a\"\n",
        );
        assert!(e.contains("fallback cycle: a -> b -> a"), "{e}");
        let e =
            expect_err("default_model = \"z\"\n[models.a]\nprovider = \"openai\"\nmodel = \"x\"\n");
        assert!(
            e.contains("unknown model `z`") && e.contains("configured: a"),
            "{e}"
        );
        let e = expect_err(
            "[models.a]\nprovider = \"openai\"\nmodel = \"x\"\nbase_url = \"ftp://h\"\n",
        );
        assert!(e.contains("base_url") && e.contains("http"), "{e}");
        let e = expect_err(
            "[models.a]\nprovider = \"openai\"\nmodel = \"x\"\nbase_url = \"https://u:p@h/v1\"\n",
        );
        assert!(e.contains("credentials"), "{e}");
        let e = expect_err(
            "[models.a]\nprovider = \"gemini\"\nmodel = \"x\"\nstructured_output = \"tools\"\n",
        );
        assert!(
            e.contains("structured_output") && e.contains("openai"),
            "{e}"
        );
        let e = expect_err("[models.a]\nprovider = \"openai\"\nmodel = \"x\"\ntimeout = 5\n");
        assert!(e.contains("model `a`") && e.contains("timeout"), "{e}");
        let e = expect_err(
            "[models.a]\nprovider = \"openai\"\nmodel = \"x\"\napi_key_env = \"sk-123\"\n",
        );
        assert!(e.contains("api_key_env"), "{e}");
        let e = expect_err("[models.a]\nmodel = \"x\"\n");
        assert!(e.contains("no `provider`"), "{e}");
        let e = expect_err("[models.a\nprovider=");
        assert!(e.contains("invalid models configuration"), "{e}");
        let e = expect_err("[models.a]\nprovider = \"openai\"\nmodel = \"x\"\ntimeout_s = -1\n");
        assert!(e.contains("timeout_s"), "{e}");
    }

    #[test]
    fn env_overrides_fields_and_can_define_a_model() {
        let mut config = ModelsConfig::from_toml_str(BRIEF_EXAMPLE).unwrap();
        let env: BTreeMap<&str, &str> = BTreeMap::from([
            (
                "BROWSERD_LLM_GPT_4_1_MINI_BASE_URL",
                "http://127.0.0.1:9/v1",
            ),
            ("BROWSERD_LLM_GPT_4_1_MINI_TIMEOUT_S", "12.5"),
            ("BROWSERD_LLM_GPT_4_1_MINI_PRICE_OUTPUT", "2"),
            ("BROWSERD_LLM_DEFAULT_MODEL", "local"),
            ("BROWSERD_LLM_LOCAL_PROVIDER", "openai"),
            ("BROWSERD_LLM_LOCAL_MODEL", "qwen2.5vl:7b"),
            ("BROWSERD_LLM_LOCAL_BASE_URL", "http://localhost:11434/v1"),
            ("BROWSERD_LLM_LOCAL_STRUCTURED_OUTPUT", "tools"),
        ]);
        config
            .apply_env(|k| env.get(k).map(|v| (*v).to_owned()))
            .unwrap();
        let gpt = config.get("gpt-4.1-mini").unwrap();
        assert_eq!(gpt.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(gpt.timeout("x"), Duration::from_secs_f64(12.5));
        assert_eq!(gpt.price.unwrap().output, 2.0);
        assert_eq!(gpt.price.unwrap().input, 0.4);
        assert_eq!(config.default_model.as_deref(), Some("local"));
        let local = config.get("local").unwrap();
        assert_eq!(local.model, "qwen2.5vl:7b");
        assert_eq!(local.structured_output, Some(StructuredOutputMode::Tools));

        let bad = BTreeMap::from([("BROWSERD_LLM_CLAUDE_TIMEOUT_S", "soon")]);
        let err = config
            .apply_env(|k| bad.get(k).map(|v| (*v).to_owned()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("BROWSERD_LLM_CLAUDE_TIMEOUT_S"), "{err}");
    }

    #[test]
    fn env_defines_cloud_models_and_every_kind_parses() {
        let mut config = ModelsConfig::default();
        let env: BTreeMap<&str, &str> = BTreeMap::from([
            ("BROWSERD_LLM_DEFAULT_MODEL", "claude"),
            ("BROWSERD_LLM_CLAUDE_PROVIDER", "bedrock"),
            (
                "BROWSERD_LLM_CLAUDE_MODEL",
                "anthropic.claude-3-5-sonnet-20240620-v1:0",
            ),
            ("BROWSERD_LLM_CLAUDE_REGION", "eu-west-1"),
            ("BROWSERD_LLM_CLAUDE_AWS_PROFILE", "work"),
            ("BROWSERD_LLM_CLAUDE_PRICE_CACHE_CREATION", "3.75"),
            ("BROWSERD_LLM_CLAUDE_FALLBACK", "codex"),
            ("BROWSERD_LLM_CODEX_PROVIDER", "azure"),
            ("BROWSERD_LLM_CODEX_MODEL", "codex-deployment"),
            ("BROWSERD_LLM_CODEX_BASE_URL", "https://r.openai.azure.com"),
            ("BROWSERD_LLM_CODEX_API", "responses"),
            ("BROWSERD_LLM_CODEX_REASONING_EFFORT", "medium"),
            ("BROWSERD_LLM_CODEX_API_VERSION", "2025-04-01-preview"),
            ("BROWSERD_LLM_CODEX_AZURE_AD_TOKEN_ENV", "AZURE_TOKEN"),
            ("BROWSERD_LLM_CODEX_VISION", "false"),
        ]);
        config
            .apply_env(|k| env.get(k).map(|v| (*v).to_owned()))
            .unwrap();
        let claude = config.get("claude").unwrap();
        assert_eq!(claude.provider, ProviderKind::Bedrock);
        assert_eq!(claude.region.as_deref(), Some("eu-west-1"));
        assert_eq!(claude.aws_profile.as_deref(), Some("work"));
        assert_eq!(claude.price.unwrap().cache_creation, Some(3.75));
        let codex = config.get("codex").unwrap();
        assert_eq!(codex.api, Some(OpenAiApi::Responses));
        assert_eq!(codex.reasoning_effort, Some(ReasoningEffort::Medium));
        assert_eq!(codex.azure_ad_token_env.as_deref(), Some("AZURE_TOKEN"));
        assert_eq!(codex.vision, Some(false));

        for (name, kind) in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(name), Some(kind));
            assert_eq!(kind.as_str(), name);
        }
        let bad = BTreeMap::from([("BROWSERD_LLM_CODEX_API", "completions")]);
        let err = config
            .apply_env(|k| bad.get(k).map(|v| (*v).to_owned()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("BROWSERD_LLM_CODEX_API"), "{err}");
        let e =
            expect_err("[models.a]\nprovider = \"bedrock\"\nmodel = \"x\"\napi_key_env = \"K\"\n");
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let e = expect_err("[models.a]\nprovider = \"gemini\"\nmodel = \"x\"\nregion = \"x\"\n");
        assert!(e.contains("region") && e.contains("bedrock"), "{e}");
    }
}
