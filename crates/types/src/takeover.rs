//! Take-over: what a person does in a task's browser through the live view while the agent is
//! paused — clicks, scrolling, typing, key presses — as sent on the live WebSocket, checked
//! here ([`PersonInput::check`]) and recorded in the task's event log as a `person_input` event.
//!
//! Coordinates are CSS pixels of the page's viewport (the size the live view's frames are
//! drawn for: the task's `viewport`), origin top left.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TaskStatus;

/// The longest text one `type` input may carry (characters).
pub const MAX_TYPED_CHARS: usize = 2000;
/// The longest `keys` combination (characters), e.g. `Control+Shift+ArrowLeft`.
pub const MAX_KEYS_CHARS: usize = 100;
/// Coordinates and scroll deltas are bounded by this (CSS pixels).
pub const MAX_COORDINATE: f64 = 100_000.0;

/// The statuses in which a person may drive a task's browser: the agent is not acting (paused,
/// or waiting for an answer to `ask_human`), and a worker holds the browser (a paused task
/// that never started has none).
pub fn accepts_person_input(status: TaskStatus) -> bool {
    status.holds_browser_for_person()
}

/// A mouse button.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MouseButton {
    #[default]
    Left,
    Middle,
    Right,
}

impl MouseButton {
    /// CDP's `Input.dispatchMouseEvent` name.
    pub fn as_str(self) -> &'static str {
        match self {
            MouseButton::Left => "left",
            MouseButton::Middle => "middle",
            MouseButton::Right => "right",
        }
    }
}

fn one() -> u8 {
    1
}

/// One input of a person driving the browser (a JSON text message on the live WebSocket,
/// `{"type": "click", "x": 120, "y": 300}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PersonInput {
    /// Press and release a mouse button at `(x, y)`; `click_count` 2 is a double click.
    Click {
        x: f64,
        y: f64,
        #[serde(default)]
        button: MouseButton,
        #[serde(default = "one")]
        click_count: u8,
    },
    /// Turn the mouse wheel over `(x, y)` by `delta_x` / `delta_y` pixels (positive: right,
    /// down).
    Scroll {
        x: f64,
        y: f64,
        #[serde(default)]
        delta_x: f64,
        #[serde(default)]
        delta_y: f64,
    },
    /// Type `text` into whatever has the focus. With `secret`, the text is sealed until the
    /// worker types it and the event log records only its length.
    Type {
        text: String,
        #[serde(default)]
        secret: bool,
    },
    /// Press a key or a combination, in the `send_keys` action's syntax (`Enter`,
    /// `Control+a`, `Shift+Tab`).
    Keys { keys: String },
}

impl PersonInput {
    /// Why this input cannot be applied, in words for the sender.
    pub fn check(&self) -> Result<(), String> {
        let coordinate = |name: &str, value: f64, min: f64| {
            if value.is_finite() && (min..=MAX_COORDINATE).contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "{name} must be a number from {min} to {MAX_COORDINATE}"
                ))
            }
        };
        match self {
            PersonInput::Click {
                x, y, click_count, ..
            } => {
                coordinate("x", *x, 0.0)?;
                coordinate("y", *y, 0.0)?;
                if !(1..=3).contains(click_count) {
                    return Err("click_count must be 1, 2 or 3".to_owned());
                }
            }
            PersonInput::Scroll {
                x,
                y,
                delta_x,
                delta_y,
            } => {
                coordinate("x", *x, 0.0)?;
                coordinate("y", *y, 0.0)?;
                coordinate("delta_x", *delta_x, -MAX_COORDINATE)?;
                coordinate("delta_y", *delta_y, -MAX_COORDINATE)?;
            }
            PersonInput::Type { text, .. } => {
                let chars = text.chars().count();
                if chars == 0 {
                    return Err("text is empty".to_owned());
                }
                if chars > MAX_TYPED_CHARS {
                    return Err(format!(
                        "text has {chars} characters; at most {MAX_TYPED_CHARS} per input"
                    ));
                }
                if text.contains('\0') {
                    return Err("text contains a NUL character".to_owned());
                }
            }
            PersonInput::Keys { keys } => {
                if keys.trim().is_empty() {
                    return Err("keys is empty".to_owned());
                }
                if keys.chars().count() > MAX_KEYS_CHARS {
                    return Err(format!("keys is longer than {MAX_KEYS_CHARS} characters"));
                }
                if keys.contains('\0') {
                    return Err("keys contains a NUL character".to_owned());
                }
            }
        }
        Ok(())
    }

    /// The input as the event log records it: a secret text is left out.
    pub fn recorded(&self) -> PersonInputEvent {
        match self {
            PersonInput::Type { text, secret: true } => PersonInputEvent {
                input: PersonInput::Type {
                    text: String::new(),
                    secret: true,
                },
                secret_chars: Some(text.chars().count()),
            },
            other => PersonInputEvent {
                input: other.clone(),
                secret_chars: None,
            },
        }
    }

    /// A short description for the agent ("clicked at (120, 300)", "typed 5 characters").
    pub fn describe(&self, secret_chars: Option<usize>) -> String {
        match self {
            PersonInput::Click {
                x,
                y,
                button,
                click_count,
            } => {
                let what = match (button, click_count) {
                    (MouseButton::Left, 1) => "clicked".to_owned(),
                    (MouseButton::Left, 2) => "double-clicked".to_owned(),
                    (button, n) => format!("clicked {n}x with the {} button", button.as_str()),
                };
                format!("{what} at ({x:.0}, {y:.0})")
            }
            PersonInput::Scroll {
                delta_x, delta_y, ..
            } => format!("scrolled by ({delta_x:.0}, {delta_y:.0})"),
            PersonInput::Type { secret: true, .. } => format!(
                "typed {} secret characters",
                secret_chars.unwrap_or_default()
            ),
            PersonInput::Type { text, .. } => format!("typed {} characters", text.chars().count()),
            PersonInput::Keys { keys } => format!("pressed {keys}"),
        }
    }
}

/// `person_input`: a person's input to the browser, as recorded (`{"input": {...},
/// "secret_chars"}`): the take-over's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PersonInputEvent {
    pub input: PersonInput,
    /// A secret `type`: how many characters were typed (the text itself is not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_chars: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<PersonInput, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_the_wire_forms_with_defaults() {
        assert_eq!(
            parse(json!({"type": "click", "x": 10, "y": 20.5})).unwrap(),
            PersonInput::Click {
                x: 10.0,
                y: 20.5,
                button: MouseButton::Left,
                click_count: 1
            }
        );
        assert_eq!(
            parse(json!({"type": "scroll", "x": 1, "y": 2, "delta_y": 300})).unwrap(),
            PersonInput::Scroll {
                x: 1.0,
                y: 2.0,
                delta_x: 0.0,
                delta_y: 300.0
            }
        );
        assert_eq!(
            parse(json!({"type": "type", "text": "hi"})).unwrap(),
            PersonInput::Type {
                text: "hi".into(),
                secret: false
            }
        );
        assert!(parse(json!({"type": "click", "x": 1, "y": 2, "z": 3})).is_err());
        assert!(parse(json!({"type": "drag", "x": 1, "y": 2})).is_err());
    }

    #[test]
    fn checks_bounds() {
        let click = |x: f64, n: u8| PersonInput::Click {
            x,
            y: 1.0,
            button: MouseButton::Left,
            click_count: n,
        };
        assert!(click(5.0, 1).check().is_ok());
        assert!(click(-1.0, 1).check().unwrap_err().contains("x must be"));
        assert!(click(f64::NAN, 1).check().is_err());
        assert!(click(5.0, 4).check().unwrap_err().contains("click_count"));
        let typed = |t: &str| PersonInput::Type {
            text: t.into(),
            secret: false,
        };
        assert!(typed("").check().is_err());
        assert!(typed(&"a".repeat(MAX_TYPED_CHARS + 1)).check().is_err());
        assert!(typed("a\0").check().is_err());
        assert!(PersonInput::Keys { keys: " ".into() }.check().is_err());
    }

    #[test]
    fn a_secret_text_is_not_recorded() {
        let input = PersonInput::Type {
            text: "hunter2".into(),
            secret: true,
        };
        let recorded = input.recorded();
        assert_eq!(recorded.secret_chars, Some(7));
        assert!(
            !serde_json::to_string(&recorded)
                .unwrap()
                .contains("hunter2")
        );
        assert_eq!(
            recorded.input.describe(recorded.secret_chars),
            "typed 7 secret characters"
        );
    }
}
