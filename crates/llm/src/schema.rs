//! Provider-specific rewrites of the caller's JSON Schema.
//!
//! The caller's schema is always what replies are validated against; these rewrites only shape
//! what is sent to the provider.
//!
//! **OpenAI strict mode** ([`openai_strict`]): every object gets `additionalProperties: false`,
//! every property is listed in `required`, and properties that were optional become nullable
//! (`"type": [T, "null"]`, or `anyOf: [T, {"type": "null"}]` when there is no plain `type`; `null`
//! is added to an `enum`). `oneOf` becomes `anyOf`; `default` is removed. The nulls the model
//! then sends for optional members are removed again before validation
//! ([`crate::output::prune_optional_nulls`]). A schema that cannot be strict — a free-form object
//! (no `properties`, or `additionalProperties` not `false`), `allOf`, or a root that is not an
//! object — is sent with `strict: false` instead.
//!
//! **Gemini** ([`gemini_schema`]): Gemini's `responseSchema` is an OpenAPI 3.0 subset. Local
//! `$ref`s are inlined (a recursive reference is cut to a placeholder object), `allOf` is merged,
//! `oneOf` becomes `anyOf`, `{"type": "null"}` branches and `"null"` types become
//! `nullable: true`, `const` becomes a one-value `enum`, non-string enums are dropped, type names
//! are upper-cased, `propertyOrdering` keeps the caller's property order, and anything else
//! (`additionalProperties`, `$defs`, `title`, `default`, `examples`, unsupported `format`s…) is
//! dropped. Objects without properties get an optional `_placeholder` string property because
//! Gemini rejects empty objects; the provider removes that member from replies.

use serde_json::{Map, Value, json};

use crate::output::resolve_local_ref;

/// Name of the property added to empty objects for Gemini.
pub(crate) const GEMINI_PLACEHOLDER: &str = "_placeholder";

/// OpenAI strict-mode version of `schema`, or `None` when the schema cannot be strict.
pub fn openai_strict(schema: &Value) -> Option<Value> {
    if !is_object_schema(schema.as_object()?) {
        return None;
    }
    let mut out = schema.clone();
    make_strict(&mut out).then_some(out)
}

fn is_object_schema(node: &Map<String, Value>) -> bool {
    node.contains_key("properties")
        || match node.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
            _ => false,
        }
}

fn is_nullable(node: &Value) -> bool {
    let Some(obj) = node.as_object() else {
        return true; // `true` schema accepts null
    };
    match obj.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(types)) if types.iter().any(|t| t == "null") => return true,
        _ => {}
    }
    ["anyOf", "oneOf"].iter().any(|k| {
        obj.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(is_nullable))
    })
}

fn make_nullable(node: Value) -> Value {
    if is_nullable(&node) {
        return node;
    }
    let Value::Object(mut obj) = node else {
        return node;
    };
    let plain_type = match obj.get("type") {
        Some(Value::String(t)) => Some(vec![Value::String(t.clone())]),
        Some(Value::Array(types)) => Some(types.clone()),
        _ => None,
    };
    match plain_type {
        Some(mut types) if !obj.contains_key("anyOf") && !obj.contains_key("$ref") => {
            types.push(Value::String("null".to_owned()));
            obj.insert("type".to_owned(), Value::Array(types));
            if let Some(Value::Array(values)) = obj.get_mut("enum")
                && !values.contains(&Value::Null)
            {
                values.push(Value::Null);
            }
            Value::Object(obj)
        }
        _ => json!({"anyOf": [Value::Object(obj), {"type": "null"}]}),
    }
}

/// Rewrites `node` in place; returns false when it cannot be strict.
fn make_strict(node: &mut Value) -> bool {
    let Some(obj) = node.as_object_mut() else {
        return true; // boolean schemas pass through
    };
    if obj.contains_key("allOf") {
        return false;
    }
    obj.remove("default");
    if let Some(one_of) = obj.remove("oneOf") {
        obj.insert("anyOf".to_owned(), one_of);
    }
    if is_object_schema(obj) {
        match obj.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return false,
        }
        if !matches!(obj.get("properties"), Some(Value::Object(_))) {
            return false; // free-form object
        }
        let required: Vec<String> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let Some(Value::Object(properties)) = obj.get_mut("properties") else {
            return false;
        };
        let mut all_keys = Vec::with_capacity(properties.len());
        for (key, sub) in properties.iter_mut() {
            if !make_strict(sub) {
                return false;
            }
            if !required.contains(key) {
                *sub = make_nullable(std::mem::take(sub));
            }
            all_keys.push(Value::String(key.clone()));
        }
        obj.insert("required".to_owned(), Value::Array(all_keys));
        obj.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for key in ["items", "not"] {
        if let Some(sub) = obj.get_mut(key)
            && !make_strict(sub)
        {
            return false;
        }
    }
    for key in ["anyOf", "prefixItems"] {
        if let Some(Value::Array(branches)) = obj.get_mut(key) {
            for branch in branches {
                if !make_strict(branch) {
                    return false;
                }
            }
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = obj.get_mut(key) {
            for def in defs.values_mut() {
                if !make_strict(def) {
                    return false;
                }
            }
        }
    }
    true
}

/// Gemini `responseSchema` version of `schema` (see the module docs for what changes).
pub fn gemini_schema(schema: &Value) -> Value {
    let mut ref_stack = Vec::new();
    gemini_node(schema, schema, &mut ref_stack)
}

fn placeholder_object() -> Value {
    json!({"type": "OBJECT", "properties": {GEMINI_PLACEHOLDER: {"type": "STRING"}}})
}

fn gemini_node(node: &Value, root: &Value, ref_stack: &mut Vec<String>) -> Value {
    let Some(obj) = node.as_object() else {
        return json!({}); // `true`: anything
    };

    // $ref: inline, with the referring node's own keywords (description…) taking precedence.
    if let Some(Value::String(reference)) = obj.get("$ref") {
        return gemini_ref(obj, reference, root, ref_stack);
    }

    if let Some(Value::Array(parts)) = obj.get("allOf") {
        let merged = merge_all_of(obj, parts, root);
        return gemini_node(&Value::Object(merged), root, ref_stack);
    }

    let mut out = Map::new();
    let mut nullable = obj
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false);

    // anyOf / oneOf: null branches become `nullable`; one branch left is merged in; otherwise
    // Gemini allows no sibling keywords next to anyOf.
    let branches = obj
        .get("anyOf")
        .or_else(|| obj.get("oneOf"))
        .and_then(Value::as_array);
    if let Some(branches) = branches {
        return gemini_any_of(obj, branches, nullable, root, ref_stack);
    }

    // type: strings upper-cased; a list of types loses "null" (→ nullable) and, when several
    // remain, becomes anyOf.
    let mut types = gemini_types(obj, &mut nullable);
    if types.len() > 1 {
        let branches: Vec<Value> = types
            .iter()
            .map(|t| {
                let mut single = obj.clone();
                single.insert("type".to_owned(), Value::String(t.clone()));
                if nullable {
                    single.insert("nullable".to_owned(), Value::Bool(true));
                }
                gemini_node(&Value::Object(single), root, ref_stack)
            })
            .collect();
        return json!({"anyOf": branches});
    }

    // const → enum; string enums only (null members → nullable).
    let enum_values = gemini_enum(obj, &mut nullable, &mut types);

    let mut kind = types.pop();
    if kind.is_none() && (obj.contains_key("properties")) {
        kind = Some("object".to_owned());
    }
    if kind.is_none() && obj.contains_key("items") {
        kind = Some("array".to_owned());
    }
    if let Some(kind) = &kind {
        out.insert("type".to_owned(), Value::String(kind.to_ascii_uppercase()));
    }
    for key in [
        "description",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "maxProperties",
    ] {
        if let Some(v) = obj.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(Value::String(format)) = obj.get("format")
        && gemini_format_allowed(kind.as_deref(), format)
    {
        out.insert("format".to_owned(), Value::String(format.clone()));
    }
    if let Some(values) = enum_values {
        out.insert("enum".to_owned(), Value::Array(values));
    }
    if nullable {
        out.insert("nullable".to_owned(), Value::Bool(true));
    }

    match kind.as_deref() {
        Some("object") => gemini_properties(obj, &mut out, root, ref_stack),
        Some("array") => {
            let items = obj.get("items").map_or_else(
                || json!({"type": "STRING"}),
                |i| gemini_node(i, root, ref_stack),
            );
            out.insert("items".to_owned(), items);
        }
        _ => {}
    }
    Value::Object(out)
}

/// A `$ref` inlined (the referring node's own keywords taking precedence); a recursive or
/// unresolvable one is cut to a placeholder object.
fn gemini_ref(
    obj: &Map<String, Value>,
    reference: &str,
    root: &Value,
    ref_stack: &mut Vec<String>,
) -> Value {
    if ref_stack.iter().any(|r| r == reference) || ref_stack.len() > 32 {
        return placeholder_object();
    }
    let Some(target) = resolve_local_ref(root, reference) else {
        return placeholder_object();
    };
    let mut merged = target.as_object().cloned().unwrap_or_default();
    for (k, v) in obj {
        if k != "$ref" {
            merged.insert(k.clone(), v.clone());
        }
    }
    ref_stack.push(reference.to_owned());
    let out = gemini_node(&Value::Object(merged), root, ref_stack);
    ref_stack.pop();
    out
}

/// `obj` with its `allOf` parts merged in: their properties and required names added, their
/// other keywords where `obj` has none.
fn merge_all_of(obj: &Map<String, Value>, parts: &[Value], root: &Value) -> Map<String, Value> {
    let mut merged = obj.clone();
    merged.remove("allOf");
    for part in parts {
        let resolved = match part.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve_local_ref(root, r).cloned().unwrap_or(Value::Null),
            None => part.clone(),
        };
        let Some(part_obj) = resolved.as_object() else {
            continue;
        };
        for (k, v) in part_obj {
            match (k.as_str(), merged.get_mut(k)) {
                ("properties", Some(Value::Object(existing))) => {
                    if let Value::Object(extra) = v {
                        for (pk, pv) in extra {
                            existing.entry(pk.clone()).or_insert_with(|| pv.clone());
                        }
                    }
                }
                ("required", Some(Value::Array(existing))) => {
                    if let Value::Array(extra) = v {
                        for r in extra {
                            if !existing.contains(r) {
                                existing.push(r.clone());
                            }
                        }
                    }
                }
                (_, Some(_)) => {}
                (_, None) => {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
    }
    merged
}

/// `anyOf` / `oneOf`: null branches make the others nullable; one branch left is the node
/// (with the node's description); otherwise an `anyOf` alone.
fn gemini_any_of(
    obj: &Map<String, Value>,
    branches: &[Value],
    mut nullable: bool,
    root: &Value,
    ref_stack: &mut Vec<String>,
) -> Value {
    let mut out = Map::new();
    let mut kept = Vec::new();
    for branch in branches {
        if branch.get("type").and_then(Value::as_str) == Some("null") {
            nullable = true;
        } else {
            kept.push(gemini_node(branch, root, ref_stack));
        }
    }
    if kept.len() == 1 {
        let mut single = kept.pop().unwrap_or_default();
        if let Some(single_obj) = single.as_object_mut() {
            if let Some(description) = obj.get("description") {
                single_obj
                    .entry("description")
                    .or_insert_with(|| description.clone());
            }
            if nullable {
                single_obj.insert("nullable".to_owned(), Value::Bool(true));
            }
        }
        return single;
    }
    if nullable {
        for branch in &mut kept {
            if let Some(b) = branch.as_object_mut() {
                b.insert("nullable".to_owned(), Value::Bool(true));
            }
        }
    }
    out.insert("anyOf".to_owned(), Value::Array(kept));
    Value::Object(out)
}

/// The node's types without `"null"` (which makes it `nullable`).
fn gemini_types(obj: &Map<String, Value>, nullable: &mut bool) -> Vec<String> {
    let mut types: Vec<String> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    if types.iter().any(|t| t == "null") {
        *nullable = true;
        types.retain(|t| t != "null");
    }
    types
}

/// The node's `enum` (or `const` as a one-value enum) when its values are strings, without
/// `null` (which makes it `nullable`); an enum without a type is a string.
fn gemini_enum(
    obj: &Map<String, Value>,
    nullable: &mut bool,
    types: &mut Vec<String>,
) -> Option<Vec<Value>> {
    let mut enum_values: Option<Vec<Value>> = obj
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| obj.get("const").map(|c| vec![c.clone()]));
    if let Some(values) = &mut enum_values {
        if values.iter().any(Value::is_null) {
            *nullable = true;
            values.retain(|v| !v.is_null());
        }
        if values.is_empty() || !values.iter().all(Value::is_string) {
            enum_values = None;
        } else if types.is_empty() {
            types.push("string".to_owned());
        }
    }
    enum_values
}

/// Whether Gemini takes `format` on a node of `kind`.
fn gemini_format_allowed(kind: Option<&str>, format: &str) -> bool {
    match kind {
        Some("string") => ["enum", "date-time"].contains(&format),
        Some("integer") => ["int32", "int64"].contains(&format),
        Some("number") => ["float", "double"].contains(&format),
        _ => false,
    }
}

/// An object's properties (in the caller's order, kept in `propertyOrdering`) and the
/// required ones among them; an object without properties gets the placeholder one.
fn gemini_properties(
    obj: &Map<String, Value>,
    out: &mut Map<String, Value>,
    root: &Value,
    ref_stack: &mut Vec<String>,
) {
    let properties = obj.get("properties").and_then(Value::as_object);
    match properties {
        Some(properties) if !properties.is_empty() => {
            let mut translated = Map::new();
            for (k, v) in properties {
                translated.insert(k.clone(), gemini_node(v, root, ref_stack));
            }
            let order: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
            let required: Vec<Value> = obj
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter(|k| k.as_str().is_some_and(|k| properties.contains_key(k)))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            out.insert("properties".to_owned(), Value::Object(translated));
            if !required.is_empty() {
                out.insert("required".to_owned(), Value::Array(required));
            }
            out.insert("propertyOrdering".to_owned(), Value::Array(order));
        }
        _ => {
            out.insert(
                "properties".to_owned(),
                json!({GEMINI_PLACEHOLDER: {"type": "STRING"}}),
            );
        }
    }
}

/// Removes the `_placeholder` members Gemini may fill in for empty objects.
pub(crate) fn remove_gemini_placeholders(value: &mut Value) {
    match value {
        Value::Object(members) => {
            members.shift_remove(GEMINI_PLACEHOLDER);
            members.values_mut().for_each(remove_gemini_placeholders);
        }
        Value::Array(items) => items.iter_mut().for_each(remove_gemini_placeholders),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_like_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "thinking": {"type": "string", "default": ""},
                "memory": {"type": "string"},
                "mode": {"enum": ["a", "b"], "type": "string"},
                "action": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/Action"}}
            },
            "required": ["memory", "action"],
            "$defs": {
                "Action": {"oneOf": [
                    {"type": "object", "properties": {"go_back": {"type": "object", "properties": {}}},
                     "required": ["go_back"], "additionalProperties": false},
                    {"type": "object", "properties": {"click": {"$ref": "#/$defs/Click"}},
                     "required": ["click"]}
                ]},
                "Click": {"type": "object", "title": "Click",
                    "properties": {"index": {"type": "integer", "format": "uint32"},
                                   "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                    "required": ["index"]}
            }
        })
    }

    #[test]
    fn strict_makes_every_property_required_and_optional_ones_nullable() {
        let strict = openai_strict(&agent_like_schema()).expect("strict-compatible");
        assert_eq!(
            strict["required"],
            json!(["thinking", "memory", "mode", "action"])
        );
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(
            strict["properties"]["thinking"],
            json!({"type": ["string", "null"]})
        );
        assert_eq!(strict["properties"]["memory"], json!({"type": "string"}));
        assert_eq!(
            strict["properties"]["mode"],
            json!({"enum": ["a", "b", null], "type": ["string", "null"]})
        );
        let click = &strict["$defs"]["Click"];
        assert_eq!(click["required"], json!(["index", "note"]));
        assert_eq!(click["additionalProperties"], json!(false));
        assert!(strict["$defs"]["Action"].get("anyOf").is_some());
        assert!(strict["$defs"]["Action"].get("oneOf").is_none());
        let go_back = &strict["$defs"]["Action"]["anyOf"][0]["properties"]["go_back"];
        assert_eq!(go_back["additionalProperties"], json!(false));
        assert_eq!(go_back["required"], json!([]));
    }

    #[test]
    fn free_form_objects_cannot_be_strict() {
        assert!(openai_strict(&json!({"type": "object"})).is_none());
        assert!(
            openai_strict(&json!({"type": "object", "properties": {"data": {"type": "object", "additionalProperties": true}}}))
                .is_none()
        );
        assert!(openai_strict(&json!({"type": "string"})).is_none());
    }

    #[test]
    fn gemini_inlines_refs_and_uses_openapi_subset() {
        let gemini = gemini_schema(&agent_like_schema());
        let text = gemini.to_string();
        for banned in [
            "$ref",
            "$defs",
            "additionalProperties",
            "oneOf",
            "default",
            "title",
            "uint32",
        ] {
            assert!(!text.contains(banned), "{banned} left in {text}");
        }
        assert_eq!(gemini["type"], json!("OBJECT"));
        assert_eq!(
            gemini["propertyOrdering"],
            json!(["thinking", "memory", "mode", "action"])
        );
        assert_eq!(gemini["required"], json!(["memory", "action"]));
        let action = &gemini["properties"]["action"];
        assert_eq!(action["type"], json!("ARRAY"));
        assert_eq!(action["minItems"], json!(1));
        let branches = action["items"]["anyOf"].as_array().unwrap();
        assert_eq!(branches.len(), 2);
        assert_eq!(
            branches[0]["properties"]["go_back"]["properties"],
            json!({GEMINI_PLACEHOLDER: {"type": "STRING"}})
        );
        let click = &branches[1]["properties"]["click"];
        assert_eq!(click["properties"]["index"], json!({"type": "INTEGER"}));
        assert_eq!(
            click["properties"]["note"],
            json!({"type": "STRING", "nullable": true})
        );
    }

    #[test]
    fn gemini_handles_const_type_lists_and_recursion() {
        let schema = json!({
            "type": "object",
            "properties": {
                "kind": {"const": "done"},
                "count": {"type": ["integer", "null"]},
                "either": {"type": ["string", "integer"]},
                "tree": {"$ref": "#/$defs/Node"}
            },
            "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}}
        });
        let gemini = gemini_schema(&schema);
        let p = &gemini["properties"];
        assert_eq!(p["kind"], json!({"type": "STRING", "enum": ["done"]}));
        assert_eq!(p["count"], json!({"type": "INTEGER", "nullable": true}));
        assert_eq!(
            p["either"],
            json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]})
        );
        assert_eq!(p["tree"]["properties"]["child"], placeholder_object());
    }

    #[test]
    fn placeholders_are_removed_from_replies() {
        let mut v = json!({"a": {"_placeholder": "x"}, "b": [{"_placeholder": ""}]});
        remove_gemini_placeholders(&mut v);
        assert_eq!(v, json!({"a": {}, "b": [{}]}));
    }
}
