use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// Uses `fallback` for the rest of its life once `primary` failed with an error that
/// [`LlmError::triggers_fallback`] (401, 402, 429, 5xx, unreachable), as browser-use does.
///
/// The switch is state: build one instance per task (what
/// [`ModelRegistry::build`](crate::ModelRegistry::build) does) so one task's outage does not
/// move every other task. The request that failed is sent to the fallback at once.
pub struct FallbackModel {
    primary: Arc<dyn ChatModel>,
    fallback: Arc<dyn ChatModel>,
    switched: AtomicBool,
}

impl FallbackModel {
    /// Wraps a primary and its fallback.
    pub fn new(primary: Arc<dyn ChatModel>, fallback: Arc<dyn ChatModel>) -> Self {
        Self {
            primary,
            fallback,
            switched: AtomicBool::new(false),
        }
    }

    /// Whether the fallback is in use.
    pub fn is_switched(&self) -> bool {
        self.switched.load(Ordering::Acquire)
    }
}

#[async_trait]
impl ChatModel for FallbackModel {
    fn name(&self) -> &str {
        self.primary.name()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if self.is_switched() {
            return self.fallback.complete(request).await;
        }
        match self.primary.complete(request).await {
            Err(error) if error.triggers_fallback() => {
                if !self.switched.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        primary = self.primary.name(),
                        fallback = self.fallback.name(),
                        error = %error,
                        "switching to the fallback model for the rest of the task"
                    );
                }
                self.fallback.complete(request).await
            }
            other => other,
        }
    }
}
