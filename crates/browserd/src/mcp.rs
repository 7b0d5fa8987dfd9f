//! `browserd mcp`: the MCP task tools over stdio (stdout carries the protocol; logs go to
//! stderr). By default tasks run in this process, as with `browserd run` — one Chrome, the
//! models of the config and `BROWSERD_LLM_*` — and are kept in memory for `get_task`,
//! `list_tasks`, the controls and screenshots until the client disconnects. With
//! `--server URL --key-env VAR` the tools call that server's REST API instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use async_trait::async_trait;
use browserd_agent::{
    AgentControl, AgentEvent, AgentHistory, EventSink, Screenshot as AgentScreenshot, UsageSummary,
};
use browserd_api::ModelCatalog;
use browserd_mcp::rmcp::ServiceExt;
use browserd_mcp::{
    Backend, BrowserdMcp, CallContext, RemoteBackend, Screenshot, TaskUpdate, ToolError,
    latest_screenshot_step, screenshot_not_found,
};
use browserd_store::NewTask;
use browserd_types::dto::{CreateTaskRequest, StepView, TaskView, screenshot_path};
use browserd_types::{TaskId, TaskStatus, Transition};
use browserd_worker::{RunEnd, RunRequest, TaskRunner, TaskSpec};
use clap::Args;
use secrecy::SecretString;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::{broadcast, mpsc};
use tracing::Instrument;

use crate::config;
use crate::runtime::{PoolShape, Runtime};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Proxy the tools to this browserd server's REST API (e.g. `http://127.0.0.1:8080`)
    /// instead of running tasks in this process.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,

    /// With --server: the environment variable holding the API key (never the key itself).
    #[arg(
        long,
        value_name = "VAR",
        default_value = "BROWSERD_API_KEY",
        requires = "server"
    )]
    pub key_env: String,

    /// Tasks that may run at once (in-process mode): browser contexts of the one Chrome.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub max_running_tasks: u32,

    /// The browser of the in-process mode.
    #[command(flatten)]
    pub browser: crate::runtime::BrowserArgs,
}

/// Serves the tools on stdin/stdout until the client closes them.
pub async fn serve(
    config_file: Option<&std::path::Path>,
    proxies: &crate::egress::ProxiesArgs,
    args: &McpArgs,
) -> anyhow::Result<()> {
    match &args.server {
        Some(server) => {
            let key = std::env::var(&args.key_env).map_err(|_| {
                anyhow::anyhow!(
                    "--server needs an API key in the environment variable {} (--key-env)",
                    args.key_env
                )
            })?;
            anyhow::ensure!(
                !key.trim().is_empty(),
                "the environment variable {} is empty",
                args.key_env
            );
            let backend = RemoteBackend::new(server, SecretString::from(key.trim().to_owned()))
                .context("building the HTTP client")?;
            tracing::info!(%server, "serving MCP on stdio, proxying to the server");
            run_stdio(Arc::new(backend)).await
        }
        None => {
            let models = config::load_models(config_file)?;
            let catalog = config::model_catalog(&models)?;
            let Runtime { pool, runner } = Runtime::build(
                &args.browser,
                proxies,
                models,
                PoolShape::single(args.max_running_tasks as usize),
            )?;
            let backend = Arc::new(LocalBackend {
                runner,
                models: catalog,
                tasks: Mutex::new(Vec::new()),
            });
            tracing::info!("serving MCP on stdio, running tasks in this process");
            let result = run_stdio(backend.clone()).await;
            backend.stop_all();
            pool.shutdown().await;
            result
        }
    }
}

async fn run_stdio(backend: Arc<dyn Backend>) -> anyhow::Result<()> {
    // SIGINT/SIGTERM end the session like a disconnect, so Chrome is closed on the way out.
    let signal = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::cancel_on_signal(signal.clone()));
    let session = async {
        let service = BrowserdMcp::new(backend)
            .serve(browserd_mcp::rmcp::transport::stdio())
            .await
            .context("starting the MCP session on stdio")?;
        let reason = service.waiting().await.context("serving MCP on stdio")?;
        tracing::info!(?reason, "MCP client disconnected");
        anyhow::Ok(())
    };
    tokio::select! {
        result = session => result,
        () = signal.cancelled() => Ok(()),
    }
}

/// Tasks run by this process, kept in memory.
struct LocalBackend {
    runner: Arc<TaskRunner>,
    models: ModelCatalog,
    /// In creation order.
    tasks: Mutex<Vec<Arc<LocalTask>>>,
}

struct LocalTask {
    id: TaskId,
    control: AgentControl,
    state: Mutex<LocalState>,
    updates: broadcast::Sender<TaskUpdate>,
}

struct LocalState {
    view: TaskView,
    steps: Vec<StepView>,
    /// Next goals so far, for a watcher that comes late.
    goals: Vec<(i64, String)>,
    screenshots: HashMap<i32, (String, Vec<u8>)>,
    usage: UsageSummary,
}

impl LocalTask {
    fn lock(&self) -> std::sync::MutexGuard<'_, LocalState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_goal(&self, step: u32, goal: String) {
        let step = i64::from(step);
        self.lock().goals.push((step, goal.clone()));
        let _ = self.updates.send(TaskUpdate::NextGoal { step, goal });
    }

    fn step_finished(&self, record: &AgentHistory) {
        let number = i32::try_from(record.metadata.step_number).unwrap_or(i32::MAX);
        let mut state = self.lock();
        let usage = &mut state.usage;
        usage.total += record.metadata.usage;
        usage.invocations += record.metadata.invocations;
        if let Some(cost) = record.metadata.cost_usd {
            usage.total_cost_usd = Some(usage.total_cost_usd.unwrap_or(0.0) + cost);
        }
        state.view.usage = serde_json::to_value(&state.usage).ok();
        let has_screenshot = state.screenshots.contains_key(&number);
        state.steps.push(StepView {
            number,
            url: (!record.state.url.is_empty()).then(|| record.state.url.clone()),
            title: (!record.state.title.is_empty()).then(|| record.state.title.clone()),
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
            screenshot_url: has_screenshot.then(|| screenshot_path(self.id, number)),
            started_at: epoch_to_time(record.metadata.step_start_time),
            finished_at: epoch_to_time(record.metadata.step_end_time),
        });
    }

    /// Records how the run ended (a task stopped by the caller stays `stopped`).
    fn ended(
        &self,
        status: TaskStatus,
        output: Option<String>,
        success: Option<bool>,
        error: Option<String>,
    ) {
        let mut state = self.lock();
        let now = OffsetDateTime::now_utc();
        if !state.view.status.is_terminal() {
            state.view.status = status;
            state.view.output = output;
            state.view.is_success = success;
            state.view.error = error;
        }
        state.view.updated_at = now;
        state.view.finished_at = Some(now);
        drop(state);
        let _ = self.updates.send(TaskUpdate::Ended);
    }
}

/// Feeds a local task's state from its agent's events.
struct LocalSink {
    task: Arc<LocalTask>,
}

#[async_trait]
impl EventSink for LocalSink {
    async fn emit(&self, event: AgentEvent) {
        match event {
            AgentEvent::ModelOutput { step, output, .. } => {
                if let Some(goal) = output.next_goal {
                    self.task.next_goal(step, goal);
                }
            }
            AgentEvent::StepFinished { record } => self.task.step_finished(&record),
            _ => {}
        }
    }

    async fn store_screenshot(&self, step: u32, screenshot: &AgentScreenshot) -> Option<String> {
        let number = i32::try_from(step).unwrap_or(i32::MAX);
        self.task.lock().screenshots.insert(
            number,
            (screenshot.mime().to_owned(), screenshot.data.clone()),
        );
        Some(screenshot_path(self.task.id, number))
    }
}

fn epoch_to_time(secs: f64) -> OffsetDateTime {
    let nanos = (secs * 1e9) as i128;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or_else(|_| OffsetDateTime::now_utc())
}

/// The runner's spec of a validated task (as the worker builds it from a stored row).
fn task_spec(new: &NewTask) -> TaskSpec {
    TaskSpec::with_options(new.task.clone(), new.options.clone())
}

fn new_view(id: TaskId, new: &NewTask) -> TaskView {
    let now = OffsetDateTime::now_utc();
    TaskView {
        id,
        status: TaskStatus::Running,
        task: new.task.clone(),
        options: new.options.clone(),
        usage: None,
        queue_position: None,
        attempts: 1,
        output: None,
        is_success: None,
        error: None,
        last_event_seq: 0,
        created_at: now,
        updated_at: now,
        started_at: Some(now),
        finished_at: None,
    }
}

impl LocalBackend {
    fn task(&self, id: TaskId) -> Result<Arc<LocalTask>, ToolError> {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| t.id == id)
            .cloned()
            .ok_or_else(ToolError::task_not_found)
    }

    /// Stops every task still running (the client went away).
    fn stop_all(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            task.control.stop();
        }
    }
}

fn api_error(err: browserd_api::ApiError) -> ToolError {
    let (field, current_status) = match &err {
        browserd_api::ApiError::Validation { field, .. } => (field.clone(), None),
        browserd_api::ApiError::Conflict { current_status, .. } => (None, *current_status),
        _ => (None, None),
    };
    ToolError {
        code: err.code().to_owned(),
        message: err.to_string(),
        field,
        current_status,
    }
}

#[async_trait]
impl Backend for LocalBackend {
    async fn create_task(
        &self,
        _cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        let new = browserd_api::validate_create_task(request, &self.models).map_err(api_error)?;
        let spec = task_spec(&new);
        // A model that is configured but cannot be built (its key missing) fails now.
        self.runner
            .model(spec.options.model.as_deref())
            .map_err(|err| ToolError::validation("model", err.to_string()))?;
        let id = TaskId::new();
        let view = new_view(id, &new);
        let task = Arc::new(LocalTask {
            id,
            control: AgentControl::new(),
            state: Mutex::new(LocalState {
                view: view.clone(),
                steps: Vec::new(),
                goals: Vec::new(),
                screenshots: HashMap::new(),
                usage: UsageSummary::default(),
            }),
            updates: broadcast::channel(256).0,
        });
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.clone());
        let runner = self.runner.clone();
        tokio::spawn(
            async move {
                let outcome = runner
                    .run(RunRequest {
                        spec,
                        workspace_dir: None,
                        sink: Arc::new(LocalSink { task: task.clone() }),
                        control: task.control.clone(),
                        prior: None,
                        resume_url: None,
                        live_view: None,
                    })
                    .await;
                match outcome {
                    Ok(outcome) => {
                        let output = outcome.final_result().map(str::to_owned);
                        match outcome.end {
                            RunEnd::Done { success } => {
                                task.ended(TaskStatus::Finished, output, success, None);
                            }
                            RunEnd::Stopped => task.ended(TaskStatus::Stopped, output, None, None),
                            RunEnd::Budget(reason)
                            | RunEnd::NotDone(reason)
                            | RunEnd::BrowserLost(reason) => {
                                task.ended(TaskStatus::Failed, output, None, Some(reason));
                            }
                        }
                    }
                    Err(err) => task.ended(TaskStatus::Failed, None, None, Some(err.to_string())),
                }
                tracing::info!(task_id = %task.id, "task ended");
            }
            .instrument(tracing::info_span!("task", mode = "mcp", task_id = %id)),
        );
        Ok(view)
    }

    async fn get_task(&self, _cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError> {
        Ok(self.task(id)?.lock().view.clone())
    }

    async fn list_tasks(
        &self,
        _cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError> {
        let limit = browserd_api::list_limit(limit).map_err(api_error)?;
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(tasks
            .iter()
            .rev()
            .map(|t| t.lock().view.clone())
            .filter(|v| status.is_none_or(|s| v.status == s))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect())
    }

    async fn steps(&self, _cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        Ok(self.task(id)?.lock().steps.clone())
    }

    async fn control(
        &self,
        _cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError> {
        let task = self.task(id)?;
        let mut state = task.lock();
        let current = state.view.status;
        if !transition.is_allowed_from(current) {
            // The REST API's 409.
            return Err(ToolError {
                current_status: Some(current),
                ..ToolError::new(
                    "illegal_transition",
                    format!("cannot {} a task that is {current}", transition.name()),
                )
            });
        }
        match transition {
            Transition::Stop => task.control.stop(),
            Transition::Pause => task.control.pause(),
            Transition::Resume => task.control.resume(),
            _ => {}
        }
        state.view.status = transition.target(true);
        state.view.updated_at = OffsetDateTime::now_utc();
        tracing::info!(task_id = %id, transition = transition.name(), "task transition");
        Ok(state.view.clone())
    }

    async fn screenshot(
        &self,
        _cx: &CallContext,
        id: TaskId,
        step: Option<i32>,
    ) -> Result<Screenshot, ToolError> {
        let task = self.task(id)?;
        let state = task.lock();
        let number = match step {
            Some(number) => number,
            None => {
                latest_screenshot_step(&state.steps).ok_or_else(|| screenshot_not_found(None))?
            }
        };
        let (content_type, bytes) = state
            .screenshots
            .get(&number)
            .cloned()
            .ok_or_else(|| screenshot_not_found(Some(number)))?;
        Ok(Screenshot {
            step: number,
            content_type,
            bytes,
        })
    }

    async fn watch(
        &self,
        _cx: &CallContext,
        id: TaskId,
    ) -> Result<mpsc::Receiver<TaskUpdate>, ToolError> {
        let task = self.task(id)?;
        let (sender, receiver) = mpsc::channel(64);
        // Under the lock: the goals so far and a subscription to the next ones, without a gap.
        let (goals, ended, mut updates) = {
            let state = task.lock();
            (
                state.goals.clone(),
                state.view.status.is_terminal() && state.view.finished_at.is_some(),
                task.updates.subscribe(),
            )
        };
        tokio::spawn(async move {
            for (step, goal) in goals {
                if sender
                    .send(TaskUpdate::NextGoal { step, goal })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if ended {
                let _ = sender.send(TaskUpdate::Ended).await;
                return;
            }
            loop {
                let update = tokio::select! {
                    () = sender.closed() => return,
                    update = updates.recv() => update,
                };
                match update {
                    Ok(update) => {
                        let end = update == TaskUpdate::Ended;
                        if sender.send(update).await.is_err() || end {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        let _ = sender.send(TaskUpdate::Ended).await;
                        return;
                    }
                }
            }
        });
        Ok(receiver)
    }
}
