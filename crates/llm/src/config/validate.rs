//! The rules a configuration must follow (those that do not need the environment).

use std::collections::BTreeMap;

use url::Url;

use super::{ConfigError, ENV_PREFIX, ModelConfig, ModelsConfig, ProviderKind, env_name};

impl ModelsConfig {
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
    reject_fields_of_other_kinds(name, model)?;
    validate_kind_values(name, model)
}

/// A field set for a kind that does not understand it.
fn reject_fields_of_other_kinds(name: &str, model: &ModelConfig) -> Result<(), ConfigError> {
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
    Ok(())
}

/// What each kind needs of its own fields: its credentials one way, well-formed versions,
/// regions and projects, a structured-output mode its host accepts.
fn validate_kind_values(name: &str, model: &ModelConfig) -> Result<(), ConfigError> {
    use ProviderKind as K;
    let kind = model.provider;
    let aws = matches!(kind, K::Bedrock | K::BedrockAnthropic);
    let google = matches!(kind, K::Vertex | K::VertexAnthropic);
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
