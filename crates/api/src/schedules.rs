//! `/v1/schedules`: tasks (or skill executions) of the caller's key created on a cron schedule
//! — create, list, get, change, delete, and the tasks each one created. The task core checks
//! and stores them ([`browserd_tasks::TaskCore::create_schedule`], …) and its scheduler fires
//! them in every api process, each tick exactly once.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_types::dto::ErrorBody;
use browserd_types::schedules::{
    CreateScheduleRequest, ScheduleList, ScheduleRunList, ScheduleView, UpdateScheduleRequest,
};
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams};

fn schedule_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "invalid_id",
        message: format!(
            "`{}` is not a schedule id (a UUID)",
            raw.chars().take(64).collect::<String>()
        ),
    })
}

/// Create a schedule. Its cron expression, time zone and target are checked now (422 naming
/// the field); the target task is admitted — the key's quotas — at each tick, and a refused
/// tick is recorded in `last_error`.
#[utoipa::path(
    post,
    path = "/v1/schedules",
    tag = "schedules",
    request_body = CreateScheduleRequest,
    responses(
        (status = 201, description = "Created", body = ScheduleView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 404, description = "The target task's `replay_of` names no task of this key (`task_not_found`)", body = ErrorBody),
        (status = 409, description = "The target task's `replay_of` names a task that has not ended", body = ErrorBody),
        (status = 422, description = "Invalid `cron`, `time_zone`, `name` or target (`target.task.<field>` as `POST /v1/tasks` refuses it; secrets are refused), or unknown field", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited, or `quota_exceeded`: the key has `--max-schedules-per-key` schedules (delete one); see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateScheduleRequest>,
) -> Result<Response, ApiError> {
    let schedule = state.core.create_schedule(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(schedule)).into_response())
}

/// The caller's schedules, newest first.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    params(
        ("limit" = Option<i64>, Query, description = "At most this many, 1–100 (default 50)", minimum = 1, maximum = 100),
        ("page" = Option<i64>, Query, description = "1-based page of `limit` schedules (default 1)", minimum = 1, maximum = 2147483647),
    ),
    responses(
        (status = 200, description = "Schedules", body = ScheduleList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_schedules(
    State(state): State<AppState>,
    caller: Caller,
    query: QueryParams,
) -> Result<Json<ScheduleList>, ApiError> {
    query.only(&["limit", "page"])?;
    let limit = query.int_in("limit", 1..=100)?.unwrap_or(50);
    let page = query.int_in("page", 1..=i64::from(i32::MAX))?.unwrap_or(1);
    Ok(Json(state.core.list_schedules(&caller, limit, page).await?))
}

/// One schedule.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = uuid::Uuid, Path, description = "Schedule id")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_schedule(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let id = schedule_id(&id)?;
    Ok(Json(state.core.get_schedule(&caller, id).await?))
}

/// Change a schedule: its name, `cron`, `time_zone`, target or `enabled`. A new timing, or
/// enabling it, moves its next tick to the first one from now.
#[utoipa::path(
    patch,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = uuid::Uuid, Path, description = "Schedule id")),
    request_body = UpdateScheduleRequest,
    responses(
        (status = 200, description = "The changed schedule", body = ScheduleView),
        (status = 400, description = "Malformed JSON, or the id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this key, or the new target task's `replay_of` names no task of this key", body = ErrorBody),
        (status = 409, description = "The new target task's `replay_of` names a task that has not ended", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid field, or unknown field", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn update_schedule(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<UpdateScheduleRequest>,
) -> Result<Json<ScheduleView>, ApiError> {
    let id = schedule_id(&id)?;
    Ok(Json(
        state.core.update_schedule(&caller, id, request).await?,
    ))
}

/// Delete a schedule. The tasks it created stay.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = uuid::Uuid, Path, description = "Schedule id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_schedule(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = schedule_id(&id)?;
    state.core.delete_schedule(&caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tasks a schedule created, latest tick first.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}/runs",
    tag = "schedules",
    params(
        ("id" = uuid::Uuid, Path, description = "Schedule id"),
        ("limit" = Option<i64>, Query, description = "At most this many, 1–100 (default 20)", minimum = 1, maximum = 100),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Runs", body = ScheduleRunList),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_schedule_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Json<ScheduleRunList>, ApiError> {
    let id = schedule_id(&id)?;
    query.only(&["limit", "cursor"])?;
    let limit = query.int_in("limit", 1..=100)?.unwrap_or(20);
    Ok(Json(
        state
            .core
            .schedule_runs(&caller, id, limit, query.get("cursor"))
            .await?,
    ))
}
