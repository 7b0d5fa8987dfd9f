//! Rules for a new task (`POST /v1/tasks`, v2's and MCP's creation, `browserd run`). Each failure names the field and the rule it broke.

use std::collections::BTreeMap;

use browserd_domains::{DomainList, DomainPattern, DomainRules, Forbidden, UrlTarget};
use browserd_store::{NewReplay, NewTask};
use browserd_types::dto::{CreateTaskRequest, ReplaySettings, limits};
use browserd_types::{TaskId, TaskOptions, TaskSecret, TaskSecrets};
use secrecy::ExposeSecret;

use crate::error::TaskError;
use crate::models::ModelCatalog;

/// Validates `request` and fills in defaults. The checks run in a fixed order (the first
/// failure is the one reported): NUL characters, the replay, the task text, the start URL, the
/// run's limits, the model, the domain lists, the secrets, the output schema, the metadata, the
/// budget, the browser settings and `ask_human`.
pub fn validate_create_task(
    mut request: CreateTaskRequest,
    models: &ModelCatalog,
) -> Result<NewTask, TaskError> {
    refuse_nul_characters(&request)?;
    let replay = validate_replay_request(&request)?;
    let task = validate_task_text(request.task.take())?;
    let start_url = request
        .start_url
        .take()
        .map(|raw| validate_start_url(&raw).map(|url| (raw, url)))
        .transpose()?;
    let run = RunLimits::check(&request)?;
    let model = validate_model(request.model.take(), replay.is_some(), models)?;
    let (allowed_domains, allowed) =
        validate_domains("allowed_domains", request.allowed_domains.take())?;
    let (prohibited_domains, prohibited) =
        validate_domains("prohibited_domains", request.prohibited_domains.take())?;
    let rules = DomainRules::new(allowed, prohibited);
    let start_url = start_url
        .map(|(raw, url)| check_start_url_against_lists(&url, &rules).map(|()| raw))
        .transpose()?;
    let secrets = validate_secrets(
        request.secrets.take().unwrap_or_default(),
        &allowed_domains,
        request.allow_secrets_on_any_domain.unwrap_or(false),
        &SecretFixNames::V1,
    )?;
    if let Some(schema) = &request.output_schema {
        validate_output_schema(schema)?;
    }
    let metadata = request.metadata.take().unwrap_or_default();
    validate_metadata(&metadata)?;
    let max_tokens = validate_max_tokens(request.max_tokens)?;
    let max_cost_usd = validate_max_cost_usd(request.max_cost_usd)?;
    let settle_timeout_ms = validate_browser_settings(&request)?;
    let ask_human_timeout_s = validate_ask_human(&request, replay.is_some())?;
    let options = TaskOptions {
        start_url,
        max_steps: run.max_steps,
        model,
        allowed_domains,
        prohibited_domains,
        output_schema: request.output_schema,
        use_vision: replay.is_none() && request.use_vision.unwrap_or(limits::USE_VISION_DEFAULT),
        max_actions_per_step: run.max_actions_per_step,
        max_failures: run.max_failures,
        timeout_s: run.timeout_s,
        metadata,
        max_tokens,
        max_cost_usd,
        viewport: request.viewport,
        settle_timeout_ms,
        proxy: request.proxy,
        highlight_elements: request.highlight_elements.unwrap_or(false),
        profile_id: request.profile_id,
        ask_human: replay.is_none() && request.ask_human.unwrap_or(true),
        ask_human_timeout_s,
    };
    Ok(NewTask {
        task,
        options,
        secrets,
        trace_context: None,
        replay,
    })
}

/// The replay of `replay_of`, checked; replay options without it are refused.
fn validate_replay_request(request: &CreateTaskRequest) -> Result<Option<NewReplay>, TaskError> {
    match request.replay_of {
        Some(source) => Ok(Some(validate_replay(request, source)?)),
        None if request.replay.is_some() => Err(TaskError::validation(
            "replay",
            "replay options need replay_of (the id of the task to replay)",
        )),
        None => Ok(None),
    }
}

/// The task's text: required, not blank, at most [`limits::TASK_MAX_CHARS`].
fn validate_task_text(task: Option<String>) -> Result<String, TaskError> {
    let Some(task) = task else {
        return Err(TaskError::validation(
            "task",
            "task is required (it may only be omitted with replay_of)",
        ));
    };
    let task_chars = task.chars().count();
    if task.trim().is_empty() {
        return Err(TaskError::validation("task", "task must not be empty"));
    }
    if task_chars > limits::TASK_MAX_CHARS {
        return Err(TaskError::validation(
            "task",
            format!(
                "task must be at most {} characters, got {task_chars}",
                limits::TASK_MAX_CHARS
            ),
        ));
    }
    Ok(task)
}

/// How long the agent may run: steps, actions per step, failures in a row, seconds.
struct RunLimits {
    max_steps: i32,
    max_actions_per_step: i32,
    max_failures: i32,
    timeout_s: Option<i32>,
}

impl RunLimits {
    fn check(request: &CreateTaskRequest) -> Result<Self, TaskError> {
        Ok(RunLimits {
            max_steps: int_field(
                "max_steps",
                request.max_steps,
                limits::MAX_STEPS_DEFAULT,
                limits::MAX_STEPS_RANGE,
            )?,
            max_actions_per_step: int_field(
                "max_actions_per_step",
                request.max_actions_per_step,
                limits::MAX_ACTIONS_PER_STEP_DEFAULT,
                limits::MAX_ACTIONS_PER_STEP_RANGE,
            )?,
            max_failures: int_field(
                "max_failures",
                request.max_failures,
                limits::MAX_FAILURES_DEFAULT,
                limits::MAX_FAILURES_RANGE,
            )?,
            timeout_s: optional_int_field("timeout_s", request.timeout_s, limits::TIMEOUT_S_RANGE)?,
        })
    }
}

/// The model: one of the catalog's; the catalog's default when not given (none for a replay,
/// which makes no model call — `validate_replay` refused a model).
fn validate_model(
    model: Option<String>,
    replaying: bool,
    models: &ModelCatalog,
) -> Result<Option<String>, TaskError> {
    match model {
        None if replaying => Ok(None),
        Some(name) => {
            if !models.contains(&name) {
                let known: Vec<&str> = models.names().collect();
                let shown: String = name.chars().take(limits::MODEL_MAX_CHARS).collect();
                return Err(TaskError::validation(
                    "model",
                    if known.is_empty() {
                        format!("unknown model `{shown}`: no models are configured")
                    } else {
                        format!("unknown model `{shown}` (configured: {})", known.join(", "))
                    },
                ));
            }
            Ok(Some(name))
        }
        None => Ok(models.default_model().map(str::to_owned)),
    }
}

fn validate_max_tokens(max_tokens: Option<i64>) -> Result<Option<i64>, TaskError> {
    max_tokens
        .map(|value| {
            if limits::MAX_TOKENS_RANGE.contains(&value) {
                Ok(value)
            } else {
                Err(TaskError::validation(
                    "max_tokens",
                    format!(
                        "max_tokens must be between {} and {}, got {value}",
                        limits::MAX_TOKENS_RANGE.start(),
                        limits::MAX_TOKENS_RANGE.end()
                    ),
                ))
            }
        })
        .transpose()
}

fn validate_max_cost_usd(max_cost_usd: Option<f64>) -> Result<Option<f64>, TaskError> {
    max_cost_usd
        .map(|value| {
            if value.is_finite() && value > 0.0 && value <= limits::MAX_COST_USD_MAX {
                Ok(value)
            } else {
                Err(TaskError::validation(
                    "max_cost_usd",
                    format!(
                        "max_cost_usd must be above 0 and at most {}, got {value}",
                        limits::MAX_COST_USD_MAX
                    ),
                ))
            }
        })
        .transpose()
}

/// The viewport, the settle timeout (returned) and the proxy's name.
fn validate_browser_settings(request: &CreateTaskRequest) -> Result<Option<i32>, TaskError> {
    if let Some(viewport) = &request.viewport {
        viewport
            .check()
            .map_err(|(field, message)| TaskError::validation(field, message))?;
    }
    let settle_timeout_ms = optional_int_field(
        "settle_timeout_ms",
        request.settle_timeout_ms,
        limits::SETTLE_TIMEOUT_MS_RANGE,
    )?;
    if let Some(name) = &request.proxy {
        let chars = name.chars().count();
        if chars == 0 || chars > limits::PROXY_NAME_MAX_CHARS {
            return Err(TaskError::validation(
                "proxy",
                format!(
                    "proxy must be the name of a configured proxy, 1–{} characters",
                    limits::PROXY_NAME_MAX_CHARS
                ),
            ));
        }
    }
    Ok(settle_timeout_ms)
}

/// `ask_human_timeout_s` (returned), and neither it nor `ask_human` in a replay.
fn validate_ask_human(
    request: &CreateTaskRequest,
    replaying: bool,
) -> Result<Option<i32>, TaskError> {
    let ask_human_timeout_s = optional_int_field(
        "ask_human_timeout_s",
        request.ask_human_timeout_s,
        limits::ASK_HUMAN_TIMEOUT_S_RANGE,
    )?;
    if replaying && (request.ask_human.is_some() || ask_human_timeout_s.is_some()) {
        return Err(TaskError::validation(
            if request.ask_human.is_some() {
                "ask_human"
            } else {
                "ask_human_timeout_s"
            },
            "a replay asks no questions: ask_human and ask_human_timeout_s need the agent",
        ));
    }
    Ok(ask_human_timeout_s)
}

/// The fields a replay does not use are refused (they would be silently ignored), and its
/// options are checked against the CLI's ranges.
fn validate_replay(request: &CreateTaskRequest, source: TaskId) -> Result<NewReplay, TaskError> {
    let agent_only = [
        ("model", request.model.is_some(), "no model is called"),
        (
            "start_url",
            request.start_url.is_some(),
            "the recorded navigation is replayed",
        ),
        (
            "output_schema",
            request.output_schema.is_some(),
            "the output is the recorded result",
        ),
        (
            "use_vision",
            request.use_vision.is_some(),
            "no model is called",
        ),
        (
            "max_steps",
            request.max_steps.is_some(),
            "the recorded steps are replayed",
        ),
        (
            "max_actions_per_step",
            request.max_actions_per_step.is_some(),
            "the recorded actions are replayed",
        ),
        (
            "max_failures",
            request.max_failures.is_some(),
            "see replay.skip_failures",
        ),
        (
            "max_tokens",
            request.max_tokens.is_some(),
            "no model is called",
        ),
        (
            "max_cost_usd",
            request.max_cost_usd.is_some(),
            "no model is called",
        ),
    ];
    if let Some((field, _, why)) = agent_only.iter().find(|(_, given, _)| *given) {
        return Err(TaskError::validation(
            *field,
            format!("{field} does not apply to a replay (replay_of is given): {why}"),
        ));
    }
    let options = request.replay.unwrap_or_default();
    let max_retries = int_field(
        "replay.max_retries",
        options.max_retries,
        limits::REPLAY_MAX_RETRIES_DEFAULT,
        limits::REPLAY_MAX_RETRIES_RANGE,
    )?;
    let retry_delay_ms = int_field(
        "replay.retry_delay_ms",
        options.retry_delay_ms,
        limits::REPLAY_RETRY_DELAY_MS_DEFAULT,
        limits::REPLAY_RETRY_DELAY_MS_RANGE,
    )?;
    Ok(NewReplay {
        source,
        options: ReplaySettings {
            skip_failures: options.skip_failures.unwrap_or(false),
            // Both ranges start at 0.
            max_retries: u32::try_from(max_retries).unwrap_or(0),
            retry_delay_ms: u64::try_from(retry_delay_ms).unwrap_or(0),
        },
    })
}

/// The `limit` of a page of steps or history items: 1–500, default 100.
pub fn step_page_limit(limit: Option<i64>) -> Result<i64, TaskError> {
    page_limit(limit, limits::STEP_PAGE_DEFAULT, limits::STEP_PAGE_MAX)
}

/// The page size of a task list: 1–100, 20 when not given (`GET /v1/tasks?limit=`, the MCP
/// `list_tasks` tool).
pub fn list_limit(limit: Option<i64>) -> Result<i64, TaskError> {
    page_limit(limit, limits::LIST_LIMIT_DEFAULT, limits::LIST_LIMIT_MAX)
}

/// A page's `limit`: `default` when not given, else 1 to `max`.
fn page_limit(limit: Option<i64>, default: i64, max: i64) -> Result<i64, TaskError> {
    let Some(value) = limit else {
        return Ok(default);
    };
    if !(1..=max).contains(&value) {
        return Err(TaskError::validation(
            "limit",
            format!("limit must be between 1 and {max}, got {value}"),
        ));
    }
    Ok(value)
}

fn int_field(
    field: &str,
    value: Option<i64>,
    default: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i32, TaskError> {
    let value = value.unwrap_or(default);
    if !range.contains(&value) {
        return Err(TaskError::validation(
            field,
            format!(
                "{field} must be between {} and {}, got {value}",
                range.start(),
                range.end()
            ),
        ));
    }
    // The ranges all fit in i32.
    i32::try_from(value).map_err(|_| TaskError::validation(field, format!("{field} is too large")))
}

/// An optional integer within `range`.
fn optional_int_field(
    field: &str,
    value: Option<i64>,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i32>, TaskError> {
    value
        .map(|value| int_field(field, Some(value), value, range))
        .transpose()
}

fn validate_start_url(raw: &str) -> Result<url::Url, TaskError> {
    if raw.chars().count() > limits::URL_MAX_CHARS {
        return Err(TaskError::validation(
            "start_url",
            format!(
                "start_url must be at most {} characters",
                limits::URL_MAX_CHARS
            ),
        ));
    }
    let url = url::Url::parse(raw).map_err(|err| {
        TaskError::validation("start_url", format!("start_url is not a valid URL: {err}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TaskError::validation(
            "start_url",
            format!(
                "start_url must be an http or https URL, got scheme `{}`",
                url.scheme()
            ),
        ));
    }
    if UrlTarget::new(&url).is_none() {
        return Err(TaskError::validation(
            "start_url",
            "start_url must have a host",
        ));
    }
    Ok(url)
}

/// A start URL the task's own domain lists forbid would only fail the run at its first step.
fn check_start_url_against_lists(url: &url::Url, rules: &DomainRules) -> Result<(), TaskError> {
    let Some(target) = UrlTarget::new(url) else {
        return Ok(());
    };
    match rules.check(&target) {
        Ok(()) => Ok(()),
        Err(Forbidden::NotInAllowedDomains) => Err(TaskError::validation(
            "start_url",
            format!(
                "start_url is forbidden by allowed_domains: no pattern in it matches (host `{}`)",
                target.host()
            ),
        )),
        Err(Forbidden::ProhibitedDomain { pattern }) => Err(TaskError::validation(
            "start_url",
            format!(
                "start_url is forbidden by prohibited_domains: it matches the pattern `{pattern}`"
            ),
        )),
    }
}

/// How a front end spells the two ways to accept flat secrets, for the refusal's message.
pub struct SecretFixNames {
    /// The task's list of allowed domains.
    pub allowed_domains: &'static str,
    /// The explicit opt-in to secrets usable on any domain.
    pub opt_in: &'static str,
}

impl SecretFixNames {
    /// `POST /v1/tasks` (and MCP, which takes its field names).
    pub const V1: Self = Self {
        allowed_domains: "allowed_domains",
        opt_in: "allow_secrets_on_any_domain: true",
    };
    /// `POST /api/v2/tasks`.
    pub const V2: Self = Self {
        allowed_domains: "allowedDomains",
        opt_in: "allowSecretsOnAnyDomain: true",
    };
    /// `browserd run` / `browserd replay`.
    pub const CLI: Self = Self {
        allowed_domains: "--allowed-domain",
        opt_in: "--allow-secrets-on-any-domain",
    };
}

/// The refusal of flat (unbound) secrets in a task without allowed domains and without the
/// opt-in, if that is the case: it names the secrets (never their values) and both fixes.
pub fn unbound_secrets_refusal(
    secrets: &TaskSecrets,
    has_allowed_domains: bool,
    opt_in: bool,
    names: &SecretFixNames,
) -> Option<String> {
    let unbound = secrets.unbound_names();
    if unbound.is_empty() || has_allowed_domains || opt_in {
        return None;
    }
    Some(format!(
        "secrets {} are bound to no domain, so a page could lead the agent to use them on any \
         site: bind them to the domains they are for, e.g. {{\"https://*.bank.example\": \
         {{\"{}\": \"…\"}}}} (the patterns of {}), or set {} (flat secrets are then bound to \
         those domains); {} accepts them on any domain",
        unbound
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", "),
        unbound[0],
        names.allowed_domains,
        names.allowed_domains,
        names.opt_in,
    ))
}

/// Checks a task's secrets (names, values, domain patterns, the flat-secret rule) and binds the
/// flat ones to `allowed_domains`. Accepted flat secrets without allowed domains (the opt-in)
/// are logged by name.
fn validate_secrets(
    secrets: TaskSecrets,
    allowed_domains: &[String],
    opt_in: bool,
    names: &SecretFixNames,
) -> Result<TaskSecrets, TaskError> {
    if secrets.count() > limits::SECRETS_MAX {
        return Err(TaskError::validation(
            "secrets",
            format!("at most {} secrets are allowed", limits::SECRETS_MAX),
        ));
    }
    for (key, entry) in &secrets.0 {
        if let TaskSecret::Bound(map) = entry {
            if let Err(err) = DomainPattern::parse(key) {
                return Err(TaskError::validation(
                    "secrets",
                    format!("secrets: a key holding an object must be a domain pattern: {err}"),
                ));
            }
            if map.is_empty() {
                return Err(TaskError::validation(
                    "secrets",
                    format!("secrets: `{key}` binds no secret to its domains"),
                ));
            }
        }
    }
    for (pattern, name, value) in secrets.entries() {
        let field = match pattern {
            None => format!("secrets.{name}"),
            Some(_) => "secrets".to_owned(),
        };
        if name.is_empty()
            || name.chars().count() > limits::SECRET_NAME_MAX_CHARS
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(TaskError::validation(
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
            return Err(TaskError::validation(
                field,
                format!(
                    "secret values must be 1–{} characters",
                    limits::SECRET_VALUE_MAX_CHARS
                ),
            ));
        }
    }
    if let Some(message) =
        unbound_secrets_refusal(&secrets, !allowed_domains.is_empty(), opt_in, names)
    {
        return Err(TaskError::validation("secrets", message));
    }
    if allowed_domains.is_empty() && !secrets.unbound_names().is_empty() {
        tracing::warn!(
            secret_names = ?secrets.unbound_names(),
            "task secrets accepted bound to no domain (allow_secrets_on_any_domain): the agent \
             may use them on any site"
        );
    }
    Ok(secrets.bind_unbound_to(allowed_domains))
}

/// Domain patterns, parsed by `browserd_domains` — the parser the egress policy uses, so a list
/// accepted here is a list the task's browser accepts. Returns the patterns as stored (trimmed,
/// lowercase) and the parsed list.
fn validate_domains(
    field: &str,
    domains: Option<Vec<String>>,
) -> Result<(Vec<String>, DomainList), TaskError> {
    let domains = domains.unwrap_or_default();
    if domains.len() > limits::DOMAINS_MAX {
        return Err(TaskError::validation(
            field,
            format!("{field} may hold at most {} entries", limits::DOMAINS_MAX),
        ));
    }
    let cleaned: Vec<String> = domains
        .iter()
        .map(|pattern| pattern.trim().to_ascii_lowercase())
        .collect();
    let list = DomainList::parse(&domains).map_err(|err| {
        TaskError::validation(format!("{field}[{}]", err.index), err.error.to_string())
    })?;
    Ok((cleaned, list))
}

fn validate_output_schema(schema: &serde_json::Value) -> Result<(), TaskError> {
    if !schema.is_object() {
        return Err(TaskError::validation(
            "output_schema",
            "output_schema must be a JSON Schema object",
        ));
    }
    // Bounded first: nothing below (or a worker's provider rewrite later) may take longer than
    // the schema's accepted size allows.
    browserd_types::schema_bounds::check_output_schema(schema)
        .map_err(|err| TaskError::validation("output_schema", err.to_string()))?;
    if let Err(err) = jsonschema::meta::validate(schema) {
        return Err(TaskError::validation(
            "output_schema",
            format!("output_schema is not a valid JSON Schema: {err}"),
        ));
    }
    // Compiling catches what the meta-schema cannot (e.g. unresolvable `$ref`s; remote
    // references are never fetched).
    if let Err(err) = jsonschema::validator_for(schema) {
        return Err(TaskError::validation(
            "output_schema",
            format!("output_schema cannot be used: {err}"),
        ));
    }
    Ok(())
}

fn validate_metadata(metadata: &BTreeMap<String, String>) -> Result<(), TaskError> {
    if metadata.len() > limits::METADATA_MAX_PAIRS {
        return Err(TaskError::validation(
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
            return Err(TaskError::validation(
                "metadata",
                format!(
                    "metadata keys must be 1–{} characters",
                    limits::METADATA_KEY_MAX_CHARS
                ),
            ));
        }
        if value.chars().count() > limits::METADATA_VALUE_MAX_CHARS {
            return Err(TaskError::validation(
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

/// Postgres stores no NUL character in text or jsonb: a request carrying one anywhere (the task,
/// metadata, an output schema's strings or keys, …) is refused here, naming where, rather than
/// failing at the insert. Walks the request's own serialization, so every field is covered.
fn refuse_nul_characters(request: &CreateTaskRequest) -> Result<(), TaskError> {
    fn find(value: &serde_json::Value, path: &str) -> Option<String> {
        match value {
            serde_json::Value::String(text) => text.contains('\0').then(|| path.to_owned()),
            serde_json::Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| find(item, &format!("{path}[{i}]"))),
            serde_json::Value::Object(fields) => fields.iter().find_map(|(key, item)| {
                let inner = if path.is_empty() {
                    key.replace('\0', "\\0")
                } else {
                    format!("{path}.{}", key.replace('\0', "\\0"))
                };
                if key.contains('\0') {
                    Some(inner)
                } else {
                    find(item, &inner)
                }
            }),
            _ => None,
        }
    }
    let Ok(value) = serde_json::to_value(request) else {
        return Ok(());
    };
    match find(&value, "") {
        Some(field) => Err(TaskError::validation(
            field.clone(),
            format!("{field} contains a NUL character (\\u0000), which cannot be stored"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod nul_tests;
