//! `POST /tasks`: a v2 request checked in v2's words (FastAPI's 422 naming the field the
//! client sent), then mapped once onto the task service's input.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_tasks::Placement;
use browserd_tasks::records::SessionChoice;
use browserd_types::dto::{self, ViewportSize};
use browserd_types::v2::{CreateTaskRequest, SessionSettings, TaskCreatedResponse, limits};
use serde_json::{Value, json};
use uuid::Uuid;

use super::super::{V2Body, V2Error, V2ErrorBody, parse_body};
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
    refuse_cloud_only(&request)?;
    let profile_id = task_profile(&state, &caller, &request).await?;
    check_text_fields(&request)?;
    let (use_vision, vision_auto) = vision(request.vision.as_ref())?;
    let checked = Checked {
        use_vision,
        output_schema: output_schema(request.structured_output.as_deref())?,
        viewport: viewport(&request)?,
        profile_id,
    };
    check_secrets(&request)?;
    let placement = placement(&request, vision_auto);
    let created = state
        .core
        .tasks()
        .create(&caller, core_input(request, checked), None, placement)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TaskCreatedResponse {
            id: created.view.id.0,
            session_id: created.session_id.unwrap_or_default(),
        }),
    )
        .into_response())
}

/// What the checks made of the request's v2-only shapes, for [`core_input`].
struct Checked {
    use_vision: Option<bool>,
    output_schema: Option<Value>,
    viewport: Option<ViewportSize>,
    profile_id: Option<Uuid>,
}

/// 501 for the features of the cloud browserd does not implement.
fn refuse_cloud_only(request: &CreateTaskRequest) -> Result<(), V2Error> {
    if request.op_vault_id.is_some() {
        return Err(cloud_only("opVaultId (1Password vaults)"));
    }
    if request.judge == Some(true) {
        return Err(cloud_only("judge"));
    }
    if request.skill_ids.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(cloud_only("skillIds"));
    }
    Ok(())
}

fn cloud_only(feature: &str) -> V2Error {
    V2Error::Detail(
        StatusCode::NOT_IMPLEMENTED,
        format!("{feature} is a browser-use cloud feature this server does not implement"),
    )
}

/// The task's profile: `sessionSettings.profileId` for a new session, the session's own for
/// an existing one.
async fn task_profile(
    state: &AppState,
    caller: &Caller,
    request: &CreateTaskRequest,
) -> Result<Option<Uuid>, V2Error> {
    let raw = request
        .session_settings
        .as_ref()
        .and_then(|s| s.profile_id.as_ref());
    Ok(match (raw, request.session_id) {
        (Some(raw), None) => Some(
            super::super::profiles::owned_profile(
                state,
                caller,
                &["body", "sessionSettings", "profileId"],
                raw,
            )
            .await?,
        ),
        (_, Some(session)) => state.core.session_profile(caller.key_id, session).await?,
        (None, None) => None,
    })
}

/// `task`, `maxSteps`, `systemPromptExtension` and `metadata` within v2's limits.
fn check_text_fields(request: &CreateTaskRequest) -> Result<(), V2Error> {
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
    Ok(())
}

/// `vision`: a boolean or `"auto"` → (`useVision`, whether it is `auto`).
fn vision(vision: Option<&Value>) -> Result<(Option<bool>, bool), V2Error> {
    match vision {
        None | Some(Value::Null) => Ok((None, false)),
        Some(Value::Bool(b)) => Ok((Some(*b), false)),
        Some(Value::String(s)) if s == "auto" => Ok((Some(true), true)),
        Some(_) => Err(V2Error::invalid(
            &["body", "vision"],
            "Input should be a valid boolean or 'auto'",
            "bool_parsing",
        )),
    }
}

/// `structuredOutput`: a JSON Schema object, stringified.
fn output_schema(text: Option<&str>) -> Result<Option<Value>, V2Error> {
    text.map(|text| {
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
    .transpose()
}

/// The new session's viewport: both `sessionSettings` sizes (ignored for an existing session).
/// Each size is checked when given, also alone (it is used only with the other one).
fn viewport(request: &CreateTaskRequest) -> Result<Option<ViewportSize>, V2Error> {
    let settings = request.session_settings.clone().unwrap_or_default();
    check_screen_sizes(&settings)?;
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
        return Err(V2Error::from(ApiError::validation(field, message)));
    }
    Ok(viewport)
}

fn check_screen_sizes(settings: &SessionSettings) -> Result<(), V2Error> {
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
    Ok(())
}

/// Flat secrets (the SDK's shape) need allowedDomains or the opt-in: said in v2's names.
fn check_secrets(request: &CreateTaskRequest) -> Result<(), V2Error> {
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
    Ok(())
}

/// Where the task runs (a new one-off session or the caller's session `sessionId`), with the
/// v2 options kept beside it.
fn placement(request: &CreateTaskRequest, vision_auto: bool) -> Placement {
    Placement::Session {
        choice: match request.session_id {
            Some(id) => SessionChoice::Existing(id),
            None => SessionChoice::New,
        },
        v2_options: json!({
            "llm": request.llm,
            "flashMode": request.flash_mode.unwrap_or(false),
            "thinking": request.thinking,
            "visionAuto": vision_auto,
            "systemPromptExtension": request.system_prompt_extension,
        }),
    }
}

/// The one mapping of a v2 request onto the task service's input.
fn core_input(request: CreateTaskRequest, checked: Checked) -> dto::CreateTaskRequest {
    dto::CreateTaskRequest {
        task: Some(request.task),
        start_url: request.start_url,
        max_steps: request.max_steps,
        model: request.llm,
        allowed_domains: request.allowed_domains,
        secrets: request.secrets,
        allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
        output_schema: checked.output_schema,
        use_vision: checked.use_vision,
        metadata: request.metadata,
        viewport: checked.viewport,
        highlight_elements: request.highlight_elements,
        profile_id: checked.profile_id,
        ..dto::CreateTaskRequest::default()
    }
}
