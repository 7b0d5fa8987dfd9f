//! The task's token and cost budgets, kept by a sink that stops the agent when one runs out.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use browserd_agent::{AgentControl, AgentEvent, AgentHistoryList, EventSink, Screenshot};

use super::TaskSpec;

/// Passes events on, and stops the agent once the task's token or cost budget is used up.
pub(super) struct BudgetSink {
    inner: Arc<dyn EventSink>,
    control: AgentControl,
    max_tokens: Option<u64>,
    max_cost_usd: Option<f64>,
    state: Mutex<BudgetState>,
}

#[derive(Default)]
struct BudgetState {
    tokens: u64,
    cost_usd: f64,
    exceeded: Option<String>,
    end_error: Option<String>,
}

impl BudgetSink {
    pub(super) fn new(
        inner: Arc<dyn EventSink>,
        control: AgentControl,
        spec: &TaskSpec,
        prior: Option<&AgentHistoryList>,
    ) -> Self {
        let mut state = BudgetState::default();
        if let Some(prior) = prior {
            let total = &prior.usage.total;
            state.tokens = total.input_tokens + total.output_tokens;
            state.cost_usd = prior.usage.total_cost_usd.unwrap_or(0.0);
        }
        Self {
            inner,
            control,
            max_tokens: spec.options.token_budget(),
            max_cost_usd: spec.options.max_cost_usd,
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the first budget that ran out.
    pub(super) fn exceed(&self, reason: String) {
        let mut state = self.lock();
        if state.exceeded.is_none() {
            state.exceeded = Some(reason);
        }
    }

    pub(super) fn exceeded(&self) -> Option<String> {
        self.lock().exceeded.clone()
    }

    pub(super) fn end_error(&self) -> Option<String> {
        self.lock().end_error.clone()
    }
}

#[async_trait]
impl EventSink for BudgetSink {
    async fn emit(&self, event: AgentEvent) {
        let mut over = None;
        match &event {
            AgentEvent::StepFinished { record } => {
                let mut state = self.lock();
                let usage = &record.metadata.usage;
                state.tokens += usage.input_tokens + usage.output_tokens;
                state.cost_usd += record.metadata.cost_usd.unwrap_or(0.0);
                if let Some(max) = self.max_tokens
                    && state.tokens > max
                {
                    over = Some(format!(
                        "max_tokens: the task used {} tokens, more than its budget of {max}",
                        state.tokens
                    ));
                } else if let Some(max) = self.max_cost_usd
                    && state.cost_usd > max
                {
                    over = Some(format!(
                        "max_cost_usd: the task cost ${:.4}, more than its budget of ${max}",
                        state.cost_usd
                    ));
                }
            }
            AgentEvent::Finished { error, .. } => {
                let mut state = self.lock();
                state.end_error = error.clone();
            }
            _ => {}
        }
        let finished = matches!(event, AgentEvent::Finished { .. });
        let is_done_step = matches!(&event, AgentEvent::StepFinished { record }
            if record.result.last().is_some_and(|r| r.is_done));
        self.inner.emit(event).await;
        if let Some(reason) = over
            && !finished
            && !is_done_step
        {
            self.exceed(reason);
            self.control.stop();
        }
    }

    async fn store_screenshot(&self, step: u32, screenshot: &Screenshot) -> Option<String> {
        self.inner.store_screenshot(step, screenshot).await
    }
}
