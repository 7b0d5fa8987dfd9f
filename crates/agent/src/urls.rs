//! Long URLs shortened in prompts and restored in the model's output, and the
//! "task mentions exactly one URL" rule for the initial navigation.

use std::collections::HashMap;
use std::sync::LazyLock;

use md5::{Digest as _, Md5};
use regex::Regex;
use serde_json::Value;

static URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?:https?://|www\.)[^\s<>"'`]+|\b[a-zA-Z0-9][a-zA-Z0-9.-]*\.[a-zA-Z]{2,}/[^\s<>"'`]*"#,
    )
    .expect("valid regex")
});

/// Shortened URL → original, kept for the whole task.
#[derive(Debug, Default)]
pub struct UrlShortener {
    limit: usize,
    originals: HashMap<String, String>,
}

impl UrlShortener {
    /// A shortener for query+fragment parts longer than `limit` chars (0 = off).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            originals: HashMap::new(),
        }
    }

    /// `text` with long URLs shortened; remembers how to restore them.
    pub fn shorten(&mut self, text: &str) -> String {
        if self.limit == 0 {
            return text.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for m in URL.find_iter(text) {
            let url = m.as_str();
            let Some(cut) = url.find(['?', '#']) else {
                continue;
            };
            let (base, tail) = url.split_at(cut);
            if tail.chars().count() <= self.limit {
                continue;
            }
            let kept: String = tail.chars().take(self.limit).collect();
            let digest = Md5::digest(tail.as_bytes());
            let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
            let short = format!("{base}{kept}...{}", &hex[..7]);
            if short.len() >= url.len() {
                continue;
            }
            out.push_str(&text[last..m.start()]);
            out.push_str(&short);
            last = m.end();
            self.originals.insert(short, url.to_owned());
        }
        out.push_str(&text[last..]);
        out
    }

    /// Replaces shortened URLs in every string of `value` by their originals.
    pub fn restore(&self, value: &mut Value) {
        if self.originals.is_empty() {
            return;
        }
        match value {
            Value::String(text) if text.contains("...") => {
                for (short, original) in &self.originals {
                    if text.contains(short.as_str()) {
                        *text = text.replace(short.as_str(), original);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.restore(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.restore(v)),
            _ => {}
        }
    }
}

static TASK_URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b(?:https?://[^\s<>"'`)\]]+|(?:www\.)?[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?::\d+)?(?:/[^\s<>"'`)\]]*)?)"#)
        .expect("valid regex")
});

const FILE_EXTENSIONS: &[&str] = &[
    "pdf", "csv", "png", "jpg", "jpeg", "gif", "txt", "json", "md", "doc", "docx", "xls", "xlsx",
    "zip", "mp3", "mp4", "svg", "webp", "xml", "py", "js", "rs",
];

/// The only URL a task mentions (not an email, a file name, a placeholder, or after "never"/
/// "don't"/"not"), with `https://` added when it has no scheme.
pub fn single_url_in_task(task: &str) -> Option<String> {
    let mut found: Vec<String> = Vec::new();
    for m in TASK_URL.find_iter(task) {
        let raw = m.as_str().trim_end_matches(['.', ',', ';', ':', '!', '?']);
        let before = &task[..m.start()];
        if before.ends_with('@') || raw.contains('@') {
            continue;
        }
        // Part of an email address: the word before has an '@'.
        if before
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|w| w.contains('@'))
        {
            continue;
        }
        let lower = raw.to_ascii_lowercase();
        if !lower.starts_with("http") {
            let last = lower.rsplit('.').next().unwrap_or_default();
            if FILE_EXTENSIONS.contains(&last) && !lower.contains('/') {
                continue;
            }
        }
        let path_ext = lower
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .rsplit_once('.')
            .map(|(_, ext)| ext.to_owned());
        if lower.contains('/')
            && path_ext.is_some_and(|ext| FILE_EXTENSIONS.contains(&ext.as_str()))
        {
            continue;
        }
        if [
            "example.com",
            "example.org",
            "your-",
            "yourdomain",
            "domain.com",
        ]
        .iter()
        .any(|p| lower.contains(p))
        {
            continue;
        }
        let window_start = before.char_indices().rev().nth(19).map_or(0, |(i, _)| i);
        let window = before[window_start..].to_ascii_lowercase();
        if ["never", "dont", "don't", "not "]
            .iter()
            .any(|w| window.contains(w))
        {
            continue;
        }
        let url = if lower.starts_with("http") {
            raw.to_owned()
        } else {
            format!("https://{raw}")
        };
        if !found.contains(&url) {
            found.push(url);
        }
    }
    (found.len() == 1).then(|| found.remove(0))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn shortens_long_queries_and_restores_them() {
        let mut s = UrlShortener::new(25);
        let long = "https://shop.test/search?q=a-very-long-query-string-that-goes-on&page=2";
        let text = format!("go to {long} now; short https://a.test/?q=1");
        let out = s.shorten(&text);
        assert!(!out.contains(long), "{out}");
        assert!(out.contains("https://a.test/?q=1"));
        let short = out
            .split_whitespace()
            .find(|w| w.starts_with("https://shop.test"))
            .unwrap()
            .trim_end_matches(';')
            .to_owned();
        assert!(short.starts_with("https://shop.test/search?q=a-very-long-query-stri..."));
        let mut v = json!({"action": [{"navigate": {"url": short}}]});
        s.restore(&mut v);
        assert_eq!(v["action"][0]["navigate"]["url"], long);
    }

    #[test]
    fn finds_exactly_one_task_url() {
        assert_eq!(
            single_url_in_task("Open http://127.0.0.1:8080/login and sign in").as_deref(),
            Some("http://127.0.0.1:8080/login")
        );
        assert_eq!(
            single_url_in_task("Find the price on shop.test/item.").as_deref(),
            Some("https://shop.test/item")
        );
        assert_eq!(single_url_in_task("compare a.test/x with b.test/y"), None);
        assert_eq!(single_url_in_task("email bob@mail.test the report"), None);
        assert_eq!(single_url_in_task("summarise report.pdf"), None);
        assert_eq!(single_url_in_task("never visit http://bad.test/ ok"), None);
        assert_eq!(single_url_in_task("no url here"), None);
    }
}
