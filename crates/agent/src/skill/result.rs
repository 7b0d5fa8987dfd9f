//! Reading a skill's result from the final page without a model ([`read_result`]) and
//! learning how, once, during generation ([`learn_result`]).
//!
//! A [`ResultReader::Script`] runs through the browser's `evaluate` action (no new browser
//! API: it is bounded by that action's 30 s timeout and its 20 000-character result cap). The
//! body is wrapped as `(async (params) => { BODY })(PARAMS)`, `params` being the execution's
//! values by name (as text), and its return value is sent back as JSON. `{{name}}` slots in the
//! body are filled with the value escaped for a JavaScript string literal.

use std::collections::BTreeMap;
use std::time::Duration;

use browserd_llm::{ChatModel, ChatRequest, Message, OutputSchema};
use serde_json::{Value, json};

use super::params::{fill_slots, make_slots};
use super::{LearnedResult, ResultReader, SkillError};
use crate::browser::AgentBrowser;

/// The longest page text the extraction prompt shows.
const PAGE_TEXT_CHARS: usize = 30_000;
/// Upper bound of one model call of [`learn_result`].
const MODEL_LIMIT: Duration = Duration::from_secs(120);

pub(super) async fn read_result(
    browser: &dyn AgentBrowser,
    reader: &ResultReader,
    values: &BTreeMap<String, String>,
    output_schema: Option<&Value>,
) -> Result<Value, SkillError> {
    let value = match reader {
        ResultReader::Text { template } => Value::String(fill_slots(template, values)),
        ResultReader::Script { function } => run_script(browser, function, values).await?,
    };
    check(value, output_schema)
}

/// The value the script returns on the page now.
async fn run_script(
    browser: &dyn AgentBrowser,
    function: &str,
    values: &BTreeMap<String, String>,
) -> Result<Value, SkillError> {
    let escaped: BTreeMap<String, String> = values
        .iter()
        .map(|(name, value)| (name.clone(), js_string_content(value)))
        .collect();
    let body = fill_slots(function, &escaped);
    let params = serde_json::to_string(values).unwrap_or_else(|_| "{}".into());
    let code = format!(
        "(async () => {{ const __r = await (async (params) => {{\n{body}\n}})({params}); \
         return JSON.stringify(__r === undefined ? null : __r); }})()"
    );
    let result = browser
        .execute("evaluate", &json!({ "code": code }))
        .await
        .map_err(|e| SkillError::Result(format!("the result script could not run: {e}")))?;
    if let Some(error) = result.error {
        return Err(SkillError::Result(format!(
            "the result script failed: {error}"
        )));
    }
    let text = result.extracted_content.unwrap_or_default();
    serde_json::from_str(&text)
        .map_err(|_| SkillError::Result("the result script returned no JSON value".into()))
}

/// `value` escaped to sit inside a JavaScript string literal (any quote).
fn js_string_content(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    quoted[1..quoted.len() - 1]
        .replace('\'', "\\'")
        .replace('`', "\\`")
        .replace("${", "\\${")
        .replace('<', "\\u003c")
}

/// Checks a result: against the schema (a string holding JSON is parsed first), else a
/// non-empty string.
fn check(value: Value, output_schema: Option<&Value>) -> Result<Value, SkillError> {
    let Some(schema) = output_schema else {
        return match value {
            Value::String(text) if text.trim().is_empty() => {
                Err(SkillError::Result("the result is empty".into()))
            }
            Value::Null => Err(SkillError::Result("the result is empty".into())),
            Value::String(text) => Ok(Value::String(text)),
            other => Ok(Value::String(other.to_string())),
        };
    };
    let value = match value {
        Value::String(text) => serde_json::from_str(&text).map_err(|_| {
            SkillError::Result(format!(
                "the result is not JSON, as the output schema asks: {}",
                preview(&text)
            ))
        })?,
        other => other,
    };
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| SkillError::Result(format!("the output schema is invalid: {e}")))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(3)
        .map(|e| format!("{} at `{}`", e, e.instance_path()))
        .collect();
    if !errors.is_empty() {
        return Err(SkillError::Result(format!(
            "the result does not match the output schema: {}",
            errors.join("; ")
        )));
    }
    Ok(value)
}

fn preview(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `got` reproduces the run's `expected` result.
fn reproduces(got: &Value, expected: &str, output_schema: Option<&Value>) -> bool {
    match (got, output_schema) {
        (Value::String(text), None) => normalised(text) == normalised(expected),
        (value, Some(_)) => serde_json::from_str::<Value>(expected).is_ok_and(|e| &e == value),
        _ => false,
    }
}

pub(super) async fn learn_result(
    model: &dyn ChatModel,
    browser: &dyn AgentBrowser,
    goal: &str,
    final_result: &str,
    output_schema: Option<&Value>,
    values: &BTreeMap<String, String>,
) -> LearnedResult {
    let slots: Vec<(String, String)> = values.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    let fallback = ResultReader::Text {
        template: make_slots(final_result, &slots),
    };
    let page = match browser.capture(false).await {
        Ok(page) => page,
        Err(e) => {
            return LearnedResult {
                reader: fallback,
                model_calls: 0,
                note: Some(format!("the final page could not be read: {e}")),
            };
        }
    };
    let page_text: String = page.llm_text.chars().take(PAGE_TEXT_CHARS).collect();
    let mut messages = vec![
        Message::system(SYSTEM),
        Message::user(extraction_prompt(
            goal,
            &page.url,
            &page_text,
            final_result,
            output_schema,
            values,
        )),
    ];
    let mut model_calls = 0;
    let mut last_error = String::new();
    for _ in 0..2 {
        let request = ChatRequest::new(messages.clone(), reply_schema());
        model_calls += 1;
        let function = match tokio::time::timeout(MODEL_LIMIT, model.complete(&request)).await {
            Ok(Ok(response)) => response
                .value
                .get("function")
                .and_then(Value::as_str)
                .map(str::to_owned),
            Ok(Err(e)) => {
                last_error = format!("the model failed: {e}");
                break;
            }
            Err(_) => {
                last_error = "the model did not answer in time".into();
                break;
            }
        };
        let Some(function) = function.filter(|f| !f.trim().is_empty()) else {
            last_error = "the model wrote no function".into();
            messages.push(Message::user(format!(
                "{last_error}. Answer {{\"function\": \"…\"}}."
            )));
            continue;
        };
        let reader = ResultReader::Script {
            function: make_slots(&function, &slots),
        };
        match read_result(browser, &reader, values, output_schema).await {
            Ok(got) if reproduces(&got, final_result, output_schema) => {
                return LearnedResult {
                    reader,
                    model_calls,
                    note: None,
                };
            }
            Ok(got) => {
                last_error = format!(
                    "the function returned {} but the run's result is {}",
                    preview(&got.to_string()),
                    preview(final_result)
                );
            }
            Err(e) => last_error = e.to_string(),
        }
        messages.push(Message::assistant(
            json!({ "function": function }).to_string(),
        ));
        messages.push(Message::user(format!(
            "That function does not reproduce the result: {last_error}. Write a corrected one."
        )));
    }
    LearnedResult {
        reader: fallback,
        model_calls,
        note: Some(format!(
            "no result script reproduced the run's result ({last_error}); the recorded text is used"
        )),
    }
}

const SYSTEM: &str = "You write a small JavaScript function that reads the result of a browser \
task from the final page of the task, so the task can be re-run without a model. Answer only \
JSON {\"function\": \"<body>\"}: the BODY of a function (statements ending in `return …;`) that \
runs in the page (document, window) and returns the result: a string, or, when an output \
schema is given, a JSON value (object/array) matching it. Read the values from the page \
(querySelector, innerText, tables…), never hard-code the result: the page will show other \
values next time. The task's parameters are available as `params.<name>` (strings).";

fn extraction_prompt(
    goal: &str,
    url: &str,
    page_text: &str,
    final_result: &str,
    output_schema: Option<&Value>,
    values: &BTreeMap<String, String>,
) -> String {
    let mut prompt = format!("Task goal:\n{goal}\n\n");
    if !values.is_empty() {
        prompt.push_str("Parameters (params):\n");
        for (name, value) in values {
            prompt.push_str(&format!("- {name} = {value}\n"));
        }
        prompt.push('\n');
    }
    prompt.push_str(&format!(
        "Final page: {url}\n<page>\n{page_text}\n</page>\n\n"
    ));
    prompt.push_str(&format!("The task's result was:\n{final_result}\n\n"));
    match output_schema {
        Some(schema) => prompt.push_str(&format!(
            "Output schema (the function returns a value matching it):\n{schema}\n"
        )),
        None => prompt.push_str("The function returns the result as a string.\n"),
    }
    prompt
}

fn reply_schema() -> OutputSchema {
    OutputSchema::new(
        "result_reader",
        json!({
            "type": "object",
            "properties": {"function": {"type": "string", "description": "JavaScript function body returning the result"}},
            "required": ["function"],
            "additionalProperties": false
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_checked_against_the_schema_or_must_not_be_empty() {
        assert_eq!(check(json!("ok"), None), Ok(json!("ok")));
        assert!(check(json!("  "), None).is_err());
        assert!(check(Value::Null, None).is_err());
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        assert_eq!(
            check(json!("{\"n\": 3}"), Some(&schema)),
            Ok(json!({"n": 3}))
        );
        assert_eq!(check(json!({"n": 3}), Some(&schema)), Ok(json!({"n": 3})));
        let wrong = check(json!({"n": "x"}), Some(&schema)).unwrap_err();
        assert!(wrong.to_string().contains("does not match"), "{wrong}");
        assert!(check(json!("not json"), Some(&schema)).is_err());
    }

    #[test]
    fn reproduction_ignores_whitespace_and_compares_json() {
        assert!(reproduces(
            &json!("Order  1042\nshipped"),
            "Order 1042 shipped",
            None
        ));
        assert!(!reproduces(&json!("Order 1043"), "Order 1042", None));
        let schema = json!({});
        assert!(reproduces(&json!({"a": 1}), "{\"a\":1}", Some(&schema)));
        assert!(!reproduces(&json!({"a": 2}), "{\"a\":1}", Some(&schema)));
    }

    #[test]
    fn slot_values_are_escaped_for_javascript_strings() {
        assert_eq!(
            js_string_content("a'b\"c`${x}</script>"),
            "a\\'b\\\"c\\`\\${x}\\u003c/script>"
        );
    }
}
