//! The dashboard's JavaScript (`crates/api/ui/app.js`) against the Rust types it reads: every
//! field it reads from an event payload or a task must exist under that name in the type that
//! writes it, so a field renamed in Rust fails here instead of blanking part of the page.
//!
//! What is read where is found in the script's own forms (its header says them):
//! - `p.<field>` inside `case '<kind>':` of `onEvent`, checked against the JSON Schema of that
//!   kind's payload, derived from [`EventBody`] with schemars;
//! - `<name>.<field>…` chains of a name typed by a JSDoc `@param {Shape} name` (the function's
//!   body) or `@type {Shape}` (the rest of its block), checked against the JSON of a value of
//!   that shape with every optional field set — the browser-use shapes the payloads carry as
//!   JSON (`AgentOutput`, `ActionResult`, `AgentHistory`, `StepMetadata`, `UsageSummary`) and
//!   the task view;
//! - `event.<field>` in `onEvent` and `connectEvents`, against [`TaskEvent`].
//!
//! A chain stops being checked where the value is no longer an object (`.length`, `.join`,
//! `.toFixed`…). A payload field that is free-form JSON (`serde_json::Value` in Rust) may only
//! be read deeper through a shape bound to it in [`payload_shapes`].

use std::collections::{BTreeMap, BTreeSet};

use browserd_agent::{
    ActionCall, ActionResult, AgentHistory, AgentOutput, BrowserStateHistory, StepMetadata,
    TabInfo, UsageSummary,
};
use browserd_types::dto::TaskView;
use browserd_types::schedules::{ScheduleRunView, ScheduleView};
use browserd_types::{EventBody, TaskEvent, TaskId, TaskOptions, TaskStatus};
use regex::Regex;
use serde_json::{Value, json};
use time::OffsetDateTime;

const APP_JS: &str = include_str!("../../crates/api/ui/app.js");

/// A value of each shape the script names, every optional field set (so every field shows).
fn shapes() -> BTreeMap<&'static str, Value> {
    let output = AgentOutput {
        thinking: Some("t".to_owned()),
        evaluation_previous_goal: Some("e".to_owned()),
        memory: Some("m".to_owned()),
        next_goal: Some("n".to_owned()),
        current_plan_item: Some(0),
        plan_update: Some(vec!["p".to_owned()]),
        action: vec![ActionCall::new("click", json!({"index": 1}))],
    };
    let result = ActionResult {
        is_done: true,
        success: Some(true),
        error: Some("e".to_owned()),
        extracted_content: Some("c".to_owned()),
        long_term_memory: Some("l".to_owned()),
        include_extracted_content_only_once: true,
        attachments: Some(vec!["a".to_owned()]),
        metadata: Some(serde_json::Map::new()),
    };
    let metadata = StepMetadata {
        cost_usd: Some(0.5),
        ..StepMetadata::default()
    };
    let history = AgentHistory {
        model_output: Some(output.clone()),
        result: vec![result.clone()],
        state: BrowserStateHistory {
            url: "https://example.com/".to_owned(),
            title: "t".to_owned(),
            tabs: vec![TabInfo {
                tab_id: "ab12".to_owned(),
                url: "https://example.com/".to_owned(),
                title: "t".to_owned(),
            }],
            interacted_element: Vec::new(),
            screenshot_ref: Some("s".to_owned()),
        },
        metadata: metadata.clone(),
        // A `step` event's record is without its rendered state message.
        state_message: None,
    };
    let usage = UsageSummary {
        total_cost_usd: Some(0.5),
        ..UsageSummary::default()
    };
    let now = OffsetDateTime::UNIX_EPOCH;
    let task = TaskView {
        id: TaskId::new(),
        status: TaskStatus::Finished,
        task: "t".to_owned(),
        options: TaskOptions::every_option_set(),
        usage: Some(serde_json::to_value(&usage).unwrap()),
        queue_position: Some(1),
        attempts: 1,
        output: Some("o".to_owned()),
        is_success: Some(true),
        error: Some("e".to_owned()),
        last_event_seq: 1,
        created_at: now,
        updated_at: now,
        started_at: Some(now),
        finished_at: Some(now),
        question: Some(browserd_types::QuestionEvent {
            question_id: "s1a0".to_owned(),
            question: "q".to_owned(),
            choices: vec!["a".to_owned()],
            secret: false,
            timeout_s: 60,
        }),
    };
    let event = TaskEvent {
        task_id: TaskId::new(),
        seq: 1,
        kind: "log".to_owned(),
        payload: json!({}),
        created_at: now,
    };
    let schedule = ScheduleView {
        id: uuid::Uuid::nil(),
        name: "n".to_owned(),
        cron: "* * * * *".to_owned(),
        time_zone: "UTC".to_owned(),
        target: json!({"task": {"task": "t"}}),
        enabled: true,
        next_run_at: Some(now),
        last_run_at: Some(now),
        last_task_id: Some(uuid::Uuid::nil()),
        last_error: Some("e".to_owned()),
        created_at: now,
        updated_at: now,
    };
    let run = ScheduleRunView {
        task_id: uuid::Uuid::nil(),
        scheduled_for: now,
        status: TaskStatus::Finished,
        is_success: Some(true),
        error: Some("e".to_owned()),
        created_at: now,
        finished_at: Some(now),
    };
    let token_usage = serde_json::to_value(&metadata).unwrap()["usage"].clone();
    BTreeMap::from([
        ("AgentOutput", serde_json::to_value(&output).unwrap()),
        ("ActionResult", serde_json::to_value(&result).unwrap()),
        ("AgentHistory", serde_json::to_value(&history).unwrap()),
        ("StepMetadata", serde_json::to_value(&metadata).unwrap()),
        ("UsageSummary", serde_json::to_value(&usage).unwrap()),
        ("TokenUsage", token_usage),
        ("TaskView", serde_json::to_value(&task).unwrap()),
        ("TaskEvent", serde_json::to_value(&event).unwrap()),
        ("ScheduleView", serde_json::to_value(&schedule).unwrap()),
        ("ScheduleRunView", serde_json::to_value(&run).unwrap()),
    ])
}

/// The shape of the payload fields that are free-form JSON in [`EventBody`] (what the worker
/// writes into them: `serde_json::to_value` of these types).
fn payload_shapes() -> BTreeMap<(&'static str, &'static str), &'static str> {
    BTreeMap::from([
        (("model_output", "output"), "AgentOutput"),
        (("model_output", "usage"), "TokenUsage"),
        (("action_result", "result"), "ActionResult"),
        (("step", "record"), "AgentHistory"),
        (("result", "usage"), "UsageSummary"),
    ])
}

/// Each event kind's payload schema, from [`EventBody`]'s JSON Schema (`kind` + `payload`).
fn payload_schemas() -> (BTreeMap<String, Value>, Value) {
    let schema = serde_json::to_value(schemars::schema_for!(EventBody)).unwrap();
    let defs = schema["$defs"].clone();
    let mut kinds = BTreeMap::new();
    for variant in schema["oneOf"]
        .as_array()
        .expect("EventBody is a oneOf of its kinds")
    {
        let kind = &variant["properties"]["kind"];
        let name = kind["const"]
            .as_str()
            .or_else(|| kind["enum"][0].as_str())
            .expect("each variant names its kind");
        kinds.insert(name.to_owned(), variant["properties"]["payload"].clone());
    }
    (kinds, defs)
}

/// The properties a schema allows, through `$ref`, `allOf`, `anyOf` and `oneOf` (a flattened
/// struct, an optional one).
fn properties(schema: &Value, defs: &Value) -> BTreeMap<String, Value> {
    let mut found = BTreeMap::new();
    if let Some(name) = schema["$ref"].as_str() {
        let name = name.trim_start_matches("#/$defs/");
        found.extend(properties(&defs[name], defs));
    }
    if let Some(props) = schema["properties"].as_object() {
        found.extend(props.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        for part in schema[combinator].as_array().into_iter().flatten() {
            found.extend(properties(part, defs));
        }
    }
    found
}

/// True for a schema that says nothing about its value (`serde_json::Value`).
fn free_form(schema: &Value) -> bool {
    schema == &Value::Bool(true) || schema.as_object().is_some_and(|o| o.is_empty())
}

/// The text of the `{…}` block that starts at the first `{` at or after `from`.
fn block_at(js: &str, from: usize) -> &str {
    let start = from + js[from..].find('{').expect("a block");
    let mut depth = 0;
    for (i, c) in js[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &js[start..=start + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced block at {start}");
}

/// The rest of the block enclosing `from`.
fn rest_of_block(js: &str, from: usize) -> &str {
    let mut depth = 0;
    for (i, c) in js[from..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return &js[from..from + i],
            '}' => depth -= 1,
            _ => {}
        }
    }
    &js[from..]
}

fn function_body<'a>(js: &'a str, name: &str) -> &'a str {
    let at = js
        .find(&format!("function {name}("))
        .unwrap_or_else(|| panic!("app.js has no function {name}"));
    block_at(js, at)
}

/// The `.a.b…` chains read off `name` in `code`.
fn chains(code: &str, name: &str) -> BTreeSet<Vec<String>> {
    let pattern = Regex::new(&format!(
        r"(?:^|[^\w$.]){}((?:\.[A-Za-z_$][\w$]*)+)",
        regex::escape(name)
    ))
    .unwrap();
    pattern
        .captures_iter(code)
        .map(|c| c[1].split('.').skip(1).map(str::to_owned).collect())
        .collect()
}

/// Walks `chain` into the JSON `value` of a shape; the problem when a field does not exist.
fn check_in_value(value: &Value, chain: &[String], path: &str) -> Option<String> {
    let mut value = value;
    let mut path = path.to_owned();
    for field in chain {
        let Some(object) = value.as_object() else {
            return None; // Not an object any more: a method or property of a plain value.
        };
        let Some(next) = object.get(field) else {
            let known: Vec<&String> = object.keys().collect();
            return Some(format!("{path}.{field} does not exist (fields: {known:?})"));
        };
        path = format!("{path}.{field}");
        value = next;
    }
    None
}

/// Every field the script reads that its Rust type does not have, as messages.
fn problems(js: &str) -> Vec<String> {
    let shapes = shapes();
    let bound = payload_shapes();
    let (kinds, defs) = payload_schemas();
    let mut problems = Vec::new();
    let mut checked = 0;

    // Event payloads, per kind.
    let on_event = function_body(js, "onEvent");
    assert!(
        on_event.contains("const p = event.payload"),
        "onEvent reads the payload as `p`"
    );
    let case = Regex::new(r"case '([a-z_]+)':").unwrap();
    let labels: Vec<_> = case.captures_iter(on_event).collect();
    assert!(!labels.is_empty(), "onEvent switches on the kind");
    for (i, label) in labels.iter().enumerate() {
        let kind = &label[1];
        let start = label.get(0).unwrap().end();
        let end = labels
            .get(i + 1)
            .map(|next| next.get(0).unwrap().start())
            .or_else(|| on_event[start..].find("default:").map(|d| start + d))
            .unwrap_or(on_event.len());
        let Some(payload) = kinds.get(kind) else {
            problems.push(format!(
                "onEvent handles kind `{kind}`, which EventBody does not have (kinds: {:?})",
                kinds.keys().collect::<Vec<_>>()
            ));
            continue;
        };
        let fields = properties(payload, &defs);
        for chain in chains(&on_event[start..end], "p") {
            checked += 1;
            let field = &chain[0];
            let Some(schema) = fields.get(field) else {
                problems.push(format!(
                    "`{kind}` payload has no field `{field}` (fields: {:?})",
                    fields.keys().collect::<Vec<_>>()
                ));
                continue;
            };
            if chain.len() == 1 {
                continue;
            }
            let path = format!("`{kind}` payload.{field}");
            if let Some(shape) = bound.get(&(kind, field.as_str())) {
                problems.extend(check_in_value(&shapes[shape], &chain[1..], &path));
            } else if free_form(schema) {
                problems.push(format!(
                    "{path} is free-form JSON; read {:?} through a shape (payload_shapes)",
                    &chain[1..]
                ));
            } else {
                let inner = properties(schema, &defs);
                if !inner.is_empty() && !inner.contains_key(&chain[1]) {
                    problems.push(format!("{path}.{} does not exist", chain[1]));
                }
            }
        }
    }

    // Names typed with JSDoc.
    let param = Regex::new(r"/\*\*\s*@param \{(\w+)\} (\w+)\s*\*/\s*function (\w+)\(").unwrap();
    let typed = Regex::new(r"/\*\*\s*@type \{(\w+)\}\s*\*/\s*const (\w+)\s*=").unwrap();
    let annotations = js.matches("@param").count() + js.matches("@type").count();
    let mut seen = 0;
    let mut scopes: Vec<(String, String, &str)> = Vec::new();
    for c in param.captures_iter(js) {
        seen += 1;
        let body = block_at(js, c.get(0).unwrap().end());
        scopes.push((c[1].to_owned(), c[2].to_owned(), body));
    }
    for c in typed.captures_iter(js) {
        seen += 1;
        let rest = rest_of_block(js, c.get(0).unwrap().end());
        scopes.push((c[1].to_owned(), c[2].to_owned(), rest));
    }
    // Two more mentions in the header comment that documents the forms.
    assert_eq!(
        seen + 2,
        annotations,
        "every JSDoc type in app.js is in a form this test reads"
    );
    for (shape, name, code) in scopes {
        let Some(value) = shapes.get(shape.as_str()) else {
            problems.push(format!("`{name}` has the unknown shape `{shape}`"));
            continue;
        };
        let found = chains(code, &name);
        assert!(!found.is_empty(), "`{name}` ({shape}) is read somewhere");
        for chain in found {
            checked += 1;
            problems.extend(check_in_value(value, &chain, &format!("{shape} {name}")));
        }
    }

    // The event envelope.
    for function in ["onEvent", "connectEvents"] {
        for chain in chains(function_body(js, function), "event") {
            checked += 1;
            problems.extend(check_in_value(
                &shapes["TaskEvent"],
                &chain,
                &format!("TaskEvent in {function}"),
            ));
        }
    }
    assert!(
        checked > 40,
        "only {checked} reads found: is the parser lost?"
    );
    problems
}

#[test]
fn every_field_the_dashboard_reads_exists_in_its_rust_type() {
    let problems = problems(APP_JS);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The check finds a renamed field in each form: a payload field, a field of a typed shape,
/// a nested field of a payload's shape, a kind.
#[test]
fn a_renamed_field_is_found() {
    for (from, to, want) in [
        (
            "p.has_screenshot",
            "p.has_screenshots",
            "`step` payload has no field `has_screenshots`",
        ),
        (
            "output.next_goal",
            "output.goal",
            "AgentOutput output.goal does not exist",
        ),
        (
            "metadata.model_ms",
            "metadata.model_time_ms",
            "StepMetadata metadata.model_time_ms does not exist",
        ),
        (
            "task.max_steps",
            "task.step_limit",
            "TaskView task.step_limit does not exist",
        ),
        (
            "record.state.url",
            "record.state.location",
            "AgentHistory record.state.location does not exist",
        ),
        (
            "case 'step_started':",
            "case 'step_begun':",
            "onEvent handles kind `step_begun`",
        ),
    ] {
        assert!(APP_JS.contains(from), "{from}");
        let found = problems(&APP_JS.replacen(from, to, 1));
        assert!(
            found.iter().any(|p| p.starts_with(want)),
            "{from} → {to}: {found:#?}"
        );
    }
}
