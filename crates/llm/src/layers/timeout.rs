use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// Bounds one call of the inner model (retries included) by `timeout`.
///
/// The deadline is written into the request options so inner layers can plan with it: the retry
/// layer does not sleep past it and each HTTP request gets the remaining time as its timeout. A
/// deadline already set by an outer caller is kept when it is earlier.
pub struct TimeoutModel {
    inner: Arc<dyn ChatModel>,
    timeout: Duration,
}

impl TimeoutModel {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChatModel>, timeout: Duration) -> Self {
        Self { inner, timeout }
    }
}

#[async_trait]
impl ChatModel for TimeoutModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let own_deadline = started + self.timeout;
        let deadline = request
            .options
            .deadline
            .map_or(own_deadline, |outer| outer.min(own_deadline));
        let mut bounded = request.clone();
        bounded.options.deadline = Some(deadline);
        let timed_out = || LlmError::Timeout {
            model: self.inner.name().to_owned(),
            after: deadline.saturating_duration_since(started),
        };
        match tokio::time::timeout_at(deadline.into(), self.inner.complete(&bounded)).await {
            Ok(Ok(mut response)) => {
                response.latency = started.elapsed();
                Ok(response)
            }
            Ok(Err(LlmError::Timeout { .. })) | Err(_) => Err(timed_out()),
            Ok(Err(error)) => Err(error),
        }
    }
}
