//! `/v1/tasks`: create, list, get, control (stop/pause/resume), steps, screenshots, delete.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use browserd_store::{ArtifactContent, StoreError, TaskCursor, TransitionDetails};
use browserd_types::dto::{
    CreateTaskRequest, ErrorBody, StepList, StepView, TaskList, TaskView, limits,
};
use browserd_types::{TaskId, TaskStatus, Transition};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams, StepPath, TaskPath};
use crate::validation::validate_create_task;

/// Create a task. It starts in status `queued`.
#[utoipa::path(
    post,
    path = "/v1/tasks",
    tag = "tasks",
    request_body = CreateTaskRequest,
    responses(
        (status = 201, description = "Task created", body = TaskView,
            headers(("Location" = String, description = "URL of the new task"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid field", body = ErrorBody),
        (status = 429, description = "Rate limited (`rate_limited`) or the queue is full (`queue_full`); see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_task(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    ApiJson(request): ApiJson<CreateTaskRequest>,
) -> Result<Response, ApiError> {
    tracing::debug!(?request, "create task");
    let mut new_task = validate_create_task(request, &state.models)?;
    if let Some(name) = &new_task.proxy
        && !state.proxies.contains(name)
    {
        let shown: String = name.chars().take(64).collect();
        return Err(ApiError::validation(
            "proxy",
            if state.proxies.is_empty() {
                format!("unknown proxy `{shown}`: no proxies are configured")
            } else {
                format!(
                    "unknown proxy `{shown}` (configured: {})",
                    state.proxies.join(", ")
                )
            },
        ));
    }
    new_task.trace_context = creating_trace_context(&state, &headers);
    if !new_task.secrets.is_empty() && !state.store.has_secrets_key() {
        return Err(ApiError::validation(
            "secrets",
            "this server has no secrets key configured (BROWSERD_SECRETS_KEY or \
             --secrets-key-file), so it cannot accept task secrets",
        ));
    }
    if let Some(max) = state.max_queued_tasks {
        let queued = state.store.queued_tasks().await?;
        if queued >= max {
            return Err(ApiError::QueueFull {
                queued,
                retry_after_secs: 5,
            });
        }
    }
    let task = state.store.create_task(caller.key_id, new_task).await?;
    tracing::info!(task_id = %task.id, "task created");
    let location = HeaderValue::try_from(format!("/v1/tasks/{}", task.id))
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let position = state.store.queue_position(task.id).await?;
    let mut view = TaskView::from(task);
    view.queue_position = position;
    let mut response = (StatusCode::CREATED, Json(view)).into_response();
    response.headers_mut().insert(header::LOCATION, location);
    Ok(response)
}

/// The trace context the task's spans join: this request's span when tracing is on, else the
/// caller's own `traceparent` (when well-formed).
fn creating_trace_context(state: &AppState, headers: &axum::http::HeaderMap) -> Option<String> {
    if let Some(trace_context) = &state.trace_context
        && let Some(traceparent) = trace_context.traceparent(&tracing::Span::current())
    {
        return Some(traceparent);
    }
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| is_traceparent(v))
        .map(str::to_owned)
}

/// A W3C `traceparent` of version 00: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`,
/// ids not all zero.
pub(crate) fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0')
}

/// List the caller's tasks, newest first.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    tag = "tasks",
    params(
        ("limit" = Option<i64>, Query, description = "Page size, 1–100 (default 20)", minimum = 1, maximum = 100),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("status" = Option<TaskStatus>, Query, description = "Only tasks in this status"),
    ),
    responses(
        (status = 200, description = "A page of tasks", body = TaskList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    query: QueryParams,
) -> Result<Json<TaskList>, ApiError> {
    query.only(&["limit", "cursor", "status"])?;
    let limit = query
        .int_in("limit", 1..=limits::LIST_LIMIT_MAX)?
        .unwrap_or(limits::LIST_LIMIT_DEFAULT);
    let status = query
        .get("status")
        .map(|raw| {
            raw.parse::<TaskStatus>()
                .map_err(|err| ApiError::validation("status", err.to_string()))
        })
        .transpose()?;
    let cursor = query.get("cursor").map(TaskCursor::decode).transpose()?;
    let page = state
        .store
        .list_tasks(caller.key_id, status, limit, cursor)
        .await?;
    Ok(Json(TaskList {
        items: page.items.into_iter().map(TaskView::from).collect(),
        next_cursor: page.next_cursor.map(|c| c.encode()),
    }))
}

/// Get one task.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<TaskView>, ApiError> {
    let task = owned_task(&state, &caller, id).await?;
    let queued = task.status == TaskStatus::Queued;
    let mut view = TaskView::from(task);
    if queued {
        view.queue_position = state.store.queue_position(id).await?;
    }
    Ok(Json(view))
}

/// Delete a task with its steps, events and artifacts. Refused while a worker runs it.
#[utoipa::path(
    delete,
    path = "/v1/tasks/{id}",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 409, description = "Task is running", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<StatusCode, ApiError> {
    let deleted = state.store.delete_task(caller.key_id, id).await?;
    for path in deleted.artifact_paths {
        if let Err(err) = tokio::fs::remove_file(&path).await
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(task_id = %id, %path, %err, "could not remove artifact file");
        }
    }
    tracing::info!(task_id = %id, "task deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn control(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
    transition: Transition,
) -> Result<Json<TaskView>, ApiError> {
    let task = state
        .store
        .transition_task(
            Some(caller.key_id),
            id,
            transition,
            TransitionDetails::default(),
        )
        .await?;
    tracing::info!(task_id = %id, transition = transition.name(), status = %task.status, "task transition");
    Ok(Json(task.into()))
}

/// Stop a queued, running or paused task (→ `stopped`, final).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/stop",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The stopped task", body = TaskView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 409, description = "Illegal in the current status (see `current_status`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn stop_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<TaskView>, ApiError> {
    control(&state, &caller, id, Transition::Stop).await
}

/// Pause a queued or running task (→ `paused`).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/pause",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The paused task", body = TaskView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 409, description = "Illegal in the current status (see `current_status`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn pause_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<TaskView>, ApiError> {
    control(&state, &caller, id, Transition::Pause).await
}

/// Resume a paused task (→ `running`, or `queued` if it never started).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/resume",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The resumed task", body = TaskView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 409, description = "Illegal in the current status (see `current_status`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resume_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<TaskView>, ApiError> {
    control(&state, &caller, id, Transition::Resume).await
}

/// The task's steps, in order.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/steps",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "Steps", body = StepList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_steps(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<StepList>, ApiError> {
    owned_task(&state, &caller, id).await?;
    let steps = state.store.list_steps(id).await?;
    Ok(Json(StepList {
        items: steps
            .into_iter()
            .map(|step| StepView {
                number: step.number,
                screenshot_url: step
                    .screenshot
                    .map(|_| format!("/v1/tasks/{id}/steps/{}/screenshot", step.number)),
                url: step.url,
                title: step.title,
                model_output: step.model_output,
                results: step.results,
                usage: step.usage,
                started_at: step.started_at,
                finished_at: step.finished_at,
            })
            .collect(),
    }))
}

/// The screenshot taken at step `n`, with its content type.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/steps/{n}/screenshot",
    tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("n" = i32, Path, description = "Step number (from 1)"),
    ),
    responses(
        (status = 200, description = "Image bytes", content_type = "image/*", body = Vec<u8>),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task, step or screenshot", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn step_screenshot(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    step: StepPath,
) -> Result<Response, ApiError> {
    let number = step.0;
    owned_task(&state, &caller, id).await?;
    let screenshot = state
        .store
        .step_screenshot(id, number)
        .await?
        .ok_or_else(|| ApiError::NotFound {
            code: "screenshot_not_found",
            message: format!("step {number} has no screenshot"),
        })?;
    let bytes = match screenshot.content {
        ArtifactContent::Inline(bytes) => bytes,
        ArtifactContent::Path(path) => tokio::fs::read(&path)
            .await
            .map_err(|err| ApiError::Internal(format!("reading screenshot file {path}: {err}")))?,
    };
    let content_type = HeaderValue::try_from(screenshot.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "private, max-age=86400, immutable")
        .header("x-content-type-options", "nosniff")
        .body(Body::from(bytes))
        .map_err(|err| ApiError::Internal(err.to_string()))
}

/// The task's AgentHistory, in the shape `browserd run --history-out` writes
/// (`{"history": [AgentHistory…], "usage": UsageSummary}`): step 0 is the initial navigation.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/history",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The history so far", body = Object),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_history(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<serde_json::Value>, ApiError> {
    let task = owned_task(&state, &caller, id).await?;
    let history = state.store.step_records(id).await?;
    let usage = task.usage.unwrap_or_else(|| {
        serde_json::json!({
            "total": {"input_tokens": 0, "cached_input_tokens": 0,
                      "cache_creation_input_tokens": 0, "output_tokens": 0},
            "invocations": 0
        })
    });
    Ok(Json(
        serde_json::json!({"history": history, "usage": usage}),
    ))
}

/// The task if it exists and belongs to the caller; 404 otherwise (another key's task is
/// indistinguishable from a missing one).
pub(crate) async fn owned_task(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
) -> Result<browserd_store::TaskRecord, ApiError> {
    state
        .store
        .get_task(Some(caller.key_id), id)
        .await?
        .ok_or(ApiError::from(StoreError::TaskNotFound(id)))
}

#[cfg(test)]
mod tests {
    use super::is_traceparent;

    #[test]
    fn traceparent_shape() {
        assert!(is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!is_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
        assert!(!is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"
        ));
        assert!(!is_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!is_traceparent(
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"
        ));
        assert!(!is_traceparent("00-abc-def-01"));
    }
}
