//! `BROWSERD_LLM_*` environment overrides of the configured models.

use super::{
    ConfigError, ENV_PREFIX, ModelConfig, ModelsConfig, OpenAiApi, ProviderKind, ReasoningEffort,
};
use crate::providers::StructuredOutputMode;
use crate::response::Price;

impl ModelsConfig {
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
    apply_price_env(model, &get)
}

/// The `PRICE_*` overrides of `model`'s price (a price is created when one is set).
fn apply_price_env(
    model: &mut ModelConfig,
    get: &impl Fn(&str) -> Option<(String, String)>,
) -> Result<(), ConfigError> {
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
