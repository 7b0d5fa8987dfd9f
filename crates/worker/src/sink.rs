//! The worker's event sink: every agent event of a claimed task becomes a store write made
//! under the task's lease — `step_started`, `model_output`, `action_result` events as they
//! happen, and each finished step as one transaction (step row with its AgentHistory record,
//! screenshot artifact, `step` event, usage). A write refused because the lease is gone makes
//! the worker abandon the task: the agent is stopped and nothing more is written.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{AgentControl, AgentEvent, AgentHistory, EventSink, Screenshot, UsageSummary};
use browserd_store::{StepWrite, Store, StoreError};
use browserd_types::dto::screenshot_path;
use browserd_types::{
    ActionResultEvent, ArtifactId, EventBody, ModelOutputEvent, ResultEvent, StepEvent, TaskId,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::Notify;

/// How long one write is retried while the database is unavailable (a restart, a failover),
/// unless the worker says otherwise ([`StoreSink::with_retry_budget`]: its lease, after which
/// the task may be another worker's anyway).
const DEFAULT_WRITE_RETRY_BUDGET: Duration = Duration::from_secs(30);
/// The longest wait between two attempts of a write.
const MAX_WRITE_RETRY_DELAY: Duration = Duration::from_secs(2);

/// Persists and publishes a claimed task's events.
pub struct StoreSink {
    store: Store,
    task_id: TaskId,
    owner: String,
    control: AgentControl,
    state: Mutex<SinkState>,
    /// Signalled when the agent reaches its pause point between steps.
    paused: Notify,
    retry_budget: Duration,
}

struct SinkState {
    screenshots: HashMap<u32, (ArtifactId, String, Vec<u8>)>,
    usage: UsageSummary,
    abandoned: Option<String>,
    at_pause_point: bool,
}

impl StoreSink {
    /// A sink for task `task_id` claimed by `owner`; `usage` is the run's usage so far (a
    /// resumed run starts from its persisted usage).
    pub fn new(
        store: Store,
        task_id: TaskId,
        owner: String,
        control: AgentControl,
        usage: UsageSummary,
    ) -> Self {
        Self {
            store,
            task_id,
            owner,
            control,
            state: Mutex::new(SinkState {
                screenshots: HashMap::new(),
                usage,
                abandoned: None,
                at_pause_point: false,
            }),
            paused: Notify::new(),
            retry_budget: DEFAULT_WRITE_RETRY_BUDGET,
        }
    }

    /// Retries a write on database errors for up to `budget` (the worker's lease) before the
    /// task is abandoned.
    #[must_use]
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the task was abandoned (its lease lost, the database unreachable), if it was.
    pub fn abandoned(&self) -> Option<String> {
        self.lock().abandoned.clone()
    }

    /// Gives the task up: the agent stops, nothing more is written.
    pub fn abandon(&self, reason: String) {
        let mut state = self.lock();
        if state.abandoned.is_none() {
            if self.control.is_stopped() {
                // Stopped from outside (the API, a deleted task): the refusal is expected.
                tracing::debug!(task_id = %self.task_id, %reason, "task ended elsewhere");
            } else {
                tracing::warn!(task_id = %self.task_id, %reason, "abandoning the task");
            }
            state.abandoned = Some(reason);
        }
        drop(state);
        self.control.stop();
    }

    /// Resolves once the agent waits between steps (after `AgentControl::pause`).
    pub async fn wait_for_pause_point(&self) {
        loop {
            let notified = self.paused.notified();
            if self.lock().at_pause_point {
                return;
            }
            notified.await;
        }
    }

    /// The run's usage summary so far.
    pub fn usage(&self) -> UsageSummary {
        self.lock().usage.clone()
    }

    /// Runs `write` with retries on database errors; a lease or end-of-task refusal (or a
    /// database that stays away) abandons the task.
    async fn persist<T, F, Fut>(&self, what: &str, mut write: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        if self.abandoned().is_some() {
            return None;
        }
        let give_up_at = tokio::time::Instant::now() + self.retry_budget;
        let mut delay = Duration::from_millis(100);
        let mut attempt = 1u32;
        loop {
            match write().await {
                Ok(value) => return Some(value),
                // The database is away (a restart, a failover): the step waits for it, as
                // long as the lease could still be ours.
                Err(StoreError::Database(err))
                    if tokio::time::Instant::now() + delay < give_up_at =>
                {
                    tracing::warn!(task_id = %self.task_id, %err, what, attempt, "write failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_WRITE_RETRY_DELAY);
                    attempt += 1;
                }
                Err(err) => {
                    self.abandon(format!("could not store {what}: {err}"));
                    return None;
                }
            }
        }
    }

    async fn event(&self, body: EventBody) {
        self.persist(body.kind(), || {
            self.store
                .append_worker_event(self.task_id, &self.owner, &body)
        })
        .await;
    }

    async fn step_finished(&self, record: &AgentHistory) {
        let number = i32::try_from(record.metadata.step_number).unwrap_or(i32::MAX);
        let (screenshot, usage) = {
            let mut state = self.lock();
            let usage = &mut state.usage;
            usage.total += record.metadata.usage;
            usage.invocations += record.metadata.invocations;
            if let Some(cost) = record.metadata.cost_usd {
                usage.total_cost_usd = Some(usage.total_cost_usd.unwrap_or(0.0) + cost);
            }
            let usage = serde_json::to_value(&*usage).unwrap_or(Value::Null);
            (
                state.screenshots.remove(&record.metadata.step_number),
                usage,
            )
        };
        let record_json = serde_json::to_value(record).unwrap_or(Value::Null);
        let mut event_record = record_json.clone();
        if let Some(object) = event_record.as_object_mut() {
            // The rendered state message can be 40 000 characters: it stays in the step row.
            object.remove("state_message");
        }
        let screenshot_url = screenshot
            .as_ref()
            .map(|_| screenshot_path(self.task_id, number));
        let url = (!record.state.url.is_empty()).then(|| record.state.url.clone());
        let title = (!record.state.title.is_empty()).then(|| record.state.title.clone());
        let write = StepWrite {
            number,
            url: url.clone(),
            title: title.clone(),
            model_output: record
                .model_output
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok()),
            results: serde_json::to_value(&record.result).unwrap_or(Value::Null),
            usage: Some(json!({
                "usage": record.metadata.usage,
                "cost_usd": record.metadata.cost_usd,
                "invocations": record.metadata.invocations,
            })),
            record: record_json,
            screenshot,
            started_at: epoch_to_time(record.metadata.step_start_time),
            finished_at: epoch_to_time(record.metadata.step_end_time),
            task_usage: usage,
            event: StepEvent {
                number,
                url,
                title,
                has_screenshot: screenshot_url.is_some(),
                screenshot_url,
                record: event_record,
            },
        };
        self.persist("the step", || {
            self.store
                .write_step(self.task_id, &self.owner, write.clone())
        })
        .await;
    }
}

fn epoch_to_time(secs: f64) -> OffsetDateTime {
    let nanos = (secs * 1e9) as i128;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or_else(|_| OffsetDateTime::now_utc())
}

#[async_trait]
impl EventSink for StoreSink {
    async fn emit(&self, event: AgentEvent) {
        match event {
            AgentEvent::TaskStarted { .. } => {}
            AgentEvent::StepStarted { step, url } => {
                let number = i32::try_from(step).unwrap_or(i32::MAX);
                self.persist("step_started", || {
                    self.store
                        .start_step(self.task_id, &self.owner, number, &url)
                })
                .await;
            }
            AgentEvent::ModelOutput {
                step,
                output,
                usage,
            } => {
                self.event(EventBody::ModelOutput(ModelOutputEvent {
                    number: step,
                    output: serde_json::to_value(&output).unwrap_or(Value::Null),
                    usage: serde_json::to_value(usage).unwrap_or(Value::Null),
                }))
                .await;
            }
            AgentEvent::ActionResult {
                step,
                index,
                action,
                result,
            } => {
                self.event(EventBody::ActionResult(ActionResultEvent {
                    number: step,
                    index,
                    action: serde_json::to_value(&action).unwrap_or(Value::Null),
                    result: serde_json::to_value(&result).unwrap_or(Value::Null),
                }))
                .await;
            }
            AgentEvent::StepFinished { record } => self.step_finished(&record).await,
            AgentEvent::Paused => {
                self.lock().at_pause_point = true;
                self.paused.notify_waiters();
            }
            AgentEvent::Resumed => self.lock().at_pause_point = false,
            AgentEvent::Finished {
                is_done,
                success,
                final_result,
                error,
            } => {
                let usage = self.usage();
                self.event(EventBody::Result(ResultEvent {
                    is_done,
                    success,
                    final_result,
                    error,
                    usage: serde_json::to_value(&usage).unwrap_or(Value::Null),
                }))
                .await;
            }
        }
    }

    async fn store_screenshot(&self, step: u32, screenshot: &Screenshot) -> Option<String> {
        let id = ArtifactId::new();
        let number = i32::try_from(step).unwrap_or(i32::MAX);
        self.lock().screenshots.insert(
            step,
            (id, screenshot.mime().to_owned(), screenshot.data.clone()),
        );
        Some(screenshot_path(self.task_id, number))
    }
}
