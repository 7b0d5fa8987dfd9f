//! Replaying a recorded run without a model, as browser-use's `rerun_history` does: the
//! actions of each recorded step run again in order, and an action that addressed an element
//! by index is pointed at the element that is *the same one* in the page as it is now — its
//! index changes with every load (indices are backend node ids) and when the page changes.
//!
//! An element is found again by the identity the history recorded ([`InteractedElement`]):
//! first the element now at the recorded index if its identity hash is unchanged, then the one
//! element with that hash, then the one element at the recorded XPath with the same tag and
//! accessible name (what now sits at the recorded place under another name is another
//! element), then the one element with the same tag and accessible name. Ambiguity is a miss,
//! never a guess. An element a skill chose by the row that showed a value (`near`) is found
//! only by that value: among the elements of its kind, the one whose region shows it.
//! With a healer (a skill execution), a step whose element is gone, or after which the page
//! is not the one the recording reached next, is handed to the healer (see `heal.rs`).
//! `done` is not re-run (its recorded text is the replay's result); `extract` needs a model and
//! the file actions the run's workspace, so they are reported as skipped.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

mod find;
mod heal;

pub use find::{find_element, find_near};

use crate::browser::AgentBrowser;
use crate::control::AgentControl;
use crate::events::{AgentEvent, EventSink, NoopSink};
use crate::secrets::Secrets;
use crate::views::{
    ActionCall, AgentHistory, AgentHistoryList, AgentOutput, BrowserStateHistory,
    InteractedElement, StepMetadata,
};
use browserd_views::{AGENT_OWNED_ACTIONS, ActionResult, TabInfo};

/// How a replay treats failures.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Go on after an action that failed for good (otherwise the replay stops there).
    pub skip_failures: bool,
    /// Further attempts of an action whose element is not found or that fails before reaching
    /// the page (the page may still be arriving); each attempt captures the page again. An
    /// action that reached the page and failed is tried again only if running it twice
    /// cannot do a thing twice (`navigate`, reads; see `REPEATABLE_ACTIONS`).
    pub max_retries: u32,
    /// Pause before the first retry; doubled for each further one, each at most
    /// [`MAX_RETRY_WAIT`], and all of one action's together at most [`MAX_RETRY_WAITS`].
    pub retry_delay: Duration,
}

/// The longest one wait between two attempts of an action may be, however often the delay
/// doubled (the largest `retry_delay` a task may ask for).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// The longest all waits between the attempts of one action may be together: once spent, the
/// action fails even with retries left (10 retries doubling from 60 s would otherwise hold a
/// worker's slot for an hour per action).
pub const MAX_RETRY_WAITS: Duration = Duration::from_secs(120);

/// The wait before retry number `retry` (0: the first retry) of an action whose waits so far
/// took `waited`: `first` doubled `retry` times, at most [`MAX_RETRY_WAIT`], and no more than
/// is left of [`MAX_RETRY_WAITS`]. `None` once that is spent: no more retries.
pub fn retry_wait(first: Duration, retry: u32, waited: Duration) -> Option<Duration> {
    let doubled = 2u32
        .checked_pow(retry)
        .and_then(|factor| first.checked_mul(factor))
        .unwrap_or(MAX_RETRY_WAIT);
    let wait = doubled.min(MAX_RETRY_WAIT);
    let left = MAX_RETRY_WAITS.saturating_sub(waited);
    if wait.is_zero() {
        return Some(wait);
    }
    (!left.is_zero()).then(|| wait.min(left))
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            skip_failures: false,
            max_retries: 2,
            retry_delay: Duration::from_millis(500),
        }
    }
}

/// How the element of an action was found again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchedBy {
    /// The element at the recorded index has the recorded identity.
    Index,
    /// The only element with the recorded identity hash (its index changed).
    Hash,
    /// The only element at the recorded XPath with the recorded tag.
    XPath,
    /// The only element with the recorded tag and accessible name.
    AxName,
    /// The only element of the recorded kind (tag and accessible name) whose region shows the
    /// script's `near` value (a skill's row chosen by the value it showed).
    Near,
}

impl MatchedBy {
    /// True when the element had to be searched for (its index changed).
    pub fn refound(self) -> bool {
        self != MatchedBy::Index
    }
}

/// What happened to one recorded action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayOutcome {
    Ok,
    Failed,
    Skipped,
}

/// One recorded action, replayed.
#[derive(Debug, Clone, Serialize)]
pub struct ActionReplay {
    /// Step number in the recorded history.
    pub step: u32,
    /// Action name.
    pub action: String,
    /// The index the recorded action used, if it addressed an element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_index: Option<u64>,
    /// The index it used now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched_by: Option<MatchedBy>,
    /// Attempts made (1 when it worked the first time).
    pub attempts: u32,
    pub outcome: ReplayOutcome,
    /// The error, or why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The whole replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub actions: Vec<ActionReplay>,
    /// The recorded run's final result (the text of its `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_result: Option<String>,
    /// Every action that ran worked (skipped ones do not count against it) and the replay
    /// was not stopped.
    pub success: bool,
    /// Why it did not succeed: the first failed action (`replaying step N `click`: element
    /// not found on …`), or `stopped`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Steps the healer carried out in place of the recorded ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub healed: Vec<crate::skill::HealedStep>,
}

/// Where a replay's steps go and what controls it: the service's worker persists each
/// replayed step through `sink` like an agent step and observes stop / pause / resume through
/// `control`; [`replay`] (the CLI) reports nowhere.
pub struct ReplayRun<'a> {
    /// Receives `step_started`, `action_result`, `step_finished` (with the step's
    /// [`AgentHistory`] record), `paused` / `resumed` and `finished`, as the agent's events.
    pub sink: &'a dyn EventSink,
    /// Pause (between steps), resume, stop (between actions; it also cuts a retry's wait).
    pub control: &'a AgentControl,
    /// Take a screenshot at the start of each step for its record.
    pub screenshots: bool,
    /// Recorded steps (with actions) an earlier attempt already replayed and persisted.
    pub skip_steps: usize,
    /// Number of the first step this run records.
    pub first_step: u32,
    /// Asked for a step whose element or expected effect is gone (a skill execution); without
    /// one such a step fails the replay.
    pub healer: Option<&'a dyn crate::skill::StepHealer>,
}

/// Replays `history` in `browser`; `secrets` fill the `<secret>` placeholders the history
/// recorded instead of values. `on_action` sees each action's report as soon as it is known.
pub async fn replay(
    browser: &dyn AgentBrowser,
    history: &AgentHistoryList,
    secrets: &Secrets,
    options: &ReplayOptions,
    on_action: impl FnMut(&ActionReplay),
) -> ReplayReport {
    let control = AgentControl::new();
    let run = ReplayRun {
        sink: &NoopSink,
        control: &control,
        screenshots: false,
        skip_steps: 0,
        first_step: 0,
        healer: None,
    };
    replay_steps(browser, history, secrets, options, &run, on_action)
        .await
        .0
}

/// [`replay`] step by step: each recorded step with actions becomes a step of the replay —
/// its model output is the recorded one with the indices used now, its results are what the
/// actions did now (each with the action's report in `metadata.replay`), its page state and
/// screenshot are the page's now. Returns the report and the replay's own history.
pub async fn replay_steps(
    browser: &dyn AgentBrowser,
    history: &AgentHistoryList,
    secrets: &Secrets,
    options: &ReplayOptions,
    run: &ReplayRun<'_>,
    mut on_action: impl FnMut(&ActionReplay),
) -> (ReplayReport, AgentHistoryList) {
    let replayer = Replayer {
        browser,
        secrets,
        options,
        run,
    };
    let mut progress = Progress::default();
    let mut replayed = AgentHistoryList::default();
    let mut number = run.first_step;
    let steps: Vec<&AgentHistory> = history
        .history
        .iter()
        .filter(|item| item.model_output.is_some())
        .collect();
    for (position, item) in steps.iter().enumerate().skip(run.skip_steps) {
        let Some(recorded_output) = &item.model_output else {
            continue;
        };
        if !replayer.may_go_on().await {
            progress.stopped = true;
            break;
        }
        let record = replayer
            .replay_step(item, recorded_output, number, &mut progress, &mut on_action)
            .await;
        replayed.history.push(record.clone());
        run.sink
            .emit(AgentEvent::StepFinished {
                record: Box::new(record),
            })
            .await;
        number += 1;
        if progress.stopped {
            break;
        }
        let failure = progress.step_failure.take();
        if let Some(healer) = run.healer {
            let next = steps.get(position + 1).copied();
            match replayer
                .heal_if_needed(healer, item, next, failure, &mut number, &mut progress)
                .await
            {
                heal::Healing::Done(records) => {
                    replayed.history.extend(records);
                    continue;
                }
                heal::Healing::Failed(records) => {
                    replayed.history.extend(records);
                    break;
                }
                heal::Healing::NotNeeded(None) => continue,
                heal::Healing::NotNeeded(Some(failure)) => {
                    progress.failure.get_or_insert(failure.message);
                }
            }
        } else if let Some(failure) = failure {
            progress.failure.get_or_insert(failure.message);
        }
        if progress.failure.is_some() && !options.skip_failures {
            break;
        }
    }
    let report = replayer.finish(history, &replayed, progress).await;
    (report, replayed)
}

/// What a replay works with: the browser, the secrets, the options and the run's sink and
/// control.
struct Replayer<'a, 'r> {
    browser: &'a dyn AgentBrowser,
    secrets: &'a Secrets,
    options: &'a ReplayOptions,
    run: &'a ReplayRun<'r>,
}

/// How far a replay got: the actions' reports, the first failure, whether it was stopped.
#[derive(Default)]
struct Progress {
    actions: Vec<ActionReplay>,
    failure: Option<String>,
    stopped: bool,
    /// The first failed action of the step being replayed.
    step_failure: Option<StepFailure>,
    healed: Vec<crate::skill::HealedStep>,
}

impl Replayer<'_, '_> {
    /// Waits out a pause (between steps); false once the replay is stopped.
    async fn may_go_on(&self) -> bool {
        let run = self.run;
        if run.control.is_paused() {
            run.sink.emit(AgentEvent::Paused).await;
            if !run.control.wait_while_paused().await {
                return false;
            }
            run.sink.emit(AgentEvent::Resumed).await;
        }
        !run.control.is_stopped()
    }

    /// One recorded step replayed on the page as it is now: its record.
    async fn replay_step(
        &self,
        item: &AgentHistory,
        recorded_output: &AgentOutput,
        number: u32,
        progress: &mut Progress,
        on_action: &mut impl FnMut(&ActionReplay),
    ) -> AgentHistory {
        let (run, secrets) = (self.run, self.secrets);
        let started = epoch_secs();
        let t_capture = Instant::now();
        let page = self.browser.capture(run.screenshots).await.ok();
        let capture_ms = millis(t_capture.elapsed());
        let url = secrets.redact(page.as_ref().map_or("", |p| p.url.as_str()));
        run.sink
            .emit(AgentEvent::StepStarted {
                step: number,
                url: url.clone(),
            })
            .await;
        let screenshot_ref = match page.as_ref().and_then(|p| p.screenshot.as_ref()) {
            Some(shot) => run.sink.store_screenshot(number, shot).await,
            None => None,
        };
        let mut output = recorded_output.clone();
        let t_actions = Instant::now();
        let (results, mut interacted) = self
            .replay_actions(item, &mut output, number, progress, on_action)
            .await;
        interacted.resize(output.action.len(), None);
        let state = BrowserStateHistory {
            url,
            title: secrets.redact(page.as_ref().map_or("", |p| p.title.as_str())),
            tabs: page
                .as_ref()
                .map(|p| redacted_tabs(secrets, &p.tabs))
                .unwrap_or_default(),
            interacted_element: interacted,
            screenshot_ref,
        };
        let metadata = StepMetadata {
            step_number: number,
            step_start_time: started,
            step_end_time: epoch_secs(),
            capture_ms,
            actions_ms: millis(t_actions.elapsed()),
            settle_ms: results
                .iter()
                .filter_map(|r| r.metadata.as_ref()?.get("settle")?.get("ms")?.as_u64())
                .sum(),
            ..StepMetadata::default()
        };
        AgentHistory {
            model_output: Some(output),
            state,
            metadata,
            result: results,
            state_message: None,
        }
    }

    /// The recorded actions of `item`, in order, until the replay is stopped or an action
    /// fails for good: each one's result now and the element it used now. `output`'s actions
    /// get the indices used now.
    async fn replay_actions(
        &self,
        item: &AgentHistory,
        output: &mut AgentOutput,
        number: u32,
        progress: &mut Progress,
        on_action: &mut impl FnMut(&ActionReplay),
    ) -> (Vec<ActionResult>, Vec<Option<InteractedElement>>) {
        let (run, secrets, options) = (self.run, self.secrets, self.options);
        let mut results = Vec::new();
        let mut interacted = Vec::new();
        let recorded_step = item.metadata.step_number;
        for (position, call) in output.action.iter_mut().enumerate() {
            if run.control.is_stopped() {
                progress.stopped = true;
                break;
            }
            let recorded = item
                .state
                .interacted_element
                .get(position)
                .cloned()
                .flatten();
            let (report, mut result, element, miss) = replay_action(
                self.browser,
                recorded_step,
                call,
                item.result.get(position),
                recorded.as_ref(),
                secrets,
                options,
                run.control,
            )
            .await;
            on_action(&report);
            if let Some(index) = report.index {
                call.params["index"] = Value::from(index);
            }
            redact_result(secrets, &mut result);
            if let Ok(entry) = serde_json::to_value(&report) {
                result
                    .metadata
                    .get_or_insert_with(Default::default)
                    .insert("replay".to_owned(), entry);
            }
            run.sink
                .emit(AgentEvent::ActionResult {
                    step: number,
                    index: position,
                    action: call.clone(),
                    result: result.clone(),
                })
                .await;
            results.push(result);
            interacted.push(element);
            let failed = report.outcome == ReplayOutcome::Failed;
            if failed && progress.step_failure.is_none() {
                let miss = miss.unwrap_or_default();
                progress.step_failure = Some(StepFailure {
                    message: format!(
                        "replaying step {recorded_step} `{}`: {}",
                        report.action,
                        report.detail.as_deref().unwrap_or("failed")
                    ),
                    reached_page: miss.reached_page,
                    not_found: miss.not_found,
                });
            }
            progress.actions.push(report);
            if failed && (!options.skip_failures || run.control.is_stopped()) {
                break;
            }
        }
        (results, interacted)
    }

    /// The report, after the `finished` event.
    async fn finish(
        &self,
        history: &AgentHistoryList,
        replayed: &AgentHistoryList,
        progress: Progress,
    ) -> ReplayReport {
        let success = !progress.stopped && progress.failure.is_none();
        let error = if progress.stopped {
            Some("stopped".to_owned())
        } else {
            progress.failure
        };
        let report = ReplayReport {
            actions: progress.actions,
            final_result: history.final_result().map(str::to_owned),
            success,
            error: error.clone(),
            healed: progress.healed,
        };
        self.run
            .sink
            .emit(AgentEvent::Finished {
                is_done: replayed.is_done(),
                success: Some(success),
                final_result: success.then(|| report.final_result.clone()).flatten(),
                error,
            })
            .await;
        report
    }
}

/// The tabs of a step's record, with the secrets' values redacted.
fn redacted_tabs(secrets: &Secrets, tabs: &[TabInfo]) -> Vec<TabInfo> {
    tabs.iter()
        .map(|t| TabInfo {
            tab_id: t.tab_id.clone(),
            url: secrets.redact(&t.url),
            title: secrets.redact(&t.title),
        })
        .collect()
}

fn redact_result(secrets: &Secrets, result: &mut ActionResult) {
    if secrets.is_empty() {
        return;
    }
    secrets.redact_opt(&mut result.error);
    secrets.redact_opt(&mut result.long_term_memory);
    secrets.redact_opt(&mut result.extracted_content);
    if let Some(meta) = &mut result.metadata {
        meta.values_mut()
            .for_each(|value| secrets.redact_value(value));
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

/// One recorded action: its report, its result now, and the element it used now.
#[allow(clippy::too_many_arguments)]
async fn replay_action(
    browser: &dyn AgentBrowser,
    step: u32,
    call: &ActionCall,
    recorded_result: Option<&ActionResult>,
    recorded: Option<&InteractedElement>,
    secrets: &Secrets,
    options: &ReplayOptions,
    control: &AgentControl,
) -> (
    ActionReplay,
    ActionResult,
    Option<InteractedElement>,
    Option<Miss>,
) {
    let name = call.name.as_str();
    let params = &call.params;
    let recorded_index = params.get("index").and_then(Value::as_u64);
    let mut report = ActionReplay {
        step,
        action: name.to_owned(),
        recorded_index,
        index: None,
        matched_by: None,
        attempts: 0,
        outcome: ReplayOutcome::Skipped,
        detail: None,
    };
    if name == "done" {
        report.detail = Some("the recorded result is the replay's result".into());
        // The recorded `done` result stands, so the replay's history ends as the recording's.
        let result = recorded_result
            .filter(|r| r.is_done)
            .cloned()
            .unwrap_or_else(|| ActionResult {
                is_done: true,
                success: params.get("success").and_then(Value::as_bool),
                extracted_content: params
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                ..ActionResult::default()
            });
        return (report, result, None, None);
    }
    if AGENT_OWNED_ACTIONS.contains(&name) {
        let detail =
            format!("`{name}` needs the agent's model, workspace or a person; not replayed");
        report.detail = Some(detail.clone());
        return (
            report,
            ActionResult::memory(format!("Skipped: {detail}")),
            None,
            None,
        );
    }
    let mut waited = Duration::ZERO;
    let mut last_not_found: Option<String>;
    loop {
        report.attempts += 1;
        match attempt(browser, name, params, recorded_index, recorded, secrets).await {
            Ok(done) => {
                report.index = done.index;
                report.matched_by = done.matched_by;
                report.outcome = ReplayOutcome::Ok;
                report.detail = None;
                return (report, done.result, done.element, None);
            }
            Err(failure) => {
                if failure.reached_page {
                    report.outcome = ReplayOutcome::Failed;
                    let detail = format!(
                        "{} (not tried again: the action reached the page, and a second one could do it twice)",
                        failure.message
                    );
                    report.detail = Some(detail.clone());
                    let miss = Miss {
                        reached_page: true,
                        not_found: None,
                    };
                    return (report, ActionResult::error(detail), None, Some(miss));
                }
                report.detail = Some(failure.message);
                last_not_found = failure.not_found;
                if report.attempts > options.max_retries || control.is_stopped() {
                    report.outcome = ReplayOutcome::Failed;
                    let result = ActionResult::error(report.detail.clone().unwrap_or_default());
                    let miss = Miss {
                        reached_page: false,
                        not_found: last_not_found,
                    };
                    return (report, result, None, Some(miss));
                }
            }
        }
        let Some(wait) = retry_wait(options.retry_delay, report.attempts - 1, waited) else {
            report.outcome = ReplayOutcome::Failed;
            let detail = format!(
                "{} (no more retries: the waits between attempts reached their cap of {} s)",
                report.detail.take().unwrap_or_default(),
                MAX_RETRY_WAITS.as_secs()
            );
            report.detail = Some(detail.clone());
            let miss = Miss {
                reached_page: false,
                not_found: last_not_found,
            };
            return (report, ActionResult::error(detail), None, Some(miss));
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = control.stopped() => {}
        }
        waited += wait;
    }
}

/// What one successful attempt did.
struct Attempted {
    index: Option<u64>,
    matched_by: Option<MatchedBy>,
    element: Option<InteractedElement>,
    result: ActionResult,
}

/// One try: capture, find the element, fill secrets, run the action.
async fn attempt(
    browser: &dyn AgentBrowser,
    name: &str,
    params: &Value,
    recorded_index: Option<u64>,
    recorded: Option<&InteractedElement>,
    secrets: &Secrets,
) -> Result<Attempted, Failure> {
    let mut params = params.clone();
    let state = browser
        .capture(false)
        .await
        .map_err(|e| Failure::before_page(format!("capturing the page: {}", e.message)))?;
    let mut found = Attempted {
        index: None,
        matched_by: None,
        element: None,
        result: ActionResult::default(),
    };
    if recorded_index.is_some() {
        let Some(recorded) = recorded else {
            return Err(Failure::before_page(
                "the history does not describe the element this action used",
            ));
        };
        let current = browser.elements().await;
        let not_found = |why: Option<String>| {
            let described = find::describe(recorded);
            let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
            Failure {
                message: format!("element not found on {}: {described}{why}", state.url),
                reached_page: false,
                not_found: Some(described),
            }
        };
        let (index, matched_by, region) = if recorded.near.is_some() {
            let (index, region) = find_near(browser, recorded, &current)
                .await
                .map_err(|why| not_found(Some(why)))?;
            (index, MatchedBy::Near, Some(region))
        } else {
            let (index, matched_by) =
                find_element(recorded, &current).ok_or_else(|| not_found(None))?;
            (index, matched_by, None)
        };
        params["index"] = Value::from(index);
        found.index = Some(index);
        found.matched_by = Some(matched_by);
        found.element = current.into_iter().find(|e| e.index == index).map(|mut e| {
            if region.is_some() {
                e.region = region;
                e.near.clone_from(&recorded.near);
            }
            e
        });
    }
    secrets
        .fill_for_action(name, &mut params, &[&state.url])
        .map_err(|e| Failure::before_page(e.to_string()))?;
    let result = browser
        .execute(name, &params)
        .await
        .map_err(|e| Failure::reached(e.message))?;
    match &result.error {
        Some(error) if may_repeat(name, &result) => Err(Failure::before_page(error.clone())),
        Some(error) => Err(Failure::reached(error.clone())),
        None => {
            found.result = result;
            Ok(found)
        }
    }
}

/// Actions that may run again after reaching the page: they read it or go to a place, so a
/// second run does what the first did (browser-use's replay retries them too).
const REPEATABLE_ACTIONS: [&str; 9] = [
    "navigate",
    "search",
    "switch",
    "wait",
    "find_text",
    "search_page",
    "find_elements",
    "dropdown_options",
    "screenshot",
];

/// Whether a failed action may be tried again: it provably did not reach the page (the
/// browser says so), or running it twice cannot do a thing twice. A click, a typing, a
/// selection, a key press, a scroll or a script that reached the page is never repeated on
/// the belief that it failed: its effect may still be coming.
fn may_repeat(name: &str, result: &ActionResult) -> bool {
    REPEATABLE_ACTIONS.contains(&name) || result.sent_to_page() == Some(false)
}

/// Why one attempt failed, and whether trying again is safe.
#[derive(Debug)]
struct Failure {
    message: String,
    /// The action may have reached the page: trying again could do it twice.
    reached_page: bool,
    /// The element was not found (described).
    not_found: Option<String>,
}

impl Failure {
    fn before_page(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            reached_page: false,
            not_found: None,
        }
    }

    fn reached(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            reached_page: true,
            not_found: None,
        }
    }
}

/// How an action that failed for good failed.
#[derive(Debug, Default)]
struct Miss {
    reached_page: bool,
    not_found: Option<String>,
}

/// The first failed action of a step.
#[derive(Debug)]
struct StepFailure {
    /// `replaying step N `click`: …`
    message: String,
    /// It may have reached the page: it is never healed (never twice).
    reached_page: bool,
    /// Its element was not found (described).
    not_found: Option<String>,
}

#[cfg(test)]
mod tests;
