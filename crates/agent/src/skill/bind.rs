//! Binding an execution's values to a script: checking them against the parameters and
//! filling every slot of the steps.
//!
//! A `string` parameter takes a JSON string; a `number` one a JSON number or a string that is
//! one (`"1042"`); a `boolean` one `true`/`false` or the strings `"true"`/`"false"`. `null`
//! counts as not given. Unknown names, missing required parameters and values of another type
//! are errors naming the parameter.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::params::{fill_slots, infer_kind};
use super::{ParameterKind, SkillError, SkillParameter, SkillScript};
use crate::views::AgentHistoryList;

pub(super) fn bind(
    script: &SkillScript,
    values: &Map<String, Value>,
) -> Result<(BTreeMap<String, String>, AgentHistoryList), SkillError> {
    let texts = check_values(&script.parameters, values)?;
    let steps = fill_history(&script.steps, &texts);
    Ok((texts, steps))
}

/// The values as text, defaults applied.
pub fn check_values(
    parameters: &[SkillParameter],
    values: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, SkillError> {
    if let Some(unknown) = values
        .keys()
        .find(|name| !parameters.iter().any(|p| &p.name == *name))
    {
        let known: Vec<&str> = parameters.iter().map(|p| p.name.as_str()).collect();
        let known = if known.is_empty() {
            "this skill takes none".to_owned()
        } else {
            format!("known: {}", known.join(", "))
        };
        return Err(SkillError::Parameters(format!(
            "unknown parameter `{unknown}` ({known})"
        )));
    }
    let mut texts = BTreeMap::new();
    for parameter in parameters {
        let given = values.get(&parameter.name).filter(|v| !v.is_null());
        let value = match (given, &parameter.default) {
            (Some(value), _) => value,
            (None, Some(default)) => default,
            (None, None) if parameter.required => {
                return Err(SkillError::Parameters(format!(
                    "parameter `{}` is required",
                    parameter.name
                )));
            }
            (None, None) => {
                texts.insert(parameter.name.clone(), String::new());
                continue;
            }
        };
        let text = as_text(parameter, value)?;
        texts.insert(parameter.name.clone(), text);
    }
    Ok(texts)
}

fn as_text(parameter: &SkillParameter, value: &Value) -> Result<String, SkillError> {
    let mismatch = |kind: &str| {
        SkillError::Parameters(format!(
            "parameter `{}` must be {kind}, got {value}",
            parameter.name
        ))
    };
    match (parameter.kind, value) {
        (ParameterKind::String, Value::String(text)) => Ok(text.clone()),
        (ParameterKind::String, _) => Err(mismatch("a string")),
        (ParameterKind::Number, Value::Number(n)) => Ok(n.to_string()),
        (ParameterKind::Number, Value::String(text))
            if infer_kind(text) == ParameterKind::Number =>
        {
            Ok(text.trim().to_owned())
        }
        (ParameterKind::Number, _) => Err(mismatch("a number")),
        (ParameterKind::Boolean, Value::Bool(b)) => Ok(b.to_string()),
        (ParameterKind::Boolean, Value::String(text))
            if infer_kind(text) == ParameterKind::Boolean =>
        {
            Ok(text.trim().to_owned())
        }
        (ParameterKind::Boolean, _) => Err(mismatch("true or false")),
    }
}

/// `steps` with every slot filled, everywhere (parameters, goals, results, URLs, element
/// names, `near`).
pub fn fill_history(
    steps: &AgentHistoryList,
    values: &BTreeMap<String, String>,
) -> AgentHistoryList {
    let Ok(mut value) = serde_json::to_value(steps) else {
        return steps.clone();
    };
    fill_value(&mut value, values);
    serde_json::from_value(value).unwrap_or_else(|_| steps.clone())
}

/// Fills the slots of every string in `value`.
pub fn fill_value(value: &mut Value, values: &BTreeMap<String, String>) {
    match value {
        Value::String(text) if text.contains("{{") => *text = fill_slots(text, values),
        Value::Array(items) => items.iter_mut().for_each(|v| fill_value(v, values)),
        Value::Object(map) => map.values_mut().for_each(|v| fill_value(v, values)),
        _ => {}
    }
}
