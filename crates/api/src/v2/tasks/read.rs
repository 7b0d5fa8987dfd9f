//! `GET /tasks/{id}` and `GET /tasks/{id}/status`.

use axum::Json;
use axum::extract::State;
use browserd_types::v2::{TaskStatusView, TaskView};

use super::super::{V2Error, V2ErrorBody, V2Path};
use super::owned;
use super::views::{item_view, task_view};
use crate::AppState;
use crate::extract::Caller;

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
