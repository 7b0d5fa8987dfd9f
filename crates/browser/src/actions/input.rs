//! The input action: typing text into an element.

use serde_json::{Value, json};

use super::{
    ActionContext, ActionResult, InputParams,
    element::describe,
    exec::{Fail, Outcome, truncate_chars},
    js, keys, timeouts,
};
use crate::session::BrowserSession;

impl BrowserSession {
    pub(super) async fn input(&self, p: &InputParams, ctx: &ActionContext) -> Outcome {
        let el = self.element(p.index).await?;
        let r = self.resolve_and_scroll_into_view(&el).await?;
        let conn = &self.chrome.conn;
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
        match kind {
            "unsupported" => {
                let t = prep.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(Fail(format!(
                    "Element {} is an input of type {t}; it cannot take text. Use click or upload_file.",
                    p.index
                )));
            }
            "direct" => {
                let value = prep.get("value").and_then(Value::as_str).unwrap_or("");
                if value != p.text {
                    return Err(Fail(format!(
                        "The field rejected '{}' (value is now '{value}'); use the format the field expects (e.g. YYYY-MM-DD)",
                        shown
                    )));
                }
                return Ok(ActionResult::memory(format!(
                    "Typed '{shown}' into {}",
                    describe(&el)
                )));
            }
            _ => {}
        }
        // One key press per character, pipelined in order on the element's session.
        let events: Vec<Value> = p.text.chars().flat_map(keys::char_events).collect();
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
        let value = self
            .call_on(&r, js::READ_VALUE, vec![], self.timeout)
            .await
            .unwrap_or(Value::Null);
        let mut memory = format!("Typed '{shown}' into {}", describe(&el));
        if let Some(actual) = value.as_str() {
            let expected_tail = p.text.replace('\n', "");
            let actual_flat = actual.replace('\n', "");
            let ok = if p.clear {
                actual_flat == expected_tail
            } else {
                actual_flat.ends_with(&expected_tail)
            };
            if !ok && shown == p.text {
                memory.push_str(&format!(
                    " (note: the field now contains '{}')",
                    truncate_chars(actual, 200).0
                ));
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
}
