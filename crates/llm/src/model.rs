//! The [`ChatModel`] trait every provider and layer implements.

use async_trait::async_trait;

use crate::{ChatRequest, ChatResponse, LlmError};

/// A chat model that answers with structured JSON.
///
/// Object-safe: the agent holds an `Arc<dyn ChatModel>`. Implementations are the three wire
/// providers ([`crate::providers`]) and the layers ([`crate::layers`]) that wrap them.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Configured name of the model (for a layered model: the primary's name).
    fn name(&self) -> &str;

    /// Sends `request` and returns the reply parsed as JSON.
    ///
    /// Behind the validation layer (what [`crate::ModelRegistry::build`] returns) the value also
    /// validates against `request.output_schema.schema`.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;
}
