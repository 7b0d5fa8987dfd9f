//! The `Agent`: its state, construction and builder methods, and [`Agent::run`] — the loop's
//! skeleton (initial navigation, then pause / failure-limit / stop checks and one bounded step at
//! a time until done, max steps, stop or a dead browser, then `Finished`). What one step does is
//! in the child modules: `step` (one step and step 0), `model_call` (model calls and the
//! agent's output), `actions` (the action set and running a step's actions with the sequence
//! guards), `own_actions` (`done` and `extract`), `guidance` (plan and nudges), `history`
//! (records, compaction, resume) and `redact` (secrets out of what the agent emits).

mod actions;
mod guidance;
mod history;
mod human;
mod model_call;
mod own_actions;
mod redact;
mod step;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use browserd_llm::{ChatModel, ChatResponse, TokenUsage};
use browserd_views::ActionResult;

use crate::browser::AgentBrowser;
use crate::config::TaskConfig;
use crate::control::AgentControl;
use crate::error::AgentError;
use crate::events::{AgentEvent, EventSink};
use crate::loop_detector::ActionLoopDetector;
use crate::messages::MessageManager;
use crate::prompts;
use crate::secrets::Secrets;
use crate::urls::UrlShortener;
use crate::views::{AgentHistory, AgentHistoryList, BrowserStateHistory, StepMetadata};
use crate::workspace::Workspace;

use guidance::PlanStatus;

/// Upper bound of one browser call made by the agent (the browser bounds its own CDP calls too).
const ACTION_TIMEOUT: Duration = Duration::from_secs(180);

/// Why a step ended the run early.
enum StepEnd {
    Continue,
    Stopped,
    Fatal(String),
}

/// Per-step accumulators.
#[derive(Default)]
struct StepAcc {
    usage: TokenUsage,
    cost: Option<f64>,
    model_time: Duration,
    invocations: u32,
}

impl StepAcc {
    fn add(&mut self, response: &ChatResponse, took: Duration) {
        self.usage += response.usage;
        if let Some(c) = response.cost_usd {
            self.cost = Some(self.cost.unwrap_or(0.0) + c);
        }
        self.model_time += took;
        self.invocations += 1;
    }
}

/// The step ran out of its time.
struct StepTimedOut;

/// `step` bounded by `limit`, not counting the time `held` is true (a person is being asked).
async fn unless_held<F: std::future::Future>(
    limit: Duration,
    mut held: tokio::sync::watch::Receiver<bool>,
    step: F,
) -> Result<F::Output, StepTimedOut> {
    tokio::pin!(step);
    let mut left = limit;
    loop {
        let is_held = *held.borrow_and_update();
        let since = std::time::Instant::now();
        let changed = if is_held {
            tokio::select! {
                out = &mut step => return Ok(out),
                changed = held.changed() => changed,
            }
        } else {
            let changed = tokio::select! {
                out = &mut step => return Ok(out),
                () = tokio::time::sleep(left) => return Err(StepTimedOut),
                changed = held.changed() => changed,
            };
            left = left.saturating_sub(since.elapsed());
            changed
        };
        if changed.is_err() {
            return tokio::time::timeout(left, step)
                .await
                .map_err(|_| StepTimedOut);
        }
    }
}

/// Runs one task.
pub struct Agent {
    config: TaskConfig,
    browser: Arc<dyn AgentBrowser>,
    model: Arc<dyn ChatModel>,
    extraction_model: Arc<dyn ChatModel>,
    sink: Arc<dyn EventSink>,
    control: AgentControl,
    secrets: Secrets,
    workspace: Workspace,
    urls: UrlShortener,
    messages: MessageManager,
    loop_detector: ActionLoopDetector,
    system_prompt: String,
    task_text: String,
    output_validator: Option<jsonschema::Validator>,
    history: AgentHistoryList,
    consecutive_failures: u32,
    n_steps: u32,
    plan: Vec<(String, PlanStatus)>,
    screenshot_requested: bool,
    available_file_paths: Vec<String>,
    last_step_end: Option<f64>,
    /// Continues a run recorded elsewhere (see [`Agent::resume_from`]).
    resumed: bool,
    /// `ask_human` is offered and answered through this (see [`Agent::with_human`]).
    human: Option<crate::human::HumanSettings>,
    /// True while the agent waits for a person: the step timeout does not run meanwhile.
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model.name())
            .field("n_steps", &self.n_steps)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Agent {
    /// An agent for `config`, driving `browser` with `model` and reporting to `sink`.
    pub fn new(
        config: TaskConfig,
        browser: Arc<dyn AgentBrowser>,
        model: Arc<dyn ChatModel>,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self, AgentError> {
        config.validate().map_err(AgentError::InvalidConfig)?;
        let output_validator = match &config.output_schema {
            Some(schema) => Some(
                jsonschema::validator_for(schema)
                    .map_err(|e| AgentError::InvalidConfig(format!("output_schema: {e}")))?,
            ),
            None => None,
        };
        // A scoped secret under an invalid domain pattern would silently never be filled.
        let secrets = Secrets::try_new(&config.sensitive_data)
            .map_err(|e| AgentError::InvalidConfig(e.to_string()))?;
        let workspace = Workspace::open(config.workspace_dir.as_deref())?;
        let mut task_text = config.task.clone();
        if let Some(schema) = &config.output_schema {
            task_text.push_str(
                "\nExpected output format (the `data` of done must match this JSON Schema):\n",
            );
            task_text.push_str(&schema.to_string());
        }
        Ok(Self {
            secrets,
            urls: UrlShortener::new(config.url_shortening_limit),
            messages: MessageManager::new(config.max_history_items),
            loop_detector: ActionLoopDetector::new(config.loop_detection_window),
            system_prompt: prompts::system_prompt(&config),
            available_file_paths: config.available_file_paths.clone(),
            extraction_model: Arc::clone(&model),
            task_text,
            output_validator,
            workspace,
            browser,
            model,
            sink,
            control: AgentControl::new(),
            history: AgentHistoryList::default(),
            consecutive_failures: 0,
            n_steps: 1,
            plan: Vec::new(),
            screenshot_requested: false,
            last_step_end: None,
            resumed: false,
            human: None,
            held: Arc::new(tokio::sync::watch::Sender::new(false)),
            config,
        })
    }

    /// Uses an existing control handle (e.g. one the worker created before the agent).
    #[must_use]
    pub fn with_control(mut self, control: AgentControl) -> Self {
        self.control = control;
        self
    }
    /// Tells the next step what a person did in the browser while the agent was paused.
    fn note_person_inputs(&mut self) {
        /// The inputs listed one by one; more are counted.
        const LISTED: usize = 20;
        let inputs = self.control.take_person_inputs();
        if inputs.is_empty() {
            return;
        }
        let mut list = inputs[..inputs.len().min(LISTED)].join("; ");
        if inputs.len() > LISTED {
            list.push_str(&format!("; and {} more", inputs.len() - LISTED));
        }
        self.messages.add_system_note(format!(
            "While the task was paused, a person used the browser ({list}). The page may have \
changed since your last step: rely on the current browser state, not on earlier ones."
        ));
    }

    /// Offers the `ask_human` action, answered through `settings.channel`.
    #[must_use]
    pub fn with_human(mut self, settings: crate::human::HumanSettings) -> Self {
        self.human = Some(settings);
        self
    }

    /// The handle to pause, resume or stop this agent.
    pub fn control(&self) -> AgentControl {
        self.control.clone()
    }

    /// The task workspace directory.
    pub fn workspace_dir(&self) -> &std::path::Path {
        self.workspace.dir()
    }

    /// The history so far.
    pub fn history(&self) -> &AgentHistoryList {
        &self.history
    }

    /// Numbers the next step `number` (a skill healer's steps continue an execution's
    /// numbering). For [`Agent::step_once`]; [`Agent::run`] still makes its initial navigation.
    #[must_use]
    pub fn with_next_step(mut self, number: u32) -> Self {
        self.n_steps = number;
        self
    }

    /// Runs one step of the loop from the page as it is now — no initial navigation, no
    /// `TaskStarted` or `Finished` event — bounded by the step timeout, and returns its record
    /// (emitted as `StepFinished` like any step's). `Err` says why no record was made: the
    /// agent was stopped, or the browser is gone.
    pub async fn step_once(&mut self) -> Result<AgentHistory, String> {
        let recorded = self.history.history.len();
        let step = self.n_steps;
        let held = self.held.subscribe();
        let span = crate::telemetry::step_span(step);
        let outcome = unless_held(
            self.config.step_timeout,
            held,
            tracing::Instrument::instrument(self.step(), span),
        )
        .await;
        match outcome {
            Ok(StepEnd::Continue) => {}
            Ok(StepEnd::Stopped) => return Err("Agent stopped".to_owned()),
            Ok(StepEnd::Fatal(message)) => return Err(message),
            Err(StepTimedOut) => {
                let error = format!(
                    "Step {step} timed out after {} seconds",
                    self.config.step_timeout.as_secs()
                );
                self.consecutive_failures += 1;
                self.record(
                    step,
                    None,
                    vec![ActionResult::error(error)],
                    BrowserStateHistory::default(),
                    epoch_secs(),
                    StepAcc::default(),
                    (0, 0),
                    None,
                )
                .await;
            }
        }
        match self.history.history.get(recorded..).and_then(<[_]>::last) {
            Some(record) => Ok(record.clone()),
            None => Err(format!("step {step} made no record")),
        }
    }

    /// Runs the task to the end (done, max steps, max failures, stop or a dead browser).
    pub async fn run(&mut self) -> AgentHistoryList {
        let task = self.secrets.redact(&self.config.task);
        self.sink.emit(AgentEvent::TaskStarted { task }).await;
        let mut end_error: Option<String> = None;

        if !self.resumed
            && let Err(fatal) = tracing::Instrument::instrument(
                self.initial_navigation(),
                crate::telemetry::step_span(0),
            )
            .await
        {
            end_error = Some(fatal);
        }

        while end_error.is_none() && self.n_steps <= self.config.max_steps {
            if self.control.is_paused() {
                self.sink.emit(AgentEvent::Paused).await;
                if !self.control.wait_while_paused().await {
                    end_error = Some("Agent stopped".to_owned());
                    break;
                }
                self.sink.emit(AgentEvent::Resumed).await;
            }
            self.note_person_inputs();
            let limit =
                self.config.max_failures + u32::from(self.config.final_response_after_failure);
            if self.consecutive_failures >= limit {
                end_error = Some(format!(
                    "Stopped due to {} consecutive failures",
                    self.consecutive_failures
                ));
                break;
            }
            if self.control.is_stopped() {
                end_error = Some("Agent stopped".to_owned());
                break;
            }
            let step = self.n_steps;
            let started = epoch_secs();
            let span = crate::telemetry::step_span(step);
            let held = self.held.subscribe();
            let outcome = unless_held(
                self.config.step_timeout,
                held,
                tracing::Instrument::instrument(self.step(), span.clone()),
            )
            .await;
            crate::telemetry::step_duration(epoch_secs() - started);
            match outcome {
                Ok(StepEnd::Continue) => {}
                Ok(StepEnd::Stopped) => {
                    end_error = Some("Agent stopped".to_owned());
                    break;
                }
                Ok(StepEnd::Fatal(message)) => {
                    end_error = Some(message);
                    break;
                }
                Err(StepTimedOut) => {
                    let error = format!(
                        "Step {step} timed out after {} seconds",
                        self.config.step_timeout.as_secs()
                    );
                    span.record("error", error.as_str());
                    self.consecutive_failures += 1;
                    let result = vec![ActionResult::error(error)];
                    self.record(
                        step,
                        None,
                        result,
                        BrowserStateHistory::default(),
                        started,
                        StepAcc::default(),
                        (0, 0),
                        None,
                    )
                    .await;
                }
            }
            if self.history.is_done() {
                break;
            }
        }

        if end_error.is_none() && !self.history.is_done() && self.n_steps > self.config.max_steps {
            let error = "Failed to complete task in maximum steps".to_owned();
            let record = AgentHistory {
                result: vec![ActionResult::error(error.clone())],
                metadata: StepMetadata {
                    step_number: self.n_steps,
                    step_start_time: epoch_secs(),
                    step_end_time: epoch_secs(),
                    ..StepMetadata::default()
                },
                ..AgentHistory::default()
            };
            self.history.history.push(record.clone());
            self.sink
                .emit(AgentEvent::StepFinished {
                    record: Box::new(record),
                })
                .await;
            end_error = Some(error);
        }

        let final_result = self.history.final_result().map(str::to_owned);
        self.sink
            .emit(AgentEvent::Finished {
                is_done: self.history.is_done(),
                success: self.history.is_successful(),
                final_result,
                error: end_error,
            })
            .await;
        self.history.clone()
    }
}
