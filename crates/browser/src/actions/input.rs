//! The input action: typing text into an element.

use serde_json::{Value, json};

use super::{
    ActionContext, ActionResult, InputParams,
    element::{Resolved, describe},
    exec::{Fail, Outcome, truncate_chars},
    js, keys, timeouts,
};
use crate::session::BrowserSession;

impl BrowserSession {
    pub(super) async fn input(&self, p: &InputParams, ctx: &ActionContext) -> Outcome {
        let el = self.element(p.index).await?;
        let r = self.resolve_and_scroll_into_view(&el).await?;
        let shown = match ctx
            .sensitive_values
            .iter()
            .find(|s| !s.value.is_empty() && p.text.contains(&s.value))
        {
            Some(secret) => format!("<secret>{}</secret>", secret.name),
            None => p.text.clone(),
        };
        let prep = self
            .call_on(
                &r,
                js::PREPARE_INPUT,
                vec![json!(p.clear), json!(p.text)],
                self.timeout,
            )
            .await?;
        let kind = prep.get("kind").and_then(Value::as_str).unwrap_or("other");
        let before = prep.get("before").and_then(Value::as_str).unwrap_or("");
        let mut memory = format!("Typed '{shown}' into {}", describe(&el));
        let secret = shown != p.text;
        let actual = match kind {
            "unsupported" => {
                let t = prep.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(Fail::new(format!(
                    "Element {} is an input of type {t}; it cannot take text. Use click or upload_file.",
                    p.index
                )));
            }
            "rejected" => {
                let t = prep.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(Fail::new(format!(
                    "The field rejected '{shown}' and was left unchanged; use the format the field expects ({})",
                    format_hint(t)
                )));
            }
            "direct" => {
                let t = prep.get("type").and_then(Value::as_str).unwrap_or("");
                let expected = if t == "number" && !p.clear {
                    format!("{before}{}", p.text)
                } else {
                    p.text.clone()
                };
                let mut value = prep
                    .get("value")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if !same_value(t, &value, &expected) {
                    // A framework may still be re-rendering the field.
                    if let Some(later) = self.read_value_later(&r).await {
                        value = later;
                    }
                }
                if !same_value(t, &value, &expected) && !secret {
                    memory.push_str(&differs_note(&value, &expected));
                }
                return Ok(ActionResult::memory(memory));
            }
            _ => {
                self.type_keys(&r, &p.text).await?;
                self.call_on(&r, js::READ_VALUE, vec![], self.timeout)
                    .await
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
            }
        };
        if let Some(mut actual) = actual {
            let typed = p.text.replace('\n', "");
            let ok = |actual: &str| {
                let flat = actual.replace('\n', "");
                if p.clear {
                    flat == typed
                } else {
                    flat.ends_with(&typed)
                }
            };
            if !ok(&actual) {
                // A framework may still be re-rendering the field.
                if let Some(later) = self.read_value_later(&r).await {
                    actual = later;
                }
            }
            // Keys typed into a field that a framework rewrites while they arrive (a caret
            // moved, an intermediate value rejected) can leave it garbled: the whole text goes in
            // at once instead, as a paste would. Not where the page's own handling of keys is
            // the point (Enter, suggestions) or the field is shorter than the text.
            let expected = if p.clear {
                typed.clone()
            } else {
                format!("{before}{typed}")
            };
            let max_length = prep.get("maxLength").and_then(Value::as_i64).unwrap_or(-1);
            let repairable = kind == "input"
                && !p.text.contains('\n')
                && prep.get("autocomplete").and_then(Value::as_bool) != Some(true)
                && (max_length < 0 || expected.chars().count() as i64 <= max_length);
            if !ok(&actual) && repairable {
                let set = self
                    .call_on(&r, js::SET_VALUE, vec![json!(expected)], self.timeout)
                    .await?;
                if let Some(value) = set.as_str() {
                    actual = value.to_owned();
                }
            }
            if !ok(&actual) && !secret {
                memory.push_str(&differs_note(&actual, &p.text));
            }
        }
        let mut result = ActionResult::memory(memory);
        if prep.get("autocomplete").and_then(Value::as_bool) == Some(true) {
            result.append_note(
                "This field may show suggestions; check the page state and pick one if needed.",
            );
        }
        Ok(result)
    }

    /// One key press per character, pipelined in order on the element's session.
    async fn type_keys(&self, r: &Resolved, text: &str) -> Result<(), Fail> {
        let conn = &self.chrome.conn;
        let events: Vec<Value> = text.chars().flat_map(keys::char_events).collect();
        let sends = events.into_iter().map(|ev| {
            conn.call_raw(
                Some(&r.session),
                "Input.dispatchKeyEvent",
                ev,
                timeouts::TYPE_TEXT,
            )
        });
        for answer in futures::future::join_all(sends).await {
            answer?;
        }
        Ok(())
    }

    /// The field's value once the page has reacted to the typing (`None`: unreadable).
    async fn read_value_later(&self, r: &Resolved) -> Option<String> {
        self.call_on(r, js::READ_VALUE_LATER, vec![], self.timeout)
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
    }
}

/// Whether a field's value is the one meant: for a number field, the same number (`37.50`
/// shown as `37.5` is no difference).
fn same_value(input_type: &str, actual: &str, expected: &str) -> bool {
    if actual == expected {
        return true;
    }
    input_type == "number"
        && matches!(
            (actual.trim().parse::<f64>(), expected.trim().parse::<f64>()),
            (Ok(a), Ok(b)) if a == b
        )
}

/// browser-use's note when the field holds something else than what was typed.
fn differs_note(actual: &str, typed: &str) -> String {
    format!(
        "\nNote: the field's actual value '{}' differs from typed text '{}'. The page may have reformatted or autocompleted your input.",
        truncate_chars(actual, 200).0,
        truncate_chars(typed, 200).0
    )
}

/// The value format an input type expects, for the model.
fn format_hint(input_type: &str) -> &'static str {
    match input_type {
        "number" | "range" => "a plain number such as 37.5, with a dot for decimals",
        "time" => "HH:MM, 24-hour, e.g. 14:30",
        "datetime-local" => "YYYY-MM-DDTHH:MM, e.g. 2024-02-29T14:30",
        "month" => "YYYY-MM",
        "week" => "YYYY-Www, e.g. 2024-W09",
        "color" => "#rrggbb",
        _ => "e.g. YYYY-MM-DD",
    }
}
