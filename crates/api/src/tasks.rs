//! `/v1/tasks`: create, list, get, control (stop/pause/resume), steps, screenshots, delete.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use browserd_tasks::Placement;
use browserd_tasks::decode_cursor;
use browserd_types::dto::{
    AnswerRequest, CreateTaskRequest, ErrorBody, HistoryPage, ReplayReportView, StepList, TaskList,
    TaskView, limits,
};
use browserd_types::{TaskId, TaskStatus, Transition};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams, StepPath, TaskPath};

/// Create a task. It starts in status `queued`. With `replay_of` it is a replay: a worker
/// re-runs the source task's recorded actions without a model (see
/// `GET /v1/tasks/{id}/replay-report`).
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
        (status = 404, description = "`replay_of` names no task of this key (`task_not_found`)", body = ErrorBody),
        (status = 409, description = "`replay_of` names a task that has not ended (`replay_source_not_ended`, see `current_status`)", body = ErrorBody),
        (status = 422, description = "Invalid field (also: a replay source without recorded actions)", body = ErrorBody),
        (status = 429, description = "Rate limited (`rate_limited`), the queue is full (`queue_full`), or the key used up a quota (`quota_exceeded`: `max_queued`, `daily_steps` or `daily_cost_usd`, named with its value in the message); see `Retry-After`", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
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
    let trace_context = creating_trace_context(&state, &headers);
    let view = state
        .core
        .tasks()
        .create(&caller, request, trace_context, Placement::Queue)
        .await?
        .view;
    let location = HeaderValue::try_from(format!("/v1/tasks/{}", view.id))
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let mut response = (StatusCode::CREATED, Json(view)).into_response();
    response.headers_mut().insert(header::LOCATION, location);
    Ok(response)
}

/// The trace context the task's spans join: this request's span when tracing is on, else the
/// caller's own `traceparent` (when well-formed).
pub(crate) fn creating_trace_context(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Option<String> {
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
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    query: QueryParams,
) -> Result<Json<TaskList>, ApiError> {
    query.only(&["limit", "cursor", "status"])?;
    let limit = query.int_in("limit", 1..=limits::LIST_LIMIT_MAX)?;
    let status = query
        .get("status")
        .map(|raw| {
            raw.parse::<TaskStatus>()
                .map_err(|err| ApiError::validation("status", err.to_string()))
        })
        .transpose()?;
    let cursor = query.get("cursor").map(decode_cursor).transpose()?;
    Ok(Json(
        state
            .core
            .tasks()
            .list(&caller, status, limit, cursor)
            .await?,
    ))
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
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<TaskView>, ApiError> {
    Ok(Json(state.core.tasks().get(&caller, id).await?))
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
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<StatusCode, ApiError> {
    let deleted = state.core.delete_task(caller.key_id, id).await?;
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
    Ok(Json(
        state.core.tasks().control(caller, id, transition).await?,
    ))
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
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
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
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
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

/// Answer the question the task asks (`ask_human`; the task is `waiting`, see its
/// `question`): free text as `answer`, or one of the question's `choices` as `choice`;
/// `secret: true` seals it like a task secret (never stored in clear, never shown to the model
/// but as a `<secret>` placeholder). The task goes back to `running` and the agent continues
/// with the answer as its action's result. Also accepted while a task whose worker was lost
/// mid-question is on its way to another worker (it gets the answer there).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/input",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    request_body = AnswerRequest,
    responses(
        (status = 200, description = "The task after the answer (usually `running`)", body = TaskView),
        (status = 400, description = "Malformed id or JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 409, description = "The task asks no question (`not_waiting`, see `current_status`)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid answer: empty, too long, both or neither of `answer` and `choice`, a `choice` not offered, or a secret answer on a server without a secrets key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn answer_task(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    ApiJson(request): ApiJson<AnswerRequest>,
) -> Result<Json<TaskView>, ApiError> {
    Ok(Json(state.core.tasks().answer(&caller, id, request).await?))
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
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
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

/// A page of the task's steps, in order. Follow `next_after_step` (pass it as `after_step`)
/// until it is `null` to read them all; a running task may add steps after that.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/steps",
    tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("after_step" = Option<i32>, Query, description = "Only steps numbered above this (the previous page's `next_after_step`); from the first step when absent", minimum = 0, maximum = 2147483647),
        ("limit" = Option<i64>, Query, description = "Page size, 1–500 (default 100)", minimum = 1, maximum = 500),
    ),
    responses(
        (status = 200, description = "A page of steps", body = StepList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 422, description = "Invalid query parameter (`limit` out of 1–500, `after_step` not a step number)", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_steps(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    query: QueryParams,
) -> Result<Json<StepList>, ApiError> {
    let (after_step, limit) = step_page(&query)?;
    Ok(Json(
        state
            .core
            .tasks()
            .steps(&caller, id, after_step, limit)
            .await?,
    ))
}

/// `after_step` and `limit` of a page of steps or history items (the limit's range is checked
/// by the task service).
fn step_page(query: &QueryParams) -> Result<(Option<i32>, Option<i64>), ApiError> {
    query.only(&["after_step", "limit"])?;
    let after_step = query
        .int_in("after_step", 0..=i64::from(i32::MAX))?
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let limit = query.int_in("limit", i64::MIN..=i64::MAX)?;
    Ok((after_step, limit))
}

/// The screenshot taken at step `n`, with its content type.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/steps/{n}/screenshot",
    tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("n" = i32, Path, description = "Step number (from 1)", minimum = 1),
    ),
    responses(
        (status = 200, description = "Image bytes", content_type = "image/*", body = Vec<u8>),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task, step or screenshot", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn step_screenshot(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    step: StepPath,
) -> Result<Response, ApiError> {
    let (content_type, bytes) = state.core.tasks().screenshot(&caller, id, step.0).await?;
    let content_type = HeaderValue::try_from(content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "private, max-age=86400, immutable")
        .header("x-content-type-options", "nosniff")
        .body(Body::from(bytes))
        .map_err(|err| ApiError::Internal(err.to_string()))
}

/// A page of the task's AgentHistory, in the shape `browserd run --history-out` writes
/// (`{"history": [AgentHistory…], "usage": UsageSummary}`): step 0 is the initial navigation.
/// Follow `next_after_step` (pass it as `after_step`) until it is `null` and concatenate the
/// pages' `history` for the whole file.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/history",
    tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("after_step" = Option<i32>, Query, description = "Only items of steps numbered above this (the previous page's `next_after_step`); from the first when absent", minimum = 0, maximum = 2147483647),
        ("limit" = Option<i64>, Query, description = "Page size, 1–500 (default 100)", minimum = 1, maximum = 500),
    ),
    responses(
        (status = 200, description = "A page of the history so far", body = HistoryPage),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 422, description = "Invalid query parameter (`limit` out of 1–500, `after_step` not a step number)", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_history(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    query: QueryParams,
) -> Result<Json<HistoryPage>, ApiError> {
    let (after_step, limit) = step_page(&query)?;
    Ok(Json(
        history_page(&state, &caller, id, after_step, limit).await?,
    ))
}

/// A page of task `id`'s history: up to `limit` (1–500, default 100, checked here) items of
/// steps numbered above `after_step`, the task's usage, and the next page's `after_step`.
pub(crate) async fn history_page(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
    after_step: Option<i32>,
    limit: Option<i64>,
) -> Result<HistoryPage, ApiError> {
    let limit = browserd_tasks::step_page_limit(limit)?;
    let task = state.core.tasks().owned_task(caller, id).await?;
    let mut records = state
        .core
        .step_records_page(id, after_step, limit + 1)
        .await?;
    let next_after_step =
        browserd_tasks::next_page_after(&mut records, limit, |(number, _)| *number);
    let usage = task.usage.unwrap_or_else(|| {
        serde_json::json!({
            "total": {"input_tokens": 0, "cached_input_tokens": 0,
                      "cache_creation_input_tokens": 0, "output_tokens": 0},
            "invocations": 0
        })
    });
    Ok(HistoryPage {
        history: records.into_iter().map(|(_, record)| record).collect(),
        usage,
        next_after_step,
    })
}

/// A replay task's report: per recorded action, the index it had and has now, how its
/// element was found again, the attempts and the outcome (also each replayed action result's
/// `metadata.replay`). Grows while the replay runs; `success` is set once it has ended.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/replay-report",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The report so far", body = ReplayReportView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key (`task_not_found`), or the task is not a replay (`not_a_replay`)", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn replay_report(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<ReplayReportView>, ApiError> {
    Ok(Json(state.core.tasks().replay_report(&caller, id).await?))
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
