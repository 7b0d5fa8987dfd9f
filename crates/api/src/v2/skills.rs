//! `/api/v2/skills`: browser-use cloud's skills (the SDK's `client.skills.*`) over browserd's
//! skills (`/v1/skills`, the same rows and the same task core). `execute` answers when the
//! execution's task has ended, as the cloud's does; an execution is a task like any other.

use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use browserd_tasks::records::FeedItem;
use browserd_types::dto::TaskView;
use browserd_types::skills::{
    CreateSkillRequest, RefineSkillRequest, RunSkillRequest, SkillView, UpdateSkillRequest,
};
use browserd_types::v2::ListResponse;
use browserd_types::v2_skills::{
    SKILL_PROMPT_MIN_CHARS, SKILL_TEXT_MAX_CHARS, SKILL_TITLE_MAX_CHARS, V2CreateSkillRequest,
    V2ExecuteSkillRequest, V2ExecuteSkillResponse, V2RefineSkillRequest, V2SkillExecutionOutput,
    V2SkillExecutionView, V2SkillId, V2SkillParameter, V2SkillView, V2UpdateSkillRequest,
};
use browserd_types::{TaskId, TaskStatus};
use serde_json::Value;
use uuid::Uuid;

use super::tasks::{paging, query_params};
use super::{V2Body, V2Error, V2ErrorBody, V2Path, parse_body, path_uuid};
use crate::AppState;
use crate::extract::Caller;

/// How long `execute` waits for its execution to end before answering that it still runs.
const EXECUTE_WAIT: Duration = Duration::from_secs(600);
/// Page size used to read a key's skills or a skill's executions for a v2 page.
const READ_PAGE: i64 = 100;
/// The most skills or executions a v2 listing reads through.
const READ_MAX: usize = 10_000;

/// A text field's length checked as the cloud's models check it: FastAPI's 422.
fn length(field: &str, text: &str, min: usize, max: usize) -> Result<(), V2Error> {
    let chars = text.chars().count();
    if chars < min {
        return Err(V2Error::invalid(
            &["body", field],
            format!("String should have at least {min} characters"),
            "string_too_short",
        ));
    }
    if chars > max {
        return Err(V2Error::invalid(
            &["body", field],
            format!("String should have at most {max} characters"),
            "string_too_long",
        ));
    }
    Ok(())
}

fn view(skill: SkillView) -> V2SkillView {
    let domains = skill
        .versions
        .iter()
        .flat_map(|v| script_domains(&v.script))
        .fold(Vec::<String>::new(), |mut all, domain| {
            if !all.contains(&domain) {
                all.push(domain);
            }
            all
        });
    V2SkillView {
        id: skill.id,
        slug: None,
        title: skill.title,
        description: skill.description,
        categories: Vec::new(),
        domains,
        goal: Some(skill.goal),
        agent_prompt: Some(skill.agent_prompt),
        status: skill.status,
        parameters: skill
            .parameters
            .into_iter()
            .map(|p| V2SkillParameter {
                name: p.name,
                kind: p.kind,
                required: p.required,
                description: p.description,
                default: p.default,
                cookie_domain: None,
            })
            .collect(),
        output_schema: skill
            .output_schema
            .unwrap_or_else(|| serde_json::json!({"type": "string"})),
        is_enabled: skill.is_enabled,
        is_public: false,
        icon_url: None,
        first_published_at: None,
        last_published_at: None,
        current_version: skill.current_version,
        current_version_started_at: skill.current_version_started_at,
        current_version_finished_at: skill.current_version_finished_at,
        code: None,
        cloned_from_skill_id: None,
        created_at: skill.created_at,
        updated_at: skill.updated_at,
    }
}

/// The hosts a version's recorded steps were on.
fn script_domains(script: &Value) -> Vec<String> {
    let Some(steps) = script.pointer("/steps/history").and_then(Value::as_array) else {
        return Vec::new();
    };
    steps
        .iter()
        .filter_map(|step| step.pointer("/state/url").and_then(Value::as_str))
        .filter_map(|url| url::Url::parse(url).ok())
        .filter_map(|url| url.host_str().map(str::to_owned))
        .collect()
}

fn execution_view(skill_id: Uuid, task: &TaskView) -> V2SkillExecutionView {
    let status = match task.status {
        TaskStatus::Finished if task.is_success != Some(false) => "completed",
        status if status.is_terminal() => "failed",
        _ => "running",
    };
    V2SkillExecutionView {
        id: task.id.0,
        skill_id,
        status: status.to_owned(),
        success: task.status == TaskStatus::Finished && task.is_success != Some(false),
        started_at: task.started_at.unwrap_or(task.created_at),
        finished_at: task.finished_at,
        latency_ms: latency_ms(task),
        has_output: task.output.is_some(),
    }
}

fn latency_ms(task: &TaskView) -> Option<i64> {
    let finished = task.finished_at?;
    let started = task.started_at.unwrap_or(task.created_at);
    i64::try_from((finished - started).whole_milliseconds()).ok()
}

/// The execution's result: its output as JSON when it is JSON (an output schema), else text.
fn result_value(task: &TaskView) -> Value {
    match &task.output {
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
        None => Value::Null,
    }
}

/// `POST /skills`: the skill, `generating` until its first run has been learnt.
#[utoipa::path(
    post,
    path = "/skills",
    tag = "skills",
    operation_id = "v2_create_skill",
    request_body = V2CreateSkillRequest,
    responses(
        (status = 201, description = "The new skill's id; it is generated by an agent run", body = V2SkillId),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 422, description = "Invalid field", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited or a quota of the key; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn create_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Body(body): V2Body,
) -> Result<Response, V2Error> {
    let request: V2CreateSkillRequest = parse_body(&body)?;
    if let Some(title) = &request.title {
        length("title", title, 0, SKILL_TITLE_MAX_CHARS)?;
    }
    if let Some(description) = &request.description {
        length("description", description, 0, SKILL_TEXT_MAX_CHARS)?;
    }
    length("goal", &request.goal, 1, SKILL_TEXT_MAX_CHARS)?;
    length(
        "agentPrompt",
        &request.agent_prompt,
        SKILL_PROMPT_MIN_CHARS,
        usize::MAX,
    )?;
    let create = CreateSkillRequest {
        prompt: Some(request.agent_prompt),
        goal: Some(request.goal),
        title: request.title.filter(|t| !t.trim().is_empty()),
        description: request.description,
        output_schema: request.output_schema,
        ..CreateSkillRequest::default()
    };
    let skill = state.core.create_skill(&caller, create, None).await?;
    tracing::info!(skill_id = %skill.id, "skill created (v2)");
    Ok((StatusCode::CREATED, Json(V2SkillId { id: skill.id })).into_response())
}

/// Every skill of the caller, newest first.
async fn all_skills(
    state: &AppState,
    caller: &Caller,
    query: Option<&str>,
) -> Result<Vec<SkillView>, V2Error> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = state
            .core
            .list_skills(caller, query, Some(READ_PAGE), cursor.as_deref())
            .await?;
        all.extend(page.items);
        match page.next_cursor {
            Some(next) if all.len() < READ_MAX => cursor = Some(next),
            _ => return Ok(all),
        }
    }
}

/// The page `page_number` of `items` (`page_size` each).
fn page_of<T>(items: Vec<T>, page_size: i64, page_number: i64) -> Vec<T> {
    let skip = usize::try_from((page_number - 1) * page_size).unwrap_or(usize::MAX);
    let take = usize::try_from(page_size).unwrap_or(0);
    items.into_iter().skip(skip).take(take).collect()
}

/// `GET /skills?pageSize&pageNumber&isEnabled&query`.
#[utoipa::path(
    get,
    path = "/skills",
    tag = "skills",
    operation_id = "v2_list_skills",
    params(
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
        ("isEnabled" = Option<bool>, Query, description = "Only enabled (true) or disabled (false) skills"),
        ("query" = Option<String>, Query, description = "Only skills whose title, goal or description contains this"),
    ),
    responses(
        (status = 200, description = "A page of skills, newest first", body = ListResponse<V2SkillView>),
        (status = 422, description = "Invalid query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_skills(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<V2SkillView>>, V2Error> {
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let enabled = match params.get("isEnabled").map(String::as_str) {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => {
            return Err(V2Error::invalid(
                &["query", "isEnabled"],
                "Input should be a valid boolean",
                "bool_parsing",
            ));
        }
    };
    let text = params
        .get("query")
        .map(String::as_str)
        .filter(|q| !q.is_empty());
    let mut skills = all_skills(&state, &caller, text).await?;
    if let Some(enabled) = enabled {
        skills.retain(|s| s.is_enabled == enabled);
    }
    let total = i64::try_from(skills.len()).unwrap_or(i64::MAX);
    Ok(Json(ListResponse {
        items: page_of(skills, page_size, page_number)
            .into_iter()
            .map(view)
            .collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

/// `GET /skills/{skill_id}`.
#[utoipa::path(
    get,
    path = "/skills/{skill_id}",
    tag = "skills",
    operation_id = "v2_get_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill", body = V2SkillView),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn get_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
) -> Result<Json<V2SkillView>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    Ok(Json(view(state.core.get_skill(&caller, id).await?)))
}

/// `PATCH /skills/{skill_id}`: title, description and `isEnabled` (categories and domains
/// are the cloud's marketplace fields: accepted, not kept).
#[utoipa::path(
    patch,
    path = "/skills/{skill_id}",
    tag = "skills",
    operation_id = "v2_update_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = V2UpdateSkillRequest,
    responses(
        (status = 200, description = "The updated skill", body = V2SkillView),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id or invalid field", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn update_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<V2SkillView>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    let request: V2UpdateSkillRequest = parse_body(&body)?;
    if let Some(title) = &request.title {
        length("title", title, 1, SKILL_TITLE_MAX_CHARS)?;
    }
    if let Some(description) = &request.description {
        length("description", description, 0, SKILL_TEXT_MAX_CHARS)?;
    }
    let update = UpdateSkillRequest {
        title: request.title,
        description: request.description,
        is_enabled: request.is_enabled,
    };
    Ok(Json(view(
        state.core.update_skill(&caller, id, update).await?,
    )))
}

/// `DELETE /skills/{skill_id}`: 204; its executions stay as tasks.
#[utoipa::path(
    delete,
    path = "/skills/{skill_id}",
    tag = "skills",
    operation_id = "v2_delete_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 204, description = "Deleted with its versions"),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn delete_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
) -> Result<StatusCode, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    state.core.delete_skill(&caller, id).await?;
    tracing::info!(skill_id = %id, "skill deleted (v2)");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /skills/{skill_id}/cancel`: stops its generation.
#[utoipa::path(
    post,
    path = "/skills/{skill_id}/cancel",
    tag = "skills",
    operation_id = "v2_cancel_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill, `cancelled`", body = V2SkillView),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 400, description = "Not generating", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn cancel_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
) -> Result<Json<V2SkillView>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    Ok(Json(view(state.core.cancel_skill(&caller, id).await?)))
}

/// `POST /skills/{skill_id}/rollback`: the previous version becomes current.
#[utoipa::path(
    post,
    path = "/skills/{skill_id}/rollback",
    tag = "skills",
    operation_id = "v2_rollback_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    responses(
        (status = 200, description = "The skill on its previous version", body = V2SkillView),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 400, description = "No earlier version", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn rollback_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
) -> Result<Json<V2SkillView>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    Ok(Json(view(state.core.rollback_skill(&caller, id).await?)))
}

/// `POST /skills/{skill_id}/refine`: generates it again with the feedback.
#[utoipa::path(
    post,
    path = "/skills/{skill_id}/refine",
    tag = "skills",
    operation_id = "v2_refine_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = V2RefineSkillRequest,
    responses(
        (status = 200, description = "The skill's id; the refined version is generated by an agent run", body = V2SkillId),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 400, description = "A generation is running", body = V2ErrorBody),
        (status = 422, description = "Malformed id or invalid field", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited or a quota of the key; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn refine_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<V2SkillId>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    let request: V2RefineSkillRequest = parse_body(&body)?;
    length(
        "feedback",
        &request.feedback,
        SKILL_PROMPT_MIN_CHARS,
        usize::MAX,
    )?;
    let mut feedback = request.feedback;
    if let Some(output) = request.test_output.filter(|t| !t.trim().is_empty()) {
        feedback.push_str(&format!("\nThe last test's output: {output}"));
    }
    if let Some(logs) = request.test_logs.filter(|t| !t.trim().is_empty()) {
        feedback.push_str(&format!("\nThe last test's logs: {logs}"));
    }
    let skill = state
        .core
        .refine_skill(
            &caller,
            id,
            RefineSkillRequest {
                feedback,
                ..RefineSkillRequest::default()
            },
            None,
        )
        .await?;
    Ok(Json(V2SkillId { id: skill.id }))
}

/// Waits (at most [`EXECUTE_WAIT`]) for task `id` to end, on its events; its view then.
async fn ended(state: &AppState, caller: &Caller, id: TaskId) -> Result<TaskView, V2Error> {
    let mut feed = state.core.tasks().follow(id, 0);
    let deadline = tokio::time::Instant::now() + EXECUTE_WAIT;
    loop {
        let task = state.core.tasks().get(caller, id).await?;
        if task.status.is_terminal() {
            return Ok(task);
        }
        let item = tokio::select! {
            () = tokio::time::sleep_until(deadline) => return Ok(task),
            item = feed.next() => item?,
        };
        if matches!(item, FeedItem::Closed | FeedItem::Deleted) {
            return state.core.tasks().get(caller, id).await.map_err(Into::into);
        }
    }
}

/// `POST /skills/{skill_id}/execute`: runs the current version with `parameters` and answers
/// when it has ended (no model unless a step had to be healed).
#[utoipa::path(
    post,
    path = "/skills/{skill_id}/execute",
    tag = "skills",
    operation_id = "v2_execute_skill",
    params(("skill_id" = uuid::Uuid, Path, description = "Skill id")),
    request_body = V2ExecuteSkillRequest,
    responses(
        (status = 200, description = "The execution's outcome", body = V2ExecuteSkillResponse),
        (status = 400, description = "Malformed JSON", body = V2ErrorBody),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 400, description = "The skill is disabled or not finished", body = V2ErrorBody),
        (status = 422, description = "Malformed id, or a parameter missing, unknown or of the wrong type", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited or a quota of the key; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn execute_skill(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
    V2Body(body): V2Body,
) -> Result<Json<V2ExecuteSkillResponse>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    let request: V2ExecuteSkillRequest = if body.is_empty() {
        V2ExecuteSkillRequest::default()
    } else {
        parse_body(&body)?
    };
    let run = RunSkillRequest {
        parameters: request.parameters.unwrap_or_default(),
        ..RunSkillRequest::default()
    };
    let task = state.core.run_skill(&caller, id, run, None).await?;
    let task = ended(&state, &caller, task.id).await?;
    let success = task.status == TaskStatus::Finished && task.is_success != Some(false);
    let error = if task.status.is_terminal() {
        (!success).then(|| {
            task.error
                .clone()
                .unwrap_or_else(|| format!("the execution ended {}", task.status))
        })
    } else {
        Some(format!(
            "the execution (task {}) is still running after {} s",
            task.id,
            EXECUTE_WAIT.as_secs()
        ))
    };
    Ok(Json(V2ExecuteSkillResponse {
        success,
        result: result_value(&task),
        error,
        stderr: None,
        latency_ms: latency_ms(&task),
    }))
}

/// Every execution of the skill, newest first.
async fn all_executions(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> Result<Vec<TaskView>, V2Error> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = state
            .core
            .skill_runs(caller, id, Some(READ_PAGE), cursor.as_deref())
            .await?;
        all.extend(page.items);
        match page.next_cursor {
            Some(next) if all.len() < READ_MAX => cursor = Some(next),
            _ => return Ok(all),
        }
    }
}

/// `GET /skills/{skill_id}/executions?pageSize&pageNumber`.
#[utoipa::path(
    get,
    path = "/skills/{skill_id}/executions",
    tag = "skills",
    operation_id = "v2_list_skill_executions",
    params(
        ("skill_id" = uuid::Uuid, Path, description = "Skill id"),
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
    ),
    responses(
        (status = 200, description = "A page of executions, newest first", body = ListResponse<V2SkillExecutionView>),
        (status = 404, description = "No such skill for this key", body = V2ErrorBody),
        (status = 422, description = "Malformed id or query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_executions(
    State(state): State<AppState>,
    caller: Caller,
    V2Path(skill_id): V2Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<V2SkillExecutionView>>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let executions = all_executions(&state, &caller, id).await?;
    let total = i64::try_from(executions.len()).unwrap_or(i64::MAX);
    Ok(Json(ListResponse {
        items: page_of(executions, page_size, page_number)
            .iter()
            .map(|task| execution_view(id, task))
            .collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

/// `GET /skills/{skill_id}/executions/{execution_id}/output`: the result as a `data:` URL
/// (JSON), so the link itself carries it and no key or signature is needed to read it.
#[utoipa::path(
    get,
    path = "/skills/{skill_id}/executions/{execution_id}/output",
    tag = "skills",
    operation_id = "v2_skill_execution_output",
    params(
        ("skill_id" = uuid::Uuid, Path, description = "Skill id"),
        ("execution_id" = uuid::Uuid, Path, description = "Execution id (its task id)"),
    ),
    responses(
        (status = 200, description = "The execution's output", body = V2SkillExecutionOutput),
        (status = 404, description = "No such skill or execution for this key, or no output yet", body = V2ErrorBody),
        (status = 422, description = "Malformed id", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn execution_output(
    State(state): State<AppState>,
    caller: Caller,
    V2Path((skill_id, execution_id)): V2Path<(String, String)>,
) -> Result<Json<V2SkillExecutionOutput>, V2Error> {
    let id = path_uuid("skill_id", &skill_id)?;
    let execution = TaskId(path_uuid("execution_id", &execution_id)?);
    let task = state.core.skill_run(&caller, id, execution).await?;
    if task.output.is_none() {
        return Err(V2Error::not_found("Output"));
    }
    let json = serde_json::to_vec(&result_value(&task)).unwrap_or_default();
    let encoded = base64::engine::general_purpose::STANDARD.encode(json);
    Ok(Json(V2SkillExecutionOutput {
        download_url: format!("data:application/json;base64,{encoded}"),
    }))
}
