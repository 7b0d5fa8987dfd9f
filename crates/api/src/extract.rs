//! Extractors whose rejections are [`ApiError`]s, so axum's own plain-text rejections
//! (malformed JSON, wrong content type, oversized body, bad path) never reach a client.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use browserd_types::dto::TicketScope;
use browserd_types::{ApiKeyId, TaskId};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body (content type `application/json` or `*+json`).
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_body_bytes(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The bytes of a JSON body: `Content-Type` checked, size limited, read errors as [`ApiError`]s.
async fn json_body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let is_json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(|value| {
            let essence = value.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
                || (essence.starts_with("application/") && essence.ends_with("+json"))
        })
        .unwrap_or(false);
    if !is_json {
        return Err(ApiError::UnsupportedMediaType(
            "expected a body with `Content-Type: application/json`".to_owned(),
        ));
    }
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge("request body is too large".to_owned())
        } else {
            ApiError::BadRequest {
                code: "invalid_body",
                message: format!("could not read request body: {}", rejection.body_text()),
            }
        }
    })
}

/// An optional JSON body: no body at all, or `null`, is `T::default()`; otherwise as [`ApiJson`].
pub struct OptionalApiJson<T>(pub T);

impl<S, T> FromRequest<S> for OptionalApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = req.headers();
        let sized = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
        let chunked = headers.get(axum::http::header::TRANSFER_ENCODING).is_some();
        if !sized && !chunked {
            return Ok(Self(T::default()));
        }
        // A JSON `null` is no body too (the document describes the body as optional).
        let bytes = json_body_bytes(req, state).await?;
        if bytes.trim_ascii() == b"null" {
            return Ok(Self(T::default()));
        }
        parse_json(&bytes).map(Self)
    }
}

/// Deserializes `bytes`: invalid JSON is a 400; valid JSON of the wrong shape (not an object,
/// unknown field, missing field, wrong type) is a 422 naming the field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|err| ApiError::BadRequest {
            code: "malformed_json",
            message: format!("request body is not valid JSON: {err}"),
        })?;
    if !value.is_object() {
        return Err(ApiError::Validation {
            field: None,
            message: "request body must be a JSON object".to_owned(),
        });
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        let field = backticked_field(&message)
            .filter(|_| {
                message.starts_with("unknown field") || message.starts_with("missing field")
            })
            .map(|name| {
                if path == "." {
                    name.to_owned()
                } else if path == name || path.ends_with(&format!(".{name}")) {
                    path.clone()
                } else {
                    format!("{path}.{name}")
                }
            })
            .or_else(|| (path != ".").then(|| path.clone()));
        let message = match &field {
            Some(field) if !message.contains(field.as_str()) => format!("{field}: {message}"),
            _ => message,
        };
        ApiError::Validation { field, message }
    })
}

/// `unknown field `foo`, expected ...` → `foo`.
fn backticked_field(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(&message[start..end])
}

/// The `{id}` path segment as a task id.
pub struct TaskPath(pub TaskId);

impl<S: Send + Sync> FromRequestParts<S> for TaskPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest {
                code: "invalid_path",
                message: rejection.body_text(),
            })?;
        let raw = params
            .get("id")
            .ok_or_else(|| ApiError::Internal("route without {id}".into()))?;
        raw.parse::<TaskId>()
            .map(TaskPath)
            .map_err(|_| ApiError::BadRequest {
                code: "invalid_task_id",
                message: format!("`{raw}` is not a valid task id (expected a UUID)"),
            })
    }
}

/// The `{n}` path segment as a step number (≥ 1).
pub struct StepPath(pub i32);

impl<S: Send + Sync> FromRequestParts<S> for StepPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest {
                code: "invalid_path",
                message: rejection.body_text(),
            })?;
        let raw = params
            .get("n")
            .ok_or_else(|| ApiError::Internal("route without {n}".into()))?;
        raw.parse::<i32>()
            .ok()
            .filter(|n| *n >= 1)
            .map(StepPath)
            .ok_or_else(|| ApiError::BadRequest {
                code: "invalid_step_number",
                message: format!("`{raw}` is not a step number (expected an integer ≥ 1)"),
            })
    }
}

/// Query parameters as a map; handlers parse each one with a precise error.
pub struct QueryParams(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(params) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest {
                code: "invalid_query",
                message: rejection.body_text(),
            })?;
        Ok(QueryParams(params))
    }
}

impl QueryParams {
    /// Fails with 422 on any parameter not in `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<(), ApiError> {
        let mut unknown: Vec<&String> = self
            .0
            .keys()
            .filter(|key| !allowed.contains(&key.as_str()))
            .collect();
        unknown.sort();
        match unknown.first() {
            None => Ok(()),
            Some(name) => Err(ApiError::validation(
                name.as_str(),
                format!(
                    "unknown query parameter `{name}` (expected one of: {})",
                    allowed.join(", ")
                ),
            )),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// An integer parameter within `range`.
    pub fn int_in(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, ApiError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        let value: i64 = raw.parse().map_err(|_| {
            ApiError::validation(name, format!("{name} must be an integer, got `{raw}`"))
        })?;
        if !range.contains(&value) {
            return Err(ApiError::validation(
                name,
                format!(
                    "{name} must be between {} and {}, got {value}",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(Some(value))
    }
}

/// The authenticated API key of the request (inserted by the auth middleware): the core's
/// [`browserd_tasks::Caller`], as an extractor. It derefs to it, so `&caller` is what the core
/// takes.
#[derive(Clone, Debug)]
pub struct Caller(pub browserd_tasks::Caller);

impl Caller {
    /// A caller authenticated by its key.
    pub fn key(key_id: ApiKeyId) -> Self {
        Self(browserd_tasks::Caller::key(key_id))
    }

    /// A caller with what its credential allows.
    pub fn scoped(key_id: ApiKeyId, scope: TicketScope) -> Self {
        Self(browserd_tasks::Caller { key_id, scope })
    }
}

impl std::ops::Deref for Caller {
    type Target = browserd_tasks::Caller;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Internal("route is missing the auth middleware".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        task: String,
        #[serde(default)]
        max_steps: Option<i64>,
    }

    fn field_of(result: Result<Body, ApiError>) -> (Option<String>, String) {
        match result {
            Err(ApiError::Validation { field, message }) => (field, message),
            other => panic!("expected validation error, got {other:?}"),
        }
    }

    #[test]
    fn unknown_missing_and_mistyped_fields_are_named() {
        let (field, message) = field_of(parse_json(br#"{"task":"x","bogus":1}"#));
        assert_eq!(field.as_deref(), Some("bogus"));
        assert!(message.contains("unknown field"), "{message}");
        let (field, _) = field_of(parse_json(br#"{}"#));
        assert_eq!(field.as_deref(), Some("task"));
        let (field, message) = field_of(parse_json(br#"{"task":"x","max_steps":"ten"}"#));
        assert_eq!(field.as_deref(), Some("max_steps"));
        assert!(message.starts_with("max_steps"), "{message}");
    }

    #[test]
    fn non_objects_are_unprocessable() {
        for body in [&b"[1, 2]"[..], b"\"task\"", b"null"] {
            assert!(matches!(
                parse_json::<Body>(body),
                Err(ApiError::Validation { field: None, .. })
            ));
        }
    }

    #[test]
    fn syntax_errors_are_bad_requests() {
        for body in [
            &b"{"[..],
            b"",
            b"{\"task\":\"x\"} trailing",
            b"nul",
            b"[1, 2",
        ] {
            match parse_json::<Body>(body) {
                Err(ApiError::BadRequest { code, .. }) => assert_eq!(code, "malformed_json"),
                other => panic!("{body:?}: {other:?}"),
            }
        }
    }
}
