//! [`TaskBackend`]: the tools' backend on the task core (`browserd-tasks`), for both
//! transports — `/mcp` over streamable HTTP on the server's core, where each call acts for the
//! key of its HTTP request, and `browserd mcp` on stdio over the same core on Postgres, acting
//! for one local key ([`TaskBackend::in_process`]), which stops the tasks it started when its
//! client goes away ([`TaskBackend::stop_started_tasks`]). Same keys, tenants, validation and
//! status machine as `/v1`, and the same error codes and messages.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use browserd_tasks::records::FeedItem;
use browserd_tasks::{Caller, Placement, TaskCore, TaskError, TaskService};
use browserd_types::dto::{CreateTaskRequest, StepView, TaskView};
use browserd_types::skills::{RunSkillRequest, SkillView};
use browserd_types::{ApiKeyId, TaskId, TaskStatus, Transition};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    Backend, CallContext, Screenshot, TaskUpdate, ToolError, latest_screenshot_step,
    screenshot_not_found,
};

impl From<TaskError> for ToolError {
    fn from(err: TaskError) -> Self {
        if let TaskError::Internal(detail) = &err {
            tracing::error!(error = %detail, "internal error in an MCP tool");
        }
        let code = err.code();
        let (field, current_status) = match &err {
            TaskError::Validation { field, .. } => (field.clone(), None),
            TaskError::Conflict { current_status, .. } => (None, *current_status),
            _ => (None, None),
        };
        ToolError {
            code: code.to_owned(),
            // An internal error's detail is logged, never sent.
            message: match &err {
                TaskError::Internal(_) => "internal error".to_owned(),
                other => other.to_string(),
            },
            field,
            current_status,
        }
    }
}

/// The MCP tools' backend on the task core: every tool is a [`TaskCore`] call, and `watch`
/// follows the task's events through the service's [`TaskFeed`](browserd_tasks::TaskFeed).
pub struct TaskBackend {
    core: TaskCore,
    callers: Callers,
    /// The tasks this backend created (kept for [`TaskBackend::stop_started_tasks`] by the
    /// stdio backend only).
    started: Option<Mutex<Vec<TaskId>>>,
    /// Ends every watch.
    shutdown: CancellationToken,
}

/// Finds the caller of a tool call in its context (e.g. the key an HTTP front end resolved
/// for the call's request).
pub type CallerOf = Arc<dyn Fn(&CallContext) -> Result<Caller, ToolError> + Send + Sync>;

/// Who a tool call acts for.
enum Callers {
    /// The caller the front end finds in the call's context.
    Resolved(CallerOf),
    /// One key for every call (stdio: the client that started the process).
    Fixed(Caller),
}

impl TaskBackend {
    /// The backend of a front end whose callers differ per call (`/mcp` over HTTP): `caller_of`
    /// finds each call's; watches end when `shutdown` is cancelled.
    pub fn per_call(core: TaskCore, caller_of: CallerOf, shutdown: CancellationToken) -> Self {
        Self {
            core,
            callers: Callers::Resolved(caller_of),
            started: None,
            shutdown,
        }
    }

    /// The backend of `browserd mcp` on stdio: every call acts as `key` (the process's local
    /// key); watches end when `shutdown` is cancelled.
    pub fn in_process(core: TaskCore, key: ApiKeyId, shutdown: CancellationToken) -> Self {
        Self {
            core,
            callers: Callers::Fixed(Caller::key(key)),
            started: Some(Mutex::default()),
            shutdown,
        }
    }

    /// Stops the tasks this backend created that have not ended (queued, running, paused or
    /// waiting): its client went away, and nobody else would follow them. Returns how many
    /// it stopped.
    pub async fn stop_started_tasks(&self) -> usize {
        let Callers::Fixed(caller) = &self.callers else {
            return 0;
        };
        let started: Vec<TaskId> = match &self.started {
            Some(started) => {
                std::mem::take(&mut *started.lock().unwrap_or_else(PoisonError::into_inner))
            }
            None => return 0,
        };
        let mut stopped = 0;
        for id in started {
            match self.tasks().control(caller, id, Transition::Stop).await {
                Ok(_) => {
                    tracing::info!(task_id = %id, "task stopped: the MCP client went away");
                    stopped += 1;
                }
                // Ended already (or deleted).
                Err(TaskError::Conflict { .. } | TaskError::NotFound { .. }) => {}
                Err(err) => tracing::warn!(task_id = %id, %err, "stopping the task failed"),
            }
        }
        stopped
    }

    fn tasks(&self) -> &TaskService {
        self.core.tasks()
    }

    fn caller(&self, cx: &CallContext) -> Result<Caller, ToolError> {
        match &self.callers {
            Callers::Fixed(caller) => Ok(caller.clone()),
            Callers::Resolved(caller_of) => caller_of(cx),
        }
    }
}

#[async_trait]
impl Backend for TaskBackend {
    async fn create_task(
        &self,
        cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        let caller = self.caller(cx)?;
        tracing::debug!(?request, "create task (mcp)");
        let created = self
            .tasks()
            .create(&caller, request, None, Placement::Queue)
            .await?;
        if let Some(started) = &self.started {
            started
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(created.view.id);
        }
        Ok(created.view)
    }

    async fn get_task(&self, cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError> {
        Ok(self.tasks().get(&self.caller(cx)?, id).await?)
    }

    async fn list_tasks(
        &self,
        cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError> {
        let page = self
            .tasks()
            .list(&self.caller(cx)?, status, limit, None)
            .await?;
        Ok(page.items)
    }

    async fn steps(&self, cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        Ok(self.tasks().all_steps(&self.caller(cx)?, id).await?)
    }

    async fn control(
        &self,
        cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError> {
        Ok(self
            .tasks()
            .control(&self.caller(cx)?, id, transition)
            .await?)
    }

    async fn answer(
        &self,
        cx: &CallContext,
        id: TaskId,
        answer: browserd_types::dto::AnswerRequest,
    ) -> Result<TaskView, ToolError> {
        Ok(self.tasks().answer(&self.caller(cx)?, id, answer).await?)
    }

    async fn screenshot(
        &self,
        cx: &CallContext,
        id: TaskId,
        step: Option<i32>,
    ) -> Result<Screenshot, ToolError> {
        let caller = self.caller(cx)?;
        let number = match step {
            Some(number) => number,
            None => {
                let steps = self.tasks().all_steps(&caller, id).await?;
                latest_screenshot_step(&steps).ok_or_else(|| screenshot_not_found(None))?
            }
        };
        let (content_type, bytes) = self.tasks().screenshot(&caller, id, number).await?;
        Ok(Screenshot {
            step: number,
            content_type,
            bytes,
        })
    }

    /// Follows the task's stored events, as the event WebSocket does: each model output's
    /// next goal, then the end.
    async fn watch(
        &self,
        cx: &CallContext,
        id: TaskId,
    ) -> Result<mpsc::Receiver<TaskUpdate>, ToolError> {
        let caller = self.caller(cx)?;
        // Subscribed before the ownership read: nothing committed meanwhile is missed.
        let mut feed = self.tasks().follow(id, 0);
        self.tasks().owned_task(&caller, id).await?;
        let (sender, receiver) = mpsc::channel(64);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = sender.closed() => return,
                    item = feed.next() => item,
                };
                let update = match item {
                    Ok(FeedItem::Event(event)) => match TaskUpdate::of_event(&event) {
                        Some(update) => update,
                        None => continue,
                    },
                    Ok(FeedItem::Resync) => continue,
                    Ok(FeedItem::Deleted) => TaskUpdate::Ended,
                    Ok(FeedItem::Closed) => return,
                    Err(err) => {
                        tracing::warn!(task_id = %id, %err, "reading task events for MCP failed");
                        return;
                    }
                };
                let end = update == TaskUpdate::Ended;
                if sender.send(update).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(receiver)
    }

    async fn list_skills(
        &self,
        cx: &CallContext,
        query: Option<String>,
        limit: Option<i64>,
    ) -> Result<Vec<SkillView>, ToolError> {
        let caller = self.caller(cx)?;
        let page = self
            .core
            .list_skills(&caller, query.as_deref(), limit, None)
            .await?;
        Ok(page.items)
    }

    async fn run_skill(
        &self,
        cx: &CallContext,
        id: uuid::Uuid,
        parameters: serde_json::Map<String, serde_json::Value>,
    ) -> Result<TaskView, ToolError> {
        let caller = self.caller(cx)?;
        let request = RunSkillRequest {
            parameters,
            ..RunSkillRequest::default()
        };
        let task = self.core.run_skill(&caller, id, request, None).await?;
        if let Some(started) = &self.started {
            started
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(task.id);
        }
        Ok(task)
    }
}
