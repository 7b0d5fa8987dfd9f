//! `/mcp`: the MCP task tools over streamable HTTP (`rmcp`'s `StreamableHttpService`, mounted
//! as a tower service). The `/v1` auth middleware runs first, so a request without a valid
//! key gets the REST API's 401 before any MCP session exists; the tools then act as that key's
//! tenant through [`task_ops`](crate::task_ops), the functions the `/v1` handlers use.
//!
//! [`McpBackend`] is the tools' backend on the task service, for both transports: here the
//! caller is the key of each HTTP request; `browserd mcp` on stdio builds one over an
//! in-memory store with its one local key ([`McpBackend::in_process`]).

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::request::Parts;
use browserd_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use browserd_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use browserd_mcp::{
    Backend, BrowserdMcp, CallContext, Screenshot, TaskUpdate, ToolError, latest_screenshot_step,
};
use browserd_store::FeedItem;
use browserd_types::dto::{CreateTaskRequest, StepView, TaskView};
use browserd_types::{ApiKeyId, TaskId, TaskStatus, Transition};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::task_ops::{self, TaskService};

/// The streamable HTTP MCP service. Sessions end when `state.shutdown` is cancelled.
pub(crate) fn service(
    state: AppState,
    body_limit_bytes: usize,
) -> StreamableHttpService<BrowserdMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown.child_token())
        .with_max_request_body_bytes(body_limit_bytes)
        // Every request carries a bearer key checked before it gets here, which is what the
        // Host check protects unauthenticated local servers with; deployments use any name.
        .disable_allowed_hosts();
    let backend: Arc<dyn Backend> = Arc::new(McpBackend {
        tasks: state.tasks.clone(),
        callers: Callers::Request,
        shutdown: state.shutdown.clone(),
    });
    StreamableHttpService::new(
        move || Ok(BrowserdMcp::new(backend.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

impl From<ApiError> for ToolError {
    fn from(err: ApiError) -> Self {
        if let ApiError::Internal(detail) = &err {
            tracing::error!(error = %detail, "internal error in an MCP tool");
        }
        let code = err.code();
        let (field, current_status) = match &err {
            ApiError::Validation { field, .. } => (field.clone(), None),
            ApiError::Conflict { current_status, .. } => (None, *current_status),
            _ => (None, None),
        };
        ToolError {
            code: code.to_owned(),
            message: err.to_string(),
            field,
            current_status,
        }
    }
}

/// The MCP tools' backend on the task service: every tool is a [`task_ops`] call, and `watch`
/// follows the task's events through the service's [`EventFeed`](browserd_store::EventFeed).
pub struct McpBackend {
    tasks: TaskService,
    callers: Callers,
    /// Ends every watch.
    shutdown: CancellationToken,
}

/// Who a tool call acts for.
enum Callers {
    /// The key the auth middleware resolved for the tool call's HTTP request.
    Request,
    /// One key for every call (stdio: the client that started the process).
    Fixed(Caller),
}

impl McpBackend {
    /// The backend of `browserd mcp` on stdio: every call acts as `key` (the owner of every
    /// task of `tasks`' store); watches end when `shutdown` is cancelled.
    pub fn in_process(tasks: TaskService, key: ApiKeyId, shutdown: CancellationToken) -> Self {
        Self {
            tasks,
            callers: Callers::Fixed(Caller::key(key)),
            shutdown,
        }
    }

    fn caller(&self, cx: &CallContext) -> Result<Caller, ToolError> {
        match &self.callers {
            Callers::Fixed(caller) => Ok(caller.clone()),
            Callers::Request => request_caller(cx),
        }
    }
}

/// The key the auth middleware resolved for the HTTP request of this tool call.
fn request_caller(cx: &CallContext) -> Result<Caller, ToolError> {
    cx.get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            ToolError::new(
                "missing_api_key",
                "send your API key as `Authorization: Bearer <key>`",
            )
        })
}

#[async_trait]
impl Backend for McpBackend {
    async fn create_task(
        &self,
        cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        let caller = self.caller(cx)?;
        tracing::debug!(?request, "create task (mcp)");
        let created = task_ops::create(
            &self.tasks,
            &caller,
            request,
            None,
            task_ops::Placement::Queue,
        )
        .await?;
        Ok(created.view)
    }

    async fn get_task(&self, cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError> {
        Ok(task_ops::get(&self.tasks, &self.caller(cx)?, id).await?)
    }

    async fn list_tasks(
        &self,
        cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError> {
        let page = task_ops::list(&self.tasks, &self.caller(cx)?, status, limit, None).await?;
        Ok(page.items)
    }

    async fn steps(&self, cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        Ok(task_ops::all_steps(&self.tasks, &self.caller(cx)?, id).await?)
    }

    async fn control(
        &self,
        cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError> {
        Ok(task_ops::control(&self.tasks, &self.caller(cx)?, id, transition).await?)
    }

    async fn answer(
        &self,
        cx: &CallContext,
        id: TaskId,
        answer: browserd_types::dto::AnswerRequest,
    ) -> Result<TaskView, ToolError> {
        Ok(task_ops::answer(&self.tasks, &self.caller(cx)?, id, answer).await?)
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
                let steps = task_ops::all_steps(&self.tasks, &caller, id).await?;
                latest_screenshot_step(&steps)
                    .ok_or_else(|| browserd_mcp::screenshot_not_found(None))?
            }
        };
        let (content_type, bytes) = task_ops::screenshot(&self.tasks, &caller, id, number).await?;
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
        let mut feed = self.tasks.follow(id, 0);
        task_ops::owned_task(&self.tasks, &caller, id).await?;
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
}
