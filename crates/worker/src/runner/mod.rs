//! One task from start to end, the same for `browserd run` and the service's workers: the
//! model from the registry, a browser context leased from the pool with the task's egress
//! settings, the workspace, the agent (fresh, or resumed from persisted history), budgets, and
//! the caller's event sink. The caller decides what the outcome means for it (exit code,
//! terminal status).

mod budget;
mod replay;
mod skill;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use browserd_agent::{
    Agent, AgentControl, AgentHistoryList, EventSink, SecretEntry, SensitiveData, TaskConfig,
    VisionMode,
};
use browserd_browser::egress::EgressSettings;
use browserd_browser::settle::DEFAULT_SETTLE_CAP;
use browserd_browser::{
    BrowserPool, BrowserSession, ContextOptions, FrameSender, LiveViewSettings, SettleSettings,
    Viewport,
};
use browserd_llm::{ChatModel, ModelRegistry};
use browserd_store::TransitionDetails;
use browserd_types::dto::ViewportSize;
use browserd_types::{TaskOptions, Transition};
use serde_json::json;

use crate::{SessionBrowser, SessionBrowserOptions, TaskWorkspace};
use budget::BudgetSink;
pub use replay::{ReplayOutcome, ReplayRequest};
pub use skill::{HEAL_MAX_MODEL_CALLS, SkillEnd, SkillRun};

/// How long releasing a browser context may take after the run.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long loading a profile into a new context may take.
const PROFILE_RESTORE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long going back to the last URL of a resumed run may take.
const RESUME_NAVIGATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything one task asks for: its text and [`TaskOptions`] (the one definition of a task's
/// options, as the api validated and the store keeps them), its secrets, and what only a run
/// has (the time left of its budget, an `/api/v2` session's browser state and agent options).
#[derive(Clone, Debug)]
pub struct TaskSpec {
    pub task: String,
    pub options: TaskOptions,
    /// Wall-clock budget of this run: `options.timeout_s`, or what is left of it for a
    /// resumed run.
    pub timeout: Option<Duration>,
    pub secrets: SensitiveData,
    /// browser-use's `use_vision="auto"` (an `/api/v2` option): screenshots only when the
    /// model asks; overrides `options.use_vision`.
    pub vision_auto: bool,
    /// browser-use's `flash_mode` (short prompt, memory + action only).
    pub flash_mode: bool,
    /// browser-use's `use_thinking`; `None` = the agent's default.
    pub use_thinking: Option<bool>,
    /// Appended to the system prompt (browser-use's `extend_system_message`).
    pub extend_system_message: Option<String>,
    /// Cookies and tabs to put into the fresh context first (an `/api/v2` session).
    pub browser_state: Option<crate::BrowserState>,
    /// Read the context's cookies and tabs at the end of the run
    /// ([`RunOutcome::browser_state`]).
    pub save_browser_state: bool,
}

impl TaskSpec {
    /// A task with every default.
    pub fn new(task: impl Into<String>) -> Self {
        Self::with_options(task, TaskOptions::default())
    }

    /// A task with these options (its budget: all of `options.timeout_s`).
    pub fn with_options(task: impl Into<String>, options: TaskOptions) -> Self {
        Self {
            task: task.into(),
            timeout: options.timeout(),
            options,
            secrets: SensitiveData::default(),
            vision_auto: false,
            flash_mode: false,
            use_thinking: None,
            extend_system_message: None,
            browser_state: None,
            save_browser_state: false,
        }
    }

    /// When the model gets screenshots.
    pub fn vision(&self) -> VisionMode {
        match (self.vision_auto, self.options.use_vision) {
            (true, _) => VisionMode::Auto,
            (false, true) => VisionMode::Always,
            (false, false) => VisionMode::Never,
        }
    }

    /// The browser's viewport; `None` = the pool's (the service's or `browserd run`'s
    /// default, browser-use's 1920×1080 unless configured).
    pub fn viewport(&self) -> Option<Viewport> {
        self.options.viewport.and_then(browser_viewport)
    }

    /// The agent's configuration for this task, with its workspace.
    pub fn agent_config(&self, workspace: &TaskWorkspace) -> TaskConfig {
        let options = &self.options;
        let mut config = TaskConfig::new(self.task.clone());
        config.start_url = options.start_url.clone();
        config.output_schema = options.output_schema.clone();
        config.use_vision = self.vision();
        config.max_steps = options.step_budget();
        config.max_actions_per_step = options.actions_per_step();
        config.max_failures = options.failure_budget();
        config.sensitive_data = self.secrets.clone();
        config.workspace_dir = Some(workspace.dir().to_path_buf());
        config.flash_mode = self.flash_mode;
        if let Some(thinking) = self.use_thinking {
            config.use_thinking = thinking;
        }
        config.extend_system_message = self.extend_system_message.clone();
        config
    }

    /// The browser context's egress settings.
    pub fn egress(&self, allow_loopback: bool) -> EgressSettings {
        EgressSettings {
            allowed_domains: self.options.allowed_domains.clone(),
            prohibited_domains: self.options.prohibited_domains.clone(),
            allow_loopback,
            ..EgressSettings::default()
        }
    }
}

/// A task's viewport as the browser takes it; `None` for a side that is not a positive
/// 32-bit number (the api refuses those before they are stored).
pub fn browser_viewport(size: ViewportSize) -> Option<Viewport> {
    let side = |v: i64| u32::try_from(v).ok().filter(|v| *v > 0);
    Some(Viewport::new(side(size.width)?, side(size.height)?))
}

/// Parses `WIDTHxHEIGHT` (e.g. `1920x1080`) within the api's ranges (`dto::limits`): the
/// `--viewport` flags of `browserd run` and the worker role.
pub fn parse_viewport(text: &str) -> Result<Viewport, String> {
    let size: ViewportSize = text.parse()?;
    browser_viewport(size).ok_or_else(|| format!("viewport `{text}` is out of range"))
}

/// Operator settings of a runner that no task can change.
#[derive(Clone, Debug, Default)]
pub struct RunnerSettings {
    /// Tasks may browse 127.0.0.0/8, ::1 and `localhost` (local sites, tests).
    pub allow_loopback: bool,
    /// Settle cap of tasks that set none; `None` = browser-use's 2 s
    /// ([`browserd_browser::settle::DEFAULT_SETTLE_CAP`]).
    pub settle_timeout: Option<Duration>,
    /// The most a task's downloads may take on disk, per file and all together (a download
    /// past either is cancelled, its partial file removed, and the model told).
    pub download_caps: browserd_browser::DownloadCaps,
}

/// A run that did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The task's model is not configured (or its key is missing).
    #[error("model: {0}")]
    Model(String),
    /// The task is not runnable as configured (e.g. an invalid output schema).
    #[error("invalid task: {0}")]
    InvalidTask(String),
    /// No browser context could be leased.
    #[error("browser: {0}")]
    Browser(String),
    /// The workspace directory could not be created.
    #[error("workspace: {0}")]
    Workspace(String),
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEnd {
    /// The agent called `done`.
    Done { success: Option<bool> },
    /// A budget ran out (max tokens, max cost, timeout); the reason names it.
    Budget(String),
    /// Stopped from outside (Ctrl-C, the API, a lost lease).
    Stopped,
    /// Ended without `done`: max steps, max failures.
    NotDone(String),
    /// The Chrome hosting the run died (crash, kill, hang): the task can go on from its last
    /// persisted step in a new browser, as when its worker is lost. The reason says what the
    /// agent saw.
    BrowserLost(String),
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub history: AgentHistoryList,
    pub end: RunEnd,
    /// The context's cookies and tabs at the end, when the spec asked for them.
    pub browser_state: Option<crate::BrowserState>,
    /// What the run did for its skill (a generation's script, an execution's result).
    pub skill: Option<SkillEnd>,
}

impl RunOutcome {
    /// The final text (or JSON) of `done`.
    pub fn final_result(&self) -> Option<&str> {
        self.history.final_result()
    }

    /// Why the run failed, if it did not end with `done`.
    pub fn error(&self) -> Option<String> {
        match &self.end {
            RunEnd::Done { .. } => None,
            RunEnd::Budget(reason) | RunEnd::NotDone(reason) | RunEnd::BrowserLost(reason) => {
                Some(reason.clone())
            }
            RunEnd::Stopped => Some("stopped".to_owned()),
        }
    }

    /// The terminal transition this end asks of the status machine, with the task's outcome:
    /// `finish` after `done`, `fail` with the reason, `stop` for a run stopped from outside
    /// (whose status usually says so already).
    pub fn end_transition(&self) -> (Transition, TransitionDetails) {
        let output = self.final_result().map(str::to_owned);
        match &self.end {
            RunEnd::Done { success } => (
                Transition::Finish,
                TransitionDetails {
                    output,
                    is_success: *success,
                    error: None,
                },
            ),
            RunEnd::Budget(reason) | RunEnd::NotDone(reason) | RunEnd::BrowserLost(reason) => (
                Transition::Fail,
                TransitionDetails {
                    output,
                    is_success: None,
                    error: Some(reason.clone()),
                },
            ),
            RunEnd::Stopped => (
                Transition::Stop,
                TransitionDetails {
                    output,
                    ..TransitionDetails::default()
                },
            ),
        }
    }
}

/// The details of a `fail` transition with `error`.
pub fn failed(error: impl Into<String>) -> TransitionDetails {
    TransitionDetails {
        error: Some(error.into()),
        ..TransitionDetails::default()
    }
}

/// One run's inputs besides the spec.
pub struct RunRequest {
    pub spec: TaskSpec,
    /// The task's directory; a temporary one when `None`.
    pub workspace_dir: Option<PathBuf>,
    pub sink: Arc<dyn EventSink>,
    pub control: AgentControl,
    /// Steps already recorded by an earlier attempt (resume).
    pub prior: Option<AgentHistoryList>,
    /// Where the earlier attempt was: opened before the resumed agent's first step.
    pub resume_url: Option<String>,
    /// Stream the focused tab while someone watches (the service's live view).
    pub live_view: Option<LiveViewLink>,
    /// Inputs of a person driving the browser while the agent is paused (take-over).
    pub take_over: Option<crate::takeover::TakeOverLink>,
    /// The browser profile the run starts from and saves back into at every step boundary.
    pub profile: Option<crate::ProfileLink>,
    /// Offer `ask_human`, answered through this channel (`None`: the action is off).
    pub human: Option<browserd_agent::HumanSettings>,
    /// The skill this run generates (its script is made before the browser is released).
    pub skill: Option<SkillRun>,
}

/// Connects a run's browser to the live view: the screencast runs while `watched` is true,
/// and each frame replaces the previous one in `frames`.
pub struct LiveViewLink {
    pub settings: LiveViewSettings,
    pub watched: tokio::sync::watch::Receiver<bool>,
    pub frames: FrameSender,
}

/// Runs tasks on a browser pool with models from a registry.
pub struct TaskRunner {
    pool: Arc<BrowserPool>,
    models: Arc<ModelRegistry>,
    settings: RunnerSettings,
}

impl TaskRunner {
    pub fn new(
        pool: Arc<BrowserPool>,
        models: Arc<ModelRegistry>,
        settings: RunnerSettings,
    ) -> Self {
        Self {
            pool,
            models,
            settings,
        }
    }

    /// The pool the runner leases from.
    pub fn pool(&self) -> &Arc<BrowserPool> {
        &self.pool
    }

    /// Builds the task's model (a fresh stack per task: the fallback switch is per run).
    /// Fails at once for a model that is not configured.
    pub fn model(&self, name: Option<&str>) -> Result<Arc<dyn ChatModel>, RunError> {
        self.models
            .build_or_default(name)
            .map_err(|err| RunError::Model(err.to_string()))
    }

    /// Runs the task to its end. Errors only when it could not start; everything after that
    /// is in the outcome.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, RunError> {
        let RunRequest {
            spec,
            workspace_dir,
            sink,
            control,
            prior,
            resume_url,
            live_view,
            take_over,
            profile,
            human,
            skill,
        } = request;
        let model = self.model(spec.options.model.as_deref())?;
        let workspace = TaskWorkspace::open(workspace_dir.as_deref())
            .map_err(|err| RunError::Workspace(err.to_string()))?;
        let config = spec.agent_config(&workspace);
        config.validate().map_err(RunError::InvalidTask)?;
        if let Some(timeout) = spec.timeout
            && timeout.is_zero()
        {
            return Err(RunError::InvalidTask(
                "the task's timeout_s has already elapsed".to_owned(),
            ));
        }

        let browser = self.lease_browser(&spec, &workspace).await?;
        // The profile first (before any navigation: its localStorage script must be there
        // when the first document loads), then a session's own cookies and tabs.
        let keeper = match &profile {
            Some(link) => {
                let restored = tokio::time::timeout(
                    PROFILE_RESTORE_TIMEOUT,
                    browser.session().restore_storage_state(&link.state),
                )
                .await;
                match restored {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => tracing::warn!(%err, "could not load the task's profile"),
                    Err(_) => tracing::warn!("loading the task's profile timed out"),
                }
                Some(Arc::new(crate::profile::ProfileKeeper::new(link)))
            }
            None => None,
        };
        if let Some(state) = &spec.browser_state {
            crate::browser_state::restore(browser.session(), state, resume_url.is_none()).await;
        }
        return_to_last_page(&browser, resume_url).await;

        let sink: Arc<dyn EventSink> = match &keeper {
            Some(keeper) => Arc::new(crate::profile::ProfileSink {
                inner: sink,
                keeper: keeper.clone(),
                browser: browser.clone(),
            }),
            None => sink,
        };
        let budget = Arc::new(BudgetSink::new(
            sink,
            control.clone(),
            &spec,
            prior.as_ref(),
        ));
        let deadline = spec.timeout.map(|timeout| {
            let control = control.clone();
            let budget = budget.clone();
            AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                budget.exceed(format!(
                    "timeout_s: the task ran out of its wall-clock budget ({} s)",
                    timeout.as_secs()
                ));
                control.stop();
            }))
        });

        let outcome = match Agent::new(config, browser.clone(), model, budget.clone()) {
            Ok(agent) => {
                let mut agent = agent.with_control(control.clone());
                if let Some(human) = human {
                    agent = agent.with_human(human);
                }
                if let Some(prior) = prior {
                    agent = agent.resume_from(prior);
                }
                let history = run_agent(&mut agent, browser.session(), live_view, take_over).await;
                Ok(history)
            }
            Err(err) => Err(RunError::InvalidTask(err.to_string())),
        };
        drop(deadline);
        let browser_lost = browser.session().browser_lost();
        if let Some(keeper) = &keeper
            && !browser_lost
        {
            keeper.checkpoint(browser.session()).await;
        }
        let browser_state = if spec.save_browser_state && !browser_lost {
            crate::browser_state::save(browser.session()).await
        } else {
            None
        };
        let skill = match (&skill, &outcome) {
            (Some(skill), Ok(history)) if !browser_lost => {
                skill.after_agent(&browser, history).await
            }
            _ => None,
        };
        release_browser(browser).await;
        let history = outcome?;
        let end = run_end(&history, &budget, &control, browser_lost);
        Ok(RunOutcome {
            history,
            end,
            browser_state,
            skill,
        })
    }

    /// A browser context for `spec` (its egress rules, viewport, settle cap, secrets), wrapped
    /// for the agent.
    async fn lease_browser(
        &self,
        spec: &TaskSpec,
        workspace: &TaskWorkspace,
    ) -> Result<Arc<SessionBrowser>, RunError> {
        let session = self
            .pool
            .lease_with(ContextOptions {
                egress: Some(spec.egress(self.settings.allow_loopback)),
                workspace_dir: Some(workspace.dir().to_path_buf()),
                viewport: spec.viewport(),
                settle: SettleSettings {
                    cap: spec
                        .options
                        .settle_timeout()
                        .or(self.settings.settle_timeout)
                        .unwrap_or(DEFAULT_SETTLE_CAP),
                    ..SettleSettings::default()
                },
                proxy: spec.options.proxy.clone(),
                download_caps: self.settings.download_caps,
            })
            .await
            .map_err(|err| RunError::Browser(err.to_string()))?;
        let browser = Arc::new(SessionBrowser::new(
            session,
            SessionBrowserOptions {
                sensitive_values: secret_values(&spec.secrets),
                capture: browserd_browser::CaptureOptions {
                    highlight_elements: spec.options.highlight_elements,
                    ..browserd_browser::CaptureOptions::default()
                },
                ..SessionBrowserOptions::default()
            },
        ));
        Ok(browser)
    }
}

/// Runs `agent` to its end, with the live view and the take-over inputs (when the task has
/// them) beside it.
async fn run_agent(
    agent: &mut Agent,
    session: &BrowserSession,
    live_view: Option<LiveViewLink>,
    take_over: Option<crate::takeover::TakeOverLink>,
) -> AgentHistoryList {
    match (live_view, take_over) {
        (None, None) => agent.run().await,
        (live_view, take_over) => {
            let live = async {
                match live_view {
                    Some(link) => {
                        session
                            .live_view(link.settings, link.watched, link.frames)
                            .await
                    }
                    None => std::future::pending().await,
                }
            };
            let take_over = async {
                match take_over {
                    Some(link) => {
                        crate::takeover::apply_person_inputs(session, link).await;
                        Ok(())
                    }
                    None => std::future::pending().await,
                }
            };
            let sides = async {
                let (live, take_over) = tokio::join!(live, take_over);
                live.and(take_over)
            };
            beside(agent.run(), sides).await
        }
    }
}

/// How an agent's run ended: done, over a budget, stopped, or not done (with the error it
/// ended on; its browser lost or not).
fn run_end(
    history: &AgentHistoryList,
    budget: &BudgetSink,
    control: &AgentControl,
    browser_lost: bool,
) -> RunEnd {
    if history.is_done() {
        RunEnd::Done {
            success: history.is_successful(),
        }
    } else if let Some(reason) = budget.exceeded() {
        RunEnd::Budget(reason)
    } else if control.is_stopped() {
        RunEnd::Stopped
    } else {
        let reason = budget
            .end_error()
            .unwrap_or_else(|| "the run ended without done".to_owned());
        if browser_lost {
            RunEnd::BrowserLost(reason)
        } else {
            RunEnd::NotDone(reason)
        }
    }
}

/// Goes back to where an earlier attempt was (`resume_url`, when it is a web page), best
/// effort: a failure or a timeout is only logged.
async fn return_to_last_page(browser: &SessionBrowser, resume_url: Option<String>) {
    if let Some(url) = resume_url.filter(|u| u.starts_with("http")) {
        let params = json!({"url": url, "new_tab": false});
        let navigate = browserd_agent::AgentBrowser::execute(browser, "navigate", &params);
        match tokio::time::timeout(RESUME_NAVIGATION_TIMEOUT, navigate).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(%err, "could not go back to the last page"),
            Err(_) => tracing::warn!("going back to the last page timed out"),
        }
    }
}

/// Runs `main` to its end with `side` running beside it; `side` ending early (or failing) is
/// only logged, and it is dropped when `main` ends.
async fn beside<T>(
    main: impl std::future::Future<Output = T>,
    side: impl std::future::Future<Output = browserd_browser::Result<()>>,
) -> T {
    tokio::pin!(main);
    tokio::pin!(side);
    let mut side_running = true;
    loop {
        tokio::select! {
            out = &mut main => return out,
            ended = &mut side, if side_running => {
                side_running = false;
                if let Err(err) = ended {
                    tracing::warn!(%err, "the live view stopped");
                }
            }
        }
    }
}

/// Gives the context back to the pool once nothing else holds the adapter.
async fn release_browser(browser: Arc<SessionBrowser>) {
    // A step interrupted by stop may leave an aborted screenshot task holding a clone for
    // a moment: let the runtime drop it, then release the context.
    let mut browser = browser;
    for _ in 0..100 {
        match Arc::try_unwrap(browser) {
            Ok(owned) => {
                let release = owned.into_session().release();
                let _ = tokio::time::timeout(RELEASE_TIMEOUT, release).await;
                break;
            }
            Err(shared) => {
                browser = shared;
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Every secret value with its name, for redaction in what the browser reports.
pub fn secret_values(secrets: &SensitiveData) -> Vec<(String, String)> {
    let mut values = Vec::new();
    for (key, entry) in &secrets.0 {
        match entry {
            SecretEntry::Value(value) => values.push((key.clone(), value.clone())),
            SecretEntry::Scoped(map) => {
                values.extend(map.iter().map(|(n, v)| (n.clone(), v.clone())));
            }
        }
    }
    values
}

/// A spawned task aborted when dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
