//! A person's input to the focused tab (the live view's take-over, while the agent is paused):
//! the same CDP input events the agent's actions send, at viewport coordinates the person saw
//! in the live view's frames.

use serde_json::{Value, json};

use super::exec::Fail;
use super::{keys, timeouts};
use crate::session::BrowserSession;

/// How a person's input failed, in words for the task's log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PersonInputError(pub String);

impl From<Fail> for PersonInputError {
    fn from(fail: Fail) -> Self {
        PersonInputError(fail.message)
    }
}

impl BrowserSession {
    /// Presses and releases `button` (`left`, `middle`, `right`) `click_count` times at
    /// `(x, y)` of the focused tab's viewport.
    pub async fn person_click(
        &self,
        x: f64,
        y: f64,
        button: &str,
        click_count: u8,
    ) -> Result<(), PersonInputError> {
        let session = self.focused_session().await?;
        self.inside_viewport(&session, x, y).await?;
        let conn = &self.chrome.conn;
        conn.call_raw(
            Some(&session),
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
            self.timeout,
        )
        .await
        .map_err(Fail::from)?;
        for count in 1..=click_count.max(1) {
            for (kind, timeout) in [
                ("mousePressed", timeouts::MOUSE_PRESSED),
                ("mouseReleased", timeouts::MOUSE_RELEASED),
            ] {
                conn.call_raw(
                    Some(&session),
                    "Input.dispatchMouseEvent",
                    json!({"type": kind, "x": x, "y": y, "button": button, "clickCount": count}),
                    timeout,
                )
                .await
                .map_err(Fail::from)?;
            }
        }
        Ok(())
    }

    /// Turns the mouse wheel over `(x, y)` by `(delta_x, delta_y)` CSS pixels.
    pub async fn person_scroll(
        &self,
        x: f64,
        y: f64,
        delta_x: f64,
        delta_y: f64,
    ) -> Result<(), PersonInputError> {
        let session = self.focused_session().await?;
        self.inside_viewport(&session, x, y).await?;
        self.chrome
            .conn
            .call_raw(
                Some(&session),
                "Input.dispatchMouseEvent",
                json!({"type": "mouseWheel", "x": x, "y": y, "deltaX": delta_x, "deltaY": delta_y}),
                timeouts::SCROLL,
            )
            .await
            .map_err(Fail::from)?;
        Ok(())
    }

    /// Types `text` into whatever has the focus, one key press per character (`\n` presses
    /// Enter), as the `input` action types.
    pub async fn person_type(&self, text: &str) -> Result<(), PersonInputError> {
        let session = self.focused_session().await?;
        let events: Vec<Value> = text.chars().flat_map(keys::char_events).collect();
        self.dispatch_keys(&session, events).await
    }

    /// Presses a key or combination in the `send_keys` syntax (`Enter`, `Control+a`).
    pub async fn person_keys(&self, combination: &str) -> Result<(), PersonInputError> {
        let presses = keys::parse_keys(combination);
        if presses.is_empty() {
            return Err(PersonInputError("keys is empty".to_owned()));
        }
        let session = self.focused_session().await?;
        let events: Vec<Value> = presses.iter().flat_map(keys::key_events).collect();
        self.dispatch_keys(&session, events).await
    }

    async fn dispatch_keys(
        &self,
        session: &str,
        events: Vec<Value>,
    ) -> Result<(), PersonInputError> {
        let conn = &self.chrome.conn;
        // Pipelined: Chrome's input router handles one session's events in order.
        let sends = events.into_iter().map(|event| {
            conn.call_raw(
                Some(session),
                "Input.dispatchKeyEvent",
                event,
                timeouts::TYPE_TEXT,
            )
        });
        for answer in futures::future::join_all(sends).await {
            answer.map_err(Fail::from)?;
        }
        Ok(())
    }

    async fn inside_viewport(&self, session: &str, x: f64, y: f64) -> Result<(), Fail> {
        let (width, height) = self.viewport(session).await;
        if (0.0..=width).contains(&x) && (0.0..=height).contains(&y) {
            Ok(())
        } else {
            Err(Fail::new(format!(
                "({x:.0}, {y:.0}) is outside the page's viewport ({width:.0}x{height:.0})"
            )))
        }
    }
}
