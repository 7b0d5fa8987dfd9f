//! `/mcp`: the MCP task tools over streamable HTTP (`rmcp`'s `StreamableHttpService`, mounted
//! as a tower service). The `/v1` auth middleware runs first, so a request without a valid
//! key gets the REST API's 401 before any MCP session exists; the tools then act as that key's
//! tenant through [`task_ops`](crate::task_ops), the functions the `/v1` handlers use.

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
use browserd_store::{EventFeed, FeedItem};
use browserd_types::dto::{CreateTaskRequest, StepView, TaskView};
use browserd_types::{EventBody, TaskId, TaskStatus, Transition};
use tokio::sync::mpsc;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::task_ops;

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
    let backend: Arc<dyn Backend> = Arc::new(StoreBackend { state });
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

/// The tools' backend on this api's store and event hub.
struct StoreBackend {
    state: AppState,
}

/// The key the auth middleware resolved for the HTTP request of this tool call.
fn caller(cx: &CallContext) -> Result<Caller, ToolError> {
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
impl Backend for StoreBackend {
    async fn create_task(
        &self,
        cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        let caller = caller(cx)?;
        tracing::debug!(?request, "create task (mcp)");
        let created = task_ops::create(
            &self.state,
            &caller,
            request,
            None,
            task_ops::Placement::Queue,
        )
        .await?;
        Ok(created.view)
    }

    async fn get_task(&self, cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError> {
        Ok(task_ops::get(&self.state, &caller(cx)?, id).await?)
    }

    async fn list_tasks(
        &self,
        cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError> {
        let page = task_ops::list(&self.state, &caller(cx)?, status, limit, None).await?;
        Ok(page.items)
    }

    async fn steps(&self, cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        Ok(task_ops::steps(&self.state, &caller(cx)?, id).await?)
    }

    async fn control(
        &self,
        cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError> {
        Ok(task_ops::control(&self.state, &caller(cx)?, id, transition).await?)
    }

    async fn screenshot(
        &self,
        cx: &CallContext,
        id: TaskId,
        step: Option<i32>,
    ) -> Result<Screenshot, ToolError> {
        let caller = caller(cx)?;
        let number = match step {
            Some(number) => number,
            None => {
                let steps = task_ops::steps(&self.state, &caller, id).await?;
                latest_screenshot_step(&steps)
                    .ok_or_else(|| browserd_mcp::screenshot_not_found(None))?
            }
        };
        let (content_type, bytes) = task_ops::screenshot(&self.state, &caller, id, number).await?;
        Ok(Screenshot {
            step: number,
            content_type,
            bytes,
        })
    }

    /// Follows the task's stored events through an [`EventFeed`], as the event WebSocket does:
    /// each model output's next goal, then the end.
    async fn watch(
        &self,
        cx: &CallContext,
        id: TaskId,
    ) -> Result<mpsc::Receiver<TaskUpdate>, ToolError> {
        let caller = caller(cx)?;
        // Subscribed before the ownership read: nothing committed meanwhile is missed.
        let mut feed = EventFeed::follow(&self.state.store, &self.state.hub, id, 0);
        task_ops::owned_task(&self.state, &caller, id).await?;
        let (sender, receiver) = mpsc::channel(64);
        let shutdown = self.state.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = sender.closed() => return,
                    item = feed.next() => item,
                };
                let update = match item {
                    Ok(FeedItem::Event(event)) if event.is_final() => TaskUpdate::Ended,
                    Ok(FeedItem::Event(event)) => match event.body() {
                        Some(EventBody::ModelOutput(model)) => match model.next_goal() {
                            Some(goal) => TaskUpdate::NextGoal {
                                step: i64::from(model.number),
                                goal: goal.to_owned(),
                            },
                            None => continue,
                        },
                        _ => continue,
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
