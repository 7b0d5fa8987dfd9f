//! `PATCH /tasks/{id}`: stop (the task, or the task and its session), pause, resume.

use axum::Json;
use axum::extract::State;
use browserd_tasks::TaskError;
use browserd_types::Transition;
use browserd_types::v2::{TaskView, UpdateRequest, V2TaskStatus};

use super::super::{TaskUpdateRequest, V2Body, V2Error, V2ErrorBody, V2Path, parse_body};
use super::owned;
use super::views::task_view;
use crate::AppState;
use crate::extract::Caller;

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
            Err(err) => return Err(err.into()),
        }
    }
    if request.action == "stop_task_and_session"
        && let Some(session) = task.session_id
    {
        super::super::sessions::stop_session_and_tasks(&state, &caller, session).await?;
    }
    tracing::info!(task_id = %id, action = %request.action, "task updated (v2)");
    let task = owned(&state, &caller, &task_id).await?;
    Ok(Json(task_view(&state, task).await?))
}
