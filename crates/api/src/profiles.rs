//! `/v1/profiles`: browser profiles of the caller's key — create, list, get, rename, delete. A
//! task names one with `profile_id`; the worker loads its saved cookies and localStorage into
//! the task's browser and saves them back at every step boundary (crates/worker/src/profile.rs).
//! The state itself is never served: only its cookie domains and version.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_tasks::records::ProfileRecord;
use browserd_types::dto::ErrorBody;
use browserd_types::profiles::{
    CreateProfileRequest, PROFILE_NAME_MAX_CHARS, ProfileList, ProfileView, UpdateProfileRequest,
};
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams};

pub(crate) fn view(profile: ProfileRecord) -> ProfileView {
    ProfileView {
        id: profile.id,
        name: profile.name,
        version: profile.version,
        cookie_domains: profile.cookie_domains,
        last_used_at: profile.last_used_at,
        created_at: profile.created_at,
        updated_at: profile.updated_at,
    }
}

/// A name: at most [`PROFILE_NAME_MAX_CHARS`] characters, no control characters.
pub(crate) fn check_label(field: &str, value: Option<&str>) -> Result<(), ApiError> {
    let Some(value) = value else { return Ok(()) };
    if value.chars().count() > PROFILE_NAME_MAX_CHARS {
        return Err(ApiError::validation(
            field,
            format!("{field} must be at most {PROFILE_NAME_MAX_CHARS} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::validation(
            field,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(())
}

fn profile_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "invalid_id",
        message: format!(
            "`{}` is not a profile id (a UUID)",
            raw.chars().take(64).collect::<String>()
        ),
    })
}

pub(crate) fn profile_not_found() -> ApiError {
    ApiError::NotFound {
        code: "profile_not_found",
        message: "profile not found".to_owned(),
    }
}

/// Create an empty profile; a task fills it (`profile_id`).
#[utoipa::path(
    post,
    path = "/v1/profiles",
    tag = "profiles",
    request_body = CreateProfileRequest,
    responses(
        (status = 201, description = "Created (no state yet)", body = ProfileView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid name (over 200 characters, control characters) or unknown field", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited, or `quota_exceeded`: the key has `--max-profiles-per-key` profiles (delete one); see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_profile(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateProfileRequest>,
) -> Result<Response, ApiError> {
    check_label("name", request.name.as_deref())?;
    let profile = state
        .core
        .create_profile(caller.key_id, request.name.as_deref(), None)
        .await?;
    tracing::info!(profile_id = %profile.id, "profile created");
    Ok((StatusCode::CREATED, Json(view(profile))).into_response())
}

/// The caller's profiles, newest first.
#[utoipa::path(
    get,
    path = "/v1/profiles",
    tag = "profiles",
    params(
        ("query" = Option<String>, Query, description = "Only profiles whose name contains this (case-insensitive)"),
        ("limit" = Option<i64>, Query, description = "At most this many, 1–100 (default 50)", minimum = 1, maximum = 100),
        ("page" = Option<i64>, Query, description = "1-based page of `limit` profiles (default 1)", minimum = 1),
    ),
    responses(
        (status = 200, description = "Profiles", body = ProfileList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_profiles(
    State(state): State<AppState>,
    caller: Caller,
    query: QueryParams,
) -> Result<Json<ProfileList>, ApiError> {
    query.only(&["query", "limit", "page"])?;
    let limit = query.int_in("limit", 1..=100)?.unwrap_or(50);
    let page = query.int_in("page", 1..=i64::from(i32::MAX))?.unwrap_or(1);
    let text = query.get("query").filter(|q| !q.is_empty());
    check_label("query", text)?;
    let (items, total) = state
        .core
        .list_profiles(caller.key_id, text, limit, page)
        .await?;
    Ok(Json(ProfileList {
        items: items.into_iter().map(view).collect(),
        total,
    }))
}

/// One profile.
#[utoipa::path(
    get,
    path = "/v1/profiles/{id}",
    tag = "profiles",
    params(("id" = uuid::Uuid, Path, description = "Profile id")),
    responses(
        (status = 200, description = "The profile", body = ProfileView),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such profile for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_profile(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ProfileView>, ApiError> {
    let id = profile_id(&id)?;
    let profile = state
        .core
        .get_profile(caller.key_id, id)
        .await?
        .ok_or_else(profile_not_found)?;
    Ok(Json(view(profile)))
}

/// Rename a profile (`name: null` clears the name).
#[utoipa::path(
    patch,
    path = "/v1/profiles/{id}",
    tag = "profiles",
    params(("id" = uuid::Uuid, Path, description = "Profile id")),
    request_body = UpdateProfileRequest,
    responses(
        (status = 200, description = "The renamed profile", body = ProfileView),
        (status = 400, description = "Malformed JSON, or the id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such profile for this key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid name or unknown field", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn update_profile(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<UpdateProfileRequest>,
) -> Result<Json<ProfileView>, ApiError> {
    let id = profile_id(&id)?;
    check_label("name", request.name.as_deref())?;
    let profile = state
        .core
        .update_profile(caller.key_id, id, Some(request.name.as_deref()), None)
        .await?
        .ok_or_else(profile_not_found)?;
    Ok(Json(view(profile)))
}

/// Delete a profile and its saved state. A task running with it stops saving into it; a
/// queued task naming it fails when it starts.
#[utoipa::path(
    delete,
    path = "/v1/profiles/{id}",
    tag = "profiles",
    params(("id" = uuid::Uuid, Path, description = "Profile id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such profile for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_profile(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = profile_id(&id)?;
    if !state.core.delete_profile(caller.key_id, id).await? {
        return Err(profile_not_found());
    }
    tracing::info!(profile_id = %id, "profile deleted");
    Ok(StatusCode::NO_CONTENT)
}
