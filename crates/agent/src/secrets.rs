//! Task secrets: `<secret>name</secret>` placeholders filled in only when an action runs, and
//! only where the value cannot leave for another site ([`Secrets::fill_for_action`]):
//! - a domain-bound secret only into actions on a page its pattern matches (the egress policy's
//!   semantics — see [`crate::domains`]);
//! - into a `navigate` URL only when that URL's own domain is one of the secret's (never a
//!   secret bound to no domain, never into the host);
//! - never into `evaluate` (code the page runs), `extract` (text for the extraction model) or
//!   `search` (a search engine's URL).
//!
//! TOTP codes for names ending in `2fa_code`, and redaction of the real values — as they are,
//! percent-encoded and base64-encoded — from every text the agent emits or stores.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::Value;

use crate::config::{SecretEntry, SensitiveData};
use crate::domains::{DomainPattern, PatternError};

static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<secret>\s*([^<]+?)\s*</secret>").expect("valid regex"));

/// Actions whose parameters never get a secret value: `evaluate` runs its code in the page
/// (which could send it anywhere), `extract` sends its query to the extraction model, and
/// `search` puts its query into a search engine's URL.
pub const NEVER_FILLED: &[&str] = &["evaluate", "extract", "search"];

/// The action whose URL gets only the secrets bound to that URL's own domain.
const NAVIGATE: &str = "navigate";

/// Secrets of one task.
pub struct Secrets {
    /// Secrets bound to no domain (an explicit opt-in of the task, `ask_human` answers).
    global: BTreeMap<String, String>,
    /// Pattern text, the parsed pattern (`None` when invalid: such secrets are never filled),
    /// and the secrets.
    scoped: Vec<(String, Option<DomainPattern>, BTreeMap<String, String>)>,
    /// `(text, name)` of every form of every value to redact (the values, percent-encoded and
    /// base64), longest first.
    redactions: Vec<(String, String)>,
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
    /// The action never gets secret values.
    #[error(
        "`{0}` never gets secret values (its text would leave the page); use \
         <secret>name</secret> only in actions on the page, like input"
    )]
    NotInAction(String),
    /// A placeholder in the host of a `navigate` URL.
    #[error("secret `{0}` cannot go into a URL's host")]
    InUrlHost(String),
    /// A `navigate` URL to a place the secret is not bound to.
    #[error(
        "secret `{name}` cannot go into a URL to {target}: a URL gets only the secrets bound \
         to its own domain"
    )]
    NotForUrl {
        /// The secret's name.
        name: String,
        /// The URL's scheme and host (never the rest of it).
        target: String,
    },
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
        let mut secrets = Self {
            global,
            scoped,
            redactions: Vec::new(),
            issued_codes: Mutex::new(Vec::new()),
        };
        secrets.redactions = secrets.value_redactions();
        secrets
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
        self.redactions = self.value_redactions();
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
        self.issue(name, value)
    }

    /// `value` itself, or the current code of a TOTP secret (remembered for redaction).
    fn issue(&self, name: &str, value: &str) -> Result<String, SecretError> {
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
    /// `params`, for the page at `url`, whatever the action. Returns whether anything was
    /// replaced. Actions go through [`Secrets::fill_for_action`], which adds the rules on
    /// where a value may go.
    pub fn fill_placeholders(&self, params: &mut Value, url: &str) -> Result<bool, SecretError> {
        if self.is_empty() {
            return Ok(false);
        }
        let names = self.names_for_url(url);
        self.fill(params, url, &names)
    }

    /// Whether any string of `params` holds a placeholder.
    pub fn mentions_placeholder(params: &Value) -> bool {
        match params {
            Value::String(text) => PLACEHOLDER.is_match(text),
            Value::Array(items) => items.iter().any(Self::mentions_placeholder),
            Value::Object(map) => map.values().any(Self::mentions_placeholder),
            _ => false,
        }
    }

    /// Fills the placeholders of action `action`'s `params` where the values cannot leave for
    /// another site. `pages` are the URLs of the page the action runs on (the captured one and,
    /// when the caller read it, the focused tab's URL right now): a secret is filled only when
    /// it is usable on every one of them. `navigate` fills only its `url`, and only with
    /// secrets bound to that URL's own domain, never into its host; [`NEVER_FILLED`] actions
    /// get no value at all (a placeholder there is an error). Returns whether anything was
    /// replaced.
    pub fn fill_for_action(
        &self,
        action: &str,
        params: &mut Value,
        pages: &[&str],
    ) -> Result<bool, SecretError> {
        if NEVER_FILLED.contains(&action) {
            return if Self::mentions_placeholder(params) {
                Err(SecretError::NotInAction(action.to_owned()))
            } else {
                Ok(false)
            };
        }
        if self.is_empty() {
            return Ok(false);
        }
        if action == NAVIGATE {
            return match params.get_mut("url") {
                Some(Value::String(url)) => self.fill_url(url),
                _ => Ok(false),
            };
        }
        let Some((first, rest)) = pages.split_first() else {
            return Ok(false);
        };
        let mut names = self.names_for_url(first);
        for page in rest {
            let here = self.names_for_url(page);
            names.retain(|n| here.contains(n));
        }
        self.fill(params, first, &names)
    }

    /// Fills the placeholders of a `navigate` URL with the secrets bound to its own domain.
    fn fill_url(&self, url: &mut String) -> Result<bool, SecretError> {
        if !PLACEHOLDER.is_match(url) {
            return Ok(false);
        }
        // The URL as the browser will read it, each placeholder stood in by a marker: where a
        // marker ends up tells where the value would.
        let mut names = Vec::new();
        let marked = PLACEHOLDER.replace_all(url, |caps: &regex::Captures<'_>| {
            names.push(caps[1].to_owned());
            format!("{URL_MARKER}{}x", names.len() - 1)
        });
        let target = url::Url::parse(&with_scheme(&marked)).ok();
        let host = target.as_ref().and_then(|t| t.host_str()).unwrap_or("");
        if host.contains(URL_MARKER) {
            let at = host
                .split(URL_MARKER)
                .nth(1)
                .and_then(|rest| rest.split('x').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            return Err(SecretError::InUrlHost(
                names.get(at).cloned().unwrap_or_default(),
            ));
        }
        let shown = target.as_ref().filter(|_| !host.is_empty()).map_or_else(
            || "a URL without a host".to_owned(),
            |t| format!("{}://{host}", t.scheme()),
        );
        let web = target
            .as_ref()
            .filter(|t| matches!(t.scheme(), "http" | "https") && !host.is_empty());
        for name in &names {
            let bound = web.is_some_and(|t| {
                self.scoped.iter().any(|(_, pattern, map)| {
                    map.contains_key(name) && pattern.as_ref().is_some_and(|p| p.matches_url(t))
                })
            });
            if !bound {
                return Err(SecretError::NotForUrl {
                    name: name.clone(),
                    target: shown,
                });
            }
        }
        let target = web.map(url::Url::as_str).unwrap_or_default().to_owned();
        let mut out = String::with_capacity(url.len());
        let mut last = 0;
        for caps in PLACEHOLDER.captures_iter(url) {
            let whole = caps.get(0).expect("group 0");
            out.push_str(&url[last..whole.start()]);
            out.push_str(&self.resolve_scoped(&caps[1], &target)?);
            last = whole.end();
        }
        out.push_str(&url[last..]);
        *url = out;
        Ok(true)
    }

    /// The value (or TOTP code) of scoped secret `name` on `url`, never a global one.
    fn resolve_scoped(&self, name: &str, url: &str) -> Result<String, SecretError> {
        let value = self
            .scoped_for(url)
            .find_map(|map| map.get(name))
            .ok_or_else(|| SecretError::Unavailable(name.to_owned()))?;
        self.issue(name, value)
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
                    let name = &caps[1];
                    if !names.iter().any(|n| n == name) {
                        return Err(SecretError::Unavailable(name.to_owned()));
                    }
                    out.push_str(&self.resolve(name, url)?);
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

    /// `(text, name)` of every value and its encoded forms, longest first.
    fn value_redactions(&self) -> Vec<(String, String)> {
        let values = self
            .global
            .iter()
            .chain(self.scoped.iter().flat_map(|(_, _, map)| map.iter()));
        let mut pairs = Vec::new();
        for (name, value) in values {
            if value.is_empty() {
                continue;
            }
            pairs.push((value.clone(), name.clone()));
            pairs.extend(encoded_forms(value).into_iter().map(|f| (f, name.clone())));
        }
        sort_longest_first(&mut pairs);
        pairs
    }

    /// `(text, name)` pairs, longest text first: the values, their encoded forms and the TOTP
    /// codes issued so far.
    fn redaction_pairs(&self) -> Vec<(String, String)> {
        let issued = self
            .issued_codes
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        if issued.is_empty() {
            return self.redactions.clone();
        }
        let mut pairs = self.redactions.clone();
        pairs.extend(issued);
        sort_longest_first(&mut pairs);
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

/// Stands in for a placeholder while a `navigate` URL is parsed (letters and digits only, so
/// that it survives host normalisation).
const URL_MARKER: &str = "browserdsecretmarker";

/// `url` as the browser's `navigate` reads it: with a scheme, else as `https://`.
fn with_scheme(url: &str) -> String {
    let url = url.trim();
    let has_scheme = url.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && !scheme.contains('.')
    }) && (url.contains("://")
        || ["about:", "data:", "javascript:", "blob:"]
            .iter()
            .any(|p| url.starts_with(p)));
    if has_scheme {
        url.to_owned()
    } else {
        format!("https://{url}")
    }
}

fn sort_longest_first(pairs: &mut Vec<(String, String)>) {
    pairs.retain(|(text, _)| !text.is_empty());
    pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    pairs.dedup_by(|a, b| a.0 == b.0);
}

/// The forms a value takes in URLs and encoded payloads, other than itself: percent-encoded
/// as a URL's query, path or user info holds it (upper- and lower-case hex), as a whole
/// component (`encodeURIComponent`, and with `+` for spaces as forms send it), and base64
/// (standard and URL-safe, padded or not, and the part that stays the same wherever the value
/// sits inside a longer encoded text).
pub fn encoded_forms(value: &str) -> Vec<String> {
    let mut forms = Vec::new();
    // WHATWG percent-encode sets: fragment, query (special schemes), path, userinfo, component.
    let fragment = |b: u8| b <= 0x20 || b >= 0x7f || b"\"<>`".contains(&b);
    let query = |b: u8| b <= 0x20 || b >= 0x7f || b"\"#<>'".contains(&b);
    let path = |b: u8| query(b) && b != b'\'' || b"?`{}^".contains(&b);
    let userinfo = |b: u8| path(b) || b"/:;=@[\\]|".contains(&b);
    let component = |b: u8| !(b.is_ascii_alphanumeric() || b"-_.~".contains(&b));
    let js_component = |b: u8| component(b) && !b"!*'()".contains(&b);
    let sets: [&dyn Fn(u8) -> bool; 6] = [
        &fragment,
        &query,
        &path,
        &userinfo,
        &component,
        &js_component,
    ];
    for set in sets {
        let upper = percent_encode(value, set);
        forms.push(upper.to_lowercase_hex());
        forms.push(upper.clone());
        if value.contains(' ') {
            let plus = percent_encode(value, &|b| b != b' ' && set(b)).replace(' ', "+");
            forms.push(plus.to_lowercase_hex());
            forms.push(plus);
        }
    }
    forms.extend(base64_forms(value.as_bytes()));
    forms.retain(|f| f != value);
    forms.sort();
    forms.dedup();
    forms
}

trait LowercaseHex {
    fn to_lowercase_hex(&self) -> String;
}

impl LowercaseHex for String {
    /// The same percent-encoded text with lower-case hex digits.
    fn to_lowercase_hex(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut chars = self.chars();
        while let Some(c) = chars.next() {
            out.push(c);
            if c == '%' {
                out.extend(chars.by_ref().take(2).map(|h| h.to_ascii_lowercase()));
            }
        }
        out
    }
}

fn percent_encode(value: &str, encode: &dyn Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for &b in value.as_bytes() {
        if encode(b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Base64 forms of `bytes`: the whole encoding (padded and not), and for each of the three
/// positions the value can start at inside a longer encoded text, the characters that depend on
/// its bytes only (when at least 8, so that short runs of ordinary text are not taken for one).
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut forms = Vec::new();
    for engine in [&STANDARD, &URL_SAFE] {
        forms.push(engine.encode(bytes));
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // Characters of whole 3-byte groups only; the group holding filler bytes is dropped.
            let whole = shifted.len() / 3 * 4;
            let skip = if offset == 0 { 0 } else { 4 };
            if whole > skip {
                let stable = &encoded[skip..whole];
                if stable.len() >= 8 || (offset == 0 && bytes.len().is_multiple_of(3)) {
                    forms.push(stable.to_owned());
                }
            }
            if offset == 0 {
                forms.push(encoded);
            }
        }
    }
    forms
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
mod tests;
