//! Errors of a model call. None of them ever carries an API key: provider messages are redacted
//! and truncated before they are stored here.

use std::time::Duration;

use crate::response::TokenUsage;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The model did not answer within its timeout.
    #[error("model `{model}` timed out after {:.1}s", after.as_secs_f64())]
    Timeout {
        /// Configured model name.
        model: String,
        /// The timeout that elapsed.
        after: Duration,
    },

    /// HTTP 429 (after retries).
    #[error("model `{model}` is rate limited (HTTP 429{}): {message}", retry_after_text(*retry_after))]
    RateLimited {
        /// Configured model name.
        model: String,
        /// What the provider asked us to wait, if it said.
        retry_after: Option<Duration>,
        /// Sanitised provider message.
        message: String,
    },

    /// Any other non-success HTTP status (after retries for 5xx).
    #[error("model `{model}` returned HTTP {status}: {message}")]
    Status {
        /// Configured model name.
        model: String,
        /// HTTP status code.
        status: u16,
        /// Sanitised provider message.
        message: String,
    },

    /// The reply did not parse as JSON or did not validate against the output schema (after the
    /// one corrective retry when the validation layer is in use).
    #[error("model `{model}` returned invalid output: {reason}")]
    InvalidOutput {
        /// Configured model name.
        model: String,
        /// What was wrong.
        reason: String,
        /// The offending reply text (truncated), for the corrective message and debugging.
        raw_output: String,
        /// Tokens billed for the failed call(s).
        usage: TokenUsage,
    },

    /// The request never got an HTTP answer (connection refused/reset, DNS, TLS, body read).
    #[error("could not reach model `{model}`: {message}")]
    Transport {
        /// Configured model name.
        model: String,
        /// Sanitised description (no URL).
        message: String,
    },

    /// The request itself is unusable (bad schema, bad image, unsupported combination).
    #[error("invalid request for model `{model}`: {message}")]
    InvalidRequest {
        /// Configured model name.
        model: String,
        /// What is wrong.
        message: String,
    },
}

fn retry_after_text(retry_after: Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| {
        format!(", retry after {:.1}s", d.as_secs_f64())
    })
}

impl LlmError {
    /// Configured name of the model that failed.
    pub fn model(&self) -> &str {
        match self {
            Self::Timeout { model, .. }
            | Self::RateLimited { model, .. }
            | Self::Status { model, .. }
            | Self::InvalidOutput { model, .. }
            | Self::Transport { model, .. }
            | Self::InvalidRequest { model, .. } => model,
        }
    }

    /// HTTP status, if the provider answered with one (429 for rate limits).
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::RateLimited { .. } => Some(429),
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the retry layer may try the same model again: 429, 5xx, 408 and transport errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. } | Self::Transport { .. } => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }

    /// Whether the fallback layer switches to the fallback model: 401, 402, 429, 5xx (as
    /// browser-use), and transport errors that survived the retries (the provider is unreachable).
    pub fn triggers_fallback(&self) -> bool {
        match self {
            Self::RateLimited { .. } | Self::Transport { .. } => true,
            Self::Status { status, .. } => matches!(status, 401 | 402) || *status >= 500,
            _ => false,
        }
    }

    /// The provider's requested wait, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Removes secrets from a provider-supplied text and caps its length.
///
/// Every occurrence of each non-empty `secret` is replaced, and so is anything following a
/// `Bearer ` marker or an `api key`-like word followed by a long token, since servers sometimes
/// echo credentials in a modified form.
pub(crate) fn sanitize_message(text: &str, secrets: &[&str], max_chars: usize) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret, "[REDACTED]");
    }
    out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    out = redact_after_marker(&out, "bearer ");
    out = redact_key_like_tokens(&out);
    truncate_chars(&out, max_chars)
}

/// Replaces the token after each (case-insensitive) `marker`.
fn redact_after_marker(text: &str, marker: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = lower[pos..].find(marker) {
        let token_start = pos + found + marker.len();
        out.push_str(&text[pos..token_start]);
        let token_len = text[token_start..]
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',')
            .unwrap_or(text.len() - token_start);
        if token_len > 0 {
            out.push_str("[REDACTED]");
        }
        pos = token_start + token_len;
    }
    out.push_str(&text[pos..]);
    out
}

/// Masks tokens that look like provider API keys (`sk-…`, `sk-ant-…`, `AIza…`, `gsk_…`) even when
/// they are not ours (a proxy may echo a different key).
fn redact_key_like_tokens(text: &str) -> String {
    const PREFIXES: [&str; 4] = ["sk-", "AIza", "gsk_", "xai-"];
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let trimmed =
            word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
        let key_like = trimmed.len() >= 20
            && PREFIXES.iter().any(|p| trimmed.starts_with(p))
            && trimmed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if key_like {
            out.push_str(&word.replace(trimmed, "[REDACTED]"));
        } else {
            out.push_str(word);
        }
    }
    out
}

/// Cuts `text` to at most `max_chars` characters, marking the cut.
pub(crate) fn truncate_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max_chars).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_redacts_exact_secret_bearer_and_key_like_tokens() {
        let text = "bad key sk-test-abcdefghijklmnopqrstuv; header was Bearer my-secret-123 and raw my-secret-123 also AIzaSyA1234567890abcdefghijk";
        let out = sanitize_message(text, &["my-secret-123"], 1000);
        assert!(!out.contains("my-secret-123"), "{out}");
        assert!(!out.contains("sk-test-abcdefghijklmnopqrstuv"), "{out}");
        assert!(!out.contains("AIzaSyA1234567890abcdefghijk"), "{out}");
        assert!(out.contains("[REDACTED]"));
        assert!(out.starts_with("bad key"));
    }

    #[test]
    fn sanitize_truncates_and_collapses_whitespace() {
        let out = sanitize_message("a\n\n b   c", &[], 3);
        assert_eq!(out, "a b…");
    }

    #[test]
    fn classification_matches_browser_use() {
        let status = |status| LlmError::Status {
            model: "m".into(),
            status,
            message: String::new(),
        };
        for code in [401, 402, 500, 502, 503, 504, 529] {
            assert!(status(code).triggers_fallback(), "{code}");
        }
        for code in [400, 403, 404, 422] {
            assert!(!status(code).triggers_fallback(), "{code}");
            assert!(!status(code).is_retryable(), "{code}");
        }
        assert!(!status(401).is_retryable());
        assert!(status(503).is_retryable());
        let invalid = LlmError::InvalidOutput {
            model: "m".into(),
            reason: String::new(),
            raw_output: String::new(),
            usage: TokenUsage::default(),
        };
        assert!(!invalid.triggers_fallback() && !invalid.is_retryable());
    }
}
