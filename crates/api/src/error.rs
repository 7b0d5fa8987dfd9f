//! The one error type of the api: every failure becomes `{"error":{"code","message"}}` with the
//! right status. Internal details are logged, never sent.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use browserd_tasks::TaskError;
use browserd_types::TaskStatus;
use browserd_types::dto::{ErrorBody, ErrorDetail};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// 422: a request value breaks a rule; `field` names it when known.
    #[error("{message}")]
    Validation {
        field: Option<String>,
        message: String,
    },
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{message}")]
    Conflict {
        code: &'static str,
        message: String,
        current_status: Option<TaskStatus>,
    },
    #[error("rate limit exceeded; retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// 429: admission control; the queue is full.
    #[error("the task queue is full ({queued} tasks waiting); retry in {retry_after_secs} s")]
    QueueFull { queued: i64, retry_after_secs: u64 },
    /// 429: the key has used one of its quotas (`max_queued`, `daily_steps`,
    /// `daily_cost_usd`); the message names the quota and its value.
    #[error("{message}")]
    QuotaExceeded {
        quota: &'static str,
        message: String,
        retry_after_secs: u64,
    },
    /// 429: the key has its quota of open task WebSockets (`max_websockets`) in this process.
    #[error(
        "this key already has {max} open task WebSockets on this server, its quota \
         `max_websockets` ({max}); close one first"
    )]
    TooManyWebSockets { max: i64 },
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 408: the request was not answered within the server's request timeout.
    #[error("the request took longer than {} s and was abandoned", .0.as_secs_f64())]
    Timeout(std::time::Duration),
    #[error("{0}")]
    Unavailable(String),
    /// Logged with its detail; the client only sees a generic message.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Validation {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn task_not_found() -> Self {
        ApiError::NotFound {
            code: "task_not_found",
            message: "task not found".to_owned(),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Validation { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::RateLimited { .. }
            | ApiError::QueueFull { .. }
            | ApiError::QuotaExceeded { .. }
            | ApiError::TooManyWebSockets { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code of the error body (`task_not_found`, …).
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized { code, .. }
            | ApiError::NotFound { code, .. }
            | ApiError::BadRequest { code, .. }
            | ApiError::Conflict { code, .. } => code,
            ApiError::Validation { .. } => "validation_failed",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::QueueFull { .. } => "queue_full",
            ApiError::QuotaExceeded { .. } => "quota_exceeded",
            ApiError::TooManyWebSockets { .. } => "too_many_websockets",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Timeout(_) => "request_timeout",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(error = %detail, "internal error");
        }
        let status = self.status();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.to_string(),
                field: match &self {
                    ApiError::Validation { field, .. } => field.clone(),
                    _ => None,
                },
                current_status: match &self {
                    ApiError::Conflict { current_status, .. } => *current_status,
                    _ => None,
                },
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let ApiError::RateLimited { retry_after_secs }
        | ApiError::QueueFull {
            retry_after_secs, ..
        }
        | ApiError::QuotaExceeded {
            retry_after_secs, ..
        } = self
        {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs.max(1)),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<TaskError> for ApiError {
    /// The task core's refusals, with the status and code each one has on the wire.
    fn from(err: TaskError) -> Self {
        match err {
            TaskError::NotFound { code, message } => ApiError::NotFound { code, message },
            TaskError::Validation { field, message } => ApiError::Validation { field, message },
            TaskError::Conflict {
                code,
                message,
                current_status,
            } => ApiError::Conflict {
                code,
                message,
                current_status,
            },
            TaskError::QueueFull {
                queued,
                retry_after_secs,
            } => ApiError::QueueFull {
                queued,
                retry_after_secs,
            },
            TaskError::QuotaExceeded {
                quota,
                message,
                retry_after_secs,
            } => ApiError::QuotaExceeded {
                quota,
                message,
                retry_after_secs,
            },
            TaskError::Internal(detail) => ApiError::Internal(detail),
        }
    }
}
