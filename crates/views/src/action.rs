//! What one action returned, and the action names the agent and the browser share.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Actions the agent implements itself (the browser neither offers nor runs them for it).
pub const AGENT_OWNED_ACTIONS: [&str; 6] = [
    "done",
    "extract",
    "write_file",
    "read_file",
    "replace_file",
    "ask_human",
];

/// The `metadata` key of a failed browser action saying whether it may have reached the page
/// (`true`: an input, navigation or script was sent, or it is not known) or provably did not
/// (`false`: its element was not found or resolved). An action whose failure reached the page
/// is never repeated on the belief that it failed.
pub const SENT_TO_PAGE: &str = "sent_to_page";

/// browser-use's `terminates_sequence` set: after these the page is expected to have changed,
/// so the rest of a multi-action step must not run on stale indices.
pub const SEQUENCE_TERMINATING_ACTIONS: [&str; 5] =
    ["search", "navigate", "go_back", "switch", "evaluate"];

/// Whether the browser action `name` ends a multi-action step.
pub fn terminates_sequence(name: &str) -> bool {
    SEQUENCE_TERMINATING_ACTIONS.contains(&name)
}

/// What one action returned (browser-use's `ActionResult`, same fields and JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    /// Set by `done` only.
    #[serde(default)]
    pub is_done: bool,
    /// The agent's own verdict, set by `done` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// What went wrong; always shown in the history (first and last 100 chars when long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The action's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extracted_content: Option<String>,
    /// What goes into `<agent_history>` for this action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_term_memory: Option<String>,
    /// Show `extracted_content` only once, in the next step's `<read_state>`.
    #[serde(default)]
    pub include_extracted_content_only_once: bool,
    /// Files to show the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<String>>,
    /// Extra data (`click_x`, `include_screenshot`, `downloaded_files`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl ActionResult {
    /// A plain success whose text is both the output and the history entry.
    pub fn memory(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            extracted_content: Some(text.clone()),
            long_term_memory: Some(text),
            ..Self::default()
        }
    }

    /// A failure the model reads.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            error: Some(text.into()),
            ..Self::default()
        }
    }

    /// Output shown only in the next step, with a short history entry.
    pub fn once(content: impl Into<String>, memory: impl Into<String>) -> Self {
        Self {
            extracted_content: Some(content.into()),
            long_term_memory: Some(memory.into()),
            include_extracted_content_only_once: true,
            ..Self::default()
        }
    }

    /// Sets a metadata entry.
    pub fn with_meta(mut self, key: &str, value: Value) -> Self {
        self.metadata
            .get_or_insert_with(Default::default)
            .insert(key.to_owned(), value);
        self
    }

    /// [`SENT_TO_PAGE`] of a failed browser action: `Some(false)` when it provably did not
    /// reach the page, `None` when the browser did not say.
    pub fn sent_to_page(&self) -> Option<bool> {
        self.metadata
            .as_ref()?
            .get(SENT_TO_PAGE)
            .and_then(Value::as_bool)
    }

    /// Appends a line to both the output and the history entry.
    pub fn append_note(&mut self, note: &str) {
        for field in [&mut self.extracted_content, &mut self.long_term_memory] {
            match field {
                Some(text) => {
                    text.push('\n');
                    text.push_str(note);
                }
                None => *field = Some(note.to_owned()),
            }
        }
    }

    /// Appends a line to the error.
    pub fn append_error(&mut self, error: &str) {
        match &mut self.error {
            Some(text) => {
                text.push('\n');
                text.push_str(error);
            }
            None => self.error = Some(error.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn serializes_like_browser_use() {
        let result = ActionResult::memory("Clicked").with_meta("click_x", json!(3));
        assert_eq!(
            serde_json::to_value(&result).expect("json"),
            json!({"is_done": false, "extracted_content": "Clicked", "long_term_memory": "Clicked",
                   "include_extracted_content_only_once": false, "metadata": {"click_x": 3}})
        );
        let back: ActionResult = serde_json::from_value(json!({"error": "x"})).expect("parse");
        assert_eq!(back, ActionResult::error("x"));
    }

    #[test]
    fn notes_and_errors_append() {
        let mut result = ActionResult::default();
        result.append_note("a");
        result.append_note("b");
        result.append_error("c");
        assert_eq!(result.long_term_memory.as_deref(), Some("a\nb"));
        assert_eq!(result.error.as_deref(), Some("c"));
    }

    #[test]
    fn page_changing_actions_terminate_a_sequence() {
        assert!(terminates_sequence("navigate") && terminates_sequence("evaluate"));
        assert!(!terminates_sequence("click") && !terminates_sequence("input"));
    }
}
