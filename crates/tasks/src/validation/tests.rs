//! `validate_create_task` against the rules each field follows.

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
            let prohibited =
                validate(json!({"task": "t", "start_url": url, "prohibited_domains": [pattern]}));
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
