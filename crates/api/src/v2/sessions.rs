//! `/api/v2/sessions`: browser state (cookies, open tabs) that later tasks reuse through
//! `sessionId`. No browser stays up between tasks: a session's `liveUrl` is the dashboard page
//! of its task while one is queued or running (its steps and the page live, after signing in
//! with the key), otherwise `null`.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_tasks::TaskError;
use browserd_tasks::records::{NewSession, SessionRecord};
use browserd_types::Transition;
use browserd_types::v2::{
    CreateSessionRequest, ListResponse, SessionItemView, SessionView, UpdateRequest,
    V2SessionStatus, V2TaskStatus,
};
use uuid::Uuid;

use super::tasks::{item_view, paging, query_params};
use super::{
    SessionUpdateRequest, V2Body, V2Error, V2ErrorBody, V2Path, absolute_url, parse_body, path_uuid,
};
use crate::AppState;
use crate::extract::Caller;

fn item(session: SessionRecord) -> SessionItemView {
    SessionItemView {
        id: session.id,
        status: if session.active {
            V2SessionStatus::Active
        } else {
            V2SessionStatus::Stopped
        },
        live_url: None,
        recording_url: None,
        started_at: session.created_at,
        finished_at: session.finished_at,
        persist_memory: session.persist_memory,
        keep_alive: session.keep_alive,
        proxy_used_mb: "0".to_owned(),
        proxy_cost: "0".to_owned(),
    }
}

async fn view(
    state: &AppState,
    caller: &Caller,
    session: SessionRecord,
) -> Result<SessionView, V2Error> {
    let tasks: Vec<_> = state
        .core
        .session_tasks(caller.key_id, session.id)
        .await?
        .into_iter()
        .map(item_view)
        .collect();
    let mut item = item(session);
    item.live_url = tasks
        .iter()
        .find(|t| matches!(t.status, V2TaskStatus::Created | V2TaskStatus::Started))
        .map(|t| absolute_url(state, &format!("/#/tasks/{}", t.id)));
    Ok(SessionView {
        item,
        tasks,
        public_share_url: None,
    })
}

/// `POST /sessions`: 201, an active session for later tasks.
#[utoipa::path(
    post,
    path = "/sessions",
    tag = "sessions",
    operation_id = "v2_create_session",
    request_body(content = Option<CreateSessionRequest>, description = "Optional: an empty body is a session with the defaults", content_type = "application/json"),
    responses(
        (status = 201, description = "The new active session", body = SessionItemView),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Invalid field (`startUrl` not an absolute http(s) URL)", body = V2ErrorBody),
        (status = 404, description = "`profileId` names no profile of this key (`Profile not found`)", body = V2ErrorBody),
        (status = 501, description = "`customProxy` was asked for", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited, or the key has `--max-sessions-per-key` active sessions (stop one); see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn create_session(
    State(state): State<AppState>,
    caller: Caller,
    V2Body(body): V2Body,
) -> Result<Response, V2Error> {
    let request: CreateSessionRequest = if body.is_empty() {
        CreateSessionRequest::default()
    } else {
        parse_body(&body)?
    };
    if request.custom_proxy.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(V2Error::Detail(
            StatusCode::NOT_IMPLEMENTED,
            "customProxy is not supported by this server".to_owned(),
        ));
    }
    if let Some(url) = &request.start_url {
        let ok = url::Url::parse(url)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if !ok {
            return Err(V2Error::invalid(
                &["body", "startUrl"],
                "startUrl must be an absolute http(s) URL",
                "url_parsing",
            ));
        }
    }
    let profile_id = match &request.profile_id {
        Some(raw) => Some(
            super::profiles::owned_profile(&state, &caller, &["body", "profileId"], raw).await?,
        ),
        None => None,
    };
    let session = state
        .core
        .create_session(
            caller.key_id,
            NewSession {
                keep_alive: request.keep_alive.unwrap_or(true),
                persist_memory: request.persist_memory.unwrap_or(true),
                start_url: request.start_url,
                profile_id,
            },
        )
        .await?;
    tracing::info!(session_id = %session.id, "session created (v2)");
    Ok((StatusCode::CREATED, Json(item(session))).into_response())
}

/// `GET /sessions?pageSize&pageNumber&filterBy=active|stopped`.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "sessions",
    operation_id = "v2_list_sessions",
    params(
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
        ("filterBy" = Option<V2SessionStatus>, Query, description = "Only sessions in this status"),
    ),
    responses(
        (status = 200, description = "A page of sessions, newest first", body = ListResponse<SessionItemView>),
        (status = 422, description = "Invalid query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_sessions(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<SessionItemView>>, V2Error> {
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let active = match params.get("filterBy").map(String::as_str) {
        None => None,
        Some("active") => Some(true),
        Some("stopped") => Some(false),
        Some(_) => {
            return Err(V2Error::invalid(
                &["query", "filterBy"],
                "Input should be 'active' or 'stopped'",
                "enum",
            ));
        }
    };
    let (sessions, total) = state
        .core
        .list_sessions(caller.key_id, active, page_size, page_number)
        .await?;
    Ok(Json(ListResponse {
        items: sessions.into_iter().map(item).collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

/// `GET /sessions/{id}`.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}",
    tag = "sessions",
    operation_id = "v2_get_session",
    params(
        ("session_id" = uuid::Uuid, Path, description = "Session id"),
    ),
    responses(
        (status = 200, description = "The session with its tasks", body = SessionView),
        (status = 404, description = "No such session for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn get_session(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(session_id): V2Path<String>,
) -> Result<Json<SessionView>, V2Error> {
    let id = path_uuid("session_id", &session_id)?;
    let session = state
        .core
        .get_session(caller.key_id, id)
        .await?
        .ok_or_else(|| V2Error::not_found("Session"))?;
    Ok(Json(view(&state, &caller, session).await?))
}

/// Stops the session and every unfinished task in it.
pub(crate) async fn stop_session_and_tasks(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> Result<SessionRecord, V2Error> {
    let session = state
        .core
        .stop_session(caller.key_id, id)
        .await?
        .ok_or_else(|| V2Error::not_found("Session"))?;
    for task in state.core.session_unfinished_tasks(id).await? {
        match state
            .core
            .tasks()
            .control(caller, task, Transition::Stop)
            .await
        {
            // Ended meanwhile.
            Ok(_) | Err(TaskError::Conflict { .. }) => {}
            Err(err) => return Err(err.into()),
        }
    }
    tracing::info!(session_id = %id, "session stopped (v2)");
    Ok(session)
}

/// `PATCH /sessions/{id}` `{"action": "stop"}`: stops the session and its running tasks.
#[utoipa::path(
    patch,
    path = "/sessions/{session_id}",
    tag = "sessions",
    operation_id = "v2_update_session",
    params(
        ("session_id" = uuid::Uuid, Path, description = "Session id"),
    ),
    request_body = SessionUpdateRequest,
    responses(
        (status = 200, description = "The stopped session (its unfinished tasks are stopped)", body = SessionView),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such session for this key", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Malformed id, or an action other than `stop`", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn update_session(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(session_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<SessionView>, V2Error> {
    let id = path_uuid("session_id", &session_id)?;
    let request: UpdateRequest = parse_body(&body)?;
    if request.action != "stop" {
        return Err(V2Error::invalid(
            &["body", "action"],
            "Input should be 'stop'",
            "enum",
        ));
    }
    let session = stop_session_and_tasks(&state, &caller, id).await?;
    Ok(Json(view(&state, &caller, session).await?))
}

/// `DELETE /sessions/{id}`: 204; stops its unfinished tasks and forgets its browser state.
#[utoipa::path(
    delete,
    path = "/sessions/{session_id}",
    tag = "sessions",
    operation_id = "v2_delete_session",
    params(
        ("session_id" = uuid::Uuid, Path, description = "Session id"),
    ),
    responses(
        (status = 204, description = "Deleted (its unfinished tasks are stopped)"),
        (status = 404, description = "No such session for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn delete_session(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(session_id): V2Path<String>,
) -> Result<StatusCode, V2Error> {
    let id = path_uuid("session_id", &session_id)?;
    stop_session_and_tasks(&state, &caller, id).await?;
    if !state.core.delete_session(caller.key_id, id).await? {
        return Err(V2Error::not_found("Session"));
    }
    Ok(StatusCode::NO_CONTENT)
}
