//! Builds layered models from a [`ModelsConfig`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;

use crate::ChatModel;
use crate::config::{ConfigError, ModelsConfig, ProviderKind, validate_base_url};
use crate::http::{ProviderSettings, http_client};
use crate::layers::{
    FallbackModel, InstrumentedModel, RetryModel, RetryPolicy, TimeoutModel, ValidatingModel,
};
use crate::providers::{AnthropicModel, GeminiModel, OpenAiModel};

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

    /// Checks that every model's `api_key_env` is set (call at startup to fail early).
    pub fn check_api_keys(&self) -> Result<(), ConfigError> {
        for (name, model) in &self.config.models {
            self.api_key(name, model.api_key_env.as_deref())?;
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

    /// One model with its own retry and timeout layers, no fallback.
    fn build_single(&self, name: &str) -> Result<Arc<dyn ChatModel>, ConfigError> {
        let config = self.config.get(name)?;
        let base_url = validate_base_url(config.base_url_or_default()).map_err(|message| {
            ConfigError::InvalidField {
                model: name.to_owned(),
                field: "base_url",
                message,
            }
        })?;
        let timeout = config.timeout(name);
        let settings = ProviderSettings {
            name: name.to_owned(),
            model_id: config.model.clone(),
            base_url,
            api_key: self.api_key(name, config.api_key_env.as_deref())?,
            request_timeout: timeout,
            price: config.price,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            client: self.client.clone(),
        };
        let provider: Arc<dyn ChatModel> = match config.provider {
            ProviderKind::OpenAi => Arc::new(OpenAiModel::new(
                settings,
                config.structured_output.unwrap_or_default(),
            )),
            ProviderKind::Anthropic => Arc::new(AnthropicModel::new(settings)),
            ProviderKind::Gemini => Arc::new(GeminiModel::new(settings)),
        };
        let policy = RetryPolicy {
            max_retries: config.max_retries_or_default(),
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            ..RetryPolicy::with_max_retries(0)
        };
        let retrying = Arc::new(RetryModel::new(provider, policy));
        Ok(Arc::new(TimeoutModel::new(retrying, timeout)))
    }
}
