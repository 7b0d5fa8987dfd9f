//! `GET /tasks/{id}/logs` and the download it points at, `GET /tasks/{id}/history`: the whole
//! AgentHistory, streamed page by page.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;
use browserd_types::TaskId;
use browserd_types::dto::limits;
use browserd_types::v2::LogsResponse;
use serde_json::json;

use super::super::{V2Error, V2ErrorBody, V2History, V2Path, absolute_url};
use super::owned;
use crate::AppState;
use crate::extract::Caller;

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
                    let page = limits::STEP_PAGE_MAX;
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
