//! One step of the loop: prepare the context (capture the page — with the history screenshot
//! taken off the critical path when the model gets no image —, record the page fingerprint,
//! compact the history when due, choose the action set, render the state message and nudges),
//! ask the model, run the actions, then post-process (failure count, loop detector, plan) and
//! record. Also step 0, the initial navigation.

use std::time::Instant;

use browserd_llm::{ChatRequest, ImageData, ImageDetail, ImagePart, Message, OutputSchema};
use browserd_views::{ActionResult, BrowserFailure, Screenshot, TabInfo};
use serde_json::json;

use super::{ACTION_TIMEOUT, Agent, StepAcc, StepEnd, epoch_secs, millis};
use crate::browser::{ActionSpec, BrowserState};
use crate::config::VisionMode;
use crate::events::AgentEvent;
use crate::loop_detector::PageFingerprint;
use crate::messages::{StateInputs, render_state_message};
use crate::schema::{SchemaMode, agent_output_schema};
use crate::urls::single_url_in_task;
use crate::views::{ActionCall, AgentOutput, BrowserStateHistory};

impl Agent {
    /// Step 0: open `start_url`, or the only URL of the task.
    pub(super) async fn initial_navigation(&mut self) -> Result<(), String> {
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

    /// One step. Records its history item unless stopped midway.
    pub(super) async fn step(&mut self) -> StepEnd {
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
        let (state, pending_shot, capture_ms) = match self.capture_state(send_image).await {
            Ok(captured) => captured,
            Err(end) => return end,
        };
        let mut state_history = self.record_page(step, &state).await;

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
        let (state_text, mut request) = self.model_request(
            step,
            &state,
            &specs,
            page_actions,
            send_image,
            (done_only_last, done_only_failures),
        );

        // 2. Ask the model (an empty action list is retried once).
        let Some(asked) = self.ask_for_output(&mut request, &mut acc).await else {
            return StepEnd::Stopped;
        };
        if let Some(pending) = pending_shot
            && let Ok(Ok(Ok(Some(shot)))) =
                tokio::time::timeout(ACTION_TIMEOUT, pending.join()).await
        {
            state_history.screenshot_ref = self.sink.store_screenshot(step, &shot).await;
        }
        let state_message_text = self.config.record_state_message.then_some(state_text);

        let mut output = match asked {
            Ok(output) => output,
            Err(error) => {
                self.consecutive_failures += 1;
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
            }
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

    /// Captures the page (with a screenshot when `send_image`; else the history's screenshot
    /// is started in the background), its time in ms. A capture that failed or timed out is a
    /// state with an error; a fatal browser failure ends the step.
    async fn capture_state(
        &self,
        send_image: bool,
    ) -> Result<(BrowserState, Option<AbortOnDrop<ShotResult>>, u64), StepEnd> {
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
            Ok(Err(e)) if e.fatal => return Err(StepEnd::Fatal(format!("browser failed: {e}"))),
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
        Ok((state, pending_shot, capture_ms))
    }

    /// Tells the sink the step started on the page, notes its downloads, stores its
    /// screenshot and records its fingerprint; the step's page state for the history.
    async fn record_page(&mut self, step: u32, state: &BrowserState) -> BrowserStateHistory {
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
        let state_history = BrowserStateHistory {
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
        state_history
    }

    /// The state message (its text) and the model request of the step: the system prompt,
    /// the state (with the screenshot when `send_image`) and the nudges, with the schema of
    /// the step's actions.
    fn model_request(
        &mut self,
        step: u32,
        state: &BrowserState,
        specs: &[ActionSpec],
        page_actions: Vec<String>,
        send_image: bool,
        (done_only_last, done_only_failures): (bool, bool),
    ) -> (String, ChatRequest) {
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
            browser: state,
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
        let request = ChatRequest::new(messages, OutputSchema::new("agent_output", schema));
        (state_text, request)
    }
}

/// What the history's background screenshot answers.
type ShotResult = Result<Option<Screenshot>, BrowserFailure>;

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
