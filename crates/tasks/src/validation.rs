//! Rules for a new task (`POST /v1/tasks`, v2's and MCP's creation, `browserd run`). Each failure names the field and the rule it broke.

use std::collections::BTreeMap;

use browserd_domains::{DomainList, DomainPattern, DomainRules, Forbidden, UrlTarget};
use browserd_store::{NewReplay, NewTask};
use browserd_types::dto::{CreateTaskRequest, ReplaySettings, limits};
use browserd_types::{TaskId, TaskOptions, TaskSecret, TaskSecrets};
use secrecy::ExposeSecret;

use crate::error::TaskError;
use crate::models::ModelCatalog;

/// Validates `request` and fills in defaults.
pub fn validate_create_task(
    request: CreateTaskRequest,
    models: &ModelCatalog,
) -> Result<NewTask, TaskError> {
    refuse_nul_characters(&request)?;
    let replay = match request.replay_of {
        Some(source) => Some(validate_replay(&request, source)?),
        None => {
            if request.replay.is_some() {
                return Err(TaskError::validation(
                    "replay",
                    "replay options need replay_of (the id of the task to replay)",
                ));
            }
            None
        }
    };
    let Some(task) = request.task else {
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

    let start_url = request
        .start_url
        .map(|raw| validate_start_url(&raw).map(|url| (raw, url)))
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
        // A replay makes no model call (`validate_replay` refused a model).
        None if replay.is_some() => None,
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
            Some(name)
        }
        None => models.default_model().map(str::to_owned),
    };

    let (allowed_domains, allowed) = validate_domains("allowed_domains", request.allowed_domains)?;
    let (prohibited_domains, prohibited) =
        validate_domains("prohibited_domains", request.prohibited_domains)?;
    let rules = DomainRules::new(allowed, prohibited);
    let start_url = match start_url {
        Some((raw, url)) => {
            check_start_url_against_lists(&url, &rules)?;
            Some(raw)
        }
        None => None,
    };

    let secrets = validate_secrets(
        request.secrets.unwrap_or_default(),
        &allowed_domains,
        request.allow_secrets_on_any_domain.unwrap_or(false),
        &SecretFixNames::V1,
    )?;

    if let Some(schema) = &request.output_schema {
        validate_output_schema(schema)?;
    }

    let metadata = request.metadata.unwrap_or_default();
    validate_metadata(&metadata)?;

    let max_tokens = request
        .max_tokens
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
        .transpose()?;
    let max_cost_usd = request
        .max_cost_usd
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
        .transpose()?;
    if let Some(viewport) = &request.viewport {
        viewport
            .check()
            .map_err(|(field, message)| TaskError::validation(field, message))?;
    }
    let settle_timeout_ms = request
        .settle_timeout_ms
        .map(|value| {
            int_field(
                "settle_timeout_ms",
                Some(value),
                value,
                limits::SETTLE_TIMEOUT_MS_RANGE,
            )
        })
        .transpose()?;

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

    let ask_human_timeout_s = request
        .ask_human_timeout_s
        .map(|value| {
            int_field(
                "ask_human_timeout_s",
                Some(value),
                value,
                limits::ASK_HUMAN_TIMEOUT_S_RANGE,
            )
        })
        .transpose()?;
    if replay.is_some() && (request.ask_human.is_some() || ask_human_timeout_s.is_some()) {
        return Err(TaskError::validation(
            if request.ask_human.is_some() {
                "ask_human"
            } else {
                "ask_human_timeout_s"
            },
            "a replay asks no questions: ask_human and ask_human_timeout_s need the agent",
        ));
    }

    let options = TaskOptions {
        start_url,
        max_steps,
        model,
        allowed_domains,
        prohibited_domains,
        output_schema: request.output_schema,
        use_vision: replay.is_none() && request.use_vision.unwrap_or(limits::USE_VISION_DEFAULT),
        max_actions_per_step,
        max_failures,
        timeout_s,
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

/// Domain patterns, parsed by `browserd_domains` — the parser the egress policy uses, so a list
/// accepted here is a list the task's browser accepts. Returns the patterns as stored (trimmed,
/// lowercase) and the parsed list.
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn validate(body: Value) -> Result<NewTask, (String, String)> {
        let request: CreateTaskRequest = serde_json::from_value(body).expect("request shape");
        validate_create_task(request, &ModelCatalog::default()).map_err(|err| match err {
            TaskError::Validation { field, message } => (field.unwrap_or_default(), message),
            other => panic!("not a validation error: {other:?}"),
        })
    }

    /// The shared domain-pattern table through `validate_create_task`: a pattern is accepted
    /// here iff the egress policy accepts it (the 422 names the entry and carries the parser's
    /// reason), and an http(s) `start_url` passes `allowed_domains: [pattern]` (and fails
    /// `prohibited_domains: [pattern]`) iff the pattern matches it.
    #[test]
    fn domain_pattern_conformance_table() {
        for case in browserd_domains::conformance::CASES {
            let pattern = case.pattern;
            if let Some(why) = case.rejected {
                for list in ["allowed_domains", "prohibited_domains"] {
                    let (field, message) =
                        validate(json!({"task": "t", list: ["ok.example", pattern]}))
                            .expect_err(pattern);
                    assert_eq!(field, format!("{list}[1]"), "{pattern:?}");
                    assert!(message.contains(why), "{pattern:?}: {message}");
                    assert!(message.starts_with("invalid domain pattern"), "{message}");
                }
                continue;
            }
            let task = validate(json!({"task": "t", "allowed_domains": [pattern]})).unwrap();
            assert_eq!(
                task.options.allowed_domains,
                [pattern.trim().to_ascii_lowercase()]
            );
            let urls = case
                .matches
                .iter()
                .map(|u| (u, true))
                .chain(case.does_not_match.iter().map(|u| (u, false)))
                // start_url is http(s) only; other schemes are refused for that reason alone.
                .filter(|(u, _)| u.starts_with("http://") || u.starts_with("https://"));
            for (url, want) in urls {
                let allowed =
                    validate(json!({"task": "t", "start_url": url, "allowed_domains": [pattern]}));
                let prohibited = validate(
                    json!({"task": "t", "start_url": url, "prohibited_domains": [pattern]}),
                );
                assert_eq!(
                    allowed.is_ok(),
                    want,
                    "{pattern:?} allows {url}: {allowed:?}"
                );
                assert_eq!(prohibited.is_err(), want, "{pattern:?} prohibits {url}");
                for err in [allowed.err(), prohibited.err()].into_iter().flatten() {
                    assert_eq!(err.0, "start_url", "{err:?}");
                }
            }
        }
    }

    #[test]
    fn a_replay_takes_no_model_fields_and_gets_its_options_checked() {
        let source = uuid::Uuid::now_v7();
        let task = validate(json!({"task": "t", "replay_of": source})).unwrap();
        let replay = task.replay.expect("a replay");
        assert_eq!(replay.source.0, source);
        assert_eq!(replay.options, ReplaySettings::default());
        assert_eq!(task.options.model, None);
        assert!(!task.options.use_vision);
        let task = validate(json!({"task": "t", "replay_of": source,
            "replay": {"skip_failures": true, "max_retries": 0, "retry_delay_ms": 60000}}))
        .unwrap();
        assert_eq!(
            task.replay.unwrap().options,
            ReplaySettings {
                skip_failures: true,
                max_retries: 0,
                retry_delay_ms: 60_000
            }
        );
        for (body, field, words) in [
            (json!({"model": "m"}), "model", "does not apply to a replay"),
            (
                json!({"max_steps": 5}),
                "max_steps",
                "does not apply to a replay",
            ),
            (json!({"max_tokens": 5}), "max_tokens", "no model is called"),
            (
                json!({"replay": {"max_retries": -1}}),
                "replay.max_retries",
                "between 0 and 10",
            ),
            (
                json!({"replay": {"retry_delay_ms": 60001}}),
                "replay.retry_delay_ms",
                "between 0 and 60000",
            ),
        ] {
            let mut body = body;
            body["task"] = json!("t");
            body["replay_of"] = json!(source);
            let (got, message) = validate(body).unwrap_err();
            assert_eq!(got, field);
            assert!(message.contains(words), "{message}");
        }
        let (field, message) = validate(json!({"task": "t", "replay": {}})).unwrap_err();
        assert_eq!(field, "replay");
        assert!(message.contains("replay_of"), "{message}");
        let (field, _) = validate(json!({"use_vision": true})).unwrap_err();
        assert_eq!(field, "task");
    }

    #[test]
    fn start_url_forbidden_by_its_own_lists_is_refused_naming_the_list() {
        let (field, message) = validate(json!({
            "task": "t",
            "start_url": "https://evil.test/login",
            "allowed_domains": ["example.com", "*.docs.rs"],
        }))
        .unwrap_err();
        assert_eq!(field, "start_url");
        assert!(message.contains("allowed_domains"), "{message}");
        assert!(message.contains("evil.test"), "{message}");
        let (field, message) = validate(json!({
            "task": "t",
            "start_url": "https://www.evil.test/login",
            "prohibited_domains": ["ok.test", "Evil.test"],
        }))
        .unwrap_err();
        assert_eq!(field, "start_url");
        assert!(message.contains("prohibited_domains"), "{message}");
        assert!(message.contains("`Evil.test`"), "{message}");
        // A non-empty allow list alone decides, like the egress policy.
        assert!(
            validate(json!({
                "task": "t",
                "start_url": "https://evil.test/",
                "allowed_domains": ["evil.test"],
                "prohibited_domains": ["evil.test"],
            }))
            .is_ok()
        );
        // The example patterns of docs/src/agent.md ("Egress policy"), the URL prefix with a path included.
        let task = validate(json!({
            "task": "t",
            "start_url": "https://example.com/path/page?x=1",
            "allowed_domains": ["https://example.com/path", "http*://example.com", "https://example.com/*"],
        }))
        .unwrap();
        assert_eq!(task.options.allowed_domains.len(), 3);
    }

    /// The ranges the tasks table's check constraints enforced before the options became one
    /// jsonb column (migration 0013) are refused here, naming the field.
    #[test]
    fn the_old_column_checks_are_enforced_at_the_edge() {
        for (body, field) in [
            (json!({"max_steps": 0}), "max_steps"),
            (json!({"max_steps": 10_001}), "max_steps"),
            (json!({"max_actions_per_step": 0}), "max_actions_per_step"),
            (json!({"max_failures": -1}), "max_failures"),
            (json!({"timeout_s": 0}), "timeout_s"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"max_cost_usd": 0.0}), "max_cost_usd"),
            (json!({"max_cost_usd": -1.0}), "max_cost_usd"),
            (
                json!({"viewport": {"width": 0, "height": 720}}),
                "viewport.width",
            ),
            (
                json!({"viewport": {"width": 1280, "height": 0}}),
                "viewport.height",
            ),
            (json!({"settle_timeout_ms": -1}), "settle_timeout_ms"),
            (json!({"settle_timeout_ms": 30_001}), "settle_timeout_ms"),
            (json!({"proxy": ""}), "proxy"),
            (json!({"proxy": "p".repeat(65)}), "proxy"),
        ] {
            let mut body = body;
            body["task"] = json!("t");
            let (got, message) = validate(body.clone()).unwrap_err();
            assert_eq!(got, field, "{body}: {message}");
        }
        // The bounds themselves pass (a viewport needs both sides: its type has both).
        let task = validate(json!({"task": "t", "max_steps": 10_000, "max_failures": 0,
            "timeout_s": 1, "max_tokens": 1, "settle_timeout_ms": 0, "proxy": "p".repeat(64)}))
        .unwrap();
        assert_eq!(task.options.max_steps, 10_000);
        assert!(
            serde_json::from_value::<CreateTaskRequest>(
                json!({"task": "t", "viewport": {"width": 1280}})
            )
            .is_err()
        );
    }

    #[test]
    fn a_catastrophic_pattern_is_validated_with_a_backtrack_limit() {
        // Accepted at the edge (the bounds are about size, not patterns) because the validator
        // that checks `done` data runs patterns with fancy-regex's backtrack limit: a
        // classic exponential case ends (as "does not match") instead of hanging the worker.
        let schema = json!({"type": "string", "pattern": "^(a+)+$"});
        validate(json!({"task": "t", "output_schema": schema.clone()})).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let hostile = format!("{}!", "a".repeat(64));
        assert!(!validator.is_valid(&json!(hostile)));
        assert!(validator.is_valid(&json!("aaaa")));
    }
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
mod nul_tests {
    use super::*;

    #[test]
    fn a_nul_character_anywhere_in_a_create_request_is_refused_naming_where() {
        let mut request = CreateTaskRequest {
            task: Some("find it".to_owned()),
            metadata: Some(BTreeMap::from([("k\0ey".to_owned(), "v".to_owned())])),
            ..CreateTaskRequest::default()
        };
        let err = refuse_nul_characters(&request).unwrap_err().to_string();
        assert!(err.contains("metadata.k\\0ey"), "{err}");
        request.metadata = None;
        request.output_schema = Some(
            serde_json::json!({"type": "object", "properties": {"a": {"enum": ["x", "y\0"]}}}),
        );
        let err = refuse_nul_characters(&request).unwrap_err().to_string();
        assert!(err.contains("output_schema.properties.a.enum[1]"), "{err}");
        request.output_schema = None;
        request.task = Some("a\0b".to_owned());
        assert!(refuse_nul_characters(&request).is_err());
        request.task = Some("fine".to_owned());
        assert!(refuse_nul_characters(&request).is_ok());
    }
}
