//! Bearer-key authentication and per-key rate limiting for `/v1`.

use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use browserd_types::ApiKeyId;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use secrecy::SecretString;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Caller;

/// Requests per second each key may make, with a burst allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

/// One token bucket per API key.
pub(crate) struct KeyRateLimiter {
    limiter: DefaultKeyedRateLimiter<ApiKeyId>,
    clock: DefaultClock,
}

impl KeyRateLimiter {
    pub(crate) fn new(limit: RateLimit) -> Arc<Self> {
        let quota = Quota::per_second(limit.per_second).allow_burst(limit.burst);
        Arc::new(Self {
            limiter: DefaultKeyedRateLimiter::keyed(quota),
            clock: DefaultClock::default(),
        })
    }

    /// `Err(seconds to wait)` when the key is over its budget.
    pub(crate) fn check(&self, key: ApiKeyId) -> Result<(), u64> {
        self.limiter.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }

    /// Forgets keys whose buckets are full again (bounded memory).
    pub(crate) fn retain_recent(&self) {
        self.limiter.retain_recent();
    }
}

fn bearer_token(headers: &HeaderMap) -> Result<SecretString, ApiError> {
    let unauthorized = |code: &'static str, message: &str| ApiError::Unauthorized {
        code,
        message: message.to_owned(),
    };
    let value = headers.get(AUTHORIZATION).ok_or_else(|| {
        unauthorized(
            "missing_api_key",
            "send your API key as `Authorization: Bearer <key>`",
        )
    })?;
    let value = value
        .to_str()
        .map_err(|_| unauthorized("invalid_api_key", "invalid API key"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthorized("invalid_api_key", "expected `Authorization: Bearer <key>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthorized(
            "invalid_api_key",
            "expected `Authorization: Bearer <key>`",
        ));
    }
    Ok(SecretString::from(token.trim().to_owned()))
}

/// Middleware: resolves the bearer key (401 otherwise), applies the key's rate limit (429 with
/// `Retry-After`), and makes the key available to handlers as [`Caller`].
pub(crate) async fn require_api_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match authenticate(&state, request.headers()).await {
        Ok(caller) => caller,
        Err(err) => return err.into_response(),
    };
    tracing::Span::current().record("api_key_id", tracing::field::display(caller.key_id));
    if let Some(limiter) = &state.rate_limiter
        && let Err(retry_after_secs) = limiter.check(caller.key_id)
    {
        metrics::counter!("browserd_rate_limited_total").increment(1);
        return ApiError::RateLimited { retry_after_secs }.into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let token = bearer_token(headers)?;
    let key = state
        .store
        .authenticate_api_key(&token)
        .await?
        .ok_or_else(|| ApiError::Unauthorized {
            code: "invalid_api_key",
            message: "invalid API key".to_owned(),
        })?;
    Ok(Caller { key_id: key.id })
}
