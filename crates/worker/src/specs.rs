//! The browser's actions as the agent's `ActionSpec`s, built from the `Action` JSON schema.

use browserd_agent::ActionSpec;
use browserd_views::{AGENT_OWNED_ACTIONS, terminates_sequence};
use serde_json::{Map, Value};

/// Our descriptions of browser-use's actions (browser-use leaves `search`, `navigate`,
/// `upload_file`, `send_keys` and `dropdown_options` without one: the parameters speak).
fn description(name: &str) -> &'static str {
    match name {
        "go_back" => "Go back to the previous page in the tab's history.",
        "wait" => "Wait a few seconds (at most 30) for the page to finish loading or updating.",
        "click" => "Click an element by its index, or at viewport coordinates.",
        "input" => {
            "Type text into the element with this index. Existing text is cleared first unless clear is false."
        }
        "switch" => "Switch to another tab by its 4-character tab_id.",
        "close" => "Close the tab with this 4-character tab_id.",
        "search_page" => {
            "Search the page text for a pattern (plain text or regex) and get the matches with context; no model call."
        }
        "find_elements" => {
            "Query the page with a CSS selector and list matching elements with their text and attributes."
        }
        "scroll" => {
            "Scroll the page (or the scroll container with this index) down or up by a number of pages."
        }
        "find_text" => "Scroll to the first occurrence of this text on the page.",
        "screenshot" => {
            "Take a screenshot: with file_name it is saved to the workspace, without it the next step shows it to you."
        }
        "save_as_pdf" => "Save the current page as a PDF file in the workspace.",
        "select_dropdown" => {
            "Select the option with this exact text or value in the dropdown with this index."
        }
        "evaluate" => {
            "Run JavaScript in the page and get its result (awaited, returned by value, capped at 20 000 characters). Use it for what the other actions cannot do, e.g. reading data or reaching elements in shadow DOM."
        }
        _ => "",
    }
}

/// Every browser action (except those the agent owns), in browser-use's registration order.
pub fn browser_action_specs() -> Vec<ActionSpec> {
    let schema =
        serde_json::to_value(browserd_browser::actions::action_schema()).unwrap_or(Value::Null);
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let variants = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut specs = Vec::new();
    for variant in variants {
        let Some((name, params)) = variant
            .get("properties")
            .and_then(Value::as_object)
            .and_then(|p| p.iter().next())
        else {
            continue;
        };
        if AGENT_OWNED_ACTIONS.contains(&name.as_str()) {
            continue;
        }
        let mut params_schema = resolve_ref(params, &defs);
        strip_titles(&mut params_schema);
        let mut used = Map::new();
        collect_refs(&params_schema, &defs, &mut used);
        if !used.is_empty()
            && let Some(obj) = params_schema.as_object_mut()
        {
            let mut used_defs = Value::Object(used);
            strip_titles(&mut used_defs);
            obj.insert("$defs".to_owned(), used_defs);
        }
        specs.push(ActionSpec {
            name: name.clone(),
            description: description(name).to_owned(),
            params_schema,
            terminates_sequence: terminates_sequence(name),
            domains: Vec::new(),
        });
    }
    specs
}

fn def_name(reference: &str) -> Option<&str> {
    reference
        .strip_prefix("#/$defs/")
        .or_else(|| reference.strip_prefix("#/definitions/"))
}

fn resolve_ref(value: &Value, defs: &Map<String, Value>) -> Value {
    match value
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(def_name)
        .and_then(|n| defs.get(n))
    {
        Some(def) => def.clone(),
        None => value.clone(),
    }
}

/// The definitions `value` refers to, transitively.
fn collect_refs(value: &Value, defs: &Map<String, Value>, used: &mut Map<String, Value>) {
    match value {
        Value::Object(obj) => {
            if let Some(name) = obj.get("$ref").and_then(Value::as_str).and_then(def_name)
                && !used.contains_key(name)
                && let Some(def) = defs.get(name)
            {
                used.insert(name.to_owned(), def.clone());
                collect_refs(def, defs, used);
            }
            for v in obj.values() {
                collect_refs(v, defs, used);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, defs, used)),
        _ => {}
    }
}

/// Drops schemars' `title` keywords (browser-use drops them too), keeping property names.
fn strip_titles(value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if obj.get("title").is_some_and(Value::is_string) {
                obj.remove("title");
            }
            for (key, v) in obj.iter_mut() {
                if key == "properties" {
                    if let Value::Object(props) = v {
                        props.values_mut().for_each(strip_titles);
                    }
                } else {
                    strip_titles(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_titles),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_follow_browser_use_order_and_flags() {
        let specs = browser_action_specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "search",
                "navigate",
                "go_back",
                "wait",
                "click",
                "input",
                "upload_file",
                "switch",
                "close",
                "search_page",
                "find_elements",
                "scroll",
                "send_keys",
                "find_text",
                "screenshot",
                "save_as_pdf",
                "dropdown_options",
                "select_dropdown",
                "evaluate"
            ]
        );
        let terminating: Vec<&str> = specs
            .iter()
            .filter(|s| s.terminates_sequence)
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            terminating,
            ["search", "navigate", "go_back", "switch", "evaluate"]
        );
        let input = specs.iter().find(|s| s.name == "input").unwrap();
        assert_eq!(input.params_schema["type"], "object");
        assert!(input.params_schema["properties"]["text"].is_object());
        assert_eq!(
            input.params_schema["required"],
            serde_json::json!(["index", "text"])
        );
    }

    #[test]
    fn referenced_definitions_travel_with_the_params() {
        let specs = browser_action_specs();
        let search = specs.iter().find(|s| s.name == "search").unwrap();
        let engine_ref = search.params_schema["properties"]["engine"]["$ref"]
            .as_str()
            .unwrap();
        let name = def_name(engine_ref).unwrap();
        assert!(search.params_schema["$defs"][name]["enum"].is_array());
        let click = specs.iter().find(|s| s.name == "click").unwrap();
        assert!(click.params_schema.get("$defs").is_none());
        assert!(!click.params_schema.to_string().contains("\"title\""));
    }
}
