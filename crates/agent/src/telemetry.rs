//! Spans and metrics of the step loop, through the `tracing` and `metrics` facades only (the
//! binary decides where they go).
//!
//! Spans: `step` (step number; token counts, cost and action count of the step) with children
//! `capture`, `model_call` (from the model layer) and one `action` per action (name, index,
//! error kind). Metrics: `browserd_step_duration_seconds`, `browserd_capture_duration_seconds`,
//! `browserd_action_duration_seconds{action}`, `browserd_actions_total{action}` and
//! `browserd_action_errors_total{action,kind}`.

use std::time::Duration;

use browserd_views::ActionResult;
use tracing::Span;
use tracing::field::Empty;

/// Registers the help texts of the agent's metrics.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        "browserd_step_duration_seconds",
        metrics::Unit::Seconds,
        "Wall time of agent steps (capture, model call and actions)"
    );
    metrics::describe_histogram!(
        "browserd_capture_duration_seconds",
        metrics::Unit::Seconds,
        "Page captures (DOM tree, text, screenshot when the model gets one)"
    );
    metrics::describe_histogram!(
        "browserd_action_duration_seconds",
        metrics::Unit::Seconds,
        "Actions by name"
    );
    metrics::describe_counter!("browserd_actions_total", "Actions run, by name");
    metrics::describe_counter!(
        "browserd_action_errors_total",
        "Actions that failed, by name and kind (failed, timeout, browser, fatal, \
         invalid_params, unavailable)"
    );
}

pub(crate) fn step_span(step: u32) -> Span {
    tracing::info_span!(
        "step",
        step,
        url = Empty,
        actions = Empty,
        input_tokens = Empty,
        output_tokens = Empty,
        cost_usd = Empty,
        model_calls = Empty,
        error = Empty,
    )
}

pub(crate) fn capture_span(screenshot: bool) -> Span {
    tracing::info_span!("capture", screenshot, elements = Empty, error = Empty)
}

pub(crate) fn action_span(name: &str, index: usize) -> Span {
    tracing::info_span!(
        "action",
        otel.name = format!("action {name}"),
        action = name,
        index,
        error_kind = Empty,
        error = Empty,
    )
}

/// Records a finished capture.
pub(crate) fn capture_finished(
    span: &Span,
    took: Duration,
    elements: Option<usize>,
    error: Option<&str>,
) {
    metrics::histogram!("browserd_capture_duration_seconds").record(took.as_secs_f64());
    if let Some(elements) = elements {
        span.record("elements", elements);
    }
    if let Some(error) = error {
        span.record("error", error);
    }
}

/// Records the end of a step on its span (call inside the step span) and its duration.
pub(crate) fn step_recorded(
    url: &str,
    actions: usize,
    usage: &browserd_llm::TokenUsage,
    cost: Option<f64>,
    model_calls: u32,
    error: Option<&str>,
) {
    let span = Span::current();
    span.record("url", url);
    span.record("actions", actions);
    span.record("input_tokens", usage.input_tokens);
    span.record("output_tokens", usage.output_tokens);
    span.record("model_calls", model_calls);
    if let Some(cost) = cost {
        span.record("cost_usd", cost);
    }
    if let Some(error) = error {
        span.record("error", error);
    }
}

/// Records a step's wall time.
pub(crate) fn step_duration(seconds: f64) {
    metrics::histogram!("browserd_step_duration_seconds").record(seconds.max(0.0));
}

/// Records a finished action: its metrics and, on failure, its error kind.
pub(crate) fn action_finished(
    span: &Span,
    name: &str,
    offered: bool,
    result: &ActionResult,
    fatal: bool,
    took: Duration,
) {
    // Names the model invents must not become label values.
    let label = if offered {
        name.to_owned()
    } else {
        "unknown".to_owned()
    };
    metrics::counter!("browserd_actions_total", "action" => label.clone()).increment(1);
    metrics::histogram!("browserd_action_duration_seconds", "action" => label.clone())
        .record(took.as_secs_f64());
    let Some(error) = result.error.as_deref() else {
        return;
    };
    let kind = error_kind(offered, fatal, error);
    span.record("error_kind", kind);
    span.record("error", error);
    metrics::counter!("browserd_action_errors_total", "action" => label, "kind" => kind)
        .increment(1);
}

/// The kind of an action error, from where it arose (see `Agent::execute_action`).
fn error_kind(offered: bool, fatal: bool, error: &str) -> &'static str {
    if !offered {
        "unavailable"
    } else if fatal {
        "fatal"
    } else if error.starts_with("Action ") && error.contains(" timed out after ") {
        "timeout"
    } else if error.starts_with("Error executing action ") {
        "browser"
    } else if error.starts_with("The parameters of ") {
        "invalid_params"
    } else {
        "failed"
    }
}

#[cfg(test)]
mod tests {
    use super::error_kind;

    #[test]
    fn error_kinds() {
        assert_eq!(
            error_kind(false, false, "Action `x` is not available"),
            "unavailable"
        );
        assert_eq!(
            error_kind(true, true, "Error executing action click: gone"),
            "fatal"
        );
        assert_eq!(
            error_kind(true, false, "Action click timed out after 180 seconds"),
            "timeout"
        );
        assert_eq!(
            error_kind(true, false, "Error executing action click: boom"),
            "browser"
        );
        assert_eq!(
            error_kind(
                true,
                false,
                "The parameters of `click` must be a JSON object"
            ),
            "invalid_params"
        );
        assert_eq!(
            error_kind(true, false, "Element index 5 does not exist"),
            "failed"
        );
    }
}
