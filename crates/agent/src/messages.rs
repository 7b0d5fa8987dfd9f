//! The state message: history rendered as text plus the current page, rebuilt every step.

use std::fmt::Write as _;

use browserd_views::{ActionResult, TabInfo};

use crate::browser::BrowserState;
use crate::views::AgentOutput;

/// Cap of `<read_state>` and of one step's action results.
pub const SECTION_CAP: usize = 60_000;

/// The first `max` characters of `text` (char-safe) and whether it was cut.
pub fn truncate_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((i, _)) => (&text[..i], true),
        None => (text, false),
    }
}

/// Errors longer than 200 chars keep their first and last 100 chars.
pub fn shorten_error(error: &str) -> String {
    let n = error.chars().count();
    if n <= 200 {
        return error.to_owned();
    }
    let head: String = error.chars().take(100).collect();
    let tail: String = error.chars().skip(n - 100).collect();
    format!("{head}......{tail}")
}

/// One entry of `<agent_history>`.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryItem {
    /// The first item.
    Initialized,
    /// A step with model output.
    Step {
        /// Step number.
        step: u32,
        /// evaluation_previous_goal.
        evaluation: Option<String>,
        /// memory.
        memory: Option<String>,
        /// next_goal.
        next_goal: Option<String>,
        /// Rendered action results.
        results: String,
    },
    /// A step without usable model output.
    Failed {
        /// Step number.
        step: u32,
        /// What went wrong (shortened).
        error: String,
    },
    /// Something that happened outside the agent's actions (browser-use's `system_message`),
    /// e.g. a person driving the browser while the task was paused.
    System(String),
}

impl HistoryItem {
    /// The item for a finished step.
    pub fn from_step(step: u32, output: Option<&AgentOutput>, results: &[ActionResult]) -> Self {
        let mut text = String::new();
        let total = results.len();
        for (i, r) in results.iter().enumerate() {
            let mut line = String::new();
            if let Some(m) = r.long_term_memory.as_deref().filter(|m| !m.is_empty()) {
                line.push_str(m);
            } else if let Some(c) = r
                .extracted_content
                .as_deref()
                .filter(|_| !r.include_extracted_content_only_once)
            {
                line.push_str(c);
            }
            if let Some(e) = &r.error {
                if !line.is_empty() {
                    line.push('\n');
                }
                line.push_str("Error: ");
                line.push_str(&shorten_error(e));
            }
            if line.is_empty() {
                continue;
            }
            let _ = writeln!(text, "Action {}/{}: {}", i + 1, total, line);
        }
        let (capped, cut) = truncate_chars(text.trim_end(), SECTION_CAP);
        let mut results_text = capped.to_owned();
        if cut {
            results_text.push_str("\n[... action results truncated ...]");
        }
        match output {
            Some(o) => Self::Step {
                step,
                evaluation: o.evaluation_previous_goal.clone(),
                memory: o.memory.clone(),
                next_goal: o.next_goal.clone(),
                results: results_text,
            },
            None => Self::Failed {
                step,
                error: if results_text.is_empty() {
                    "Agent failed to output in the right format.".to_owned()
                } else {
                    results_text
                },
            },
        }
    }

    /// Rendered text.
    pub fn render(&self) -> String {
        match self {
            Self::Initialized => "Agent initialized".to_owned(),
            Self::Step {
                step,
                evaluation,
                memory,
                next_goal,
                results,
            } => {
                let mut out = format!("<step_{step}>\n");
                for (label, value) in [
                    ("Evaluation of previous step", evaluation),
                    ("Memory", memory),
                    ("Next goal", next_goal),
                ] {
                    if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                        let _ = writeln!(out, "{label}: {v}");
                    }
                }
                if !results.is_empty() {
                    let _ = writeln!(out, "Result:\n{results}");
                }
                let _ = write!(out, "</step_{step}>");
                out
            }
            Self::Failed { step, error } => format!("<step_{step}>\n{error}\n</step_{step}>"),
            Self::System(text) => format!("<sys>\n{text}\n</sys>"),
        }
    }
}

/// History and one-shot content across steps.
#[derive(Debug)]
pub struct MessageManager {
    items: Vec<HistoryItem>,
    compacted_memory: Option<String>,
    last_compaction_step: u32,
    read_state: Vec<String>,
    max_history_items: Option<usize>,
}

impl MessageManager {
    /// A fresh history.
    pub fn new(max_history_items: Option<usize>) -> Self {
        Self {
            items: vec![HistoryItem::Initialized],
            compacted_memory: None,
            last_compaction_step: 0,
            read_state: Vec::new(),
            max_history_items,
        }
    }

    /// Records a finished step and collects its one-shot content for the next `<read_state>`.
    pub fn add_step(&mut self, item: HistoryItem, results: &[ActionResult]) {
        self.items.push(item);
        self.read_state = results
            .iter()
            .filter(|r| r.include_extracted_content_only_once)
            .filter_map(|r| r.extracted_content.clone())
            .collect();
    }

    /// Records something that happened between steps, for the next `<agent_history>`.
    pub fn add_system_note(&mut self, text: String) {
        self.items.push(HistoryItem::System(text));
    }

    /// Number of items (incl. the first).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Always false: the first item is always there.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The `<agent_history>` body.
    pub fn history_text(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(summary) = &self.compacted_memory {
            parts.push(format!(
                "<compacted_memory>\n<!-- A summary of earlier steps written by a model. Treat it as unverified: \
check the current page before relying on it. -->\n{summary}\n</compacted_memory>"
            ));
        }
        let items = &self.items;
        match self.max_history_items {
            Some(max) if items.len() > max => {
                parts.push(items[0].render());
                let keep = max.saturating_sub(1);
                let omitted = items.len() - 1 - keep;
                parts.push(format!(
                    "<sys>[... {omitted} previous steps omitted...]</sys>"
                ));
                parts.extend(items[items.len() - keep..].iter().map(HistoryItem::render));
            }
            _ => parts.extend(items.iter().map(HistoryItem::render)),
        }
        parts.join("\n")
    }

    /// `<read_state>` block (empty string when nothing to show).
    pub fn read_state_text(&self) -> String {
        if self.read_state.is_empty() {
            return String::new();
        }
        let mut body = String::new();
        for (i, content) in self.read_state.iter().enumerate() {
            let _ = writeln!(body, "<read_state_{i}>\n{content}\n</read_state_{i}>");
        }
        let (capped, cut) = truncate_chars(&body, SECTION_CAP);
        let mut out = format!("<read_state>\n{capped}");
        if cut {
            out.push_str("\n[... read state truncated ...]\n");
        }
        out.push_str("</read_state>\n");
        out
    }

    /// Whether compaction is due at `step`.
    pub fn compaction_due(&self, step: u32, every: u32, trigger_chars: usize) -> bool {
        every > 0
            && step.saturating_sub(self.last_compaction_step) >= every
            && self.history_text().chars().count() >= trigger_chars
    }

    /// The text the compaction model summarises.
    pub fn compaction_input(&self, task: &str) -> String {
        let previous = self
            .compacted_memory
            .as_deref()
            .map(|s| format!("<previous_summary>\n{s}\n</previous_summary>\n"))
            .unwrap_or_default();
        let all: Vec<String> = self.items.iter().map(HistoryItem::render).collect();
        format!(
            "<user_request>\n{task}\n</user_request>\n{previous}<agent_history>\n{}\n</agent_history>",
            all.join("\n")
        )
    }

    /// Stores the summary and keeps the first and the last `keep_last` items.
    pub fn apply_compaction(&mut self, summary: String, step: u32, keep_last: usize) {
        self.compacted_memory = Some(summary);
        self.last_compaction_step = step;
        if self.items.len() > keep_last + 1 {
            let tail = self.items.split_off(self.items.len() - keep_last);
            self.items.truncate(1);
            self.items.extend(tail);
        }
    }
}

/// Everything the `<agent_state>` and `<browser_state>` sections need besides the history.
pub struct StateInputs<'a> {
    /// The task text.
    pub task: &'a str,
    /// `<file_system>` body.
    pub file_system: String,
    /// todo.md content.
    pub todo: String,
    /// Rendered plan, if any.
    pub plan: Option<String>,
    /// Secret names usable on this page.
    pub secret_names: Vec<String>,
    /// Readable/uploadable files.
    pub available_file_paths: &'a [String],
    /// The page.
    pub browser: &'a BrowserState,
    /// DOM text cap.
    pub max_dom_chars: usize,
    /// `name: description (params)` lines of page-specific actions.
    pub page_actions: Vec<String>,
    /// Step number (1-based).
    pub step: u32,
    /// Budget.
    pub max_steps: u32,
    /// `YYYY-MM-DD`.
    pub today: String,
}

fn current_tab(state: &BrowserState) -> Option<&TabInfo> {
    if let Some(id) = &state.current_tab_id {
        return state.tabs.iter().find(|t| &t.tab_id == id);
    }
    let mut matches = state
        .tabs
        .iter()
        .filter(|t| t.url == state.url && t.title == state.title);
    match (matches.next(), matches.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

fn browser_block(state: &BrowserState, max_dom_chars: usize) -> String {
    let mut out = String::from("<browser_state>\n");
    if let Some(s) = state.page_stats {
        let mut line = String::new();
        if s.total_elements < 10 {
            line.push_str("Page appears empty - consider waiting - ");
        }
        let _ = write!(
            line,
            "{} links, {} interactive, {} iframes",
            s.links, s.interactive_elements, s.iframes
        );
        if s.shadow_open + s.shadow_closed > 0 {
            let _ = write!(
                line,
                ", {} shadow(open), {} shadow(closed)",
                s.shadow_open, s.shadow_closed
            );
        }
        if s.images > 0 {
            let _ = write!(line, ", {} images", s.images);
        }
        let _ = write!(line, ", {} total elements", s.total_elements);
        let _ = writeln!(out, "<page_stats>{line}</page_stats>");
    }
    if let Some(tab) = current_tab(state) {
        let _ = writeln!(out, "Current tab: {}", tab.tab_id);
    }
    let _ = writeln!(out, "Current URL: {}", state.url);
    out.push_str("Available tabs:\n");
    for tab in &state.tabs {
        let (title, _) = truncate_chars(&tab.title, 30);
        let _ = writeln!(out, "Tab {}: {} - {}", tab.tab_id, tab.url, title);
    }
    if let Some(p) = state.page_info {
        let (above, below) = (p.pages_above(), p.pages_below());
        let hint = if below > 0.2 {
            " — scroll down to reveal more content"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<page_info>{above:.1} pages above, {below:.1} pages below{hint}</page_info>"
        );
    }
    if let Some(e) = &state.error {
        let _ = writeln!(out, "<browser_state_error>{e}</browser_state_error>");
    }
    if !state.browser_errors.is_empty() {
        out.push_str("Browser errors since the last step:\n");
        for e in &state.browser_errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    if !state.closed_dialogs.is_empty() {
        out.push_str("Auto-closed JavaScript dialogs:\n");
        for d in &state.closed_dialogs {
            let _ = writeln!(out, "- {d}");
        }
    }
    let (dom, cut) = truncate_chars(&state.llm_text, max_dom_chars);
    if dom.trim().is_empty() {
        out.push_str("Interactive elements:\nempty page\n");
    } else if cut {
        let _ = writeln!(
            out,
            "Interactive elements (truncated to {max_dom_chars} characters):\n{dom}"
        );
    } else {
        let _ = writeln!(out, "Interactive elements:\n{dom}");
    }
    out.push_str("</browser_state>\n");
    out
}

/// Renders the whole state message (before secret redaction and URL shortening).
pub fn render_state_message(history: &MessageManager, inputs: &StateInputs<'_>) -> String {
    let mut out = String::with_capacity(inputs.browser.llm_text.len() + 4096);
    let _ = write!(
        out,
        "<user_request>\n{}\n</user_request>\n\n<agent_history>\n{}\n</agent_history>\n\n",
        inputs.task,
        history.history_text()
    );
    out.push_str("<agent_state>\n<file_system>\n");
    out.push_str(&inputs.file_system);
    out.push_str("</file_system>\n<todo_contents>\n");
    if inputs.todo.trim().is_empty() {
        out.push_str("[empty todo.md, fill it when applicable]");
    } else {
        out.push_str(inputs.todo.trim_end());
    }
    out.push_str("\n</todo_contents>\n");
    if let Some(plan) = &inputs.plan {
        let _ = writeln!(out, "<plan>\n{plan}\n</plan>");
    }
    if !inputs.secret_names.is_empty() {
        let _ = writeln!(
            out,
            "<sensitive_data>\nSecrets you can use on this page (write <secret>name</secret> in an action): {}\n</sensitive_data>",
            inputs.secret_names.join(", ")
        );
    }
    if !inputs.available_file_paths.is_empty() {
        let _ = writeln!(
            out,
            "<available_file_paths>\n{}\nUse with absolute paths\n</available_file_paths>",
            inputs.available_file_paths.join("\n")
        );
    }
    out.push_str("</agent_state>\n");
    out.push_str(&browser_block(inputs.browser, inputs.max_dom_chars));
    out.push_str(&history.read_state_text());
    if !inputs.page_actions.is_empty() {
        let _ = writeln!(
            out,
            "<page_specific_actions>\n{}\n</page_specific_actions>",
            inputs.page_actions.join("\n")
        );
    }
    let _ = writeln!(
        out,
        "<step_info>Step {} of at most {}\nToday: {}</step_info>",
        inputs.step, inputs.max_steps, inputs.today
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_head_and_tail() {
        let e = format!("{}{}{}", "a".repeat(100), "b".repeat(50), "c".repeat(100));
        assert_eq!(
            shorten_error(&e),
            format!("{}......{}", "a".repeat(100), "c".repeat(100))
        );
        assert_eq!(shorten_error("short"), "short");
    }

    #[test]
    fn history_keeps_first_marker_and_last_items() {
        let mut m = MessageManager::new(Some(6));
        for step in 1..=10 {
            let out = AgentOutput {
                memory: Some(format!("mem {step}")),
                ..AgentOutput::default()
            };
            m.add_step(HistoryItem::from_step(step, Some(&out), &[]), &[]);
        }
        let text = m.history_text();
        assert!(
            text.starts_with("Agent initialized\n<sys>[... 5 previous steps omitted...]</sys>")
        );
        assert!(!text.contains("mem 5\n") && text.contains("mem 6") && text.contains("mem 10"));
    }

    #[test]
    fn compaction_keeps_first_and_last() {
        let mut m = MessageManager::new(None);
        for step in 1..=30 {
            m.add_step(
                HistoryItem::Failed {
                    step,
                    error: "x".repeat(2000),
                },
                &[],
            );
        }
        assert!(m.compaction_due(30, 25, 40_000));
        assert!(!m.compaction_due(30, 25, 100_000));
        m.apply_compaction("SUMMARY".into(), 30, 6);
        assert_eq!(m.len(), 7);
        let text = m.history_text();
        assert!(text.starts_with("<compacted_memory>") && text.contains("unverified"));
        assert!(text.contains("<step_25>") && !text.contains("<step_24>"));
        assert!(!m.compaction_due(40, 25, 0));
    }
}
