//! Dropdowns (listing and selecting options) and file upload.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ActionContext, ActionResult,
    element::RemoteObject,
    exec::{Fail, Outcome},
    js, timeouts,
};
use crate::{session::BrowserSession, types::ElementInfo};

impl BrowserSession {
    pub(super) async fn dropdown_options(&self, el: &ElementInfo) -> Outcome {
        let r = self.resolve(el).await?;
        let answer = self
            .call_on(&r, js::DROPDOWN_OPTIONS, vec![], timeouts::DROPDOWN)
            .await?;
        let options = answer
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if options.is_empty() {
            return Err(Fail::new(format!(
                "Element {} is not a dropdown with options (no <select>, listbox or menu found)",
                el.index
            )));
        }
        let lines: Vec<String> = options
            .iter()
            .map(|o| {
                format!(
                    "{}: text={}, value={}{}",
                    o.get("index").and_then(Value::as_u64).unwrap_or(0),
                    serde_json::to_string(o.get("text").and_then(Value::as_str).unwrap_or(""))
                        .unwrap_or_default(),
                    serde_json::to_string(o.get("value").and_then(Value::as_str).unwrap_or(""))
                        .unwrap_or_default(),
                    if o.get("selected").and_then(Value::as_bool) == Some(true) {
                        " (selected)"
                    } else {
                        ""
                    },
                )
            })
            .collect();
        let content = format!(
            "Options of dropdown {}:\n{}\nUse select_dropdown with the exact text or value.",
            el.index,
            lines.join("\n")
        );
        Ok(ActionResult::once(
            content,
            format!("Found {} options in dropdown {}", options.len(), el.index),
        ))
    }

    pub(super) async fn select_dropdown(&self, index: u32, text: &str) -> Outcome {
        let el = self.element(index).await?;
        let r = self.resolve(&el).await?;
        let answer = self
            .call_on(
                &r,
                js::SELECT_OPTION,
                vec![json!(text)],
                timeouts::SELECT_DROPDOWN,
            )
            .await?;
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            let chosen = answer.get("text").and_then(Value::as_str).unwrap_or(text);
            let value = answer.get("value").and_then(Value::as_str).unwrap_or("");
            return Ok(ActionResult::memory(format!(
                "Selected option '{chosen}' (value {value}) in dropdown {index}"
            )));
        }
        let options: Vec<String> = answer
            .get("options")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let why = if answer.get("disabled").and_then(Value::as_bool) == Some(true) {
            "is disabled"
        } else {
            "was not found"
        };
        Err(Fail::new(format!(
            "Option '{text}' {why} in dropdown {index}. Available options: {}. Use the exact text or value.",
            if options.is_empty() {
                "(none)".to_owned()
            } else {
                options.join(" | ")
            }
        )))
    }

    pub(super) async fn upload(&self, index: u32, path: &str, ctx: &ActionContext) -> Outcome {
        let file = self.allowed_file(path, ctx)?;
        let el = self.element(index).await?;
        let r = self.resolve(&el).await?;
        #[derive(Deserialize)]
        struct Answer {
            result: RemoteObject,
        }
        let answer: Answer = self
            .chrome
            .conn
            .call_raw(
                Some(&r.session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": js::UPLOAD_TARGET, "objectId": r.object_id, "returnByValue": false}),
                self.timeout,
            )
            .await?
            .decode()?;
        let input = match (answer.result.object_id, answer.result.subtype.as_deref()) {
            (Some(id), _) => id,
            _ => {
                return Err(Fail::new(format!(
                    "No file input found near element {index} or on the page"
                )));
            }
        };
        self.chrome
            .conn
            .call_raw(
                Some(&r.session),
                "DOM.setFileInputFiles",
                json!({"files": [file.to_string_lossy()], "objectId": input}),
                timeouts::UPLOAD_FILE,
            )
            .await?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(ActionResult::memory(format!(
            "Uploaded file {name} to element {index}"
        )))
    }

    /// A local file the task may use: listed in `available_file_paths`, or inside the
    /// workspace (downloads included).
    pub(super) fn allowed_file(
        &self,
        path: &str,
        ctx: &ActionContext,
    ) -> Result<std::path::PathBuf, Fail> {
        let candidate = std::path::Path::new(path);
        for allowed in &ctx.available_file_paths {
            let matches = allowed == candidate
                || allowed
                    .file_name()
                    .is_some_and(|n| candidate.as_os_str() == n);
            if matches
                && let Ok(canon) = allowed.canonicalize()
                && canon.is_file()
            {
                return Ok(canon);
            }
        }
        let relative = if candidate.is_absolute() {
            candidate
                .strip_prefix(self.workspace.root())
                .map(|p| p.to_string_lossy().into_owned())
                .ok()
        } else {
            Some(path.to_owned())
        };
        if let Some(rel) = relative
            && let Ok(resolved) = self.workspace.resolve(&rel)
            && resolved.is_file()
        {
            return Ok(resolved);
        }
        Err(Fail::new(format!(
            "File {path} is not available to this task. Use a file from available_file_paths, a download or a file written to the workspace."
        )))
    }
}
