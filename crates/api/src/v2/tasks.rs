//! `/api/v2/tasks`: the v2 view of browserd's tasks.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use browserd_tasks::records::{SessionChoice, V2Task, V2TaskFilter};
use browserd_tasks::{Placement, TaskError};
use browserd_types::dto::{self, ViewportSize};
use browserd_types::v2::{
    CreateTaskRequest, FileView, ListResponse, LogsResponse, TaskCreatedResponse, TaskItemView,
    TaskOutputFileResponse, TaskStatusView, TaskStepView, TaskView, UpdateRequest, V2TaskStatus,
    cost_string, limits,
};
use browserd_types::{TaskId, TaskStatus, Transition};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::{
    TaskUpdateRequest, V2Body, V2Error, V2ErrorBody, V2History, V2Path, absolute_url, parse_body,
    path_uuid,
};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::Caller;

/// `POST /tasks`: 202 `{id, sessionId}`; the task runs in a new one-off session, or in the
/// caller's active, idle session `sessionId`.
#[utoipa::path(
    post,
    path = "/tasks",
    tag = "tasks",
    operation_id = "v2_create_task",
    request_body = CreateTaskRequest,
    responses(
        (status = 202, description = "Task created (status `created`)", body = TaskCreatedResponse),
        (status = 400, description = "The session is stopped or already has a running task; or malformed JSON", body = V2ErrorBody),
        (status = 404, description = "`sessionId` names no session of this key, or `sessionSettings.profileId` no profile (`Profile not found`)", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Invalid field (FastAPI's `detail` list names it)", body = V2ErrorBody),
        (status = 429, description = "Rate limited, or the task queue is full; see `Retry-After`", body = V2ErrorBody),
        (status = 501, description = "A cloud-only feature was asked for (`opVaultId`, `judge`, `skillIds`)", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn create_task(
    State(state): State<AppState>,
    caller: Caller,
    V2Body(body): V2Body,
) -> Result<Response, V2Error> {
    let request: CreateTaskRequest = parse_body(&body)?;
    tracing::debug!(?request, "create v2 task");
    if request.op_vault_id.is_some() {
        return Err(cloud_only("opVaultId (1Password vaults)"));
    }
    if request.judge == Some(true) {
        return Err(cloud_only("judge"));
    }
    if request.skill_ids.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(cloud_only("skillIds"));
    }
    let settings = request.session_settings.clone().unwrap_or_default();
    // The task's profile: `sessionSettings.profileId` for a new session, the session's own
    // for an existing one.
    let profile_id = match (&settings.profile_id, request.session_id) {
        (Some(raw), None) => Some(
            super::profiles::owned_profile(
                &state,
                &caller,
                &["body", "sessionSettings", "profileId"],
                raw,
            )
            .await?,
        ),
        (_, Some(session)) => state.core.session_profile(caller.key_id, session).await?,
        (None, None) => None,
    };
    if request.task.trim().is_empty() {
        return Err(V2Error::invalid(
            &["body", "task"],
            "String should have at least 1 character",
            "string_too_short",
        ));
    }
    if let Some(steps) = request.max_steps
        && !limits::MAX_STEPS_RANGE.contains(&steps)
    {
        return Err(V2Error::invalid(
            &["body", "maxSteps"],
            format!(
                "Input should be between {} and {}",
                limits::MAX_STEPS_RANGE.start(),
                limits::MAX_STEPS_RANGE.end()
            ),
            "less_than_equal",
        ));
    }
    if let Some(extension) = &request.system_prompt_extension
        && extension.chars().count() > limits::SYSTEM_PROMPT_EXTENSION_MAX_CHARS
    {
        return Err(V2Error::invalid(
            &["body", "systemPromptExtension"],
            format!(
                "String should have at most {} characters",
                limits::SYSTEM_PROMPT_EXTENSION_MAX_CHARS
            ),
            "string_too_long",
        ));
    }
    if request
        .metadata
        .as_ref()
        .is_some_and(|m| m.len() > limits::METADATA_MAX_PAIRS)
    {
        return Err(V2Error::invalid(
            &["body", "metadata"],
            format!("at most {} metadata pairs", limits::METADATA_MAX_PAIRS),
            "value_error",
        ));
    }
    let (use_vision, vision_auto) = match &request.vision {
        None | Some(Value::Null) => (None, false),
        Some(Value::Bool(b)) => (Some(*b), false),
        Some(Value::String(s)) if s == "auto" => (Some(true), true),
        Some(_) => {
            return Err(V2Error::invalid(
                &["body", "vision"],
                "Input should be a valid boolean or 'auto'",
                "bool_parsing",
            ));
        }
    };
    let output_schema = request
        .structured_output
        .as_deref()
        .map(|text| {
            serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    V2Error::invalid(
                        &["body", "structuredOutput"],
                        "structuredOutput must be a JSON Schema object, stringified",
                        "value_error",
                    )
                })
        })
        .transpose()?;
    // Each size is checked when given, also alone (it is used only with the other one).
    for (name, value, range) in [
        (
            "browserScreenWidth",
            settings.browser_screen_width,
            limits::SCREEN_WIDTH_RANGE,
        ),
        (
            "browserScreenHeight",
            settings.browser_screen_height,
            limits::SCREEN_HEIGHT_RANGE,
        ),
    ] {
        if let Some(value) = value
            && !range.contains(&value)
        {
            return Err(V2Error::invalid(
                &["body", "sessionSettings", name],
                format!(
                    "Input should be between {} and {}",
                    range.start(),
                    range.end()
                ),
                "less_than_equal",
            ));
        }
    }
    let viewport = match (
        settings.browser_screen_width,
        settings.browser_screen_height,
    ) {
        (Some(width), Some(height)) if request.session_id.is_none() => {
            Some(ViewportSize { width, height })
        }
        _ => None,
    };
    if let Some(viewport) = viewport
        && let Err((field, message)) = viewport.check()
    {
        return Err(V2Error::from(crate::error::ApiError::validation(
            field, message,
        )));
    }

    let options = json!({
        "llm": request.llm,
        "flashMode": request.flash_mode.unwrap_or(false),
        "thinking": request.thinking,
        "visionAuto": vision_auto,
        "systemPromptExtension": request.system_prompt_extension,
    });
    // Flat secrets (the SDK's shape) need allowedDomains or the opt-in: said in v2's names.
    if let Some(secrets) = &request.secrets
        && let Some(message) = browserd_tasks::unbound_secrets_refusal(
            secrets,
            request
                .allowed_domains
                .as_ref()
                .is_some_and(|d| !d.is_empty()),
            request.allow_secrets_on_any_domain.unwrap_or(false),
            &browserd_tasks::SecretFixNames::V2,
        )
    {
        return Err(V2Error::invalid(
            &["body", "secrets"],
            message,
            "value_error",
        ));
    }
    // The one mapping of a v2 request onto the task service's input.
    let v1 = dto::CreateTaskRequest {
        task: Some(request.task),
        start_url: request.start_url,
        max_steps: request.max_steps,
        model: request.llm,
        allowed_domains: request.allowed_domains,
        secrets: request.secrets,
        allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
        output_schema,
        use_vision,
        metadata: request.metadata,
        viewport,
        highlight_elements: request.highlight_elements,
        profile_id,
        ..dto::CreateTaskRequest::default()
    };
    let placement = Placement::Session {
        choice: match request.session_id {
            Some(id) => SessionChoice::Existing(id),
            None => SessionChoice::New,
        },
        v2_options: options,
    };
    let created = state
        .core
        .tasks()
        .create(&caller, v1, None, placement)
        .await
        .map_err(ApiError::from)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TaskCreatedResponse {
            id: created.view.id.0,
            session_id: created.session_id.unwrap_or_default(),
        }),
    )
        .into_response())
}

fn cloud_only(feature: &str) -> V2Error {
    V2Error::Detail(
        StatusCode::NOT_IMPLEMENTED,
        format!("{feature} is a browser-use cloud feature this server does not implement"),
    )
}

/// `GET /tasks`: newest first, page-number pagination; filters `sessionId`, `filterBy`
/// (status), `after` and `before` (creation time). Unknown parameters are ignored.
#[utoipa::path(
    get,
    path = "/tasks",
    tag = "tasks",
    operation_id = "v2_list_tasks",
    params(
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
        ("sessionId" = Option<uuid::Uuid>, Query, description = "Only the tasks of this session"),
        ("filterBy" = Option<V2TaskStatus>, Query, description = "Only tasks in this status"),
        ("after" = Option<String>, Query, description = "Only tasks created after this time (RFC 3339)", format = DateTime),
        ("before" = Option<String>, Query, description = "Only tasks created before this time (RFC 3339)", format = DateTime),
    ),
    responses(
        (status = 200, description = "A page of tasks, newest first", body = ListResponse<TaskItemView>),
        (status = 422, description = "Invalid query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<TaskItemView>>, V2Error> {
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let mut filter = V2TaskFilter::default();
    if let Some(raw) = params.get("sessionId") {
        filter.session_id = Some(uuid_query("sessionId", raw)?);
    }
    if let Some(raw) = params.get("filterBy") {
        let status = V2TaskStatus::parse(raw).ok_or_else(|| {
            V2Error::invalid(
                &["query", "filterBy"],
                "Input should be 'created', 'started', 'finished', 'failed' or 'stopped'",
                "enum",
            )
        })?;
        filter.statuses = status.statuses().to_vec();
    }
    filter.after = params
        .get("after")
        .map(|raw| date_query("after", raw))
        .transpose()?;
    filter.before = params
        .get("before")
        .map(|raw| date_query("before", raw))
        .transpose()?;
    let (tasks, total) = state
        .core
        .list_v2_tasks(caller.key_id, &filter, page_size, page_number)
        .await?;
    Ok(Json(ListResponse {
        items: tasks.into_iter().map(item_view).collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

pub(crate) fn query_params(query: Option<&str>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// `pageSize` (1–100, default 10) and `pageNumber` (from 1, default 1).
pub(crate) fn paging(params: &BTreeMap<String, String>) -> Result<(i64, i64), V2Error> {
    let int =
        |name: &str, default: i64, range: std::ops::RangeInclusive<i64>| match params.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .parse::<i64>()
                .ok()
                .filter(|v| range.contains(v))
                .ok_or_else(|| {
                    V2Error::invalid(
                        &["query", name],
                        format!(
                            "Input should be an integer between {} and {}",
                            range.start(),
                            range.end()
                        ),
                        "int_parsing",
                    )
                }),
        };
    Ok((
        int(
            "pageSize",
            limits::PAGE_SIZE_DEFAULT,
            limits::PAGE_SIZE_RANGE,
        )?,
        int("pageNumber", 1, 1..=1_000_000)?,
    ))
}

fn uuid_query(name: &str, raw: &str) -> Result<Uuid, V2Error> {
    Uuid::parse_str(raw).map_err(|err| {
        V2Error::invalid(
            &["query", name],
            format!("Input should be a valid UUID, {err}"),
            "uuid_parsing",
        )
    })
}

/// RFC 3339, or Python's `str(datetime)` (space separator; no offset = UTC).
fn date_query(name: &str, raw: &str) -> Result<OffsetDateTime, V2Error> {
    let normalized = raw.trim().replacen(' ', "T", 1);
    OffsetDateTime::parse(&normalized, &Rfc3339)
        .or_else(|_| OffsetDateTime::parse(&format!("{normalized}Z"), &Rfc3339))
        .map_err(|_| {
            V2Error::invalid(
                &["query", name],
                "Input should be a valid datetime (RFC 3339)",
                "datetime_parsing",
            )
        })
}

async fn owned(state: &AppState, caller: &Caller, raw_id: &str) -> Result<V2Task, V2Error> {
    let id = TaskId(path_uuid("task_id", raw_id)?);
    state
        .core
        .get_v2_task(caller.key_id, id)
        .await?
        .ok_or_else(|| V2Error::not_found("Task"))
}

/// `GET /tasks/{id}`.
#[utoipa::path(
    get,
    path = "/tasks/{task_id}",
    tag = "tasks",
    operation_id = "v2_get_task",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
    ),
    responses(
        (status = 200, description = "The task with its steps (every model step: the SDK's stream indexes them; a task has at most `maxSteps`, ≤ 10 000) and output files", body = TaskView),
        (status = 404, description = "No such task for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(task_id): V2Path<String>,
) -> Result<Json<TaskView>, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    Ok(Json(task_view(&state, task).await?))
}

/// `GET /tasks/{id}/status`: the cheap poll target of every SDK helper.
#[utoipa::path(
    get,
    path = "/tasks/{task_id}/status",
    tag = "tasks",
    operation_id = "v2_task_status",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
    ),
    responses(
        (status = 200, description = "The task's status and result", body = TaskStatusView),
        (status = 404, description = "No such task for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn task_status(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(task_id): V2Path<String>,
) -> Result<Json<TaskStatusView>, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    let item = item_view(task);
    Ok(Json(TaskStatusView {
        id: item.id,
        status: item.status,
        output: item.output,
        finished_at: item.finished_at,
        is_success: item.is_success,
        cost: item.cost,
    }))
}

/// `PATCH /tasks/{id}`: `stop`, `stop_task_and_session`, and browserd's `pause` / `resume`
/// (a paused task still reads `started`). Stopping an ended task answers it unchanged.
#[utoipa::path(
    patch,
    path = "/tasks/{task_id}",
    tag = "tasks",
    operation_id = "v2_update_task",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
    ),
    request_body = TaskUpdateRequest,
    responses(
        (status = 200, description = "The task after the action (stopping an ended task answers it unchanged)", body = TaskView),
        (status = 400, description = "The action is illegal in the task's status (e.g. pause a finished task); or malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such task for this key", body = V2ErrorBody),
        (status = 413, description = "Body too large", body = V2ErrorBody),
        (status = 422, description = "Malformed id, or an unknown action", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn update_task(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(task_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<TaskView>, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    let request: UpdateRequest = parse_body(&body)?;
    let id = task.record.id;
    let transition = match request.action.as_str() {
        "stop" | "stop_task_and_session" => Transition::Stop,
        "pause" => Transition::Pause,
        "resume" => Transition::Resume,
        _ => {
            return Err(V2Error::invalid(
                &["body", "action"],
                "Input should be 'stop' or 'stop_task_and_session'",
                "enum",
            ));
        }
    };
    let ended = task.record.status.is_terminal();
    if !(ended && transition == Transition::Stop) {
        match state.core.tasks().control(&caller, id, transition).await {
            Ok(_) => {}
            Err(TaskError::Conflict {
                current_status: Some(current),
                ..
            }) => {
                return Err(V2Error::bad_request(format!(
                    "Cannot {} a task that is {}",
                    request.action,
                    V2TaskStatus::from(current).as_str()
                )));
            }
            Err(err) => return Err(ApiError::from(err).into()),
        }
    }
    if request.action == "stop_task_and_session"
        && let Some(session) = task.session_id
    {
        super::sessions::stop_session_and_tasks(&state, &caller, session).await?;
    }
    tracing::info!(task_id = %id, action = %request.action, "task updated (v2)");
    let task = owned(&state, &caller, &task_id).await?;
    Ok(Json(task_view(&state, task).await?))
}

/// `GET /tasks/{id}/logs`: where to download the task's log (its AgentHistory JSON).
#[utoipa::path(
    get,
    path = "/tasks/{task_id}/logs",
    tag = "tasks",
    operation_id = "v2_task_logs",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
    ),
    responses(
        (status = 200, description = "Where to download the task's log (its whole AgentHistory)", body = LogsResponse),
        (status = 404, description = "No such task for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn task_logs(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(task_id): V2Path<String>,
) -> Result<Json<LogsResponse>, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    Ok(Json(LogsResponse {
        download_url: absolute_url(&state, &format!("/api/v2/tasks/{}/history", task.record.id)),
    }))
}

/// `GET /tasks/{id}/history`: the whole AgentHistory, `{"history": [...], "usage": ...}` (the
/// items `/v1/tasks/{id}/history` pages), the download behind the logs' `downloadUrl`. It is
/// streamed: read from the database one page of [`limits::STEP_PAGE_MAX`] items at a time, so a
/// long task's log never sits whole in the server's memory. The usage is read after the last
/// item.
#[utoipa::path(
    get,
    path = "/tasks/{task_id}/history",
    tag = "tasks",
    operation_id = "v2_task_history",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
    ),
    responses(
        (status = 200, description = "The whole AgentHistory `{\"history\": […], \"usage\": …}`, streamed", body = V2History),
        (status = 404, description = "No such task for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn task_history(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(task_id): V2Path<String>,
) -> Result<Response, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    let id = task.record.id;
    let key = caller.key_id;
    enum Part {
        Open,
        Items {
            after_step: Option<i32>,
            first: bool,
        },
        Usage,
        Done,
    }
    let body = futures::stream::unfold(Part::Open, move |part| {
        let store = state.core.clone();
        async move {
            let (bytes, next) = match part {
                Part::Open => (
                    b"{\"history\":[".to_vec(),
                    Part::Items {
                        after_step: None,
                        first: true,
                    },
                ),
                Part::Items { after_step, first } => {
                    let page = dto::limits::STEP_PAGE_MAX;
                    let mut records = match store.step_records_page(id, after_step, page + 1).await
                    {
                        Ok(records) => records,
                        Err(err) => return Some((Err(history_error(id, &err)), Part::Done)),
                    };
                    let next_after =
                        browserd_tasks::next_page_after(&mut records, page, |(number, _)| *number);
                    let mut bytes = Vec::new();
                    for (index, (_, record)) in records.iter().enumerate() {
                        if !(first && index == 0) {
                            bytes.push(b',');
                        }
                        if let Err(err) = serde_json::to_writer(&mut bytes, record) {
                            return Some((Err(history_error(id, &err)), Part::Done));
                        }
                    }
                    let first = first && records.is_empty();
                    let next = match next_after {
                        Some(after) => Part::Items {
                            after_step: Some(after),
                            first,
                        },
                        None => Part::Usage,
                    };
                    (bytes, next)
                }
                Part::Usage => {
                    let usage = match store.get_task(Some(key), id).await {
                        Ok(task) => task.and_then(|t| t.usage).unwrap_or_else(|| json!({})),
                        Err(err) => return Some((Err(history_error(id, &err)), Part::Done)),
                    };
                    let mut bytes = b"],\"usage\":".to_vec();
                    if let Err(err) = serde_json::to_writer(&mut bytes, &usage) {
                        return Some((Err(history_error(id, &err)), Part::Done));
                    }
                    bytes.push(b'}');
                    (bytes, Part::Done)
                }
                Part::Done => return None,
            };
            Some((Ok(axum::body::Bytes::from(bytes)), next))
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .map_err(|err| V2Error::Internal(err.to_string()))
}

/// A failure in the middle of a streamed history: logged; the response is cut short (its
/// status is already sent), so the client sees a broken download, never a partial document
/// that parses.
fn history_error(id: TaskId, err: &dyn std::fmt::Display) -> std::io::Error {
    tracing::error!(task_id = %id, error = %err, "streaming a task's history failed");
    std::io::Error::other(format!("reading the history of task {id} failed"))
}

/// `GET /tasks/{id}/steps/{n}/screenshot`: a step's screenshot (the steps' `screenshotUrl`).
#[utoipa::path(
    get,
    path = "/tasks/{task_id}/steps/{number}/screenshot",
    tag = "tasks",
    operation_id = "v2_step_screenshot",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
        ("number" = i32, Path, description = "Step number", minimum = 0),
    ),
    responses(
        (status = 200, description = "Image bytes", content_type = "image/*", body = Vec<u8>),
        (status = 404, description = "No such task for this key, or the step has no screenshot", body = V2ErrorBody),
        (status = 422, description = "Malformed id or step number", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn step_screenshot(
    State(state): State<AppState>,
    caller: Caller,
    V2Path((task_id, number)): V2Path<(String, String)>,
) -> Result<Response, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    let number: i32 = number.parse().map_err(|_| {
        V2Error::invalid(
            &["path", "number"],
            "Input should be a valid integer",
            "int_parsing",
        )
    })?;
    // The task service's read, as `/v1`'s; only the cloud's words differ.
    let (content_type, bytes) = match state
        .core
        .tasks()
        .screenshot(&caller, task.record.id, number)
        .await
    {
        Ok(screenshot) => screenshot,
        Err(TaskError::NotFound {
            code: "screenshot_not_found",
            ..
        }) => return Err(V2Error::not_found("Screenshot")),
        Err(err) => return Err(err.into()),
    };
    let content_type = HeaderValue::try_from(content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "private, max-age=86400, immutable")
        .header("x-content-type-options", "nosniff")
        .body(Body::from(bytes))
        .map_err(|err| V2Error::Internal(err.to_string()))
}

/// `GET /files/tasks/{id}/output-files/{file}`: `{id, fileName, downloadUrl}`, where
/// `downloadUrl` is a signed link valid for an hour that needs no key
/// (`crate::output_files`); 404 `Output file not found` (also for a file whose content was
/// skipped).
#[utoipa::path(
    get,
    path = "/files/tasks/{task_id}/output-files/{file_id}",
    tag = "files",
    operation_id = "v2_output_file",
    params(
        ("task_id" = uuid::Uuid, Path, description = "Task id"),
        ("file_id" = uuid::Uuid, Path, description = "Output file id"),
    ),
    responses(
        (status = 200, description = "The file's name and a signed `downloadUrl`, valid for an hour, that needs no key", body = TaskOutputFileResponse),
        (status = 404, description = "No such task or file for this key (or the file's content was skipped)", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn output_file(
    State(state): State<AppState>,
    caller: Caller,
    V2Path((task_id, file_id)): V2Path<(String, String)>,
) -> Result<Json<TaskOutputFileResponse>, V2Error> {
    let task = owned(&state, &caller, &task_id).await?;
    let file_id = path_uuid("file_id", &file_id)?;
    let file = state
        .core
        .output_file(Some(task.record.id), file_id)
        .await?
        .ok_or_else(|| V2Error::not_found("Output file"))?;
    Ok(Json(TaskOutputFileResponse {
        id: file.record.id,
        download_url: crate::output_files::download_url(&state, &file),
        file_name: file.record.file_name,
    }))
}

/// The listing shape of a task.
pub(crate) fn item_view(task: V2Task) -> TaskItemView {
    let V2Task {
        record,
        session_id,
        options,
    } = task;
    let llm = options
        .as_ref()
        .and_then(|o| o.get("llm"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or(record.options.model.clone())
        .unwrap_or_else(|| "default".to_owned());
    let cost = record
        .usage
        .as_ref()
        .and_then(|u| u.get("total_cost_usd"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    // A failed task's reason is its output (v2 has no error field).
    let output = match record.status {
        TaskStatus::Failed => record.output.or(record.error),
        _ => record.output,
    };
    TaskItemView {
        id: record.id.0,
        // A /v1 task is alone in a session of its own, named like the task.
        session_id: session_id.unwrap_or(record.id.0),
        llm,
        task: record.task,
        // Paused before it ever ran: still `created`.
        status: if record.status == TaskStatus::Paused && record.started_at.is_none() {
            V2TaskStatus::Created
        } else {
            record.status.into()
        },
        created_at: record.created_at,
        started_at: record.started_at,
        finished_at: record.finished_at,
        metadata: Some(record.options.metadata),
        output,
        browser_use_version: None,
        is_success: record.is_success,
        judgement: None,
        judge_verdict: None,
        cost: Some(cost_string(cost)),
    }
}

/// The full shape of a task: its steps (model steps 1..N; browserd's step 0, the initial
/// navigation, is not a v2 step) with absolute screenshot URLs.
async fn task_view(state: &AppState, task: V2Task) -> Result<TaskView, V2Error> {
    let id = task.record.id;
    let records = state.core.list_steps(id).await?;
    let mut previous_end: Option<OffsetDateTime> = None;
    let mut steps = Vec::with_capacity(records.len());
    for step in records {
        let start = previous_end.unwrap_or(step.started_at);
        previous_end = Some(step.finished_at);
        if step.number < 1 {
            continue;
        }
        let output = step.model_output.unwrap_or(Value::Null);
        let text = |key: &str| {
            output
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let actions = output
            .get("action")
            .and_then(Value::as_array)
            .map(|actions| actions.iter().map(Value::to_string).collect())
            .unwrap_or_default();
        steps.push(TaskStepView {
            number: step.number,
            memory: text("memory"),
            evaluation_previous_goal: text("evaluation_previous_goal"),
            next_goal: text("next_goal"),
            url: step.url.unwrap_or_default(),
            actions,
            screenshot_url: step.screenshot.map(|_| {
                absolute_url(
                    state,
                    &format!("/api/v2/tasks/{id}/steps/{}/screenshot", step.number),
                )
            }),
            duration: Some((step.finished_at - start).as_seconds_f64().max(0.0)),
        });
    }
    // Files whose content was skipped (over the caps) are listed on /v1 only: v2 clients
    // download every file they see.
    let output_files = state
        .core
        .list_output_files(id)
        .await?
        .into_iter()
        .filter(|file| file.skipped.is_none())
        .map(|file| FileView {
            id: file.id,
            file_name: file.file_name,
        })
        .collect();
    Ok(TaskView {
        item: item_view(task),
        steps,
        output_files,
    })
}
