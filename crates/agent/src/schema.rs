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

const DEF_KEYS: [&str; 2] = ["$defs", "definitions"];

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
        Some(schema) => {
            // `#/$defs/…` refs of the task schema must resolve at the root of the final schema:
            // move its definitions up (agent_output_schema hoists them further).
            let mut data = schema.clone();
            let mut defs = Map::new();
            if let Some(obj) = data.as_object_mut() {
                for key in DEF_KEYS {
                    if let Some(Value::Object(d)) = obj.remove(key) {
                        defs.insert(key.to_owned(), Value::Object(d));
                    }
                }
            }
            let mut params = json!({
            "type": "object",
            "properties": {
                "data": data,
                "success": {"type": "boolean", "default": true, "description": "true only if every requirement is met"}
            },
            "required": ["data", "success"],
            "additionalProperties": false
            });
            if let Some(obj) = params.as_object_mut() {
                obj.extend(defs);
            }
            params
        }
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

/// The variant for one action; its parameter schema's definitions move into `defs` so that
/// `#/$defs/…` references (as schemars writes them) resolve at the root.
fn action_variant(spec: &ActionSpec, defs: &mut Map<String, Value>) -> Value {
    let mut params = spec.params_schema.clone();
    if let Some(obj) = params.as_object_mut() {
        for key in DEF_KEYS {
            if let Some(Value::Object(found)) = obj.remove(key) {
                let Value::Object(target) = defs
                    .entry(key.to_owned())
                    .or_insert_with(|| Value::Object(Map::new()))
                else {
                    continue;
                };
                for (name, def) in found {
                    match target.get(&name) {
                        Some(existing) if existing != &def => tracing::warn!(
                            action = %spec.name,
                            definition = %name,
                            "two actions define `{name}` differently; keeping the first"
                        ),
                        Some(_) => {}
                        None => {
                            target.insert(name, def);
                        }
                    }
                }
            }
        }
    }
    let mut variant = Map::new();
    variant.insert("type".into(), json!("object"));
    if !spec.description.is_empty() {
        variant.insert("description".into(), json!(spec.description));
    }
    let mut props = Map::new();
    props.insert(spec.name.clone(), params);
    variant.insert("properties".into(), Value::Object(props));
    variant.insert("required".into(), json!([spec.name]));
    variant.insert("additionalProperties".into(), json!(false));
    Value::Object(variant)
}

/// `AgentOutput` schema with `action: [anyOf {name: params}]` over `actions`.
pub fn agent_output_schema(actions: &[&ActionSpec], mode: SchemaMode) -> Value {
    let mut defs = Map::new();
    let variants: Vec<Value> = actions
        .iter()
        .map(|s| action_variant(s, &mut defs))
        .collect();
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
    let mut schema = json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false
    });
    if let Some(obj) = schema.as_object_mut() {
        obj.extend(defs);
    }
    schema
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

    #[test]
    fn definitions_are_hoisted_so_refs_resolve() {
        let task_schema = json!({
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "required": ["items"],
            "$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
        });
        let done = done_spec(Some(&task_schema));
        let scroll = ActionSpec {
            name: "scroll".into(),
            description: String::new(),
            params_schema: json!({
                "type": "object",
                "properties": {"direction": {"$ref": "#/$defs/Direction"}},
                "$defs": {"Direction": {"type": "string", "enum": ["up", "down"]}}
            }),
            terminates_sequence: false,
            domains: vec![],
        };
        let schema = agent_output_schema(
            &[&done, &scroll],
            SchemaMode {
                thinking: false,
                flash: false,
                planning: false,
            },
        );
        assert!(schema["$defs"]["Item"].is_object() && schema["$defs"]["Direction"].is_object());
        let validator = jsonschema::validator_for(&schema).unwrap();
        let base = json!({"evaluation_previous_goal": "", "memory": "", "next_goal": ""});
        let with = |action: Value| {
            let mut v = base.clone();
            v["action"] = json!([action]);
            v
        };
        assert!(validator.is_valid(&with(
            json!({"done": {"data": {"items": [{"name": "a"}]}, "success": true}})
        )));
        assert!(!validator.is_valid(&with(
            json!({"done": {"data": {"items": [{"nome": "a"}]}, "success": true}})
        )));
        assert!(validator.is_valid(&with(json!({"scroll": {"direction": "up"}}))));
        assert!(!validator.is_valid(&with(json!({"scroll": {"direction": "left"}}))));
    }
}
