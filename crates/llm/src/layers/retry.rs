use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// When and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = no retry).
    pub max_retries: u32,
    /// First backoff delay; doubles per retry.
    pub base_delay: Duration,
    /// Cap of the backoff delay.
    pub max_delay: Duration,
    /// A `Retry-After` longer than this is not waited for: the error is returned at once so the
    /// fallback model can take over.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// The provider SDK defaults browser-use relies on: 0.5 s doubling to 8 s, jitter −25 %.
    pub const fn with_max_retries(max_retries: u32) -> Self {
        Self {
            max_retries,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }

    /// Backoff before retry number `retry` (0-based), with up to 25 % jitter taken off.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponential = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.min(16)));
        let capped = exponential.min(self.max_delay);
        capped.mul_f64(1.0 - 0.25 * fastrand::f64())
    }
}

/// Retries retryable errors ([`LlmError::is_retryable`]) of the inner model.
pub struct RetryModel {
    inner: Arc<dyn ChatModel>,
    policy: RetryPolicy,
}

impl RetryModel {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChatModel>, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }
}

#[async_trait]
impl ChatModel for RetryModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let mut retry = 0;
        loop {
            let error = match self.inner.complete(request).await {
                Ok(mut response) => {
                    response.latency = started.elapsed();
                    return Ok(response);
                }
                Err(error) => error,
            };
            if !error.is_retryable() || retry >= self.policy.max_retries {
                return Err(error);
            }
            let delay = match error.retry_after() {
                Some(asked) if asked > self.policy.max_retry_after => return Err(error),
                Some(asked) => asked,
                None => self.policy.backoff(retry),
            };
            if request.remaining().is_some_and(|left| delay >= left) {
                // Waiting would run into the deadline; surface the real error instead.
                return Err(error);
            }
            retry += 1;
            tracing::warn!(
                model = self.inner.name(),
                retry,
                max_retries = self.policy.max_retries,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "retrying model call"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters_down() {
        let policy = RetryPolicy::with_max_retries(5);
        for retry in 0..8 {
            let nominal = Duration::from_millis(500)
                .saturating_mul(2u32.pow(retry))
                .min(Duration::from_secs(8));
            let d = policy.backoff(retry);
            assert!(d <= nominal && d >= nominal.mul_f64(0.75), "{retry}: {d:?}");
        }
    }
}
