//! `/api/v2/profiles`: browser-use cloud's profiles (the SDK's `profiles.*`) over browserd's
//! profiles (`/v1/profiles`, the same rows). A task uses one through
//! `sessionSettings.profileId`, or a session through its `profileId`.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_tasks::records::ProfileRecord;
use browserd_types::profiles::{V2ProfileRequest, V2ProfileView};
use browserd_types::v2::ListResponse;
use uuid::Uuid;

use super::tasks::{paging, query_params};
use super::{V2Body, V2Error, V2ErrorBody, V2Path, parse_body, path_uuid};
use crate::AppState;
use crate::extract::Caller;
use crate::profiles::check_label;

fn view(profile: ProfileRecord) -> V2ProfileView {
    V2ProfileView {
        id: profile.id,
        user_id: profile.user_id,
        name: profile.name,
        last_used_at: profile.last_used_at,
        created_at: profile.created_at,
        updated_at: profile.updated_at,
        cookie_domains: profile.cookie_domains,
    }
}

fn not_found() -> V2Error {
    V2Error::not_found("Profile")
}

/// The name and user id of a request, checked as `/v1` checks a name.
fn labels(request: &V2ProfileRequest) -> Result<(), V2Error> {
    for (field, value) in [("name", &request.name), ("userId", &request.user_id)] {
        if let Err(err) = check_label(field, value.as_deref()) {
            return Err(err.into());
        }
    }
    Ok(())
}

/// The caller's profile named by a v2 id (a task's `sessionSettings.profileId`, a session's
/// `profileId`): FastAPI's 422 for a malformed one, 404 `Profile not found` for another key's
/// or a missing one.
pub(crate) async fn owned_profile(
    state: &AppState,
    caller: &Caller,
    loc: &[&str],
    raw: &str,
) -> Result<Uuid, V2Error> {
    let id = Uuid::parse_str(raw).map_err(|err| {
        V2Error::invalid(
            loc,
            format!("Input should be a valid UUID, {err}"),
            "uuid_parsing",
        )
    })?;
    state
        .core
        .get_profile(caller.key_id, id)
        .await?
        .ok_or_else(not_found)?;
    Ok(id)
}

/// `POST /profiles`: 201, an empty profile.
#[utoipa::path(
    post,
    path = "/profiles",
    tag = "profiles",
    operation_id = "v2_create_profile",
    request_body(content = Option<V2ProfileRequest>, description = "Optional name and userId", content_type = "application/json"),
    responses(
        (status = 201, description = "The new profile", body = V2ProfileView),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Invalid field (over 200 characters, control characters)", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited, or the key has `--max-profiles-per-key` profiles (delete one); see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn create_profile(
    State(state): State<AppState>,
    caller: Caller,
    V2Body(body): V2Body,
) -> Result<Response, V2Error> {
    let request: V2ProfileRequest = if body.is_empty() {
        V2ProfileRequest::default()
    } else {
        parse_body(&body)?
    };
    labels(&request)?;
    let profile = state
        .core
        .create_profile(
            caller.key_id,
            request.name.as_deref(),
            request.user_id.as_deref(),
        )
        .await?;
    tracing::info!(profile_id = %profile.id, "profile created (v2)");
    Ok((StatusCode::CREATED, Json(view(profile))).into_response())
}

/// `GET /profiles?pageSize&pageNumber&query`.
#[utoipa::path(
    get,
    path = "/profiles",
    tag = "profiles",
    operation_id = "v2_list_profiles",
    params(
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
        ("query" = Option<String>, Query, description = "Only profiles whose name contains this (case-insensitive)"),
    ),
    responses(
        (status = 200, description = "A page of profiles, newest first", body = ListResponse<V2ProfileView>),
        (status = 422, description = "Invalid query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_profiles(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<V2ProfileView>>, V2Error> {
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let text = params
        .get("query")
        .map(String::as_str)
        .filter(|q| !q.is_empty());
    if let Err(err) = check_label("query", text) {
        return Err(err.into());
    }
    let (profiles, total) = state
        .core
        .list_profiles(caller.key_id, text, page_size, page_number)
        .await?;
    Ok(Json(ListResponse {
        items: profiles.into_iter().map(view).collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

/// `GET /profiles/{profile_id}`.
#[utoipa::path(
    get,
    path = "/profiles/{profile_id}",
    tag = "profiles",
    operation_id = "v2_get_profile",
    params(("profile_id" = uuid::Uuid, Path, description = "Profile id")),
    responses(
        (status = 200, description = "The profile", body = V2ProfileView),
        (status = 404, description = "No such profile for this key (`Profile not found`)", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn get_profile(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(profile_id): V2Path<String>,
) -> Result<Json<V2ProfileView>, V2Error> {
    let id = path_uuid("profile_id", &profile_id)?;
    let profile = state
        .core
        .get_profile(caller.key_id, id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(view(profile)))
}

/// `PATCH /profiles/{profile_id}`: sets `name` and `userId` where given.
#[utoipa::path(
    patch,
    path = "/profiles/{profile_id}",
    tag = "profiles",
    operation_id = "v2_update_profile",
    params(("profile_id" = uuid::Uuid, Path, description = "Profile id")),
    request_body = V2ProfileRequest,
    responses(
        (status = 200, description = "The updated profile", body = V2ProfileView),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such profile for this key (`Profile not found`)", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Malformed id or invalid field", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn update_profile(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(profile_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<V2ProfileView>, V2Error> {
    let id = path_uuid("profile_id", &profile_id)?;
    // The document requires a body here (the SDK always sends one, `{}` at least).
    let request: V2ProfileRequest = parse_body(&body)?;
    labels(&request)?;
    let profile = state
        .core
        .update_profile(
            caller.key_id,
            id,
            request.name.as_deref().map(Some),
            request.user_id.as_deref().map(Some),
        )
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(view(profile)))
}

/// `DELETE /profiles/{profile_id}`: 204.
#[utoipa::path(
    delete,
    path = "/profiles/{profile_id}",
    tag = "profiles",
    operation_id = "v2_delete_profile",
    params(("profile_id" = uuid::Uuid, Path, description = "Profile id")),
    responses(
        (status = 204, description = "Deleted with its saved state"),
        (status = 404, description = "No such profile for this key (`Profile not found`)", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn delete_profile(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(profile_id): V2Path<String>,
) -> Result<StatusCode, V2Error> {
    let id = path_uuid("profile_id", &profile_id)?;
    if !state.core.delete_profile(caller.key_id, id).await? {
        return Err(not_found());
    }
    tracing::info!(profile_id = %id, "profile deleted (v2)");
    Ok(StatusCode::NO_CONTENT)
}
