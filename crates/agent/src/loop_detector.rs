//! Soft loop detection: repeated normalised actions and an unchanging page produce nudges.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::views::ActionCall;

const EXEMPT: &[&str] = &["wait", "done", "go_back"];
const STAGNATION_THRESHOLD: u32 = 5;

/// What the page looked like, to notice that nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageFingerprint {
    /// URL.
    pub url: String,
    /// Indexed elements.
    pub element_count: usize,
    /// First 16 hex chars of the DOM text's SHA-256.
    pub text_hash: String,
}

impl PageFingerprint {
    /// Fingerprint of a page.
    pub fn new(url: &str, element_count: usize, dom_text: &str) -> Self {
        Self {
            url: url.to_owned(),
            element_count,
            text_hash: hex_prefix(&Sha256::digest(dom_text.as_bytes()), 16),
        }
    }
}

fn hex_prefix(bytes: &[u8], chars: usize) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex[..chars.min(hex.len())].to_owned()
}

/// The detector's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ActionLoopDetector {
    window: usize,
    recent: VecDeque<String>,
    fingerprints: VecDeque<PageFingerprint>,
    consecutive_stagnant_pages: u32,
}

fn normalise(action: &ActionCall) -> String {
    let p = &action.params;
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
    let idx = |k: &str| {
        p.get(k)
            .filter(|v| !v.is_null())
            .map_or_else(|| "None".to_owned(), ToString::to_string)
    };
    match action.name.as_str() {
        "search" => {
            let cleaned: String = s("query")
                .to_lowercase()
                .chars()
                .map(|c| if c.is_alphanumeric() { c } else { ' ' })
                .collect();
            let mut tokens: Vec<&str> = cleaned.split_whitespace().collect();
            tokens.sort_unstable();
            tokens.dedup();
            let engine = p
                .get("engine")
                .and_then(Value::as_str)
                .unwrap_or("duckduckgo");
            format!("search|{engine}|{}", tokens.join("|"))
        }
        "click" => format!("click|{}", idx("index")),
        "input" => format!("input|{}|{}", idx("index"), s("text").trim().to_lowercase()),
        "navigate" => format!("navigate|{}", s("url")),
        "scroll" => {
            let down = p.get("down").and_then(Value::as_bool).unwrap_or(true);
            let dir = if down { "down" } else { "up" };
            format!("scroll|{dir}|{}", idx("index"))
        }
        name => {
            let mut sorted: Vec<(&String, &Value)> = p
                .as_object()
                .map(|m| m.iter().filter(|(_, v)| !v.is_null()).collect())
                .unwrap_or_default();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            let body: serde_json::Map<String, Value> = sorted
                .into_iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            format!("{name}|{}", Value::Object(body))
        }
    }
}

impl ActionLoopDetector {
    /// A detector looking back over `window` actions.
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            ..Self::default()
        }
    }

    /// Records the actions of a step.
    pub fn record_actions(&mut self, actions: &[ActionCall]) {
        for action in actions {
            if EXEMPT.contains(&action.name.as_str()) {
                continue;
            }
            let hash = hex_prefix(&Sha256::digest(normalise(action).as_bytes()), 12);
            self.recent.push_back(hash);
            while self.recent.len() > self.window {
                self.recent.pop_front();
            }
        }
    }

    /// Records the page seen at the start of a step.
    pub fn record_page(&mut self, fingerprint: PageFingerprint) {
        if self.fingerprints.back() == Some(&fingerprint) {
            self.consecutive_stagnant_pages += 1;
        } else {
            self.consecutive_stagnant_pages = 0;
        }
        self.fingerprints.push_back(fingerprint);
        while self.fingerprints.len() > 5 {
            self.fingerprints.pop_front();
        }
    }

    /// Count of the most frequent action in the window.
    pub fn max_repetition_count(&self) -> usize {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for h in &self.recent {
            *counts.entry(h.as_str()).or_default() += 1;
        }
        counts.values().copied().max().unwrap_or(0)
    }

    /// Steps in a row with an identical page.
    pub fn consecutive_stagnant_pages(&self) -> u32 {
        self.consecutive_stagnant_pages
    }

    /// The nudge to show this step, if any.
    pub fn nudge(&self) -> Option<String> {
        let mut parts = Vec::new();
        let repeats = self.max_repetition_count();
        let seen = self.recent.len();
        if repeats >= 12 {
            parts.push(format!(
                "Loop warning: you have repeated the same action {repeats} times in your last {seen} actions. \
This approach is not working. Stop repeating it: try a completely different strategy, a different page or element, \
or call done with what you have and explain what blocked you."
            ));
        } else if repeats >= 8 {
            parts.push(format!(
                "You have now repeated a similar action {repeats} times in your last {seen} actions without getting closer. \
Change your approach: look for another element, another page, or a search instead of repeating the same step."
            ));
        } else if repeats >= 5 {
            parts.push(format!(
                "Heads up: you have repeated a similar action {repeats} times in your last {seen} actions. \
If it is not making progress, consider a different approach."
            ));
        }
        if self.consecutive_stagnant_pages >= STAGNATION_THRESHOLD {
            parts.push(format!(
                "The page has not changed for {} steps in a row (same URL, same elements, same text). \
Your actions are not having an effect; try something different.",
                self.consecutive_stagnant_pages
            ));
        }
        (!parts.is_empty()).then(|| parts.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, params: Value) -> ActionCall {
        ActionCall::new(name, params)
    }

    #[test]
    fn normalisation_groups_equivalent_actions() {
        assert_eq!(
            normalise(&call("search", json!({"query": "Rust, tokio!"}))),
            normalise(&call("search", json!({"query": "tokio rust"})))
        );
        assert_eq!(
            normalise(&call("input", json!({"index": 3, "text": " Hello "}))),
            normalise(&call(
                "input",
                json!({"index": 3, "text": "hello", "clear": false})
            ))
        );
        assert_eq!(
            normalise(&call("scroll", json!({"down": true, "pages": 1.0}))),
            normalise(&call("scroll", json!({"down": true, "pages": 3.0})))
        );
        assert_ne!(
            normalise(&call("click", json!({"index": 1}))),
            normalise(&call("click", json!({"index": 2})))
        );
        assert_eq!(
            normalise(&call("find_text", json!({"text": "a", "x": null}))),
            "find_text|{\"text\":\"a\"}"
        );
    }

    #[test]
    fn thresholds_window_and_exemptions() {
        let mut d = ActionLoopDetector::new(20);
        for _ in 0..4 {
            d.record_actions(&[call("click", json!({"index": 7})), call("wait", json!({}))]);
        }
        assert_eq!(d.max_repetition_count(), 4);
        assert!(d.nudge().is_none());
        d.record_actions(&[call("click", json!({"index": 7}))]);
        assert!(d.nudge().unwrap().starts_with("Heads up"));
        for _ in 0..3 {
            d.record_actions(&[call("click", json!({"index": 7}))]);
        }
        assert!(d.nudge().unwrap().contains("8 times"));
        for _ in 0..4 {
            d.record_actions(&[call("click", json!({"index": 7}))]);
        }
        assert!(d.nudge().unwrap().starts_with("Loop warning"));
        for i in 0..20 {
            d.record_actions(&[call("click", json!({"index": 100 + i}))]);
        }
        assert_eq!(d.max_repetition_count(), 1);
        assert!(d.nudge().is_none());
    }

    #[test]
    fn stagnation_after_five_identical_pages() {
        let mut d = ActionLoopDetector::new(20);
        for _ in 0..5 {
            d.record_page(PageFingerprint::new("https://a.test/", 3, "same"));
        }
        assert_eq!(d.consecutive_stagnant_pages(), 4);
        assert!(d.nudge().is_none());
        d.record_page(PageFingerprint::new("https://a.test/", 3, "same"));
        assert!(d.nudge().unwrap().contains("has not changed for 5 steps"));
        d.record_page(PageFingerprint::new("https://a.test/", 3, "different"));
        assert!(d.nudge().is_none());
    }
}
