//! The step loop: prepare context, ask the model, run the actions with their guards, record.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use browserd_llm::{
    ChatModel, ChatRequest, ChatResponse, ImageData, ImageDetail, ImagePart, LlmError, Message,
    OutputSchema, TokenUsage,
};
use browserd_views::{AGENT_OWNED_ACTIONS, ActionResult, BrowserFailure, TabInfo};
use serde_json::{Value, json};

use crate::browser::{ActionSpec, AgentBrowser, BrowserState, MarkdownOptions};
use crate::config::{TaskConfig, VisionMode};
use crate::control::AgentControl;
use crate::domains::url_matches_pattern;
use crate::error::AgentError;
use crate::events::{AgentEvent, EventSink};
use crate::loop_detector::{ActionLoopDetector, PageFingerprint};
use crate::messages::{HistoryItem, MessageManager, StateInputs, render_state_message};
use crate::prompts;
use crate::schema::{SchemaMode, agent_output_schema, done_spec};
use crate::secrets::Secrets;
use crate::urls::{UrlShortener, single_url_in_task};
use crate::views::{
    ActionCall, AgentHistory, AgentHistoryList, AgentOutput, BrowserStateHistory, StepMetadata,
};
use crate::workspace::{Workspace, file_action_specs};

/// Upper bound of one browser call made by the agent (the browser bounds its own CDP calls too).
const ACTION_TIMEOUT: Duration = Duration::from_secs(180);
/// Extraction results at least this long go to a workspace file and are shown once.
const EXTRACT_TO_FILE: usize = 10_000;

/// The agent-owned `extract` action (the agent makes the model call on the page markdown).
fn extract_spec() -> ActionSpec {
    ActionSpec {
        name: "extract".into(),
        description: "Read the whole page with a separate model and answer a query about it \
(slow: only when the information is not visible in the element list)."
            .into(),
        params_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "extract_links": {"type": "boolean", "default": false},
                "extract_images": {"type": "boolean", "default": false},
                "start_from_char": {"type": "integer", "minimum": 0, "default": 0},
                "already_collected": {"type": "array", "items": {"type": "string"}, "default": []}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        terminates_sequence: false,
        domains: Vec::new(),
    }
}

/// Status of one plan item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlanStatus {
    Pending,
    Current,
    Done,
}

/// Why a step ended the run early.
enum StepEnd {
    Continue,
    Stopped,
    Fatal(String),
}

/// What a model call produced.
enum ModelCall {
    Reply(ChatResponse),
    Failed(String),
    Stopped,
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

/// Time the step's actions waited for the page to settle, from the browser's reports in each
/// result's `metadata.settle.ms`.
fn settle_ms(results: &[ActionResult]) -> u64 {
    results
        .iter()
        .filter_map(|r| r.metadata.as_ref()?.get("settle")?.get("ms")?.as_u64())
        .sum()
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
            config,
        })
    }

    /// Continues a run whose earlier steps are `prior` (persisted by a worker that is gone):
    /// the step number, the consecutive-failure count, the history shown to the model, the
    /// plan, the loop detector's action window and the usage are rebuilt from it, and the
    /// initial navigation is not repeated. What `prior` cannot tell (the page fingerprints of
    /// the stagnation check, a compaction summary) starts afresh. An empty `prior` changes
    /// nothing.
    #[must_use]
    pub fn resume_from(mut self, prior: AgentHistoryList) -> Self {
        if prior.history.is_empty() {
            return self;
        }
        for item in &prior.history {
            let step = item.metadata.step_number;
            let output = item.model_output.as_ref();
            self.messages.add_step(
                HistoryItem::from_step(step, output, &item.result),
                &item.result,
            );
            let failed = (item.result.len() == 1 && item.result[0].error.is_some())
                || item.result.is_empty();
            if failed {
                self.consecutive_failures += 1;
            } else {
                self.consecutive_failures = 0;
            }
            if step > 0
                && let Some(output) = output
            {
                self.loop_detector.record_actions(&output.action);
                self.update_plan(output);
            }
            self.n_steps = self.n_steps.max(step + 1);
            self.last_step_end = Some(item.metadata.step_end_time);
        }
        self.history = prior;
        self.resumed = true;
        self
    }

    /// Uses an existing control handle (e.g. one the worker created before the agent).
    #[must_use]
    pub fn with_control(mut self, control: AgentControl) -> Self {
        self.control = control;
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
            let outcome = tokio::time::timeout(
                self.config.step_timeout,
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
                Err(_elapsed) => {
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

    /// Step 0: open `start_url`, or the only URL of the task.
    async fn initial_navigation(&mut self) -> Result<(), String> {
        let url = match &self.config.start_url {
            Some(u) => Some(u.clone()),
            None if self.config.directly_open_url => single_url_in_task(&self.config.task),
            None => None,
        };
        let Some(url) = url else { return Ok(()) };
        let started = epoch_secs();
        self.sink
            .emit(AgentEvent::StepStarted {
                step: 0,
                url: String::new(),
            })
            .await;
        let action = ActionCall::new("navigate", json!({"url": url, "new_tab": false}));
        let t = Instant::now();
        let mut fatal = None;
        let action_span = crate::telemetry::action_span("navigate", 0);
        let mut result = match tokio::time::timeout(
            self.config.step_timeout,
            tracing::Instrument::instrument(
                self.browser.execute("navigate", &action.params),
                action_span.clone(),
            ),
        )
        .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                if e.fatal {
                    fatal = Some(format!("browser failed: {e}"));
                }
                ActionResult::error(format!("Error executing action navigate: {e}"))
            }
            Err(_) => ActionResult::error(format!(
                "Initial navigation timed out after {} seconds",
                self.config.step_timeout.as_secs()
            )),
        };
        self.redact_result(&mut result);
        crate::telemetry::action_finished(
            &action_span,
            "navigate",
            true,
            &result,
            fatal.is_some(),
            t.elapsed(),
        );
        if result.error.is_some() {
            self.consecutive_failures += 1;
        }
        self.sink
            .emit(AgentEvent::ActionResult {
                step: 0,
                index: 0,
                action: action.clone(),
                result: result.clone(),
            })
            .await;
        let output = AgentOutput {
            evaluation_previous_goal: Some("Start".into()),
            memory: None,
            next_goal: Some("Initial navigation".into()),
            action: vec![action],
            ..AgentOutput::default()
        };
        let state = BrowserStateHistory {
            url: url.clone(),
            title: "Initial Actions".into(),
            interacted_element: vec![None],
            ..BrowserStateHistory::default()
        };
        let actions_ms = millis(t.elapsed());
        self.record_item(
            0,
            Some(output),
            vec![result],
            state,
            started,
            StepAcc::default(),
            (0, actions_ms),
            None,
        )
        .await;
        fatal.map_or(Ok(()), Err)
    }

    /// Actions offered on `url`: browser actions (domain-filtered), the agent's own, and done.
    fn actions_for(&self, url: &str, done_only: bool) -> (Vec<ActionSpec>, Vec<String>) {
        let done = done_spec(self.config.output_schema.as_ref());
        if done_only {
            return (vec![done], Vec::new());
        }
        let own = file_action_specs();
        let mut specs = vec![done];
        let mut page_specific = Vec::new();
        let browser_specs = self.browser.action_specs();
        for spec in browser_specs {
            if AGENT_OWNED_ACTIONS.contains(&spec.name.as_str()) {
                continue;
            }
            if spec.name == "screenshot" && self.config.use_vision != VisionMode::Auto {
                continue;
            }
            if !spec.domains.is_empty() {
                if !spec.domains.iter().any(|d| url_matches_pattern(url, d)) {
                    continue;
                }
                let params = spec.params_schema["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
                    .unwrap_or_default();
                page_specific.push(format!(
                    "{}: {} (params: {params})",
                    spec.name, spec.description
                ));
            }
            specs.push(spec);
        }
        specs.push(extract_spec());
        specs.extend(own);
        (specs, page_specific)
    }

    fn render_plan(&self) -> Option<String> {
        if self.plan.is_empty() {
            return None;
        }
        let lines: Vec<String> = self
            .plan
            .iter()
            .enumerate()
            .map(|(i, (text, status))| {
                let mark = match status {
                    PlanStatus::Done => "[x]",
                    PlanStatus::Current => "[>]",
                    PlanStatus::Pending => "[ ]",
                };
                format!("{mark} {i}: {text}")
            })
            .collect();
        Some(lines.join("\n"))
    }

    fn update_plan(&mut self, output: &AgentOutput) {
        if let Some(items) = &output.plan_update {
            self.plan = items
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let status = if i == 0 {
                        PlanStatus::Current
                    } else {
                        PlanStatus::Pending
                    };
                    (t.clone(), status)
                })
                .collect();
        }
        if let Some(current) = output.current_plan_item
            && !self.plan.is_empty()
        {
            let last = self.plan.len() - 1;
            let current = usize::try_from(current.max(0)).unwrap_or(0).min(last);
            for (i, item) in self.plan.iter_mut().enumerate() {
                item.1 = match i.cmp(&current) {
                    std::cmp::Ordering::Less => PlanStatus::Done,
                    std::cmp::Ordering::Equal => PlanStatus::Current,
                    std::cmp::Ordering::Greater => PlanStatus::Pending,
                };
            }
        }
    }

    fn nudges(&self, step: u32, done_only_last: bool, done_only_failures: bool) -> Vec<String> {
        let c = &self.config;
        let mut nudges = Vec::new();
        if !done_only_last && u64::from(step) * 4 >= u64::from(c.max_steps) * 3 {
            let pct = u64::from(step) * 100 / u64::from(c.max_steps);
            nudges.push(format!(
                "Budget warning: this is step {step} of {} ({pct}% of your steps). Start consolidating: \
secure the most important results and prepare to call done with what you have.",
                c.max_steps
            ));
        }
        let planning = c.enable_planning && !c.flash_mode;
        if planning
            && c.planning_replan_on_stall > 0
            && self.consecutive_failures >= c.planning_replan_on_stall
        {
            nudges.push(format!(
                "Replan suggested: your last {} steps failed. Step back, think about why, and send a new \
plan with plan_update that takes a different route.",
                self.consecutive_failures
            ));
        }
        if planning
            && c.planning_exploration_limit > 0
            && self.plan.is_empty()
            && step > c.planning_exploration_limit
        {
            nudges.push(format!(
                "Planning nudge: you have taken {} steps without a plan. If the task has several parts, \
write a short plan with plan_update.",
                step - 1
            ));
        }
        if c.loop_detection_enabled
            && let Some(n) = self.loop_detector.nudge()
        {
            nudges.push(n);
        }
        if done_only_last {
            nudges.push(
                "This is your last step. Call done now — and only done — with everything you have found. \
Set success to false if the task is not fully complete."
                    .to_owned(),
            );
        } else if done_only_failures {
            nudges.push(format!(
                "You have failed {} times in a row. Call done now — and only done — with what you have, \
explain what went wrong, and set success to false unless the task is really complete.",
                self.consecutive_failures
            ));
        }
        nudges
    }

    async fn call_model(
        &self,
        model: &Arc<dyn ChatModel>,
        request: &ChatRequest,
        acc: &mut StepAcc,
    ) -> ModelCall {
        let t = Instant::now();
        let call = tokio::time::timeout(self.config.llm_timeout, model.complete(request));
        let outcome = tokio::select! {
            () = self.control.stopped() => return ModelCall::Stopped,
            outcome = call => outcome,
        };
        match outcome {
            Ok(Ok(response)) => {
                acc.add(&response, t.elapsed());
                ModelCall::Reply(response)
            }
            Ok(Err(error)) => {
                acc.model_time += t.elapsed();
                if let LlmError::InvalidOutput { usage, .. } = &error {
                    acc.usage += *usage;
                    acc.invocations += 1;
                }
                ModelCall::Failed(self.secrets.redact(&error.to_string()))
            }
            Err(_) => {
                acc.model_time += t.elapsed();
                ModelCall::Failed(format!(
                    "LLM call timed out after {}s. Keep your thinking and output short.",
                    self.config.llm_timeout.as_secs()
                ))
            }
        }
    }

    fn parse_output(&self, mut value: Value) -> Result<AgentOutput, String> {
        self.urls.restore(&mut value);
        serde_json::from_value::<AgentOutput>(value).map_err(|e| {
            format!("Invalid model output format. Please follow the correct schema.\nDetails: {e}")
        })
    }

    fn redact_result(&self, result: &mut ActionResult) {
        if self.secrets.is_empty() {
            return;
        }
        self.secrets.redact_opt(&mut result.error);
        self.secrets.redact_opt(&mut result.long_term_memory);
        self.secrets.redact_opt(&mut result.extracted_content);
        if let Some(meta) = &mut result.metadata {
            meta.values_mut()
                .for_each(|value| self.secrets.redact_value(value));
        }
    }

    fn redact_output(&self, output: &AgentOutput) -> AgentOutput {
        if self.secrets.is_empty() {
            return output.clone();
        }
        let Ok(mut value) = serde_json::to_value(output) else {
            return output.clone();
        };
        self.secrets.redact_value(&mut value);
        serde_json::from_value(value).unwrap_or_else(|_| output.clone())
    }

    /// One step. Records its history item unless stopped midway.
    async fn step(&mut self) -> StepEnd {
        let step = self.n_steps;
        let started = epoch_secs();
        let mut acc = StepAcc::default();

        // 1. Prepare context. When the model gets no image this step, the screenshot for the
        // history record (it waits for a compositor frame) is started once the DOM capture is
        // done — not competing with it for Chrome — and collected after the model call,
        // before any action runs: off the step's critical path.
        let send_image = match self.config.use_vision {
            VisionMode::Always => true,
            VisionMode::Never => false,
            VisionMode::Auto => self.screenshot_requested,
        };
        self.screenshot_requested = false;
        let t_capture = Instant::now();
        let capture_span = crate::telemetry::capture_span(send_image);
        let captured = tokio::time::timeout(
            ACTION_TIMEOUT,
            tracing::Instrument::instrument(self.browser.capture(send_image), capture_span.clone()),
        )
        .await;
        let pending_shot = (!send_image).then(|| {
            let browser = self.browser.clone();
            AbortOnDrop(tokio::spawn(async move { browser.screenshot().await }))
        });
        let state = match captured {
            Ok(Ok(state)) => state,
            Ok(Err(e)) if e.fatal => return StepEnd::Fatal(format!("browser failed: {e}")),
            Ok(Err(e)) => BrowserState {
                error: Some(format!("Could not capture the page: {e}")),
                ..BrowserState::default()
            },
            Err(_) => BrowserState {
                error: Some("Capturing the page timed out".to_owned()),
                ..BrowserState::default()
            },
        };
        let capture_ms = millis(t_capture.elapsed());
        crate::telemetry::capture_finished(
            &capture_span,
            t_capture.elapsed(),
            Some(state.element_count),
            state
                .error
                .as_deref()
                .map(|e| self.secrets.redact(e))
                .as_deref(),
        );
        self.sink
            .emit(AgentEvent::StepStarted {
                step,
                url: self.secrets.redact(&state.url),
            })
            .await;
        for file in &state.downloaded_files {
            if !self.available_file_paths.contains(file) {
                self.available_file_paths.push(file.clone());
            }
        }
        let screenshot_ref = match &state.screenshot {
            Some(shot) => self.sink.store_screenshot(step, shot).await,
            None => None,
        };
        let mut state_history = BrowserStateHistory {
            url: self.secrets.redact(&state.url),
            title: self.secrets.redact(&state.title),
            tabs: state
                .tabs
                .iter()
                .map(|t| TabInfo {
                    tab_id: t.tab_id.clone(),
                    url: self.secrets.redact(&t.url),
                    title: self.secrets.redact(&t.title),
                })
                .collect(),
            interacted_element: Vec::new(),
            screenshot_ref,
        };
        self.loop_detector.record_page(PageFingerprint::new(
            &state.url,
            state.element_count,
            &state.llm_text,
        ));

        if self.messages.compaction_due(
            step,
            self.config.compact_every_n_steps,
            self.config.compaction_trigger_chars,
        ) && let StepEnd::Stopped = self.compact(step, &mut acc).await
        {
            return StepEnd::Stopped;
        }

        let done_only_last = step >= self.config.max_steps;
        let done_only_failures = self.config.final_response_after_failure
            && self.consecutive_failures >= self.config.max_failures;
        let done_only = done_only_last || done_only_failures;
        let (specs, page_actions) = self.actions_for(&state.url, done_only);
        let spec_refs: Vec<&ActionSpec> = specs.iter().collect();
        let schema = agent_output_schema(
            &spec_refs,
            SchemaMode {
                thinking: self.config.use_thinking,
                flash: self.config.flash_mode,
                planning: self.config.enable_planning,
            },
        );
        let inputs = StateInputs {
            task: &self.task_text,
            file_system: self.workspace.describe(),
            todo: self.workspace.todo(),
            plan: self.render_plan(),
            secret_names: self.secrets.names_for_url(&state.url),
            available_file_paths: &self.available_file_paths,
            browser: &state,
            max_dom_chars: self.config.max_clickable_elements_length,
            page_actions,
            step,
            max_steps: self.config.max_steps,
            today: time::OffsetDateTime::now_utc().date().to_string(),
        };
        let raw_state = render_state_message(&self.messages, &inputs);
        let state_text = self.urls.shorten(&self.secrets.redact(&raw_state));
        let mut state_message = Message::user(state_text.clone());
        if send_image && let Some(shot) = state.screenshot.as_ref().filter(|s| s.data.len() > 100) {
            state_message.content.push(browserd_llm::ContentPart::Text(
                "Current screenshot:".into(),
            ));
            state_message = state_message.with_image(ImagePart {
                media_type: shot.mime().to_owned(),
                data: ImageData::Bytes(shot.data.clone()),
                detail: ImageDetail::Auto,
            });
        }
        let mut messages = vec![Message::system(self.system_prompt.clone()), state_message];
        for nudge in self.nudges(step, done_only_last, done_only_failures) {
            let text = self.urls.shorten(&self.secrets.redact(&nudge));
            messages.push(Message::user(text));
        }
        let mut request = ChatRequest::new(messages, OutputSchema::new("agent_output", schema));

        // 2. Ask the model (an empty action list is retried once).
        let mut output = None;
        let mut failure = None;
        for attempt in 0..2 {
            match self
                .call_model(&self.model.clone(), &request, &mut acc)
                .await
            {
                ModelCall::Stopped => return StepEnd::Stopped,
                ModelCall::Failed(e) => {
                    failure = Some(e);
                    break;
                }
                ModelCall::Reply(response) => match self.parse_output(response.value) {
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                    Ok(parsed) if parsed.action.is_empty() && attempt == 0 => {
                        request.messages.push(Message::user(
                            "You forgot to return an action. Return at least one action in the `action` list; \
call done if the task is finished.",
                        ));
                    }
                    Ok(mut parsed) => {
                        if parsed.action.is_empty() {
                            parsed.action.push(ActionCall::new(
                                "done",
                                json!({"text": "No next action returned by LLM!", "success": false}),
                            ));
                        }
                        output = Some(parsed);
                        break;
                    }
                },
            }
        }
        if let Some(pending) = pending_shot
            && let Ok(Ok(Ok(Some(shot)))) =
                tokio::time::timeout(ACTION_TIMEOUT, pending.join()).await
        {
            state_history.screenshot_ref = self.sink.store_screenshot(step, &shot).await;
        }
        let state_message_text = self.config.record_state_message.then_some(state_text);

        let Some(mut output) = output else {
            self.consecutive_failures += 1;
            let error = failure.unwrap_or_else(|| "the model returned nothing".to_owned());
            self.record(
                step,
                None,
                vec![ActionResult::error(error)],
                state_history,
                started,
                acc,
                (capture_ms, 0),
                state_message_text,
            )
            .await;
            return StepEnd::Continue;
        };
        output.action.truncate(self.config.max_actions_per_step);
        let shown_output = self.redact_output(&output);
        self.sink
            .emit(AgentEvent::ModelOutput {
                step,
                output: shown_output.clone(),
                usage: acc.usage,
            })
            .await;
        if self.control.is_stopped() {
            return StepEnd::Stopped;
        }

        // 3. Run the actions.
        let t_actions = Instant::now();
        let (results, interacted, fatal) = self
            .multi_act(step, &output.action, &specs, &state, &mut acc)
            .await;
        state_history.interacted_element = interacted;
        let actions_ms = millis(t_actions.elapsed());

        // 4. Post-process.
        if results.len() == 1 && results[0].error.is_some() {
            self.consecutive_failures += 1;
        } else {
            self.consecutive_failures = 0;
        }
        self.loop_detector.record_actions(&output.action);
        self.update_plan(&output);
        self.record(
            step,
            Some(shown_output),
            results,
            state_history,
            started,
            acc,
            (capture_ms, actions_ms),
            state_message_text,
        )
        .await;
        match fatal {
            Some(message) => StepEnd::Fatal(message),
            None => StepEnd::Continue,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn record(
        &mut self,
        step: u32,
        output: Option<AgentOutput>,
        results: Vec<ActionResult>,
        state: BrowserStateHistory,
        started: f64,
        acc: StepAcc,
        (capture_ms, actions_ms): (u64, u64),
        state_message: Option<String>,
    ) {
        self.record_item(
            step,
            output,
            results,
            state,
            started,
            acc,
            (capture_ms, actions_ms),
            state_message,
        )
        .await;
        self.n_steps += 1;
    }

    #[allow(clippy::too_many_arguments)]
    async fn record_item(
        &mut self,
        step: u32,
        output: Option<AgentOutput>,
        results: Vec<ActionResult>,
        state: BrowserStateHistory,
        started: f64,
        acc: StepAcc,
        (capture_ms, actions_ms): (u64, u64),
        state_message: Option<String>,
    ) {
        let item = HistoryItem::from_step(step, output.as_ref(), &results);
        self.messages.add_step(item, &results);
        let ended = epoch_secs();
        let usage = &mut self.history.usage;
        usage.total += acc.usage;
        usage.invocations += acc.invocations;
        if let Some(c) = acc.cost {
            usage.total_cost_usd = Some(usage.total_cost_usd.unwrap_or(0.0) + c);
        }
        let settle_ms = settle_ms(&results);
        let record = AgentHistory {
            model_output: output,
            result: results,
            state,
            metadata: StepMetadata {
                step_number: step,
                step_start_time: started,
                step_end_time: ended,
                capture_ms,
                model_ms: millis(acc.model_time),
                actions_ms,
                settle_ms,
                usage: acc.usage,
                invocations: acc.invocations,
                cost_usd: acc.cost,
            },
            state_message,
        };
        crate::telemetry::step_recorded(
            &record.state.url,
            record.result.len(),
            &acc.usage,
            acc.cost,
            acc.invocations,
            record.result.iter().find_map(|r| r.error.as_deref()),
        );
        self.last_step_end = Some(ended);
        self.history.history.push(record.clone());
        self.sink
            .emit(AgentEvent::StepFinished {
                record: Box::new(record),
            })
            .await;
    }

    /// Runs the step's actions with the sequence guards.
    async fn multi_act(
        &mut self,
        step: u32,
        actions: &[ActionCall],
        specs: &[ActionSpec],
        state: &BrowserState,
        acc: &mut StepAcc,
    ) -> (
        Vec<ActionResult>,
        Vec<Option<crate::views::InteractedElement>>,
        Option<String>,
    ) {
        let mut results = Vec::new();
        let mut interacted = Vec::new();
        let mut current_url = state.url.clone();
        for (i, action) in actions.iter().enumerate() {
            if action.name == "done" && i > 0 {
                break;
            }
            if i > 0 && self.control.is_stopped() {
                break;
            }
            let has_next = i + 1 < actions.len();
            let before = if has_next {
                self.browser.focused_tab().await.ok()
            } else {
                None
            };
            if let Some(b) = &before {
                current_url.clone_from(&b.url);
            }
            let mut element = match action.index() {
                Some(index) => self.browser.describe_element(index).await,
                None => None,
            };
            if let Some(el) = element.as_mut().filter(|_| !self.secrets.is_empty()) {
                let mut attributes = Value::Object(std::mem::take(&mut el.attributes));
                self.secrets.redact_value(&mut attributes);
                if let Value::Object(map) = attributes {
                    el.attributes = map;
                }
                self.secrets.redact_opt(&mut el.ax_name);
                self.secrets.redact_opt(&mut el.x_path);
            }
            interacted.push(element);
            let spec = specs.iter().find(|s| s.name == action.name);
            let action_span = crate::telemetry::action_span(&action.name, i);
            let t_action = Instant::now();
            let (mut result, fatal) = match spec {
                None => {
                    let available: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
                    (
                        ActionResult::error(format!(
                            "Action `{}` is not available now. Available actions: {}",
                            action.name,
                            available.join(", ")
                        )),
                        None,
                    )
                }
                Some(_) => {
                    let run = self.execute_action(action, &current_url, acc);
                    tracing::Instrument::instrument(run, action_span.clone()).await
                }
            };
            self.redact_result(&mut result);
            crate::telemetry::action_finished(
                &action_span,
                &action.name,
                spec.is_some(),
                &result,
                fatal.is_some(),
                t_action.elapsed(),
            );
            if result
                .metadata
                .as_ref()
                .and_then(|m| m.get("include_screenshot"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                self.screenshot_requested = true;
            }
            self.sink
                .emit(AgentEvent::ActionResult {
                    step,
                    index: i,
                    action: self.redact_call(action),
                    result: result.clone(),
                })
                .await;
            let stop_here = result.is_done
                || result.error.is_some()
                || spec.is_some_and(|s| s.terminates_sequence);
            results.push(result);
            if let Some(message) = fatal {
                return (results, interacted, Some(message));
            }
            if stop_here || !has_next {
                break;
            }
            if let Some(b) = before
                && let Ok(after) = self.browser.focused_tab().await
                && (after.url != b.url || after.tab_id != b.tab_id)
            {
                break;
            }
        }
        (results, interacted, None)
    }

    fn redact_call(&self, action: &ActionCall) -> ActionCall {
        let mut params = action.params.clone();
        self.secrets.redact_value(&mut params);
        ActionCall::new(action.name.clone(), params)
    }

    async fn execute_action(
        &mut self,
        action: &ActionCall,
        url: &str,
        acc: &mut StepAcc,
    ) -> (ActionResult, Option<String>) {
        let mut params = match &action.params {
            Value::Null => json!({}),
            Value::Object(_) => action.params.clone(),
            _ => {
                return (
                    ActionResult::error(format!(
                        "The parameters of `{}` must be a JSON object",
                        action.name
                    )),
                    None,
                );
            }
        };
        if action.name == "done" {
            return (self.done(&params), None);
        }
        if let Err(e) = self.secrets.fill_placeholders(&mut params, url) {
            return (ActionResult::error(e.to_string()), None);
        }
        if let Some(result) =
            self.workspace
                .execute(&action.name, &params, &self.available_file_paths)
        {
            return (result, None);
        }
        if action.name == "extract" {
            return (self.extract(&params, acc).await, None);
        }
        match tokio::time::timeout(ACTION_TIMEOUT, self.browser.execute(&action.name, &params))
            .await
        {
            Ok(Ok(result)) => (result, None),
            Ok(Err(BrowserFailure { message, fatal })) => {
                let error = format!("Error executing action {}: {message}", action.name);
                let fatal = fatal.then(|| format!("browser failed: {message}"));
                (ActionResult::error(error), fatal)
            }
            Err(_) => (
                ActionResult::error(format!(
                    "Action {} timed out after {} seconds",
                    action.name,
                    ACTION_TIMEOUT.as_secs()
                )),
                None,
            ),
        }
    }

    fn done(&self, params: &Value) -> ActionResult {
        let success = params
            .get("success")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let (text, attachments) = if let Some(validator) = &self.output_validator {
            let failing_text = params
                .get("text")
                .and_then(Value::as_str)
                .filter(|_| !success && params.get("data").is_none());
            if let Some(text) = failing_text {
                return ActionResult {
                    is_done: true,
                    success: Some(false),
                    long_term_memory: Some(format!("Task completed: false - {text}")),
                    extracted_content: Some(text.to_owned()),
                    ..ActionResult::default()
                };
            }
            let Some(data) = params.get("data") else {
                return ActionResult::error(
                    "done needs `data` matching the required output schema; call done again with it",
                );
            };
            let problems: Vec<String> = validator
                .iter_errors(data)
                .take(10)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    let at = if path.is_empty() {
                        "/".to_owned()
                    } else {
                        path
                    };
                    format!("at {at}: {e}")
                })
                .collect();
            if !problems.is_empty() {
                return ActionResult::error(format!(
                    "The done data does not match the required output schema: {}. Fix the data and call done again.",
                    problems.join("; ")
                ));
            }
            let attachments = self
                .available_file_paths
                .iter()
                .filter(|p| !self.config.available_file_paths.contains(p))
                .cloned()
                .collect::<Vec<_>>();
            (data.to_string(), attachments)
        } else {
            let Some(text) = params.get("text").and_then(Value::as_str) else {
                return ActionResult::error("done needs a `text` string; call done again with it");
            };
            let names: Vec<String> = params
                .get("files_to_display")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let files = self.workspace.resolve_display_files(&names);
            let mut full = text.to_owned();
            if self.config.display_files_in_done_text && !files.is_empty() {
                full.push_str("\n\nAttachments:");
                for (path, content) in &files {
                    let name = std::path::Path::new(path)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    full.push_str(&format!("\n\n{name}:\n{content}"));
                }
            }
            (full, files.into_iter().map(|(p, _)| p).collect())
        };
        let head: String = text.chars().take(100).collect();
        ActionResult {
            is_done: true,
            success: Some(success),
            long_term_memory: Some(format!("Task completed: {success} - {head}")),
            extracted_content: Some(text),
            attachments: (!attachments.is_empty()).then_some(attachments),
            ..ActionResult::default()
        }
    }

    async fn extract(&mut self, params: &Value, acc: &mut StepAcc) -> ActionResult {
        let Some(query) = params
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
        else {
            return ActionResult::error("extract needs a non-empty `query`");
        };
        let options = MarkdownOptions {
            query: query.to_owned(),
            extract_links: params
                .get("extract_links")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            extract_images: params
                .get("extract_images")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            start_from_char: params
                .get("start_from_char")
                .and_then(Value::as_u64)
                .map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX)),
        };
        let page =
            match tokio::time::timeout(ACTION_TIMEOUT, self.browser.extract_markdown(&options))
                .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    return ActionResult::error(format!("Error executing action extract: {e}"));
                }
                Err(_) => return ActionResult::error("extract: reading the page timed out"),
            };
        let chunk = page.chunk.content;
        let figures = &page.chunk.stats;
        let (start, total) = (figures.start_from_char, figures.total_markdown_chars);
        let end = start + figures.chunk_chars;
        let stats = match figures.next_start_char {
            Some(next) => format!(
                "characters {start}..{end} of {total}; call extract again with start_from_char={next} for the rest"
            ),
            None => format!("characters {start}..{end} of {total} (complete)"),
        };
        let already: Vec<String> = params
            .get("already_collected")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut user = format!(
            "<query>\n{query}\n</query>\n<content_stats>\n{stats}\n</content_stats>\n<webpage_content>\n{chunk}\n</webpage_content>"
        );
        if !already.is_empty() {
            user.push_str(&format!(
                "\n<already_collected>\n{}\n</already_collected>",
                already.join("\n")
            ));
        }
        let user = self.secrets.redact(&user);
        let structured = params
            .get("output_schema")
            .filter(|s| s.is_object())
            .cloned();
        let schema = structured.clone().unwrap_or_else(|| {
            json!({
                "type": "object",
                "properties": {"result": {"type": "string"}},
                "required": ["result"],
                "additionalProperties": false
            })
        });
        let request = ChatRequest::new(
            vec![Message::system(prompts::EXTRACT), Message::user(user)],
            OutputSchema::new("extraction", schema),
        );
        let model = Arc::clone(&self.extraction_model);
        let response = match self.call_model(&model, &request, acc).await {
            ModelCall::Reply(r) => r,
            ModelCall::Failed(e) => return ActionResult::error(format!("extract failed: {e}")),
            ModelCall::Stopped => {
                return ActionResult::error("extract was interrupted: the agent is stopping");
            }
        };
        let answer = if structured.is_some() {
            response.value.to_string()
        } else {
            match response.value.get("result").and_then(Value::as_str) {
                Some(r) => r.to_owned(),
                None => response.value.to_string(),
            }
        };
        let content = format!(
            "<url>\n{}\n</url>\n<query>\n{query}\n</query>\n<result>\n{answer}\n</result>",
            page.url
        );
        if content.chars().count() >= EXTRACT_TO_FILE {
            let saved = self.workspace.write_unique("extracted_content", &content);
            let memory = match &saved {
                Some(name) => format!(
                    "Extracted content from {} for query \"{query}\"; saved in full to {name} (shown once in read_state).",
                    page.url
                ),
                None => format!(
                    "Extracted content from {} for query \"{query}\" (shown once in read_state).",
                    page.url
                ),
            };
            return ActionResult {
                extracted_content: Some(content),
                long_term_memory: Some(memory),
                include_extracted_content_only_once: true,
                ..ActionResult::default()
            };
        }
        ActionResult::memory(content)
    }

    async fn compact(&mut self, step: u32, acc: &mut StepAcc) -> StepEnd {
        let input = self
            .secrets
            .redact(&self.messages.compaction_input(&self.config.task));
        let system = prompts::COMPACTION.replace(
            "{max_chars}",
            &self.config.compaction_summary_max_chars.to_string(),
        );
        let request = ChatRequest::new(
            vec![Message::system(system), Message::user(input)],
            OutputSchema::new(
                "history_summary",
                json!({
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"],
                    "additionalProperties": false
                }),
            ),
        );
        let model = Arc::clone(&self.extraction_model);
        match self.call_model(&model, &request, acc).await {
            ModelCall::Stopped => StepEnd::Stopped,
            ModelCall::Failed(e) => {
                tracing::warn!(step, error = %e, "history compaction failed; keeping the full history");
                StepEnd::Continue
            }
            ModelCall::Reply(response) => {
                if let Some(summary) = response.value.get("summary").and_then(Value::as_str) {
                    let (capped, _) = crate::messages::truncate_chars(
                        summary,
                        self.config.compaction_summary_max_chars,
                    );
                    let summary = self.secrets.redact(capped);
                    self.messages
                        .apply_compaction(summary, step, self.config.compaction_keep_last);
                }
                StepEnd::Continue
            }
        }
    }
}

/// A spawned task aborted when its handle is dropped (a step that ends early leaves nothing
/// running behind it).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_defines_exactly_the_agent_owned_actions() {
        let mut defined: Vec<String> = [done_spec(None), extract_spec()]
            .into_iter()
            .chain(file_action_specs())
            .map(|spec| spec.name)
            .collect();
        defined.sort();
        let mut owned = AGENT_OWNED_ACTIONS.to_vec();
        owned.sort_unstable();
        assert_eq!(defined, owned);
    }
}
