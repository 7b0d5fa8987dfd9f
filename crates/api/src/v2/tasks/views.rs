//! The wire shapes of a task: the listing's item and the full view with steps and files.

use browserd_tasks::records::V2Task;
use browserd_types::TaskStatus;
use browserd_types::v2::{
    FileView, TaskItemView, TaskStepView, TaskView, V2TaskStatus, cost_string,
};
use serde_json::Value;
use time::OffsetDateTime;

use super::super::{V2Error, absolute_url};
use crate::AppState;

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
pub(super) async fn task_view(state: &AppState, task: V2Task) -> Result<TaskView, V2Error> {
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
