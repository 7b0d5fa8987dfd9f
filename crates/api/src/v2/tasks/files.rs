//! A step's screenshot and a task's output files.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use browserd_tasks::TaskError;
use browserd_types::v2::TaskOutputFileResponse;

use super::super::{V2Error, V2ErrorBody, V2Path, path_uuid};
use super::owned;
use crate::AppState;
use crate::extract::Caller;

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
