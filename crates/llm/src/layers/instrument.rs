use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, TokenUsage};

/// Outermost layer: one `model_call` span per call (model, answering model, token counts,
/// cost) and the model metrics — `browserd_model_requests_total{model,outcome}`,
/// `browserd_model_request_duration_seconds{model,outcome}`,
/// `browserd_model_tokens_total{model,kind}` and `browserd_model_cost_usd_total{model}`,
/// labelled with the configured name of the model that answered (a fallback shows as itself).
///
/// Only `tracing` and the `metrics` facade: where they go is the binary's business.
pub struct InstrumentedModel {
    inner: Arc<dyn ChatModel>,
}

impl InstrumentedModel {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChatModel>) -> Self {
        Self { inner }
    }
}

/// Registers the help texts of the model metrics.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "browserd_model_requests_total",
        "Model calls (retries and fallbacks included) by model and outcome"
    );
    metrics::describe_histogram!(
        "browserd_model_request_duration_seconds",
        metrics::Unit::Seconds,
        "Latency of model calls by model and outcome"
    );
    metrics::describe_counter!(
        "browserd_model_tokens_total",
        "Tokens billed by model and kind (input, cached_input, cache_creation, output)"
    );
    metrics::describe_gauge!(
        "browserd_model_cost_usd_total",
        "Cost of model calls in USD by model, from the configured price table (only grows; a \
         gauge because it is fractional)"
    );
}

fn outcome(error: &LlmError) -> &'static str {
    match error {
        LlmError::Timeout { .. } => "timeout",
        LlmError::RateLimited { .. } => "rate_limited",
        LlmError::Status { .. } => "http_error",
        LlmError::InvalidOutput { .. } => "invalid_output",
        LlmError::Transport { .. } => "unreachable",
        LlmError::InvalidRequest { .. } => "invalid_request",
    }
}

fn count_tokens(model: &str, usage: &TokenUsage) {
    for (kind, n) in [
        ("input", usage.input_tokens),
        ("cached_input", usage.cached_input_tokens),
        ("cache_creation", usage.cache_creation_input_tokens),
        ("output", usage.output_tokens),
    ] {
        if n > 0 {
            metrics::counter!("browserd_model_tokens_total", "model" => model.to_owned(), "kind" => kind)
                .increment(n);
        }
    }
}

#[async_trait]
impl ChatModel for InstrumentedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = tracing::info_span!(
            "model_call",
            otel.kind = "client",
            model = self.inner.name(),
            answered_by = tracing::field::Empty,
            provider_model = tracing::field::Empty,
            input_tokens = tracing::field::Empty,
            cached_input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            cost_usd = tracing::field::Empty,
            stop_reason = tracing::field::Empty,
            error = tracing::field::Empty,
            http_status = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self.inner.complete(request).instrument(span.clone()).await;
        let elapsed = started.elapsed().as_secs_f64();
        match &result {
            Ok(response) => {
                let model = response.model.as_str();
                span.record("answered_by", model);
                span.record("provider_model", response.provider_model.as_str());
                span.record("input_tokens", response.usage.input_tokens);
                span.record("cached_input_tokens", response.usage.cached_input_tokens);
                span.record("output_tokens", response.usage.output_tokens);
                if let Some(cost) = response.cost_usd {
                    span.record("cost_usd", cost);
                    // Fractional, so a gauge that only grows (rate() and increase() work).
                    metrics::gauge!("browserd_model_cost_usd_total", "model" => model.to_owned())
                        .increment(cost);
                }
                if let Some(reason) = &response.stop_reason {
                    span.record("stop_reason", reason.as_str());
                }
                let labels = [("model", model.to_owned()), ("outcome", "ok".to_owned())];
                metrics::counter!("browserd_model_requests_total", &labels).increment(1);
                metrics::histogram!("browserd_model_request_duration_seconds", &labels)
                    .record(elapsed);
                count_tokens(model, &response.usage);
            }
            Err(error) => {
                // The kind only: the message is the caller's to redact.
                span.record("error", outcome(error));
                if let Some(status) = error.status() {
                    span.record("http_status", status);
                }
                let model = error.model();
                let labels = [
                    ("model", model.to_owned()),
                    ("outcome", outcome(error).to_owned()),
                ];
                metrics::counter!("browserd_model_requests_total", &labels).increment(1);
                metrics::histogram!("browserd_model_request_duration_seconds", &labels)
                    .record(elapsed);
                if let LlmError::InvalidOutput { usage, .. } = error {
                    count_tokens(model, usage);
                }
            }
        }
        result
    }
}
