//! make_script, bind and healed_script over hand-made histories.

use serde_json::{Map, json};

use super::*;
use crate::replay::{ActionReplay, MatchedBy, ReplayOutcome};
use crate::skill::{HealedStep, ParameterKind, bind, parse_prompt};
use crate::views::{ActionCall, AgentOutput, BrowserStateHistory, StepMetadata};
use browserd_views::ActionResult;

fn element(index: u64, tag: &str, name: &str, region: &str) -> InteractedElement {
    InteractedElement {
        index,
        node_name: tag.into(),
        ax_name: (!name.is_empty()).then(|| name.into()),
        x_path: Some(format!("html/body/div[{index}]/{tag}")),
        element_hash: Some(format!("hash{index}")),
        region: (!region.is_empty()).then(|| region.into()),
        ..InteractedElement::default()
    }
}

fn step(
    number: u32,
    url: &str,
    actions: Vec<(ActionCall, Option<InteractedElement>)>,
) -> AgentHistory {
    let (calls, elements): (Vec<_>, Vec<_>) = actions.into_iter().unzip();
    let results = calls
        .iter()
        .map(|c| {
            if c.name == "done" {
                ActionResult {
                    is_done: true,
                    success: Some(true),
                    extracted_content: c.params["text"].as_str().map(str::to_owned),
                    ..ActionResult::default()
                }
            } else {
                ActionResult::memory(format!("did {}", c.name))
            }
        })
        .collect();
    AgentHistory {
        model_output: Some(AgentOutput {
            next_goal: Some(format!("step {number}")),
            action: calls,
            ..AgentOutput::default()
        }),
        result: results,
        state: BrowserStateHistory {
            url: url.into(),
            interacted_element: elements,
            ..BrowserStateHistory::default()
        },
        metadata: StepMetadata {
            step_number: number,
            ..StepMetadata::default()
        },
        state_message: Some("the page text with Blue Shirt".into()),
    }
}

fn call(name: &str, params: serde_json::Value) -> ActionCall {
    ActionCall::new(name, params)
}

/// A shop run: search "Blue Shirt", open the result list, add the row showing order 1042
/// to the cart, type an email and a password placeholder, open order "Order 1042", done.
fn shop_run() -> AgentHistoryList {
    let history = vec![
        step(
            0,
            "https://shop.test/",
            vec![(call("navigate", json!({"url": "https://shop.test/"})), None)],
        ),
        step(
            1,
            "https://shop.test/",
            vec![(call("search", json!({"query": "Blue Shirt"})), None)],
        ),
        step(
            2,
            "https://shop.test/search?q=Blue+Shirt",
            vec![(
                call(
                    "navigate",
                    json!({"url": "https://shop.test/items?name=Blue%20Shirt&order=1042"}),
                ),
                None,
            )],
        ),
        AgentHistory {
            model_output: None,
            result: vec![ActionResult::error("model failed")],
            ..AgentHistory::default()
        },
        step(
            3,
            "https://shop.test/items",
            vec![
                (
                    call("click", json!({"index": 31})),
                    Some(element(
                        31,
                        "button",
                        "Add to cart",
                        "Order 1042 Blue Shirt 12 € Add to cart",
                    )),
                ),
                (
                    call("input", json!({"index": 40, "text": "ada@example.com"})),
                    Some(InteractedElement {
                        attributes: Map::from_iter([("type".into(), json!("email"))]),
                        ..element(40, "input", "", "")
                    }),
                ),
                (
                    call("input", json!({"index": 41, "text": "<secret>pw</secret>"})),
                    Some(element(41, "input", "Password", "")),
                ),
                (
                    call("input", json!({"index": 42, "text": "leave at door"})),
                    Some(element(42, "textarea", "", "")),
                ),
            ],
        ),
        step(
            4,
            "https://shop.test/orders",
            vec![(
                call("click", json!({"index": 50})),
                Some(element(50, "a", "Order 1042", "Order 1042 shipped")),
            )],
        ),
        step(
            5,
            "https://shop.test/orders/1042",
            vec![(
                call(
                    "done",
                    json!({"text": "Order 1042 (Blue Shirt) shipped", "success": true}),
                ),
                None,
            )],
        ),
    ];
    AgentHistoryList {
        history,
        ..AgentHistoryList::default()
    }
}

fn declared() -> (Vec<SkillParameter>, BTreeMap<String, String>) {
    let prompt =
        parse_prompt("Add {{item=Blue Shirt}} of order {{order=1042}} to the cart").unwrap();
    (prompt.parameters, prompt.examples)
}

fn params_of(script: &SkillScript, step: usize, action: usize) -> serde_json::Value {
    script.steps.history[step]
        .model_output
        .as_ref()
        .unwrap()
        .action[action]
        .params
        .clone()
}

fn element_of(script: &SkillScript, step: usize, action: usize) -> InteractedElement {
    script.steps.history[step].state.interacted_element[action]
        .clone()
        .unwrap()
}

#[test]
fn every_use_of_a_value_becomes_a_slot() {
    let (declared, values) = declared();
    let script = make_script(&shop_run(), &declared, &values);
    // The step without a model output is dropped; done stays last.
    assert_eq!(script.steps.history.len(), 6);
    assert_eq!(params_of(&script, 1, 0)["query"], "{{item}}");
    assert_eq!(
        params_of(&script, 2, 0)["url"],
        "https://shop.test/items?name={{item|url}}&order={{order}}"
    );
    assert_eq!(
        script.steps.history[2].state.url,
        "https://shop.test/search?q={{item|form}}"
    );
    assert_eq!(
        script.steps.history[2]
            .model_output
            .as_ref()
            .unwrap()
            .next_goal
            .as_deref(),
        Some("step 2")
    );
    assert!(
        script
            .steps
            .history
            .iter()
            .all(|s| s.state_message.is_none())
    );
    // The row's button: chosen by the value its region shows.
    let button = element_of(&script, 3, 0);
    assert_eq!(
        button.near.as_deref(),
        Some("{{item}}"),
        "the longest value first"
    );
    assert_eq!(button.element_hash, None);
    assert_eq!(button.ax_name.as_deref(), Some("Add to cart"));
    // A link named by the value: its name is slotted, no near.
    let link = element_of(&script, 4, 0);
    assert_eq!(link.ax_name.as_deref(), Some("Order {{order}}"));
    assert_eq!(link.near, None);
    assert_eq!(link.element_hash, None);
    assert_eq!(
        params_of(&script, 5, 0)["text"],
        "Order {{order}} ({{item}}) shipped"
    );
    assert_eq!(
        script.result,
        ResultReader::Text {
            template: "Order {{order}} ({{item}}) shipped".into()
        }
    );
}

#[test]
fn undeclared_typed_values_are_proposed_but_never_secrets() {
    let (declared, values) = declared();
    let script = make_script(&shop_run(), &declared, &values);
    let names: Vec<(&str, bool, Option<&serde_json::Value>)> = script
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p.required, p.default.as_ref()))
        .collect();
    assert_eq!(
        names,
        [
            ("item", true, None),
            ("order", true, None),
            ("email", false, Some(&json!("ada@example.com"))),
            ("text_1", false, Some(&json!("leave at door"))),
        ]
    );
    assert_eq!(script.parameters[1].kind, ParameterKind::Number);
    assert_eq!(params_of(&script, 3, 1)["text"], "{{email}}");
    assert_eq!(params_of(&script, 3, 2)["text"], "<secret>pw</secret>");
    assert_eq!(params_of(&script, 3, 3)["text"], "{{text_1}}");
}

#[test]
fn a_value_named_like_a_secret_never_touches_the_placeholder() {
    let mut run = shop_run();
    run.history[4].model_output.as_mut().unwrap().action[2].params["text"] =
        json!("<secret>pw</secret>");
    let values = BTreeMap::from([("who".to_owned(), "pw".to_owned())]);
    let declared = parse_prompt("{{who=pw}}").unwrap().parameters;
    let script = make_script(&run, &declared, &values);
    assert_eq!(params_of(&script, 3, 2)["text"], "<secret>pw</secret>");
}

#[test]
fn bind_fills_every_slot_and_checks_the_values() {
    let (declared, values) = declared();
    let script = make_script(&shop_run(), &declared, &values);
    let given = json!({"item": "Red Hat & Co", "order": 77})
        .as_object()
        .unwrap()
        .clone();
    let (texts, steps) = bind(&script, &given).unwrap();
    assert_eq!(texts["order"], "77");
    assert_eq!(texts["email"], "ada@example.com", "a default");
    let bound = SkillScript {
        steps,
        ..script.clone()
    };
    assert_eq!(params_of(&bound, 1, 0)["query"], "Red Hat & Co");
    assert_eq!(
        params_of(&bound, 2, 0)["url"],
        "https://shop.test/items?name=Red%20Hat%20%26%20Co&order=77"
    );
    assert_eq!(
        bound.steps.history[2].state.url,
        "https://shop.test/search?q=Red+Hat+%26+Co"
    );
    assert_eq!(
        element_of(&bound, 3, 0).near.as_deref(),
        Some("Red Hat & Co")
    );
    assert_eq!(
        element_of(&bound, 4, 0).ax_name.as_deref(),
        Some("Order 77")
    );
    assert_eq!(
        params_of(&bound, 5, 0)["text"],
        "Order 77 (Red Hat & Co) shipped"
    );

    let error = |values: serde_json::Value| {
        bind(&script, values.as_object().unwrap())
            .unwrap_err()
            .to_string()
    };
    let unknown = error(json!({"item": "x", "order": 1, "colour": "red"}));
    assert!(
        unknown.contains("`colour`") && unknown.contains("item, order, email, text_1"),
        "{unknown}"
    );
    assert!(error(json!({"item": "x"})).contains("`order` is required"));
    assert!(error(json!({"item": "x", "order": "seven"})).contains("`order` must be a number"));
    assert!(error(json!({"item": 5, "order": 1})).contains("`item` must be a string"));
    assert!(
        bind(
            &script,
            json!({"item": "x", "order": "12"}).as_object().unwrap()
        )
        .is_ok()
    );
    let null_is_absent = bind(
        &script,
        json!({"item": "x", "order": 1, "email": null})
            .as_object()
            .unwrap(),
    );
    assert_eq!(null_is_absent.unwrap().0["email"], "ada@example.com");
}

fn replay_meta(step: u32, outcome: ReplayOutcome) -> serde_json::Map<String, serde_json::Value> {
    let report = ActionReplay {
        step,
        action: "click".into(),
        recorded_index: Some(31),
        index: Some(77),
        matched_by: Some(MatchedBy::Near),
        attempts: 1,
        outcome,
        detail: None,
    };
    Map::from_iter([("replay".to_owned(), serde_json::to_value(report).unwrap())])
}

#[test]
fn a_healed_execution_becomes_the_next_version() {
    let (declared, values) = declared();
    let script = make_script(&shop_run(), &declared, &values);
    let given = json!({"item": "Red Hat", "order": 77})
        .as_object()
        .unwrap()
        .clone();
    let (texts, bound) = bind(&script, &given).unwrap();
    // The execution: steps 0–2 replayed, step 3's click missed (the healer clicked
    // "Add to basket" in the row of Red Hat), steps 4–5 replayed.
    let mut execution = AgentHistoryList::default();
    for (i, recorded) in bound.history.iter().enumerate() {
        let mut record = recorded.clone();
        record.metadata.step_number = 10 + u32::try_from(i).unwrap();
        for result in &mut record.result {
            result.metadata = Some(replay_meta(
                recorded.metadata.step_number,
                ReplayOutcome::Ok,
            ));
        }
        if recorded.metadata.step_number == 3 {
            record.result[0] = ActionResult::error("element not found");
            record.result[0].metadata = Some(replay_meta(3, ReplayOutcome::Failed));
            record.result.truncate(1);
            execution.history.push(record);
            let healer = step(
                14,
                "https://shop.test/items",
                vec![(
                    call("click", json!({"index": 99})),
                    Some(element(
                        99,
                        "button",
                        "Add to basket",
                        "Red Hat 9 € Add to basket",
                    )),
                )],
            );
            execution.history.push(healer);
            execution.history.push(step(
                15,
                "https://shop.test/items",
                vec![(
                    call("done", json!({"text": "clicked", "success": true})),
                    None,
                )],
            ));
            continue;
        }
        execution.history.push(record);
    }
    let report = ReplayReport {
        actions: Vec::new(),
        final_result: None,
        success: true,
        error: None,
        healed: vec![HealedStep {
            step: 3,
            reason: "element not found: <button> \"Add to cart\"".into(),
            model_calls: 2,
        }],
    };
    let next = healed_script(&script, &execution, &report, &texts);
    let goals: Vec<&str> = next
        .steps
        .history
        .iter()
        .map(|s| {
            s.model_output
                .as_ref()
                .unwrap()
                .next_goal
                .as_deref()
                .unwrap()
        })
        .collect();
    // The failed replay of step 3 (nothing worked) and the healer's own done are gone.
    assert_eq!(
        goals,
        ["step 0", "step 1", "step 2", "step 14", "step 4", "step 5"]
    );
    let healed = element_of(&next, 3, 0);
    assert_eq!(healed.ax_name.as_deref(), Some("Add to basket"));
    assert_eq!(
        healed.near.as_deref(),
        Some("{{item}}"),
        "the healed row is found by the value again"
    );
    assert_eq!(
        element_of(&next, 4, 0).ax_name.as_deref(),
        Some("Order {{order}}")
    );
    assert_eq!(params_of(&next, 1, 0)["query"], "{{item}}");
    assert_eq!(next.parameters, script.parameters);
    assert_eq!(next.result, script.result);
    assert!(
        next.steps.history[1].result[0]
            .metadata
            .as_ref()
            .is_none_or(|m| !m.contains_key("replay"))
    );
}
