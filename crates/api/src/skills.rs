//! `/v1/skills`: skills of the caller's key — a task saved as a parameterised script that runs
//! again without a model. Create one from a prompt or from an ended task, read, list, edit,
//! delete, cancel its generation, roll back, refine, list its versions, run it with parameters
//! (a task, answered like `POST /v1/tasks`) and list its runs. Thin handlers: parse, call the
//! task core, map its answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use browserd_types::TaskId;
use browserd_types::dto::{ErrorBody, TaskView};
use browserd_types::skills::{
    CreateSkillRequest, RefineSkillRequest, RunSkillRequest, SkillList, SkillRunList,
    SkillVersionList, SkillView, UpdateSkillRequest,
};
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams};
use crate::tasks::creating_trace_context;

fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "invalid_id",
        message: format!(
            "`{}` is not a {what} id (a UUID)",
            raw.chars().take(64).collect::<String>()
        ),
    })
}

fn located(status: StatusCode, location: String, body: impl serde::Serialize) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(location) = HeaderValue::try_from(location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// Create a skill: from `prompt` (the agent runs it once, each `{{name=example}}` parameter
/// with its example) or from `from_task` (an ended, successful task of this key, replayed
/// once, with `parameters` naming the values it used). The skill is `generating` until its
/// first version is saved; `generation_task_id` is the task that generates it.
#[utoipa::path(
    post,
    path = "/v1/skills",
    tag = "skills",
    request_body = CreateSkillRequest,
    responses(
        (status = 201, description = "Skill created, its generation queued", body = SkillView,
            headers(("Location" = String, description = "URL of the new skill"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "`from_task` names no task of this key (`task_not_found`)", body = ErrorBody),
        (status = 409, description = "`from_task` names a task that has not ended", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid field (a malformed `{{…}}` declaration, a source task that did not succeed, a task option)", body = ErrorBody),
        (status = 429, description = "Rate limited, the queue is full, or the key used up a quota; see `Retry-After`", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_skill(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    ApiJson(request): ApiJson<CreateSkillRequest>,
) -> Result<Response, ApiError> {
    let trace_context = creating_trace_context(&state, &headers);
    let view = state
        .core
        .create_skill(&caller, request, trace_context)
        .await?;
    Ok(located(
        StatusCode::CREATED,
        format!("/v1/skills/{}", view.id),
        view,
    ))
}

/// The caller's skills, newest first (without their versions).
#[utoipa::path(
    get,
    path = "/v1/skills",
    tag = "skills",
    params(
        ("query" = Option<String>, Query, description = "Only skills whose title, goal or description contains this (case-insensitive)"),
        ("limit" = Option<i64>, Query, description = "Page size, 1–100 (default 20)", minimum = 1, maximum = 100),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of skills", body = SkillList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_skills(
    State(state): State<AppState>,
    caller: Caller,
    query: QueryParams,
) -> Result<Json<SkillList>, ApiError> {
    query.only(&["query", "limit", "cursor"])?;
    let limit = query.int_in("limit", 1..=100)?;
    Ok(Json(
        state
            .core
            .list_skills(&caller, query.get("query"), limit, query.get("cursor"))
            .await?,
    ))
}

/// One skill: its parameters, status, current version and every version (origin, healed
/// steps, script).
#[utoipa::path(
    get,
    path = "/v1/skills/{id}",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill", body = SkillView),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_skill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SkillView>, ApiError> {
    let id = parse_id(&id, "skill")?;
    Ok(Json(state.core.get_skill(&caller, id).await?))
}

/// Change a skill's title, description or `is_enabled` (a disabled skill does not run).
#[utoipa::path(
    patch,
    path = "/v1/skills/{id}",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = UpdateSkillRequest,
    responses(
        (status = 200, description = "The skill", body = SkillView),
        (status = 400, description = "Malformed JSON or id", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid field", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn update_skill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<UpdateSkillRequest>,
) -> Result<Json<SkillView>, ApiError> {
    let id = parse_id(&id, "skill")?;
    Ok(Json(state.core.update_skill(&caller, id, request).await?))
}

/// Delete a skill and its versions (a running generation is stopped); its runs stay as tasks.
#[utoipa::path(
    delete,
    path = "/v1/skills/{id}",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_skill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id, "skill")?;
    state.core.delete_skill(&caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Run a skill's current version with `parameters`: a task that replays it without a model
/// (healing a step the site broke with one) and reads its result from the final page.
#[utoipa::path(
    post,
    path = "/v1/skills/{id}/runs",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = RunSkillRequest,
    responses(
        (status = 202, description = "The run's task, queued", body = TaskView,
            headers(("Location" = String, description = "URL of the task"))),
        (status = 400, description = "Malformed JSON or id", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 409, description = "The skill is disabled (`skill_disabled`) or has no finished version (`skill_not_ready`)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "A parameter is missing, unknown or of the wrong type (named), or another field is invalid", body = ErrorBody),
        (status = 429, description = "Rate limited, the queue is full, or the key used up a quota; see `Retry-After`", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn run_skill(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<RunSkillRequest>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "skill")?;
    let trace_context = creating_trace_context(&state, &headers);
    let view = state
        .core
        .run_skill(&caller, id, request, trace_context)
        .await?;
    Ok(located(
        StatusCode::ACCEPTED,
        format!("/v1/tasks/{}", view.id),
        view,
    ))
}

/// A skill's runs (tasks, with their results), newest first.
#[utoipa::path(
    get,
    path = "/v1/skills/{id}/runs",
    tag = "skills",
    params(
        ("id" = uuid::Uuid, Path, description = "Skill id"),
        ("limit" = Option<i64>, Query, description = "Page size, 1–100 (default 20)", minimum = 1, maximum = 100),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of runs", body = SkillRunList),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_skill_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Json<SkillRunList>, ApiError> {
    let id = parse_id(&id, "skill")?;
    query.only(&["limit", "cursor"])?;
    let limit = query.int_in("limit", 1..=100)?;
    Ok(Json(
        state
            .core
            .skill_runs(&caller, id, limit, query.get("cursor"))
            .await?,
    ))
}

/// One run of a skill: its task, with its output.
#[utoipa::path(
    get,
    path = "/v1/skills/{id}/runs/{task_id}",
    tag = "skills",
    params(
        ("id" = uuid::Uuid, Path, description = "Skill id"),
        ("task_id" = uuid::Uuid, Path, description = "The run's task id"),
    ),
    responses(
        (status = 200, description = "The run's task", body = TaskView),
        (status = 400, description = "An id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill, or no such run of it, for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_skill_run(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, task)): Path<(String, String)>,
) -> Result<Json<TaskView>, ApiError> {
    let id = parse_id(&id, "skill")?;
    let task = TaskId(parse_id(&task, "task")?);
    Ok(Json(state.core.skill_run(&caller, id, task).await?))
}

/// A skill's versions, oldest first.
#[utoipa::path(
    get,
    path = "/v1/skills/{id}/versions",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The versions", body = SkillVersionList),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_skill_versions(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SkillVersionList>, ApiError> {
    let id = parse_id(&id, "skill")?;
    Ok(Json(state.core.skill_versions(&caller, id).await?))
}

/// Make the version before the current one current again.
#[utoipa::path(
    post,
    path = "/v1/skills/{id}/rollback",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill", body = SkillView),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 409, description = "No version before the current one (`no_previous_version`)", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn rollback_skill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SkillView>, ApiError> {
    let id = parse_id(&id, "skill")?;
    Ok(Json(state.core.rollback_skill(&caller, id).await?))
}

/// Generate the skill again with `feedback` added to its prompt; the new run's version
/// (origin `refined`) becomes current.
#[utoipa::path(
    post,
    path = "/v1/skills/{id}/refine",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = RefineSkillRequest,
    responses(
        (status = 202, description = "The skill, generating again", body = SkillView),
        (status = 400, description = "Malformed JSON or id", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 409, description = "A generation is running (`skill_busy`)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid feedback", body = ErrorBody),
        (status = 429, description = "Rate limited, the queue is full, or the key used up a quota; see `Retry-After`", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn refine_skill(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<RefineSkillRequest>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "skill")?;
    let trace_context = creating_trace_context(&state, &headers);
    let view = state
        .core
        .refine_skill(&caller, id, request, trace_context)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// Stop the skill's generation (status `cancelled`).
#[utoipa::path(
    post,
    path = "/v1/skills/{id}/cancel",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill", body = SkillView),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such skill for this key", body = ErrorBody),
        (status = 409, description = "The skill is not generating (`skill_not_generating`)", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_skill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SkillView>, ApiError> {
    let id = parse_id(&id, "skill")?;
    Ok(Json(state.core.cancel_skill(&caller, id).await?))
}
