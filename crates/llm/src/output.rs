//! Turning a model's reply text into JSON: `<think>` stripping, code-fence extraction, and the
//! null pruning that undoes OpenAI strict-mode's "every property required" rule.

use serde_json::Value;

/// Removes reasoning blocks (`<think>…</think>`, also `<thinking>`), including an unclosed
/// opening block's tail handling: text before a stray closing tag is dropped.
pub fn strip_think(text: &str) -> String {
    let mut out = text.to_owned();
    for (open, close) in [("<think>", "</think>"), ("<thinking>", "</thinking>")] {
        // A closing tag with no opening tag: some servers drop the opening one from the output.
        if let Some(close_at) = out.rfind(close)
            && !out[..close_at].contains(open)
            && !out.trim_start().starts_with(['{', '['])
        {
            out = out[close_at + close.len()..].to_owned();
        }
        while let Some(start) = out.find(open) {
            match out[start..].find(close) {
                Some(rel_end) => {
                    out.replace_range(start..start + rel_end + close.len(), "");
                }
                None => {
                    // Unclosed reasoning: nothing after it is an answer.
                    out.truncate(start);
                }
            }
        }
    }
    out.trim().to_owned()
}

/// Why a reply did not yield JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseFailure {
    /// Human-readable reason (goes into the corrective message).
    pub reason: String,
}

/// Parses a reply as JSON: the whole text, else the first fenced ```json block, else the
/// outermost `{…}` span. `<think>` blocks are stripped first.
pub fn parse_json_reply(text: &str) -> Result<Value, ParseFailure> {
    // A reply that already is JSON is taken as is, so a `<think>` inside a string value survives.
    if let Ok(value) = serde_json::from_str::<Value>(text.trim()) {
        return Ok(unwrap_string_json(value));
    }
    let stripped = strip_think(text);
    if stripped.is_empty() {
        return Err(ParseFailure {
            reason: "the reply was empty".to_owned(),
        });
    }
    let first_error = match serde_json::from_str::<Value>(&stripped) {
        Ok(value) => return Ok(unwrap_string_json(value)),
        Err(e) => e,
    };
    for candidate in fenced_blocks(&stripped)
        .into_iter()
        .chain(outer_object(&stripped))
    {
        if let Ok(value) = serde_json::from_str::<Value>(candidate.trim()) {
            return Ok(unwrap_string_json(value));
        }
    }
    Err(ParseFailure {
        reason: format!("the reply is not valid JSON ({first_error})"),
    })
}

/// A JSON string whose content is itself a JSON object/array (double-encoded) is decoded once.
fn unwrap_string_json(value: Value) -> Value {
    if let Value::String(s) = &value
        && let Ok(inner @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(s.trim())
    {
        return inner;
    }
    value
}

/// Contents of ``` fenced blocks, ```json ones first.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut tagged = Vec::new();
    let mut untagged = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let (info, body_start) = match after.find('\n') {
            Some(nl) => (&after[..nl], nl + 1),
            None => break,
        };
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        let block = &body[..end];
        if info.trim().eq_ignore_ascii_case("json") {
            tagged.push(block);
        } else {
            untagged.push(block);
        }
        rest = &body[end + 3..];
    }
    tagged.extend(untagged);
    tagged
}

/// The span from the first `{` to the last `}`.
fn outer_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    (end > start).then(|| &text[start..=end])
}

/// Removes `null` members that the schema does not require, recursively (objects, arrays,
/// `anyOf`/`oneOf`/`allOf` branches, local `$ref`s).
///
/// OpenAI strict mode forces every property into `required` and makes optional ones nullable, so
/// a strict reply says `"thinking": null` where the caller's schema expects the member to be
/// absent. Dropping such members gives the value the caller's schema describes.
pub fn prune_optional_nulls(value: &mut Value, schema: &Value) {
    prune(value, schema, schema, 0);
}

fn prune(value: &mut Value, schema: &Value, root: &Value, depth: usize) {
    if depth > 64 {
        return;
    }
    let Some(schema_obj) = schema.as_object() else {
        return;
    };
    if let Some(Value::String(reference)) = schema_obj.get("$ref")
        && let Some(target) = resolve_local_ref(root, reference)
    {
        prune(value, target, root, depth + 1);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = schema_obj.get(key) {
            for branch in branches {
                prune(value, branch, root, depth + 1);
            }
        }
    }
    match value {
        Value::Object(members) => {
            let required: Vec<&str> = schema_obj
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema_obj.get("properties").and_then(Value::as_object);
            if properties.is_some() {
                members.retain(|k, v| !v.is_null() || required.contains(&k.as_str()));
            }
            if let Some(properties) = properties {
                for (k, v) in members.iter_mut() {
                    if let Some(sub) = properties.get(k) {
                        prune(v, sub, root, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema_obj.get("items") {
                for item in items {
                    prune(item, item_schema, root, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Resolves `#/…` JSON pointers inside the root schema.
pub(crate) fn resolve_local_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strips_think_blocks_and_parses() {
        let v = parse_json_reply("<think>let me {think}</think>\n{\"a\": 1}").unwrap();
        assert_eq!(v, json!({"a": 1}));
        let v = parse_json_reply("reasoning without opener</think>{\"a\": 2}").unwrap();
        assert_eq!(v, json!({"a": 2}));
        assert!(parse_json_reply("<think>never closed {\"a\":1}").is_err());
    }

    #[test]
    fn extracts_fenced_json_and_outer_object() {
        let v = parse_json_reply("Sure!\n```json\n{\"a\": [1, 2]}\n```\nDone.").unwrap();
        assert_eq!(v, json!({"a": [1, 2]}));
        let v = parse_json_reply("```\n{\"b\": true}\n```").unwrap();
        assert_eq!(v, json!({"b": true}));
        let v = parse_json_reply("Here you go: {\"c\": \"}\"} thanks").unwrap();
        assert_eq!(v, json!({"c": "}"}));
        let err = parse_json_reply("no json here").unwrap_err();
        assert!(err.reason.contains("not valid JSON"), "{}", err.reason);
    }

    #[test]
    fn decodes_double_encoded_json() {
        let v = parse_json_reply(r#""{\"a\": 1}""#).unwrap();
        assert_eq!(v, json!({"a": 1}));
    }

    #[test]
    fn prunes_only_optional_nulls() {
        let schema = json!({
            "type": "object",
            "properties": {
                "thinking": {"type": "string"},
                "memory": {"type": ["string", "null"]},
                "action": {"type": "array", "items": {"$ref": "#/$defs/A"}}
            },
            "required": ["memory", "action"],
            "$defs": {"A": {"anyOf": [
                {"type": "object", "properties": {"click": {"type": "object",
                    "properties": {"index": {"type": "integer"}, "button": {"type": "string"}},
                    "required": ["index"]}}, "required": ["click"]}
            ]}}
        });
        let mut value = json!({
            "thinking": null, "memory": null,
            "action": [{"click": {"index": 3, "button": null}}]
        });
        prune_optional_nulls(&mut value, &schema);
        assert_eq!(
            value,
            json!({"memory": null, "action": [{"click": {"index": 3}}]})
        );
    }
}
