//! The worker's spans and metrics, through the `tracing` and `metrics` facades.
//!
//! Span `task` (task id, attempt, model; at the end status, steps, tokens, cost) is the root of
//! a task's run on this worker; its parent is the creating request's trace context when the
//! binary wires one in ([`crate::Worker::with_trace_parent`]).

use browserd_agent::AgentHistoryList;
use browserd_types::{TaskId, TaskStatus};
use tracing::Span;
use tracing::field::Empty;

/// Registers the help texts of the worker's metrics (and those of the crates it runs).
pub fn describe_metrics() {
    metrics::describe_counter!(
        "browserd_tasks_claimed_total",
        "Tasks claimed by this worker (resumed attempts included)"
    );
    metrics::describe_counter!(
        "browserd_tasks_ended_total",
        "Tasks this worker brought to a terminal status, by status"
    );
    metrics::describe_gauge!(
        "browserd_worker_tasks_running",
        "Tasks this worker is running now"
    );
    metrics::gauge!("browserd_worker_tasks_running").set(0.0);
    metrics::describe_gauge!(
        "browserd_worker_admission_blocked",
        "1 while this worker does not claim tasks because of pressure, by reason (memory, cpu): the machine or cgroup lacks the headroom of --min-available-memory-mb / --max-cpu-pressure"
    );
    for reason in ["memory", "cpu"] {
        metrics::gauge!("browserd_worker_admission_blocked", "reason" => reason).set(0.0);
    }
    metrics::describe_counter!(
        "browserd_tasks_browser_lost_total",
        "Runs whose Chrome died under them, by outcome (requeued, failed = out of attempts)"
    );
    metrics::describe_counter!(
        "browserd_webhook_attempts_total",
        "Webhook delivery attempts by outcome (delivered, retry, failed = given up)"
    );
    browserd_agent::telemetry::describe_metrics();
    browserd_browser::describe_metrics();
    browserd_llm::layers::describe_metrics();
}

/// A run whose Chrome died: requeued, or failed out of attempts.
pub(crate) fn browser_lost(requeued: bool) {
    let outcome = if requeued { "requeued" } else { "failed" };
    metrics::counter!("browserd_tasks_browser_lost_total", "outcome" => outcome).increment(1);
}

pub(crate) fn task_span(id: TaskId, attempt: i32, model: Option<&str>) -> Span {
    tracing::info_span!(
        "task",
        task_id = %id,
        attempt,
        model = model.unwrap_or("default"),
        status = Empty,
        steps = Empty,
        input_tokens = Empty,
        output_tokens = Empty,
        cost_usd = Empty,
    )
}

/// Counts a running task while it lives.
pub(crate) struct RunningTask;

impl RunningTask {
    pub(crate) fn start() -> Self {
        metrics::gauge!("browserd_worker_tasks_running").increment(1.0);
        Self
    }
}

impl Drop for RunningTask {
    fn drop(&mut self) {
        metrics::gauge!("browserd_worker_tasks_running").decrement(1.0);
    }
}

/// Records the run's totals on the task span.
pub(crate) fn run_finished(history: &AgentHistoryList) {
    let span = Span::current();
    span.record("steps", history.history.len());
    span.record("input_tokens", history.usage.total.input_tokens);
    span.record("output_tokens", history.usage.total.output_tokens);
    if let Some(cost) = history.usage.total_cost_usd {
        span.record("cost_usd", cost);
    }
}

/// Records the terminal status on the task span and counts it.
pub(crate) fn task_ended(status: TaskStatus) {
    Span::current().record("status", status.as_str());
    metrics::counter!("browserd_tasks_ended_total", "status" => status.as_str()).increment(1);
}
