//! The HTTP plumbing the three providers share: settings, one POST with a deadline, and the
//! mapping of HTTP failures onto [`LlmError`] (sanitised, key-free).

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use url::Url;

use crate::error::{sanitize_message, truncate_chars};
use crate::response::{Price, TokenUsage};
use crate::{ChatRequest, LlmError};

/// Credentials applied to one request beyond a static key header.
pub(crate) enum RequestAuth {
    /// Nothing more.
    None,
    /// `Authorization: Bearer <token>` with a token fetched for this call (OAuth).
    Bearer(SecretString),
    /// An AWS SigV4 signature over the method, URL, headers and body bytes.
    SigV4(std::sync::Arc<crate::aws::SigV4Signer>),
}

/// Longest provider message kept in an error.
const MAX_ERROR_MESSAGE_CHARS: usize = 500;

/// Everything a wire provider needs to talk to one configured model.
#[derive(Clone)]
pub struct ProviderSettings {
    /// Configured name (what errors and responses call the model).
    pub name: String,
    /// Provider model id sent on the wire.
    pub model_id: String,
    /// API root, e.g. `https://api.openai.com/v1` (from configuration only, never from clients).
    pub base_url: Url,
    /// The API key, if the endpoint needs one.
    pub api_key: Option<SecretString>,
    /// Cap on one HTTP request (the timeout layer's deadline may cut it shorter).
    pub request_timeout: Duration,
    /// Price table for cost accounting.
    pub price: Option<Price>,
    /// Default `max_tokens` when the request does not set one.
    pub max_tokens: Option<u32>,
    /// Default temperature when the request does not set one.
    pub temperature: Option<f32>,
    /// Shared HTTP client (connection pool). Build it with [`http_client`].
    pub client: reqwest::Client,
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("name", &self.name)
            .field("model_id", &self.model_id)
            .field("base_url", &self.base_url.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("request_timeout", &self.request_timeout)
            .field("price", &self.price)
            .finish_non_exhaustive()
    }
}

/// Makes rustls's `ring` provider the process default, once (later calls do nothing). reqwest is
/// built without a provider of its own (aws-lc-rs, a long C build), so every client needs this
/// first: `main` calls it, and so does every function here that builds a client.
pub fn install_tls_provider() {
    // Err means a provider is already installed: the first one stays, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The HTTP client the providers use: no redirects (a redirect could carry our key headers to
/// another host), a connect timeout, and a product user agent.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    install_tls_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("browserd/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl ProviderSettings {
    /// `base_url` joined with `path` (keeps the base's path, e.g. `/v1`).
    pub(crate) fn endpoint(&self, path: &str) -> Url {
        let mut url = self.base_url.clone();
        let joined = format!(
            "{}/{}",
            url.path().trim_end_matches('/'),
            path.trim_start_matches('/')
        );
        url.set_path(&joined);
        url
    }

    /// Header carrying the key, marked sensitive so `Debug` of the request never shows it.
    pub(crate) fn key_header(
        &self,
        name: &'static str,
        prefix: &str,
    ) -> Result<Option<(HeaderName, HeaderValue)>, LlmError> {
        let Some(key) = &self.api_key else {
            return Ok(None);
        };
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose_secret()))
            .map_err(|_| LlmError::InvalidRequest {
                model: self.name.clone(),
                message: "the API key contains characters not allowed in an HTTP header".to_owned(),
            })?;
        value.set_sensitive(true);
        Ok(Some((HeaderName::from_static(name), value)))
    }

    pub(crate) fn cost(&self, usage: &TokenUsage) -> Option<f64> {
        self.price.map(|p| p.cost_usd(usage))
    }

    pub(crate) fn invalid_request(&self, message: impl Into<String>) -> LlmError {
        LlmError::InvalidRequest {
            model: self.name.clone(),
            message: message.into(),
        }
    }

    /// The time one HTTP exchange may take: the request timeout, cut to the call's deadline.
    pub(crate) fn call_timeout(&self, request: &ChatRequest) -> Duration {
        match request.remaining() {
            Some(remaining) => remaining.min(self.request_timeout),
            None => self.request_timeout,
        }
    }

    /// POSTs `body` as JSON and returns the parsed JSON answer of a 2xx response.
    pub(crate) async fn post_json(
        &self,
        url: Url,
        headers: HeaderMap,
        body: &Value,
        request: &ChatRequest,
    ) -> Result<Value, LlmError> {
        self.post_json_with(url, headers, body, request, &RequestAuth::None)
            .await
    }

    /// [`post_json`](Self::post_json) with credentials that are not a static key header: a
    /// fetched OAuth token (Vertex) or a SigV4 signature over the exact bytes sent (Bedrock).
    /// Every secret that went into the request is redacted from the error.
    pub(crate) async fn post_json_with(
        &self,
        url: Url,
        mut headers: HeaderMap,
        body: &Value,
        request: &ChatRequest,
        auth: &RequestAuth,
    ) -> Result<Value, LlmError> {
        let timeout = self.call_timeout(request);
        if timeout.is_zero() {
            return Err(LlmError::Timeout {
                model: self.name.clone(),
                after: self.request_timeout,
            });
        }
        let bytes = serde_json::to_vec(body).map_err(|e| {
            self.invalid_request(format!("the request body cannot be serialised: {e}"))
        })?;
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut secrets: Vec<SecretString> = self.api_key.iter().cloned().collect();
        match auth {
            RequestAuth::None => {}
            RequestAuth::Bearer(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                    .map_err(|_| {
                        self.invalid_request("the access token is not a valid header value")
                    })?;
                value.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, value);
                secrets.push(token.clone());
            }
            RequestAuth::SigV4(signer) => {
                secrets.extend(signer.sign(&url, &mut headers, &bytes).await?);
            }
        }
        let secrets: Vec<&str> = secrets.iter().map(|s| s.expose_secret()).collect();
        let sent = self
            .client
            .post(url)
            .headers(headers)
            .body(bytes)
            .timeout(timeout)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Err(self.transport_error(&e, timeout, &secrets)),
        };
        let status = response.status();
        let response_headers = response.headers().clone();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return Err(self.transport_error(&e, timeout, &secrets)),
        };
        if !status.is_success() {
            return Err(self.status_error(status.as_u16(), &response_headers, &bytes, &secrets));
        }
        serde_json::from_slice(&bytes).map_err(|e| LlmError::Transport {
            model: self.name.clone(),
            message: format!(
                "the response body is not JSON ({e}): {}",
                sanitize_message(&String::from_utf8_lossy(&bytes), &secrets, 200)
            ),
        })
    }

    pub(crate) fn transport_error(
        &self,
        error: &reqwest::Error,
        timeout: Duration,
        secrets: &[&str],
    ) -> LlmError {
        if error.is_timeout() {
            return LlmError::Timeout {
                model: self.name.clone(),
                after: timeout,
            };
        }
        // Describe the error chain without the URL.
        let mut parts = Vec::new();
        let mut source: Option<&dyn std::error::Error> = Some(error);
        while let Some(err) = source {
            let text = err.to_string();
            if !parts.contains(&text) {
                parts.push(text);
            }
            source = err.source();
        }
        let described = parts.join(": ");
        let described = described.replace(self.base_url.as_str(), "<base_url>");
        LlmError::Transport {
            model: self.name.clone(),
            message: sanitize_message(&described, secrets, MAX_ERROR_MESSAGE_CHARS),
        }
    }

    pub(crate) fn status_error(
        &self,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
        secrets: &[&str],
    ) -> LlmError {
        let text = String::from_utf8_lossy(body);
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        let message = parsed
            .as_ref()
            .and_then(provider_error_message)
            .unwrap_or_else(|| truncate_chars(text.trim(), MAX_ERROR_MESSAGE_CHARS));
        let message = sanitize_message(&message, secrets, MAX_ERROR_MESSAGE_CHARS);
        if status == 429 {
            let retry_after = retry_after_from_headers(headers)
                .or_else(|| parsed.as_ref().and_then(gemini_retry_delay));
            LlmError::RateLimited {
                model: self.name.clone(),
                retry_after,
                message,
            }
        } else {
            LlmError::Status {
                model: self.name.clone(),
                status,
                message,
            }
        }
    }
}

/// `error.message` (OpenAI, Anthropic, Gemini), `error` as a string, or `message` (Bedrock).
fn provider_error_message(body: &Value) -> Option<String> {
    let error = body.get("error");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| error.and_then(Value::as_str))
        .or_else(|| body.get("message").and_then(Value::as_str))?;
    let kind = error
        .and_then(|e| e.get("type").or_else(|| e.get("status")))
        .and_then(Value::as_str);
    Some(match kind {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_owned(),
    })
}

/// `retry-after-ms` (OpenAI), then `Retry-After` in seconds or as an HTTP date.
pub(crate) fn retry_after_from_headers(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Gemini's `google.rpc.RetryInfo` detail: `"retryDelay": "30s"`.
fn gemini_retry_delay(body: &Value) -> Option<Duration> {
    let details = body.get("error")?.get("details")?.as_array()?;
    details.iter().find_map(|d| {
        let delay = d.get("retryDelay")?.as_str()?;
        let seconds: f64 = delay.strip_suffix('s')?.parse().ok()?;
        (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
    })
}

/// A temperature as JSON with its shortest decimal form (`0.2`, not `0.20000000298023224`).
pub(crate) fn temperature_json(temperature: f32) -> Value {
    let shortest: f64 = temperature
        .to_string()
        .parse()
        .unwrap_or(f64::from(temperature));
    Value::from(shortest)
}

/// Reads a JSON number as u64 (absent or negative → 0).
pub(crate) fn count(value: Option<&Value>) -> u64 {
    value.and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn retry_after_variants() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(
            retry_after_from_headers(&headers),
            Some(Duration::from_secs(2))
        );
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            retry_after_from_headers(&headers),
            Some(Duration::from_millis(1500))
        );
        let mut headers = HeaderMap::new();
        let future = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&future).unwrap());
        let parsed = retry_after_from_headers(&headers).unwrap();
        assert!(parsed > Duration::from_secs(25) && parsed <= Duration::from_secs(30));
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after_from_headers(&headers), None);
    }

    #[test]
    fn gemini_retry_info_is_read() {
        let body = json!({"error": {"code": 429, "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}});
        assert_eq!(gemini_retry_delay(&body), Some(Duration::from_secs(7)));
    }

    #[test]
    fn endpoint_keeps_base_path() {
        let settings = ProviderSettings {
            name: "m".into(),
            model_id: "m".into(),
            base_url: Url::parse("http://127.0.0.1:11434/v1/").unwrap(),
            api_key: None,
            request_timeout: Duration::from_secs(1),
            price: None,
            max_tokens: None,
            temperature: None,
            client: http_client().unwrap(),
        };
        assert_eq!(
            settings.endpoint("chat/completions").as_str(),
            "http://127.0.0.1:11434/v1/chat/completions"
        );
    }
}
