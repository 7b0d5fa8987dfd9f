//! Making a script from a run ([`make_script`]), the next version after a healed execution
//! ([`healed_script`]), and proposing parameters for typed values the prompt did not declare,
//! named as browser-use's variable detector names them (the input's `type`, then keywords in
//! its id / name / placeholder / aria-label, then the value's pattern: email, phone, date,
//! name, number), `text_N` when nothing fits.

use std::collections::BTreeMap;

use serde_json::Value;

use super::params::{Encoding, has_slot, make_slots, shows, slot};
use super::{ResultReader, SkillParameter, SkillScript};
use crate::replay::ReplayReport;
use crate::views::{AgentHistory, AgentHistoryList, InteractedElement};

/// Actions whose typed value is proposed as a parameter, with the parameter holding it.
const TYPED: [(&str, &str); 3] = [
    ("input", "text"),
    ("select_dropdown", "text"),
    ("search", "query"),
];

pub(super) fn make_script(
    history: &AgentHistoryList,
    declared: &[SkillParameter],
    values: &BTreeMap<String, String>,
) -> SkillScript {
    let mut slots: Vec<(String, String)> = values
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let steps = script_steps(history);
    let mut parameters = declared.to_vec();
    for (item, number) in steps.iter().map(|s| (s, s.metadata.step_number)) {
        propose(item, number, &mut parameters, &mut slots);
    }
    let steps = steps.iter().map(|item| slot_step(item, &slots)).collect();
    let template = history
        .final_result()
        .map(|text| make_slots(text, &slots))
        .unwrap_or_default();
    SkillScript {
        steps: AgentHistoryList {
            history: steps,
            usage: history.usage.clone(),
        },
        parameters,
        result: ResultReader::Text { template },
    }
}

/// The steps of a script: those with a model output, up to the first `done`.
fn script_steps(history: &AgentHistoryList) -> Vec<AgentHistory> {
    let mut steps = Vec::new();
    for item in history.history.iter().filter(|h| h.model_output.is_some()) {
        steps.push(item.clone());
        if is_done_step(item) {
            break;
        }
    }
    steps
}

fn is_done_step(item: &AgentHistory) -> bool {
    item.model_output
        .as_ref()
        .is_some_and(|o| o.action.iter().any(|a| a.name == "done"))
}

/// Proposes each value typed in `item` that no slot covers as an optional parameter.
fn propose(
    item: &AgentHistory,
    number: u32,
    parameters: &mut Vec<SkillParameter>,
    slots: &mut Vec<(String, String)>,
) {
    let Some(output) = &item.model_output else {
        return;
    };
    for (position, call) in output.action.iter().enumerate() {
        let Some((_, field)) = TYPED.iter().find(|(name, _)| *name == call.name) else {
            continue;
        };
        let Some(value) = call.params.get(*field).and_then(Value::as_str) else {
            continue;
        };
        if value.trim().is_empty()
            || value.contains("<secret>")
            || has_slot(&make_slots(value, slots))
        {
            continue;
        }
        let element = item
            .state
            .interacted_element
            .get(position)
            .and_then(Option::as_ref);
        let base = detect_name(value, element).unwrap_or("text");
        let name = unique_name(base, parameters);
        parameters.push(SkillParameter {
            name: name.clone(),
            kind: super::ParameterKind::String,
            required: false,
            default: Some(Value::String(value.to_owned())),
            description: Some(format!(
                "Proposed: the value typed by `{}` in step {number}",
                call.name
            )),
        });
        slots.push((name, value.to_owned()));
    }
}

/// `base`, or `base_2`, `base_3`… (`text_1`, `text_2`… for the fallback) not yet taken.
fn unique_name(base: &str, taken: &[SkillParameter]) -> String {
    let free = |name: &str| !taken.iter().any(|p| p.name == name);
    if base != "text" && free(base) {
        return base.to_owned();
    }
    let first = if base == "text" { 1 } else { 2 };
    (first..)
        .map(|n| format!("{base}_{n}"))
        .find(|name| free(name))
        .unwrap_or_else(|| base.to_owned())
}

/// A name for a typed value: from its element's attributes, else from its pattern.
fn detect_name(value: &str, element: Option<&InteractedElement>) -> Option<&'static str> {
    element
        .and_then(|e| name_from_attributes(&e.attributes))
        .or_else(|| name_from_pattern(value))
}

fn name_from_attributes(attributes: &serde_json::Map<String, Value>) -> Option<&'static str> {
    let attr = |key: &str| attributes.get(key).and_then(Value::as_str).unwrap_or("");
    match attr("type").to_lowercase().as_str() {
        "email" => return Some("email"),
        "tel" => return Some("phone"),
        "date" => return Some("date"),
        "number" => return Some("number"),
        "url" => return Some("url"),
        _ => {}
    }
    let text = ["id", "name", "placeholder", "aria-label"]
        .map(attr)
        .join(" ")
        .to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    let name = if has(&["address", "street", "addr"]) {
        if has(&["billing"]) {
            "billing_address"
        } else if has(&["shipping"]) {
            "shipping_address"
        } else {
            "address"
        }
    } else if has(&["comment", "note", "message", "description"]) {
        "comment"
    } else if has(&["email", "e-mail"]) {
        "email"
    } else if has(&["phone", "tel", "mobile", "cell"]) {
        "phone"
    } else if has(&["name"]) {
        if has(&["first"]) {
            "first_name"
        } else if has(&["last"]) {
            "last_name"
        } else if has(&["full"]) {
            "full_name"
        } else {
            "name"
        }
    } else if has(&["date", "dob", "birth"]) {
        "date"
    } else if has(&["city"]) {
        "city"
    } else if has(&["state", "province"]) {
        "state"
    } else if has(&["country"]) {
        "country"
    } else if has(&["zip", "postal", "postcode"]) {
        "zip_code"
    } else if has(&["company", "organization"]) {
        "company"
    } else if has(&["search", "query"]) {
        "query"
    } else {
        return None;
    };
    Some(name)
}

fn name_from_pattern(value: &str) -> Option<&'static str> {
    static EMAIL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[\w.-]+@[\w.-]+\.\w+$").expect("valid regex")
    });
    static DATE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("valid regex")
    });
    if EMAIL.is_match(value) {
        return Some("email");
    }
    let phone_chars = value
        .chars()
        .all(|c| c.is_ascii_digit() || " -()+".contains(c));
    if phone_chars && value.chars().filter(char::is_ascii_digit).count() >= 10 {
        return Some("phone");
    }
    if DATE.is_match(value) {
        return Some("date");
    }
    let letters = value.chars().filter(|c| *c != ' ' && *c != '-');
    let count = value.chars().count();
    if value.chars().next().is_some_and(char::is_uppercase)
        && letters.clone().count() > 0
        && letters.into_iter().all(char::is_alphabetic)
        && (2..=30).contains(&count)
    {
        return Some(match value.split_whitespace().count() {
            1 => "first_name",
            2 => "full_name",
            _ => "name",
        });
    }
    if value.chars().all(|c| c.is_ascii_digit()) && (1..=9).contains(&count) {
        return Some("number");
    }
    None
}

/// `item` with its values made slots: in the actions' string parameters and the goals, the
/// results' texts, the page's URL, title and tabs, and the elements' names, attributes and
/// regions. An element chosen because its region showed a value gets `near`; one whose own
/// name shows it loses its identity hash (the element with the new value has another).
pub(super) fn slot_step(item: &AgentHistory, slots: &[(String, String)]) -> AgentHistory {
    let mut step = item.clone();
    step.state_message = None;
    for element in step.state.interacted_element.iter_mut().flatten() {
        mark_near(element, slots);
    }
    if let Some(output) = &mut step.model_output {
        let mut value = serde_json::to_value(&*output).unwrap_or(Value::Null);
        slot_value(&mut value, slots);
        if let Ok(slotted) = serde_json::from_value(value) {
            *output = slotted;
        }
    }
    for result in &mut step.result {
        for text in [
            &mut result.extracted_content,
            &mut result.long_term_memory,
            &mut result.error,
        ]
        .into_iter()
        .flatten()
        {
            *text = make_slots(text, slots);
        }
        if let Some(metadata) = &mut result.metadata {
            metadata.remove("replay");
        }
    }
    let state = &mut step.state;
    state.url = make_slots(&state.url, slots);
    state.title = make_slots(&state.title, slots);
    for tab in &mut state.tabs {
        tab.url = make_slots(&tab.url, slots);
        tab.title = make_slots(&tab.title, slots);
    }
    for element in state.interacted_element.iter_mut().flatten() {
        for text in [&mut element.ax_name, &mut element.region]
            .into_iter()
            .flatten()
        {
            *text = make_slots(text, slots);
        }
        for value in element.attributes.values_mut() {
            slot_value(value, slots);
        }
    }
    step
}

/// Sets `near` when the element's region shows a value its own name does not; drops the
/// identity hash when its name shows one.
fn mark_near(element: &mut InteractedElement, slots: &[(String, String)]) {
    let mut ordered: Vec<&(String, String)> = slots.iter().collect();
    ordered.sort_by_key(|(_, v)| std::cmp::Reverse(v.chars().count()));
    let name = element.ax_name.clone().unwrap_or_default();
    if ordered.iter().any(|(_, v)| shows(&name, v)) {
        element.element_hash = None;
        return;
    }
    if element.near.is_some() {
        return;
    }
    let region = element.region.clone().unwrap_or_default();
    if let Some((slot_name, _)) = ordered.iter().find(|(_, v)| shows(&region, v)) {
        element.near = Some(slot(slot_name, Encoding::Raw));
        element.element_hash = None;
    }
}

fn slot_value(value: &mut Value, slots: &[(String, String)]) {
    match value {
        Value::String(text) => *text = make_slots(text, slots),
        Value::Array(items) => items.iter_mut().for_each(|v| slot_value(v, slots)),
        Value::Object(map) => map.values_mut().for_each(|v| slot_value(v, slots)),
        _ => {}
    }
}

pub(super) fn healed_script(
    previous: &SkillScript,
    execution: &AgentHistoryList,
    report: &ReplayReport,
    values: &BTreeMap<String, String>,
) -> SkillScript {
    let slots: Vec<(String, String)> = values
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let healed: Vec<u32> = report.healed.iter().map(|h| h.step).collect();
    let mut steps = Vec::new();
    let items: Vec<&AgentHistory> = execution
        .history
        .iter()
        .filter(|h| h.model_output.is_some())
        .collect();
    for (position, item) in items.iter().enumerate() {
        let last = position + 1 == items.len();
        if is_done_step(item) && !last {
            // A healer's `done` ended its own small task, not the skill's.
            continue;
        }
        let mut item = (*item).clone();
        if let Some(recorded) = replayed_step(&item) {
            if healed.contains(&recorded) {
                keep_successful_prefix(&mut item);
                if item
                    .model_output
                    .as_ref()
                    .is_none_or(|o| o.action.is_empty())
                {
                    continue;
                }
            }
            carry_near(&mut item, previous, recorded);
        }
        steps.push(slot_step(&item, &slots));
    }
    SkillScript {
        steps: AgentHistoryList {
            history: steps,
            usage: execution.usage.clone(),
        },
        parameters: previous.parameters.clone(),
        result: previous.result.clone(),
    }
}

/// The recorded step number a replayed record carried out (from its results' `replay`
/// reports); `None` for the healer's own steps.
fn replayed_step(item: &AgentHistory) -> Option<u32> {
    item.result.iter().find_map(|r| {
        let step = r.metadata.as_ref()?.get("replay")?.get("step")?.as_u64()?;
        u32::try_from(step).ok()
    })
}

/// Keeps the actions that worked, before the first that failed.
fn keep_successful_prefix(item: &mut AgentHistory) {
    let ok = item.result.iter().take_while(|r| r.error.is_none()).count();
    if let Some(output) = &mut item.model_output {
        output.action.truncate(ok);
    }
    item.result.truncate(ok);
    item.state.interacted_element.truncate(ok);
}

/// Gives the replayed record's elements the `near` of the recorded step they came from.
fn carry_near(item: &mut AgentHistory, previous: &SkillScript, recorded: u32) {
    let Some(source) = previous
        .steps
        .history
        .iter()
        .find(|s| s.metadata.step_number == recorded)
    else {
        return;
    };
    for (element, old) in item
        .state
        .interacted_element
        .iter_mut()
        .zip(&source.state.interacted_element)
    {
        if let (Some(element), Some(old)) = (element.as_mut(), old.as_ref())
            && old.near.is_some()
        {
            element.near.clone_from(&old.near);
            element.element_hash = None;
        }
    }
}

#[cfg(test)]
mod tests;
