//! The AgentOutput JSON Schema sent to the model, built from the action specs.

use serde_json::{Map, Value, json};

use crate::browser::ActionSpec;

/// Which fields the model must fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaMode {
    /// Include `thinking`.
    pub thinking: bool,
    /// Only `memory` + `action`.
    pub flash: bool,
    /// Include `current_plan_item` / `plan_update`.
    pub planning: bool,
}

/// The `done` spec: free text, or `data` following the task's output schema.
pub fn done_spec(output_schema: Option<&Value>) -> ActionSpec {
    let params_schema = match output_schema {
        None => json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "everything the user asked for"},
                "success": {"type": "boolean", "default": true, "description": "true only if every requirement is met"},
                "files_to_display": {"type": "array", "items": {"type": "string"}, "default": [], "description": "workspace files to show the user"}
            },
            "required": ["text", "success"],
            "additionalProperties": false
        }),
        Some(schema) => json!({
            "type": "object",
            "properties": {
                "data": schema,
                "success": {"type": "boolean", "default": true, "description": "true only if every requirement is met"}
            },
            "required": ["data", "success"],
            "additionalProperties": false
        }),
    };
    let description = if output_schema.is_some() {
        "Finish the task: put the result in `data`, matching the required schema exactly."
    } else {
        "Finish the task and report the result to the user."
    };
    ActionSpec {
        name: "done".into(),
        description: description.into(),
        params_schema,
        terminates_sequence: true,
        domains: Vec::new(),
    }
}

fn action_variant(spec: &ActionSpec) -> Value {
    let mut variant = Map::new();
    variant.insert("type".into(), json!("object"));
    if !spec.description.is_empty() {
        variant.insert("description".into(), json!(spec.description));
    }
    let mut props = Map::new();
    props.insert(spec.name.clone(), spec.params_schema.clone());
    variant.insert("properties".into(), Value::Object(props));
    variant.insert("required".into(), json!([spec.name]));
    variant.insert("additionalProperties".into(), json!(false));
    Value::Object(variant)
}

/// `AgentOutput` schema with `action: [anyOf {name: params}]` over `actions`.
pub fn agent_output_schema(actions: &[&ActionSpec], mode: SchemaMode) -> Value {
    let variants: Vec<Value> = actions.iter().map(|s| action_variant(s)).collect();
    let action = json!({
        "type": "array",
        "minItems": 1,
        "description": "actions to run in order",
        "items": {"anyOf": variants}
    });
    let mut props = Map::new();
    let mut required = Vec::new();
    if mode.flash {
        props.insert("memory".into(), json!({"type": "string"}));
        required.push("memory");
    } else {
        if mode.thinking {
            props.insert("thinking".into(), json!({"type": "string"}));
        }
        for field in ["evaluation_previous_goal", "memory", "next_goal"] {
            props.insert(field.into(), json!({"type": "string"}));
            required.push(field);
        }
        if mode.planning {
            props.insert("current_plan_item".into(), json!({"type": "integer"}));
            props.insert(
                "plan_update".into(),
                json!({"type": "array", "items": {"type": "string"}}),
            );
        }
    }
    props.insert("action".into(), action);
    required.push("action");
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ActionSpec {
        ActionSpec {
            name: name.into(),
            description: format!("{name} it"),
            params_schema: json!({"type": "object", "properties": {"index": {"type": "integer"}}}),
            terminates_sequence: false,
            domains: vec![],
        }
    }

    #[test]
    fn builds_full_flash_and_done_variants() {
        let click = spec("click");
        let done = done_spec(None);
        let full = agent_output_schema(
            &[&done, &click],
            SchemaMode {
                thinking: true,
                flash: false,
                planning: true,
            },
        );
        assert_eq!(
            full["required"],
            json!(["evaluation_previous_goal", "memory", "next_goal", "action"])
        );
        assert!(full["properties"]["thinking"].is_object());
        assert!(full["properties"]["plan_update"].is_object());
        let items = &full["properties"]["action"]["items"]["anyOf"];
        assert_eq!(items[1]["required"], json!(["click"]));
        assert_eq!(items[1]["description"], "click it");
        let flash = agent_output_schema(
            &[&done],
            SchemaMode {
                thinking: true,
                flash: true,
                planning: true,
            },
        );
        let keys: Vec<&String> = flash["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["memory", "action"]);
        let structured = done_spec(Some(
            &json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ));
        assert_eq!(
            structured.params_schema["properties"]["data"]["properties"]["n"]["type"],
            "integer"
        );
        // The schema compiles as a JSON Schema.
        assert!(jsonschema::validator_for(&full).is_ok());
    }
}
