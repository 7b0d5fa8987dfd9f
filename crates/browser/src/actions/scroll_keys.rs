//! Scrolling and sending keys.

use serde_json::{Value, json};

use super::{
    ActionResult, ScrollParams,
    exec::{Fail, Outcome},
    js, keys, timeouts,
};
use crate::session::BrowserSession;

impl BrowserSession {
    pub(super) async fn scroll(&self, p: &ScrollParams) -> Outcome {
        if !p.pages.is_finite() || p.pages < 0.0 || p.pages > 100.0 {
            return Err(Fail::new("pages must be a number between 0 and 100".into()));
        }
        let sign = if p.down { 1.0 } else { -1.0 };
        let direction = if p.down { "down" } else { "up" };
        match p.index.filter(|i| *i != 0) {
            Some(index) => {
                let el = self.element(index).await?;
                let r = self.resolve(&el).await?;
                let moved = self
                    .call_on(
                        &r,
                        js::SCROLL_ELEMENT,
                        vec![json!(sign * p.pages)],
                        timeouts::SCROLL,
                    )
                    .await?;
                let target = moved
                    .get("target")
                    .and_then(Value::as_str)
                    .unwrap_or("element")
                    .to_owned();
                Ok(ActionResult::memory(format!(
                    "Scrolled {direction} {} pages in {target} (element {index})",
                    p.pages
                )))
            }
            None => {
                let session = self.focused_session().await?;
                let (_, vh) = self.viewport(&session).await;
                let dy = sign * p.pages * vh;
                let moved = self
                    .eval(
                        &session,
                        &js::with_arg(js::SCROLL_PAGE, &json!({"dy": dy})),
                        timeouts::SCROLL,
                    )
                    .await?;
                let mut memory = format!("Scrolled {direction} {} pages", p.pages);
                if moved.get("edge").and_then(Value::as_bool) == Some(true) {
                    memory.push_str(if p.down {
                        " (already at the bottom)"
                    } else {
                        " (already at the top)"
                    });
                } else if let Some(t) = moved
                    .get("target")
                    .and_then(Value::as_str)
                    .filter(|t| *t != "page")
                {
                    memory.push_str(&format!(" in {t}"));
                }
                Ok(ActionResult::memory(memory))
            }
        }
    }

    pub(super) async fn send_keys(&self, keys_text: &str) -> Outcome {
        let presses = keys::parse_keys(keys_text);
        if presses.is_empty() {
            return Err(Fail::new("keys is empty".into()));
        }
        let session = self.focused_session().await?;
        for press in &presses {
            for ev in keys::key_events(press) {
                self.chrome
                    .conn
                    .call_raw(
                        Some(&session),
                        "Input.dispatchKeyEvent",
                        ev,
                        timeouts::SEND_KEYS,
                    )
                    .await?;
            }
        }
        Ok(ActionResult::memory(format!("Sent keys: {keys_text}")))
    }
}
