//! Builds layered models from a [`ModelsConfig`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secrecy::SecretString;

use crate::ChatModel;
use crate::aws::{CredentialSource, SigV4Signer};
use crate::config::{ConfigError, ModelConfig, ModelsConfig, ProviderKind, validate_base_url};
use crate::google::{ServiceAccountTokens, VertexTarget, vertex_base_url};
use crate::http::{ProviderSettings, http_client};
use crate::layers::{
    FallbackModel, InstrumentedModel, RetryModel, RetryPolicy, TimeoutModel, ValidatingModel,
};
use crate::providers::{
    AnthropicHost, AnthropicModel, BedrockModel, GeminiModel, OpenAiHost, OpenAiModel,
    OpenAiOptions, StructuredOutputMode, bedrock_base_url,
};

type KeyLookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The configured models, ready to be instantiated per task.
///
/// `build` returns a fresh stack each time, so the fallback switch is per task.
pub struct ModelRegistry {
    config: ModelsConfig,
    client: reqwest::Client,
    key_lookup: Arc<KeyLookup>,
    base_delay: Duration,
    max_delay: Duration,
    /// Service-account token sources by key file, shared by every task so a token is fetched
    /// once per hour, not once per task.
    google_tokens: Mutex<BTreeMap<String, Arc<ServiceAccountTokens>>>,
    /// Container-role credential sources by endpoint, shared likewise.
    aws_container_sources: Mutex<BTreeMap<String, Arc<CredentialSource>>>,
}

impl fmt::Debug for ModelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRegistry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ModelRegistry {
    /// A registry reading API keys from the process environment.
    pub fn new(config: ModelsConfig) -> Result<Self, ConfigError> {
        Self::with_key_lookup(config, |name| std::env::var(name).ok())
    }

    /// A registry reading API keys through `lookup` (given the `api_key_env` name).
    pub fn with_key_lookup(
        config: ModelsConfig,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let client = http_client().map_err(|e| ConfigError::Http {
            message: e.to_string(),
        })?;
        let defaults = RetryPolicy::with_max_retries(0);
        Ok(Self {
            config,
            client,
            key_lookup: Arc::new(lookup),
            base_delay: defaults.base_delay,
            max_delay: defaults.max_delay,
            google_tokens: Mutex::new(BTreeMap::new()),
            aws_container_sources: Mutex::new(BTreeMap::new()),
        })
    }

    /// Overrides the retry backoff (first delay and cap); `Retry-After` still wins.
    #[must_use]
    pub fn with_backoff(mut self, base_delay: Duration, max_delay: Duration) -> Self {
        self.base_delay = base_delay;
        self.max_delay = max_delay;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ModelsConfig {
        &self.config
    }

    /// The configured default model name.
    pub fn default_model(&self) -> Option<&str> {
        self.config.default_model.as_deref()
    }

    /// Checks that every model's credentials are there — `api_key_env` / `azure_ad_token_env`
    /// set, AWS credentials and region found, the Vertex service-account key readable — by
    /// building each model once (call at startup to fail early).
    pub fn check_api_keys(&self) -> Result<(), ConfigError> {
        for name in self.config.models.keys() {
            self.build_single(name)?;
        }
        Ok(())
    }

    /// The model called `name`, with retry, timeout, fallback (if configured) and validation
    /// layers. Reads the API keys of the whole fallback chain now.
    pub fn build(&self, name: &str) -> Result<Arc<dyn ChatModel>, ConfigError> {
        let chain = self.config.fallback_chain(name)?;
        let mut model: Option<Arc<dyn ChatModel>> = None;
        for link in chain.iter().rev() {
            let own = self.build_single(link)?;
            model = Some(match model {
                None => own,
                Some(fallback) => Arc::new(FallbackModel::new(own, fallback)),
            });
        }
        let model = model.ok_or_else(|| ConfigError::UnknownModel {
            name: name.to_owned(),
            known: self.config.known_names(),
        })?;
        Ok(Arc::new(InstrumentedModel::new(Arc::new(
            ValidatingModel::new(model),
        ))))
    }

    /// [`build`](Self::build) for `name`; when `name` is `None`, for `default_model`, or for the
    /// only configured model when there is exactly one.
    pub fn build_or_default(&self, name: Option<&str>) -> Result<Arc<dyn ChatModel>, ConfigError> {
        let only = (self.config.models.len() == 1)
            .then(|| self.config.models.keys().next().map(String::as_str))
            .flatten();
        match name.or(self.default_model()).or(only) {
            Some(name) => self.build(name),
            None => Err(ConfigError::NoDefaultModel),
        }
    }

    fn api_key(&self, name: &str, env: Option<&str>) -> Result<Option<SecretString>, ConfigError> {
        let Some(env) = env else { return Ok(None) };
        match (self.key_lookup)(env) {
            Some(key) if !key.trim().is_empty() => {
                Ok(Some(SecretString::from(key.trim().to_owned())))
            }
            _ => Err(ConfigError::MissingApiKey {
                model: name.to_owned(),
                env_var: env.to_owned(),
            }),
        }
    }

    /// A non-empty environment value through the registry's lookup.
    fn env(&self, name: &str) -> Option<String> {
        (self.key_lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// One model with its own retry and timeout layers, no fallback.
    fn build_single(&self, name: &str) -> Result<Arc<dyn ChatModel>, ConfigError> {
        let config = self.config.get(name)?;
        let invalid = |field: &'static str, message: String| ConfigError::InvalidField {
            model: name.to_owned(),
            field,
            message,
        };
        let kind = config.provider;
        let region = self.region(name, config)?;
        let base_url_text = match (config.base_url_or_default(), region.as_deref()) {
            (Some(url), _) => url.to_owned(),
            (None, Some(region))
                if matches!(kind, ProviderKind::Vertex | ProviderKind::VertexAnthropic) =>
            {
                vertex_base_url(region)
            }
            (None, Some(region)) => bedrock_base_url(region),
            (None, None) => {
                return Err(invalid("base_url", "is required".to_owned()));
            }
        };
        let base_url =
            validate_base_url(&base_url_text).map_err(|message| invalid("base_url", message))?;
        let timeout = config.timeout(name);
        let key_env = match kind {
            ProviderKind::Azure if config.azure_ad_token_env.is_some() => {
                config.azure_ad_token_env.as_deref()
            }
            _ => config.api_key_env.as_deref(),
        };
        let settings = ProviderSettings {
            name: name.to_owned(),
            model_id: config.model.clone(),
            base_url,
            api_key: self.api_key(name, key_env)?,
            request_timeout: timeout,
            price: config.price,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            client: self.client.clone(),
        };
        let provider = self.provider(name, config, settings, region, timeout)?;
        let policy = RetryPolicy {
            max_retries: config.max_retries_or_default(),
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            ..RetryPolicy::with_max_retries(0)
        };
        let retrying = Arc::new(RetryModel::new(provider, policy));
        Ok(Arc::new(TimeoutModel::new(retrying, timeout)))
    }

    /// The region of a Bedrock model (its setting, else `AWS_REGION` or
    /// `AWS_DEFAULT_REGION`: one is required) or a Vertex AI one (its setting, else
    /// `GOOGLE_CLOUD_LOCATION`, else `global`); none for the other kinds.
    fn region(&self, name: &str, config: &ModelConfig) -> Result<Option<String>, ConfigError> {
        let invalid = |field: &'static str, message: String| ConfigError::InvalidField {
            model: name.to_owned(),
            field,
            message,
        };
        let kind = config.provider;
        Ok(match kind {
            ProviderKind::Bedrock | ProviderKind::BedrockAnthropic => Some(
                config
                    .region
                    .clone()
                    .or_else(|| self.env("AWS_REGION"))
                    .or_else(|| self.env("AWS_DEFAULT_REGION"))
                    .ok_or_else(|| {
                        invalid(
                            "region",
                            "is not set, and neither is AWS_REGION or AWS_DEFAULT_REGION"
                                .to_owned(),
                        )
                    })?,
            ),
            ProviderKind::Vertex | ProviderKind::VertexAnthropic => Some(
                config
                    .region
                    .clone()
                    .or_else(|| self.env("GOOGLE_CLOUD_LOCATION"))
                    .unwrap_or_else(|| "global".to_owned()),
            ),
            _ => None,
        })
    }

    /// The provider client of `config`'s kind over `settings` (no retry or timeout layers).
    fn provider(
        &self,
        name: &str,
        config: &ModelConfig,
        settings: ProviderSettings,
        region: Option<String>,
        timeout: Duration,
    ) -> Result<Arc<dyn ChatModel>, ConfigError> {
        let invalid = |field: &'static str, message: String| ConfigError::InvalidField {
            model: name.to_owned(),
            field,
            message,
        };
        let kind = config.provider;
        Ok(match kind {
            ProviderKind::Anthropic => Arc::new(AnthropicModel::new(settings)),
            ProviderKind::Gemini => Arc::new(GeminiModel::new(settings)),
            ProviderKind::Azure => {
                let options = OpenAiOptions {
                    mode: config
                        .structured_output
                        .unwrap_or(StructuredOutputMode::JsonSchema),
                    api: config.api.unwrap_or_default(),
                    host: OpenAiHost::Azure {
                        api_version: config.api_version.clone(),
                    },
                    vision: config.vision.unwrap_or(true),
                    reasoning_effort: config.reasoning_effort,
                    key_header: if config.azure_ad_token_env.is_some() {
                        ("authorization", "Bearer ")
                    } else {
                        ("api-key", "")
                    },
                    ..OpenAiOptions::new(StructuredOutputMode::JsonSchema)
                };
                Arc::new(OpenAiModel::with_options(settings, options))
            }
            ProviderKind::Bedrock | ProviderKind::BedrockAnthropic => {
                let signer = Arc::new(SigV4Signer {
                    region: region.unwrap_or_default(),
                    service: "bedrock",
                    source: self
                        .aws_source(config)
                        .map_err(|m| invalid("credentials", m))?,
                    model: name.to_owned(),
                    timeout,
                });
                if kind == ProviderKind::Bedrock {
                    Arc::new(BedrockModel::new(settings, signer))
                } else {
                    Arc::new(AnthropicModel::on_host(
                        settings,
                        AnthropicHost::Bedrock(signer),
                    ))
                }
            }
            ProviderKind::Vertex | ProviderKind::VertexAnthropic => {
                let target = Arc::new(self.vertex_target(
                    name,
                    config,
                    region.as_deref().unwrap_or("global"),
                )?);
                if kind == ProviderKind::Vertex {
                    Arc::new(GeminiModel::on_vertex(settings, target))
                } else {
                    Arc::new(AnthropicModel::on_host(
                        settings,
                        AnthropicHost::Vertex(target),
                    ))
                }
            }
            preset_kind => {
                let preset = preset_kind.openai_preset().ok_or_else(|| {
                    invalid("provider", "has no OpenAI-compatible preset".to_owned())
                })?;
                let options = OpenAiOptions {
                    mode: config
                        .structured_output
                        .unwrap_or_else(|| preset.default_mode_for(&config.model)),
                    api: config.api.unwrap_or_default(),
                    host: OpenAiHost::Standard,
                    strict: preset.strict,
                    vision: config.vision.unwrap_or(preset.vision),
                    reasoning_effort: config.reasoning_effort,
                    unsupported_schema_keywords: preset.unsupported_schema_keywords,
                    key_header: ("authorization", "Bearer "),
                };
                Arc::new(OpenAiModel::with_options(settings, options))
            }
        })
    }

    /// AWS credentials for a Bedrock model (container sources shared across builds).
    fn aws_source(&self, config: &ModelConfig) -> Result<Arc<CredentialSource>, String> {
        let lookup = |name: &str| self.env(name);
        let source =
            CredentialSource::resolve(&lookup, config.aws_profile.as_deref(), &self.client)?;
        let CredentialSource::Container { url, .. } = &source else {
            return Ok(Arc::new(source));
        };
        let key = url.to_string();
        let mut shared = self
            .aws_container_sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(shared
            .entry(key)
            .or_insert_with(|| Arc::new(source))
            .clone())
    }

    /// The service account, project and model path of a Vertex model.
    fn vertex_target(
        &self,
        name: &str,
        config: &ModelConfig,
        region: &str,
    ) -> Result<VertexTarget, ConfigError> {
        let invalid = |field: &'static str, message: String| ConfigError::InvalidField {
            model: name.to_owned(),
            field,
            message,
        };
        let path = config
            .credentials_file
            .clone()
            .or_else(|| self.env("GOOGLE_APPLICATION_CREDENTIALS"))
            .ok_or_else(|| {
                invalid(
                    "credentials_file",
                    "is not set, and neither is GOOGLE_APPLICATION_CREDENTIALS (the path of a \
                     service-account JSON key)"
                        .to_owned(),
                )
            })?;
        let tokens = {
            let mut shared = self
                .google_tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match shared.get(&path) {
                Some(tokens) => tokens.clone(),
                None => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        invalid("credentials_file", format!("cannot read `{path}`: {e}"))
                    })?;
                    let tokens = Arc::new(
                        ServiceAccountTokens::from_json(&text, self.client.clone())
                            .map_err(|m| invalid("credentials_file", format!("`{path}` {m}")))?,
                    );
                    shared.insert(path.clone(), tokens.clone());
                    tokens
                }
            }
        };
        let project = config
            .project
            .clone()
            .or_else(|| self.env("GOOGLE_CLOUD_PROJECT"))
            .or_else(|| tokens.project_id.clone())
            .ok_or_else(|| {
                invalid(
                    "project",
                    "is not set, nor GOOGLE_CLOUD_PROJECT, nor the key's project_id".to_owned(),
                )
            })?;
        let publisher = if config.provider == ProviderKind::VertexAnthropic {
            "anthropic"
        } else {
            "google"
        };
        let model = config.model.trim_start_matches("models/");
        Ok(VertexTarget {
            tokens,
            model_path: format!(
                "projects/{project}/locations/{region}/publishers/{publisher}/models/{model}"
            ),
        })
    }
}
