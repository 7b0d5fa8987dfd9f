//! Rules for `POST /v1/tasks`. Each failure names the field and the rule it broke.

use std::collections::BTreeMap;

use browserd_store::NewTask;
use browserd_types::dto::{CreateTaskRequest, limits};
use secrecy::ExposeSecret;

use crate::error::ApiError;
use crate::models::ModelCatalog;

/// Validates `request` and fills in defaults.
pub fn validate_create_task(
    request: CreateTaskRequest,
    models: &ModelCatalog,
) -> Result<NewTask, ApiError> {
    let task_chars = request.task.chars().count();
    if request.task.trim().is_empty() {
        return Err(ApiError::validation("task", "task must not be empty"));
    }
    if task_chars > limits::TASK_MAX_CHARS {
        return Err(ApiError::validation(
            "task",
            format!(
                "task must be at most {} characters, got {task_chars}",
                limits::TASK_MAX_CHARS
            ),
        ));
    }

    let start_url = request
        .start_url
        .map(|url| validate_start_url(&url).map(|()| url))
        .transpose()?;

    let max_steps = int_field(
        "max_steps",
        request.max_steps,
        limits::MAX_STEPS_DEFAULT,
        limits::MAX_STEPS_RANGE,
    )?;
    let max_actions_per_step = int_field(
        "max_actions_per_step",
        request.max_actions_per_step,
        limits::MAX_ACTIONS_PER_STEP_DEFAULT,
        limits::MAX_ACTIONS_PER_STEP_RANGE,
    )?;
    let max_failures = int_field(
        "max_failures",
        request.max_failures,
        limits::MAX_FAILURES_DEFAULT,
        limits::MAX_FAILURES_RANGE,
    )?;
    let timeout_s = request
        .timeout_s
        .map(|value| int_field("timeout_s", Some(value), 0, limits::TIMEOUT_S_RANGE))
        .transpose()?;

    let model = match request.model {
        Some(name) => {
            if !models.contains(&name) {
                let known: Vec<&str> = models.names().collect();
                let shown: String = name.chars().take(limits::MODEL_MAX_CHARS).collect();
                return Err(ApiError::validation(
                    "model",
                    if known.is_empty() {
                        format!("unknown model `{shown}`: no models are configured")
                    } else {
                        format!("unknown model `{shown}` (configured: {})", known.join(", "))
                    },
                ));
            }
            Some(name)
        }
        None => models.default_model().map(str::to_owned),
    };

    let allowed_domains = validate_domains("allowed_domains", request.allowed_domains)?;
    let prohibited_domains = validate_domains("prohibited_domains", request.prohibited_domains)?;

    let secrets = request.secrets.unwrap_or_default();
    if secrets.len() > limits::SECRETS_MAX {
        return Err(ApiError::validation(
            "secrets",
            format!("at most {} secrets are allowed", limits::SECRETS_MAX),
        ));
    }
    for (name, value) in &secrets {
        let field = format!("secrets.{name}");
        if name.is_empty()
            || name.chars().count() > limits::SECRET_NAME_MAX_CHARS
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(ApiError::validation(
                "secrets",
                format!(
                    "secret names must be 1–{} characters of A–Z, a–z, 0–9, `_`, `-`, `.`",
                    limits::SECRET_NAME_MAX_CHARS
                ),
            ));
        }
        // Never echo the value.
        let chars = value.expose_secret().chars().count();
        if chars == 0 || chars > limits::SECRET_VALUE_MAX_CHARS {
            return Err(ApiError::validation(
                field,
                format!(
                    "secret values must be 1–{} characters",
                    limits::SECRET_VALUE_MAX_CHARS
                ),
            ));
        }
    }

    if let Some(schema) = &request.output_schema {
        validate_output_schema(schema)?;
    }

    let metadata = request.metadata.unwrap_or_default();
    validate_metadata(&metadata)?;

    Ok(NewTask {
        task: request.task,
        start_url,
        max_steps,
        model,
        allowed_domains,
        prohibited_domains,
        secrets,
        output_schema: request.output_schema,
        use_vision: request.use_vision.unwrap_or(true),
        max_actions_per_step,
        max_failures,
        timeout_s,
        metadata,
    })
}

fn int_field(
    field: &str,
    value: Option<i64>,
    default: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i32, ApiError> {
    let value = value.unwrap_or(default);
    if !range.contains(&value) {
        return Err(ApiError::validation(
            field,
            format!(
                "{field} must be between {} and {}, got {value}",
                range.start(),
                range.end()
            ),
        ));
    }
    // The ranges all fit in i32.
    i32::try_from(value).map_err(|_| ApiError::validation(field, format!("{field} is too large")))
}

fn validate_start_url(raw: &str) -> Result<(), ApiError> {
    if raw.chars().count() > limits::URL_MAX_CHARS {
        return Err(ApiError::validation(
            "start_url",
            format!(
                "start_url must be at most {} characters",
                limits::URL_MAX_CHARS
            ),
        ));
    }
    let url = url::Url::parse(raw).map_err(|err| {
        ApiError::validation("start_url", format!("start_url is not a valid URL: {err}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ApiError::validation(
            "start_url",
            format!(
                "start_url must be an http or https URL, got scheme `{}`",
                url.scheme()
            ),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ApiError::validation(
            "start_url",
            "start_url must have a host",
        ));
    }
    Ok(())
}

/// Domain patterns as browser-use accepts them: `example.com`, `*.example.com`,
/// `https://example.com`, `http*://example.com`, an IP, optionally with a port.
fn validate_domains(field: &str, domains: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let domains = domains.unwrap_or_default();
    if domains.len() > limits::DOMAINS_MAX {
        return Err(ApiError::validation(
            field,
            format!("{field} may hold at most {} entries", limits::DOMAINS_MAX),
        ));
    }
    let mut cleaned = Vec::with_capacity(domains.len());
    for (index, pattern) in domains.into_iter().enumerate() {
        let entry_field = format!("{field}[{index}]");
        let pattern = pattern.trim().to_ascii_lowercase();
        let host = pattern
            .split_once("://")
            .map_or(
                pattern.as_str(),
                |(scheme, host)| {
                    if scheme.is_empty() { "" } else { host }
                },
            );
        let valid = !host.is_empty()
            && host.len() <= limits::DOMAIN_MAX_CHARS
            && host.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '*' | ':' | '[' | ']' | '_')
            })
            && !host.starts_with('.')
            && !host.contains("..");
        if !valid {
            return Err(ApiError::validation(
                entry_field,
                format!(
                    "`{pattern}` is not a domain pattern (expected e.g. `example.com`, `*.example.com` or `https://example.com`)"
                ),
            ));
        }
        cleaned.push(pattern);
    }
    Ok(cleaned)
}

fn validate_output_schema(schema: &serde_json::Value) -> Result<(), ApiError> {
    if !schema.is_object() {
        return Err(ApiError::validation(
            "output_schema",
            "output_schema must be a JSON Schema object",
        ));
    }
    if let Err(err) = jsonschema::meta::validate(schema) {
        return Err(ApiError::validation(
            "output_schema",
            format!("output_schema is not a valid JSON Schema: {err}"),
        ));
    }
    // Compiling catches what the meta-schema cannot (e.g. unresolvable `$ref`s; remote
    // references are never fetched).
    if let Err(err) = jsonschema::validator_for(schema) {
        return Err(ApiError::validation(
            "output_schema",
            format!("output_schema cannot be used: {err}"),
        ));
    }
    Ok(())
}

fn validate_metadata(metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if metadata.len() > limits::METADATA_MAX_PAIRS {
        return Err(ApiError::validation(
            "metadata",
            format!(
                "metadata may hold at most {} pairs, got {}",
                limits::METADATA_MAX_PAIRS,
                metadata.len()
            ),
        ));
    }
    for (key, value) in metadata {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > limits::METADATA_KEY_MAX_CHARS {
            return Err(ApiError::validation(
                "metadata",
                format!(
                    "metadata keys must be 1–{} characters",
                    limits::METADATA_KEY_MAX_CHARS
                ),
            ));
        }
        if value.chars().count() > limits::METADATA_VALUE_MAX_CHARS {
            return Err(ApiError::validation(
                format!("metadata.{key}"),
                format!(
                    "metadata values must be at most {} characters",
                    limits::METADATA_VALUE_MAX_CHARS
                ),
            ));
        }
    }
    Ok(())
}
