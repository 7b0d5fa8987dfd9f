//! Reading the page: extract, search_page, find_elements, screenshot, PDF, evaluate.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ActionResult, ExtractParams, FindElementsParams, SaveAsPdfParams, SearchPageParams,
    element::EvalAnswer,
    exec::{Fail, Outcome, truncate_chars},
    js, markdown, timeouts,
    workspace::{Workspace, sanitize_file_name},
};
use crate::session::BrowserSession;

/// Largest `evaluate` result returned as text.
pub const EVALUATE_MAX_CHARS: usize = 20_000;
/// Results at least this long are shown to the model only once.
const SHOW_ONCE_CHARS: usize = 10_000;

impl BrowserSession {
    pub(super) async fn extract(&self, p: &ExtractParams) -> Outcome {
        let session = self.focused_session().await?;
        let target = self.focused_target().await?;
        let url = self.target_url(&target).await.unwrap_or_default();
        let wants_images = p.extract_images || {
            let q = p.query.to_lowercase();
            ["image", "photo", "picture", "img", "logo", "icon"]
                .iter()
                .any(|w| q.contains(w))
        };
        let html = self
            .eval(
                &session,
                &js::with_arg(
                    js::EXTRACT_HTML,
                    &json!({"links": p.extract_links, "images": wants_images}),
                ),
                timeouts::EXTRACT,
            )
            .await?;
        let html = html.as_str().unwrap_or_default().to_owned();
        let start = p.start_from_char;
        let page = tokio::task::spawn_blocking(move || markdown::html_to_markdown(&html, start))
            .await
            .map_err(|_| Fail::new("markdown conversion failed".into()))?
            .map_err(Fail::new)?;
        let stats = &page.stats;
        let mut stats_text = format!(
            "Original HTML: {} chars; markdown: {} chars; this chunk: chars {}..{}",
            stats.original_html_chars,
            stats.total_markdown_chars,
            stats.start_from_char,
            stats.start_from_char + stats.chunk_chars
        );
        if let Some(next) = stats.next_start_char {
            stats_text.push_str(&format!(
                "; more content follows: call extract again with start_from_char={next}"
            ));
        }
        let collected = if p.already_collected.is_empty() {
            String::new()
        } else {
            format!(
                "\n<already_collected>\n{}\n</already_collected>",
                p.already_collected.join("\n")
            )
        };
        let content = format!(
            "<url>{url}</url>\n<query>{}</query>\n<content_stats>{stats_text}</content_stats>\n<webpage_content>\n{}\n</webpage_content>{collected}",
            p.query, page.content
        );
        let memory = format!("Extracted page content of {url} for query: {}", p.query);
        Ok(ActionResult::once(content, memory)
            .with_meta("extraction", json!({"url": url, "query": p.query, "markdown": page.content, "stats": page.stats, "extract_links": p.extract_links, "extract_images": wants_images})))
    }

    /// Runs a page-side query script (`search_page`, `find_elements`) with its argument and
    /// returns the total count and the listed results under `list_key`.
    pub(super) async fn page_query(
        &self,
        session: &str,
        script: &str,
        arg: &Value,
        list_key: &str,
    ) -> Result<(u64, Vec<Value>), Fail> {
        let mut answer = self
            .eval(
                session,
                &js::with_arg(script, arg),
                timeouts::SCROLL_TO_TEXT,
            )
            .await?;
        if let Some(err) = answer.get("error").and_then(Value::as_str) {
            return Err(Fail::new(err.to_owned()));
        }
        let total = answer.get("total").and_then(Value::as_u64).unwrap_or(0);
        let list = match answer.get_mut(list_key).map(Value::take) {
            Some(Value::Array(list)) => list,
            _ => Vec::new(),
        };
        Ok((total, list))
    }

    pub(super) async fn search_page(&self, p: &SearchPageParams) -> Outcome {
        if p.pattern.is_empty() {
            return Err(Fail::new("pattern is empty".into()));
        }
        let session = self.focused_session().await?;
        let arg = json!({"pattern": p.pattern, "regex": p.regex, "case_sensitive": p.case_sensitive, "context_chars": p.context_chars.min(2000), "css_scope": p.css_scope, "max_results": p.max_results.clamp(1, 500)});
        let (total, matches) = self
            .page_query(&session, js::SEARCH_PAGE, &arg, "matches")
            .await?;
        if total == 0 {
            return Ok(ActionResult::memory(format!(
                "No matches for '{}' on the page",
                p.pattern
            )));
        }
        let mut out = format!("Found {total} matches for '{}'", p.pattern);
        if (matches.len() as u64) < total {
            out.push_str(&format!(" (showing {})", matches.len()));
        }
        out.push_str(":\n");
        for (i, m) in matches.iter().enumerate() {
            out.push_str(&format!(
                "{}. [{}] …{}…\n",
                i + 1,
                m.get("path").and_then(Value::as_str).unwrap_or(""),
                m.get("context").and_then(Value::as_str).unwrap_or("")
            ));
        }
        Ok(ActionResult::once(
            out,
            format!("Searched page for '{}': {total} matches", p.pattern),
        ))
    }

    pub(super) async fn find_elements(&self, p: &FindElementsParams) -> Outcome {
        let session = self.focused_session().await?;
        let arg = json!({"selector": p.selector, "attributes": p.attributes, "max_results": p.max_results.clamp(1, 1000), "include_text": p.include_text});
        let (total, items) = self
            .page_query(&session, js::FIND_ELEMENTS, &arg, "items")
            .await?;
        if total == 0 {
            return Ok(ActionResult::memory(format!(
                "No elements match '{}'",
                p.selector
            )));
        }
        let mut out = format!("Found {total} elements matching '{}'", p.selector);
        if (items.len() as u64) < total {
            out.push_str(&format!(" (showing {})", items.len()));
        }
        out.push_str(":\n");
        for (i, item) in items.iter().enumerate() {
            out.push_str(&format!(
                "[{i}] <{}>",
                item.get("tag").and_then(Value::as_str).unwrap_or("?")
            ));
            if let Some(text) = item
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push_str(&format!(" \"{text}\""));
            }
            if let Some(attrs) = item.get("attrs").and_then(Value::as_object) {
                for (k, v) in attrs {
                    out.push_str(&format!(" {{{k}=\"{}\"}}", v.as_str().unwrap_or("")));
                }
            }
            out.push_str(&format!(
                " ({} children)\n",
                item.get("children").and_then(Value::as_u64).unwrap_or(0)
            ));
        }
        Ok(ActionResult::once(
            out,
            format!("Found {total} elements matching '{}'", p.selector),
        ))
    }

    pub(super) async fn screenshot(&self, file_name: Option<&str>) -> Outcome {
        let Some(name) = file_name else {
            return Ok(
                ActionResult::memory("Requested a screenshot for the next observation")
                    .with_meta("include_screenshot", json!(true)),
            );
        };
        let session = self.focused_session().await?;
        let data = self
            .capture_bytes(
                &session,
                "Page.captureScreenshot",
                // From the view: no surface copy left in the GPU process (capture::screenshot).
                json!({"format": "png", "fromSurface": false}),
                timeouts::SCREENSHOT,
            )
            .await?;
        let mut file = sanitize_file_name(name, "screenshot.png");
        if !file.to_ascii_lowercase().ends_with(".png") {
            file.push_str(".png");
        }
        let path = self.workspace.unique_path(&file)?;
        std::fs::write(&path, data)
            .map_err(|e| Fail::new(format!("Could not save the screenshot: {e}")))?;
        let shown = display_name(&self.workspace, &path);
        let mut result = ActionResult::memory(format!("Saved screenshot to {shown}"));
        result.attachments = Some(vec![path.to_string_lossy().into_owned()]);
        Ok(result)
    }

    pub(super) async fn save_as_pdf(&self, p: &SaveAsPdfParams) -> Outcome {
        if !(0.1..=2.0).contains(&p.scale) {
            return Err(Fail::new("scale must be between 0.1 and 2.0".into()));
        }
        let session = self.focused_session().await?;
        let target = self.focused_target().await?;
        let (w, h) = p.paper_format.inches();
        let mut params = json!({
            "printBackground": p.print_background, "landscape": p.landscape, "scale": p.scale,
            "paperWidth": w, "paperHeight": h, "displayHeaderFooter": p.display_header_footer,
        });
        if let Some(t) = &p.header_template {
            params["headerTemplate"] = json!(t);
        }
        if let Some(t) = &p.footer_template {
            params["footerTemplate"] = json!(t);
        }
        let data = self
            .capture_bytes(&session, "Page.printToPDF", params, timeouts::PRINT_TO_PDF)
            .await?;
        let name = match &p.file_name {
            Some(n) => sanitize_file_name(n, "page.pdf"),
            None => {
                let title = self
                    .tabs()
                    .await
                    .ok()
                    .and_then(|t| {
                        t.into_iter()
                            .find(|t| t.target_id == target)
                            .map(|t| t.title)
                    })
                    .unwrap_or_default();
                let stem: String = title
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                    .take(50)
                    .collect();
                let stem = stem.trim().replace(' ', "_");
                if stem.is_empty() {
                    "page.pdf".to_owned()
                } else {
                    format!("{stem}.pdf")
                }
            }
        };
        let name = if name.to_ascii_lowercase().ends_with(".pdf") {
            name
        } else {
            format!("{name}.pdf")
        };
        let path = self.workspace.unique_path(&name)?;
        std::fs::write(&path, &data)
            .map_err(|e| Fail::new(format!("Could not save the PDF: {e}")))?;
        let shown = display_name(&self.workspace, &path);
        let mut result = ActionResult::memory(format!(
            "Saved page as PDF to {shown} ({} bytes)",
            data.len()
        ));
        result.attachments = Some(vec![path.to_string_lossy().into_owned()]);
        Ok(result)
    }

    pub(super) async fn capture_bytes(
        &self,
        session: &str,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Vec<u8>, Fail> {
        #[derive(Deserialize)]
        struct Data {
            data: String,
        }
        use base64::Engine;
        let data: Data = self
            .chrome
            .conn
            .call_raw(Some(session), method, params, timeout)
            .await?
            .decode()?;
        base64::engine::general_purpose::STANDARD
            .decode(data.data)
            .map_err(|e| Fail::new(format!("{method} returned invalid data: {e}")))
    }

    pub(super) async fn evaluate(&self, code: &str) -> Outcome {
        if code.trim().is_empty() {
            return Err(Fail::new("code is empty".into()));
        }
        let session = self.focused_session().await?;
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(Some(&session), "Runtime.evaluate", json!({"expression": code, "returnByValue": true, "awaitPromise": true, "userGesture": true}), timeouts::EVALUATE)
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail::new(format!(
                "JavaScript execution error: {}",
                ex.message()
            )));
        }
        let text = match (&answer.result.value, answer.result.kind.as_deref()) {
            (Some(Value::String(s)), _) => s.clone(),
            (Some(Value::Null), _) => "null".to_owned(),
            (Some(v), _) => v.to_string(),
            (None, Some("undefined")) => "undefined".to_owned(),
            (None, _) => answer
                .result
                .description
                .clone()
                .unwrap_or_else(|| "undefined".to_owned()),
        };
        let (text, _) = truncate_chars(&text, EVALUATE_MAX_CHARS);
        let memory: String = text.chars().take(1000).collect();
        if text.chars().count() >= SHOW_ONCE_CHARS {
            Ok(ActionResult::once(
                text,
                format!("JavaScript result (first 1000 characters): {memory}"),
            ))
        } else {
            Ok(ActionResult::memory(text))
        }
    }
}

fn display_name(ws: &Workspace, path: &std::path::Path) -> String {
    path.strip_prefix(ws.root())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}
