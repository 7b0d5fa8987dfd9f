//! The agent-owned actions the browser does not run (with the workspace's file actions, exactly
//! `AGENT_OWNED_ACTIONS`): `done` (text and files to display, or `data` validated against the
//! task's `output_schema`; a mismatch is an action error the model sees) and `extract` (page
//! markdown from the browser, a call to the extraction model, the answer kept in memory or — when
//! long — written to a workspace file and shown once).

use std::sync::Arc;

use browserd_llm::{ChatRequest, Message, OutputSchema};
use browserd_views::ActionResult;
use serde_json::{Value, json};

use super::model_call::ModelCall;
use super::{ACTION_TIMEOUT, Agent, StepAcc};
use crate::browser::{ActionSpec, MarkdownOptions};
use crate::prompts;

/// Extraction results at least this long go to a workspace file and are shown once.
const EXTRACT_TO_FILE: usize = 10_000;

/// The agent-owned `extract` action (the agent makes the model call on the page markdown).
pub(super) fn extract_spec() -> ActionSpec {
    ActionSpec {
        name: "extract".into(),
        description: "Read the whole page with a separate model and answer a query about it \
(slow: only when the information is not visible in the element list)."
            .into(),
        params_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "extract_links": {"type": "boolean", "default": false},
                "extract_images": {"type": "boolean", "default": false},
                "start_from_char": {"type": "integer", "minimum": 0, "default": 0},
                "already_collected": {"type": "array", "items": {"type": "string"}, "default": []}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        terminates_sequence: false,
        domains: Vec::new(),
    }
}

impl Agent {
    pub(super) fn done(&self, params: &Value) -> ActionResult {
        let success = params
            .get("success")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let (text, attachments) = if let Some(validator) = &self.output_validator {
            let failing_text = params
                .get("text")
                .and_then(Value::as_str)
                .filter(|_| !success && params.get("data").is_none());
            if let Some(text) = failing_text {
                return ActionResult {
                    is_done: true,
                    success: Some(false),
                    long_term_memory: Some(format!("Task completed: false - {text}")),
                    extracted_content: Some(text.to_owned()),
                    ..ActionResult::default()
                };
            }
            let Some(data) = params.get("data") else {
                return ActionResult::error(
                    "done needs `data` matching the required output schema; call done again with it",
                );
            };
            let problems: Vec<String> = validator
                .iter_errors(data)
                .take(10)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    let at = if path.is_empty() {
                        "/".to_owned()
                    } else {
                        path
                    };
                    format!("at {at}: {e}")
                })
                .collect();
            if !problems.is_empty() {
                return ActionResult::error(format!(
                    "The done data does not match the required output schema: {}. Fix the data and call done again.",
                    problems.join("; ")
                ));
            }
            let attachments = self
                .available_file_paths
                .iter()
                .filter(|p| !self.config.available_file_paths.contains(p))
                .cloned()
                .collect::<Vec<_>>();
            (data.to_string(), attachments)
        } else {
            let Some(text) = params.get("text").and_then(Value::as_str) else {
                return ActionResult::error("done needs a `text` string; call done again with it");
            };
            let names: Vec<String> = params
                .get("files_to_display")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let files = self.workspace.resolve_display_files(&names);
            let mut full = text.to_owned();
            if self.config.display_files_in_done_text && !files.is_empty() {
                full.push_str("\n\nAttachments:");
                for (path, content) in &files {
                    let name = std::path::Path::new(path)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    full.push_str(&format!("\n\n{name}:\n{content}"));
                }
            }
            (full, files.into_iter().map(|(p, _)| p).collect())
        };
        let head: String = text.chars().take(100).collect();
        ActionResult {
            is_done: true,
            success: Some(success),
            long_term_memory: Some(format!("Task completed: {success} - {head}")),
            extracted_content: Some(text),
            attachments: (!attachments.is_empty()).then_some(attachments),
            ..ActionResult::default()
        }
    }

    pub(super) async fn extract(&mut self, params: &Value, acc: &mut StepAcc) -> ActionResult {
        let Some(query) = params
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
        else {
            return ActionResult::error("extract needs a non-empty `query`");
        };
        let options = MarkdownOptions {
            query: query.to_owned(),
            extract_links: params
                .get("extract_links")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            extract_images: params
                .get("extract_images")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            start_from_char: params
                .get("start_from_char")
                .and_then(Value::as_u64)
                .map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX)),
        };
        let page =
            match tokio::time::timeout(ACTION_TIMEOUT, self.browser.extract_markdown(&options))
                .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    return ActionResult::error(format!("Error executing action extract: {e}"));
                }
                Err(_) => return ActionResult::error("extract: reading the page timed out"),
            };
        let chunk = page.chunk.content;
        let figures = &page.chunk.stats;
        let (start, total) = (figures.start_from_char, figures.total_markdown_chars);
        let end = start + figures.chunk_chars;
        let stats = match figures.next_start_char {
            Some(next) => format!(
                "characters {start}..{end} of {total}; call extract again with start_from_char={next} for the rest"
            ),
            None => format!("characters {start}..{end} of {total} (complete)"),
        };
        let already: Vec<String> = params
            .get("already_collected")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut user = format!(
            "<query>\n{query}\n</query>\n<content_stats>\n{stats}\n</content_stats>\n<webpage_content>\n{chunk}\n</webpage_content>"
        );
        if !already.is_empty() {
            user.push_str(&format!(
                "\n<already_collected>\n{}\n</already_collected>",
                already.join("\n")
            ));
        }
        let user = self.secrets.redact(&user);
        let structured = params
            .get("output_schema")
            .filter(|s| s.is_object())
            .cloned();
        let schema = structured.clone().unwrap_or_else(|| {
            json!({
                "type": "object",
                "properties": {"result": {"type": "string"}},
                "required": ["result"],
                "additionalProperties": false
            })
        });
        let request = ChatRequest::new(
            vec![Message::system(prompts::EXTRACT), Message::user(user)],
            OutputSchema::new("extraction", schema),
        );
        let model = Arc::clone(&self.extraction_model);
        let response = match self.call_model(&model, &request, acc).await {
            ModelCall::Reply(r) => r,
            ModelCall::Failed(e) => return ActionResult::error(format!("extract failed: {e}")),
            ModelCall::Stopped => {
                return ActionResult::error("extract was interrupted: the agent is stopping");
            }
        };
        let answer = if structured.is_some() {
            response.value.to_string()
        } else {
            match response.value.get("result").and_then(Value::as_str) {
                Some(r) => r.to_owned(),
                None => response.value.to_string(),
            }
        };
        let content = format!(
            "<url>\n{}\n</url>\n<query>\n{query}\n</query>\n<result>\n{answer}\n</result>",
            page.url
        );
        if content.chars().count() >= EXTRACT_TO_FILE {
            let saved = self.workspace.write_unique("extracted_content", &content);
            let memory = match &saved {
                Some(name) => format!(
                    "Extracted content from {} for query \"{query}\"; saved in full to {name} (shown once in read_state).",
                    page.url
                ),
                None => format!(
                    "Extracted content from {} for query \"{query}\" (shown once in read_state).",
                    page.url
                ),
            };
            return ActionResult {
                extracted_content: Some(content),
                long_term_memory: Some(memory),
                include_extracted_content_only_once: true,
                ..ActionResult::default()
            };
        }
        ActionResult::memory(content)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schema::done_spec;
    use crate::workspace::file_action_specs;
    use browserd_views::AGENT_OWNED_ACTIONS;

    #[test]
    fn the_agent_defines_exactly_the_agent_owned_actions() {
        let mut defined: Vec<String> = [
            done_spec(None),
            extract_spec(),
            crate::human::ask_human_spec(),
        ]
        .into_iter()
        .chain(file_action_specs())
        .map(|spec| spec.name)
        .collect();
        defined.sort();
        let mut owned = AGENT_OWNED_ACTIONS.to_vec();
        owned.sort_unstable();
        assert_eq!(defined, owned);
    }
}
