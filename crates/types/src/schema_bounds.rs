//! Bounds on a client's output schema (`output_schema`, v2 `structuredOutput`, MCP's), checked
//! once at the edge so that nothing a worker does with it later — a provider's rewrite that
//! inlines `$ref`s (Gemini), strict-mode rewriting, compiling it, validating `done` data — can
//! grow past what was accepted. The expanded size is what inlining every `$ref` would make,
//! counted with a budget: a chain of definitions that each reference the next twice is refused
//! after at most `OUTPUT_SCHEMA_MAX_EXPANDED_NODES` steps instead of growing to 2^n nodes.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

/// Serialized size, in bytes.
pub const OUTPUT_SCHEMA_MAX_BYTES: usize = 64 * 1024;
/// Nesting of JSON objects and arrays.
pub const OUTPUT_SCHEMA_MAX_NESTING: usize = 64;
/// `$ref` keywords.
pub const OUTPUT_SCHEMA_MAX_REFS: usize = 256;
/// Schema nodes (objects and arrays) once every `$ref` is inlined (a recursive one counts
/// once, as the providers' rewrites stop there).
pub const OUTPUT_SCHEMA_MAX_EXPANDED_NODES: u64 = 20_000;
/// Values of one `enum`.
pub const OUTPUT_SCHEMA_MAX_ENUM_VALUES: usize = 1_000;

/// Which bound a schema breaks; the message names the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaBoundError {
    TooLarge { bytes: usize },
    TooDeep,
    TooManyRefs { refs: usize },
    ExpandsTooMuch,
    EnumTooLong { values: usize },
}

impl fmt::Display for SchemaBoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaBoundError::TooLarge { bytes } => write!(
                f,
                "output_schema is {bytes} bytes; at most {OUTPUT_SCHEMA_MAX_BYTES} are accepted"
            ),
            SchemaBoundError::TooDeep => write!(
                f,
                "output_schema nests deeper than {OUTPUT_SCHEMA_MAX_NESTING} levels"
            ),
            SchemaBoundError::TooManyRefs { refs } => write!(
                f,
                "output_schema has {refs} `$ref`s; at most {OUTPUT_SCHEMA_MAX_REFS} are accepted"
            ),
            SchemaBoundError::ExpandsTooMuch => write!(
                f,
                "output_schema expands to more than {OUTPUT_SCHEMA_MAX_EXPANDED_NODES} nodes \
                 once its `$ref`s are inlined (definitions that reference each other many times)"
            ),
            SchemaBoundError::EnumTooLong { values } => write!(
                f,
                "an `enum` of output_schema has {values} values; at most \
                 {OUTPUT_SCHEMA_MAX_ENUM_VALUES} are accepted"
            ),
        }
    }
}

impl std::error::Error for SchemaBoundError {}

/// Checks `schema` against every bound. Linear in the schema's size, plus at most
/// `OUTPUT_SCHEMA_MAX_EXPANDED_NODES` steps for the expansion.
pub fn check_output_schema(schema: &Value) -> Result<(), SchemaBoundError> {
    let bytes = serde_json::to_vec(schema).map_or(usize::MAX, |b| b.len());
    if bytes > OUTPUT_SCHEMA_MAX_BYTES {
        return Err(SchemaBoundError::TooLarge { bytes });
    }
    let mut refs = 0;
    walk(schema, 0, &mut refs)?;
    if refs > OUTPUT_SCHEMA_MAX_REFS {
        return Err(SchemaBoundError::TooManyRefs { refs });
    }
    let mut expansion = Expansion {
        root: schema,
        memo: HashMap::new(),
        stack: Vec::new(),
    };
    if expansion.size(schema) > OUTPUT_SCHEMA_MAX_EXPANDED_NODES {
        return Err(SchemaBoundError::ExpandsTooMuch);
    }
    Ok(())
}

/// Nesting, `$ref` count and enum lengths, in one pass over the raw schema.
fn walk(node: &Value, depth: usize, refs: &mut usize) -> Result<(), SchemaBoundError> {
    if depth > OUTPUT_SCHEMA_MAX_NESTING {
        return Err(SchemaBoundError::TooDeep);
    }
    match node {
        Value::Object(object) => {
            if object.get("$ref").is_some_and(Value::is_string) {
                *refs += 1;
            }
            if let Some(Value::Array(values)) = object.get("enum")
                && values.len() > OUTPUT_SCHEMA_MAX_ENUM_VALUES
            {
                return Err(SchemaBoundError::EnumTooLong {
                    values: values.len(),
                });
            }
            object
                .values()
                .try_for_each(|value| walk(value, depth + 1, refs))
        }
        Value::Array(items) => items
            .iter()
            .try_for_each(|value| walk(value, depth + 1, refs)),
        _ => Ok(()),
    }
}

/// The size of a schema with its local `$ref`s inlined, saturating just past the budget.
struct Expansion<'a> {
    root: &'a Value,
    /// Expanded size of each reference target already counted.
    memo: HashMap<&'a str, u64>,
    /// References being expanded (a reference back into one of them is recursion: 1 node).
    stack: Vec<&'a str>,
}

impl<'a> Expansion<'a> {
    fn size(&mut self, node: &'a Value) -> u64 {
        let limit = OUTPUT_SCHEMA_MAX_EXPANDED_NODES + 1;
        match node {
            Value::Object(object) => {
                let mut total: u64 = 1;
                if let Some(Value::String(reference)) = object.get("$ref") {
                    total = total.saturating_add(self.reference(reference));
                }
                for (key, value) in object {
                    // Definitions count where they are used, not where they are declared.
                    if key == "$defs" || key == "definitions" {
                        continue;
                    }
                    total = total.saturating_add(self.size(value));
                    if total >= limit {
                        return limit;
                    }
                }
                total.min(limit)
            }
            Value::Array(items) => {
                let mut total: u64 = 1;
                for item in items {
                    total = total.saturating_add(self.size(item));
                    if total >= limit {
                        return limit;
                    }
                }
                total
            }
            _ => 0,
        }
    }

    fn reference(&mut self, reference: &'a str) -> u64 {
        if self.stack.contains(&reference) {
            return 1;
        }
        if let Some(size) = self.memo.get(reference) {
            return *size;
        }
        let Some(target) = resolve_local(self.root, reference) else {
            // Not local: compiling the schema refuses it (remote references are never fetched).
            return 1;
        };
        self.stack.push(reference);
        let size = self.size(target);
        self.stack.pop();
        self.memo.insert(reference, size);
        size
    }
}

/// The target of a local reference (`#`, `#/$defs/name`, any JSON pointer into the schema).
fn resolve_local<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
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

    /// `n` definitions, each referencing the next `fan_out` times.
    fn ref_chain(n: usize, fan_out: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..n {
            let mut properties = serde_json::Map::new();
            for j in 0..fan_out {
                let target = if i + 1 < n {
                    json!({"$ref": format!("#/$defs/d{}", i + 1)})
                } else {
                    json!({"type": "string"})
                };
                properties.insert(format!("p{j}"), target);
            }
            defs.insert(
                format!("d{i}"),
                json!({"type": "object", "properties": properties}),
            );
        }
        json!({"$defs": defs, "$ref": "#/$defs/d0"})
    }

    #[test]
    fn ordinary_schemas_pass() {
        let schema = json!({
            "type": "object",
            "properties": {
                "price": {"type": "number"},
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
                "tree": {"$ref": "#/$defs/node"}
            },
            "$defs": {
                "item": {"type": "object", "properties": {"name": {"type": "string"}}},
                "node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
            }
        });
        assert_eq!(check_output_schema(&schema), Ok(()));
        assert_eq!(check_output_schema(&ref_chain(30, 1)), Ok(()));
    }

    #[test]
    fn a_reference_fan_out_is_refused_within_the_budget() {
        // 2^30 nodes if inlined; refused after counting at most the budget.
        let started = std::time::Instant::now();
        assert_eq!(
            check_output_schema(&ref_chain(30, 2)),
            Err(SchemaBoundError::ExpandsTooMuch)
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let message = SchemaBoundError::ExpandsTooMuch.to_string();
        assert!(message.contains("20000"), "{message}");
    }

    #[test]
    fn size_nesting_refs_and_enums_are_bounded() {
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        assert_eq!(check_output_schema(&deep), Err(SchemaBoundError::TooDeep));
        let values: Vec<Value> = (0..1_001).map(|i| json!(i)).collect();
        assert_eq!(
            check_output_schema(&json!({"enum": values})),
            Err(SchemaBoundError::EnumTooLong { values: 1_001 })
        );
        let huge = json!({"description": "x".repeat(70_000)});
        assert!(matches!(
            check_output_schema(&huge),
            Err(SchemaBoundError::TooLarge { .. })
        ));
        let refs: serde_json::Map<String, Value> = (0..300)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/s"})))
            .collect();
        let many = json!({"properties": refs, "$defs": {"s": {"type": "string"}}});
        assert_eq!(
            check_output_schema(&many),
            Err(SchemaBoundError::TooManyRefs { refs: 300 })
        );
    }
}
