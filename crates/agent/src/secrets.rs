//! Task secrets: `<secret>name</secret>` placeholders filled in only when an action runs (scoped
//! secrets only on URLs their domain pattern matches, with the egress policy's semantics — see
//! [`crate::domains`]), TOTP codes for names ending in `2fa_code`, and redaction of the real values
//! from every text the agent emits or stores.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::Value;

use crate::config::{SecretEntry, SensitiveData};
use crate::domains::{DomainPattern, PatternError};

static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<secret>\s*([^<]+?)\s*</secret>").expect("valid regex"));

/// Secrets of one task.
pub struct Secrets {
    global: BTreeMap<String, String>,
    /// Pattern text, the parsed pattern (`None` when invalid: such secrets are never filled),
    /// and the secrets.
    scoped: Vec<(String, Option<DomainPattern>, BTreeMap<String, String>)>,
    /// TOTP codes handed out so far (redacted like the other values).
    issued_codes: Mutex<Vec<(String, String)>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("global", &self.global.keys().collect::<Vec<_>>())
            .field(
                "scoped",
                &self.scoped.iter().map(|(p, _, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why a placeholder could not be filled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No secret of that name is usable on the current page.
    #[error("secret `{0}` is not available on this page")]
    Unavailable(String),
    /// A `*2fa_code` value is not a usable base32 TOTP secret.
    #[error("secret `{0}` is not a valid base32 TOTP secret")]
    BadTotp(String),
    /// The domain pattern of scoped secrets is invalid.
    #[error("sensitive_data: {0}")]
    InvalidScope(PatternError),
}

fn is_totp(name: &str) -> bool {
    name.ends_with("2fa_code")
}

impl Secrets {
    /// Builds the secret set of a task. Secrets under an invalid domain pattern are never
    /// filled (but still redacted); [`Secrets::try_new`] refuses them instead.
    pub fn new(data: &SensitiveData) -> Self {
        let mut global = BTreeMap::new();
        let mut scoped = Vec::new();
        for (key, entry) in &data.0 {
            match entry {
                SecretEntry::Value(value) => {
                    global.insert(key.clone(), value.clone());
                }
                SecretEntry::Scoped(map) => {
                    scoped.push((key.clone(), DomainPattern::parse(key).ok(), map.clone()));
                }
            }
        }
        Self {
            global,
            scoped,
            issued_codes: Mutex::new(Vec::new()),
        }
    }

    /// Like [`Secrets::new`], but an invalid domain pattern is an error (the one the api and
    /// the egress policy give for it).
    pub fn try_new(data: &SensitiveData) -> Result<Self, SecretError> {
        for (key, entry) in &data.0 {
            if let SecretEntry::Scoped(_) = entry {
                DomainPattern::parse(key).map_err(SecretError::InvalidScope)?;
            }
        }
        Ok(Self::new(data))
    }

    /// The scoped secret maps whose pattern matches `url`.
    fn scoped_for<'a>(&'a self, url: &str) -> impl Iterator<Item = &'a BTreeMap<String, String>> {
        let url = url::Url::parse(url).ok();
        self.scoped.iter().filter_map(move |(_, pattern, map)| {
            let hit = url
                .as_ref()
                .zip(pattern.as_ref())
                .is_some_and(|(url, pattern)| pattern.matches_url(url));
            hit.then_some(map)
        })
    }

    /// Adds a secret usable on every page (a secret answer to `ask_human`); a value already
    /// under `name` is replaced.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.global.insert(name.into(), value.into());
    }

    /// No secrets at all.
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.scoped.is_empty()
    }

    /// Names usable on `url`, sorted.
    pub fn names_for_url(&self, url: &str) -> Vec<String> {
        let mut names: Vec<String> = self.global.keys().cloned().collect();
        for map in self.scoped_for(url) {
            names.extend(map.keys().cloned());
        }
        names.sort();
        names.dedup();
        names
    }

    fn value_for(&self, name: &str, url: &str) -> Option<&str> {
        self.scoped_for(url)
            .find_map(|map| map.get(name))
            .or_else(|| self.global.get(name))
            .map(String::as_str)
    }

    fn resolve(&self, name: &str, url: &str) -> Result<String, SecretError> {
        let value = self
            .value_for(name, url)
            .ok_or_else(|| SecretError::Unavailable(name.to_owned()))?;
        if !is_totp(name) {
            return Ok(value.to_owned());
        }
        let code = totp_now(value).ok_or_else(|| SecretError::BadTotp(name.to_owned()))?;
        if let Ok(mut issued) = self.issued_codes.lock() {
            issued.push((code.clone(), name.to_owned()));
            let excess = issued.len().saturating_sub(32);
            issued.drain(..excess);
        }
        Ok(code)
    }

    /// Replaces placeholders (and strings equal to a bare secret name) in every string of
    /// `params`, for the page at `url`. Returns whether anything was replaced.
    pub fn fill_placeholders(&self, params: &mut Value, url: &str) -> Result<bool, SecretError> {
        if self.is_empty() {
            return Ok(false);
        }
        let names = self.names_for_url(url);
        self.fill(params, url, &names)
    }

    fn fill(&self, value: &mut Value, url: &str, names: &[String]) -> Result<bool, SecretError> {
        match value {
            Value::String(text) => {
                if names.iter().any(|n| n == text.trim()) {
                    *text = self.resolve(text.trim(), url)?;
                    return Ok(true);
                }
                if !PLACEHOLDER.is_match(text) {
                    return Ok(false);
                }
                let mut out = String::with_capacity(text.len());
                let mut last = 0;
                for caps in PLACEHOLDER.captures_iter(text) {
                    let whole = caps.get(0).expect("group 0");
                    out.push_str(&text[last..whole.start()]);
                    out.push_str(&self.resolve(&caps[1], url)?);
                    last = whole.end();
                }
                out.push_str(&text[last..]);
                *text = out;
                Ok(true)
            }
            Value::Array(items) => {
                let mut any = false;
                for item in items {
                    any |= self.fill(item, url, names)?;
                }
                Ok(any)
            }
            Value::Object(map) => {
                let mut any = false;
                for item in map.values_mut() {
                    any |= self.fill(item, url, names)?;
                }
                Ok(any)
            }
            _ => Ok(false),
        }
    }

    /// `(value, name)` pairs, longest value first.
    fn redaction_pairs(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = self
            .global
            .iter()
            .map(|(k, v)| (v.clone(), k.clone()))
            .collect();
        for (_, _, map) in &self.scoped {
            pairs.extend(map.iter().map(|(k, v)| (v.clone(), k.clone())));
        }
        if let Ok(issued) = self.issued_codes.lock() {
            pairs.extend(issued.iter().cloned());
        }
        pairs.retain(|(v, _)| !v.is_empty());
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs
    }

    /// `text` with every secret value replaced by its placeholder.
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_owned();
        }
        let mut out = text.to_owned();
        for (value, name) in self.redaction_pairs() {
            if out.contains(&value) {
                out = out.replace(&value, &format!("<secret>{name}</secret>"));
            }
        }
        out
    }

    /// Redacts every string inside a JSON value.
    pub fn redact_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        let pairs = self.redaction_pairs();
        redact_value_with(value, &pairs);
    }

    /// Redacts an optional string in place.
    pub fn redact_opt(&self, text: &mut Option<String>) {
        if let Some(t) = text {
            *t = self.redact(t);
        }
    }
}

fn redact_value_with(value: &mut Value, pairs: &[(String, String)]) {
    match value {
        Value::String(text) => {
            for (secret, name) in pairs {
                if text.contains(secret.as_str()) {
                    *text = text.replace(secret.as_str(), &format!("<secret>{name}</secret>"));
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value_with(v, pairs)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_value_with(v, pairs)),
        _ => {}
    }
}

/// The current 6-digit TOTP code (SHA-1, 30 s) of a base32 secret.
pub fn totp_now(base32_secret: &str) -> Option<String> {
    let cleaned: String = base32_secret
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect::<String>()
        .to_uppercase();
    let bytes = totp_rs::Secret::Encoded(cleaned).to_bytes().ok()?;
    if bytes.is_empty() {
        return None;
    }
    let totp = totp_rs::TOTP::new_unchecked(totp_rs::Algorithm::SHA1, 6, 1, 30, bytes);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(totp.generate(now))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scoped(pattern: &str) -> SensitiveData {
        SensitiveData(BTreeMap::from([(
            pattern.to_owned(),
            SecretEntry::Scoped(BTreeMap::from([("pw".to_owned(), "s3cret".to_owned())])),
        )]))
    }

    /// The shared domain-pattern table through secret scoping: a pattern is accepted here iff
    /// the api and the egress policy accept it, and a secret scoped to it is filled exactly on
    /// the URLs the egress policy treats as matching it.
    #[test]
    fn domain_pattern_conformance_table() {
        for case in browserd_domains::conformance::CASES {
            let data = scoped(case.pattern);
            if let Some(why) = case.rejected {
                match Secrets::try_new(&data) {
                    Err(SecretError::InvalidScope(e)) => {
                        assert!(e.problem.contains(why), "{:?}: {e}", case.pattern);
                    }
                    other => panic!("{:?}: {other:?}", case.pattern),
                }
                // Without validation the secret is simply never available.
                let lenient = Secrets::new(&data);
                for url in ["https://example.com/", "http://93.184.215.14/"] {
                    assert!(lenient.names_for_url(url).is_empty(), "{:?}", case.pattern);
                }
                continue;
            }
            let secrets = Secrets::try_new(&data).expect(case.pattern);
            for (url, want) in case
                .matches
                .iter()
                .map(|u| (u, true))
                .chain(case.does_not_match.iter().map(|u| (u, false)))
            {
                let mut params = json!({"text": "<secret>pw</secret>"});
                let filled = secrets.fill_placeholders(&mut params, url);
                if want {
                    assert_eq!(filled, Ok(true), "{:?} on {url}", case.pattern);
                    assert_eq!(params["text"], "s3cret");
                } else {
                    assert_eq!(
                        filled,
                        Err(SecretError::Unavailable("pw".into())),
                        "{:?} on {url}",
                        case.pattern
                    );
                }
                assert_eq!(
                    crate::domains::url_matches_pattern(url, case.pattern),
                    want,
                    "action domains: {:?} on {url}",
                    case.pattern
                );
            }
        }
    }

    #[test]
    fn scoped_values_win_over_global_ones_on_matching_pages_only() {
        let mut data = scoped("*.example.com");
        data.0
            .insert("pw".to_owned(), SecretEntry::Value("global".to_owned()));
        let secrets = Secrets::new(&data);
        let fill = |url: &str| {
            let mut v = json!("<secret>pw</secret>");
            secrets.fill_placeholders(&mut v, url).unwrap();
            v
        };
        assert_eq!(fill("https://a.example.com/login"), "s3cret");
        assert_eq!(fill("https://evil.com/"), "global");
        assert_eq!(fill("not a url"), "global");
        assert_eq!(
            secrets.redact("s3cret and global"),
            "<secret>pw</secret> and <secret>pw</secret>"
        );
    }
}
