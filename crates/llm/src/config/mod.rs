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

mod env;
mod kinds;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use env::env_name;
pub use kinds::{OpenAiApi, ProviderKind, ReasoningEffort};
pub(crate) use validate::validate_base_url;

use crate::providers::StructuredOutputMode;
use crate::response::Price;

/// Prefix of every environment variable this module reads.
pub const ENV_PREFIX: &str = "BROWSERD_LLM_";
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
