//! The MCP server handler: the tool router and what each tool returns.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use browserd_types::dto::{StepView, TaskView};
use browserd_types::{TaskStatus, Transition};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use crate::params::{
    AnswerTaskParams, ListSkillsParams, ListTasksParams, RunSkillParams, RunTaskParams,
    ScreenshotParams, TaskIdParams,
};
use crate::{Backend, CallContext, TaskUpdate, ToolError, parse_task_id};

/// How long `run_task` waits for the end when the caller does not say.
pub const DEFAULT_WAIT_S: u64 = 120;
/// The longest wait a caller can ask of `run_task`.
pub const MAX_WAIT_S: u64 = 600;
/// Steps `get_task` describes (the latest ones).
const LAST_STEPS: usize = 5;
/// Characters of a text shown in a summary (a task, a goal, an error).
const SUMMARY_CHARS: usize = 300;

const INSTRUCTIONS: &str = "browserd runs LLM browser agents. `run_task` gives a task (in plain \
words, optionally a start URL, allowed domains and a JSON Schema for the result) to an agent \
driving a headless browser and waits for its result; a task still running after `wait_s` is \
followed with `get_task` and controlled with `stop_task`, `pause_task` and `resume_task`. \
A task that asks a question (status `waiting`, with its `question`) waits for `answer_task`. \
`get_screenshot` shows what the browser showed at a step.";

/// browserd's MCP server: the task tools over a [`Backend`]. Cheap to clone; one per session.
#[derive(Clone)]
pub struct BrowserdMcp {
    backend: Arc<dyn Backend>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for BrowserdMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserdMcp").finish_non_exhaustive()
    }
}

#[tool_router]
impl BrowserdMcp {
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            tool_router: Self::tool_router(),
        }
    }

    /// Submit a task and wait for its result.
    #[tool(
        description = "Run a browser agent on a task and wait (up to wait_s, default 120 s) for its result: the final text (or JSON matching output_schema), whether it succeeded, the steps taken and the cost. A task still running then is returned with its id and status (follow it with get_task). With a progressToken, each step's next goal is sent as a progress notification."
    )]
    async fn run_task(
        &self,
        Parameters(params): Parameters<RunTaskParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run(params, ctx).await.unwrap_or_else(error_result)
    }

    #[tool(
        description = "A task's status, result (final text or JSON, success, error, cost) and its last steps (URL, next goal, actions, errors)."
    )]
    async fn get_task(
        &self,
        Parameters(params): Parameters<TaskIdParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let cx = ctx.extensions;
        async {
            let id = parse_task_id(&params.id)?;
            let view = self.backend.get_task(&cx, id).await?;
            let steps = self.backend.steps(&cx, id).await?;
            let start = steps.len().saturating_sub(LAST_STEPS);
            let mut body = task_summary(&view, &steps);
            body["last_steps"] = steps[start..].iter().map(step_summary).collect();
            Ok(structured(body))
        }
        .await
        .unwrap_or_else(error_result)
    }

    #[tool(description = "The caller's tasks, newest first (optionally only those in one status).")]
    async fn list_tasks(
        &self,
        Parameters(params): Parameters<ListTasksParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let cx = ctx.extensions;
        async {
            let tasks = self
                .backend
                .list_tasks(&cx, params.status, params.limit)
                .await?;
            let items: Vec<Value> = tasks
                .iter()
                .map(|t| {
                    json!({
                        "id": t.id.to_string(),
                        "status": t.status,
                        "task": shorten(&t.task, SUMMARY_CHARS),
                        "is_success": t.is_success,
                        "created_at": rfc3339(t.created_at),
                    })
                })
                .collect();
            Ok(structured(json!({ "items": items })))
        }
        .await
        .unwrap_or_else(error_result)
    }

    #[tool(
        description = "The caller's skills (workflows learnt once from an agent run, re-run without a model), newest first: id, title, status, current version and the parameters each takes."
    )]
    async fn list_skills(
        &self,
        Parameters(params): Parameters<ListSkillsParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let cx = ctx.extensions;
        async {
            let skills = self
                .backend
                .list_skills(&cx, params.query, params.limit)
                .await?;
            let items: Vec<Value> = skills
                .iter()
                .map(|s| {
                    json!({
                        "id": s.id.to_string(),
                        "title": s.title,
                        "goal": shorten(&s.goal, SUMMARY_CHARS),
                        "status": s.status,
                        "current_version": s.current_version,
                        "is_enabled": s.is_enabled,
                        "parameters": s.parameters,
                    })
                })
                .collect();
            Ok(structured(json!({ "items": items })))
        }
        .await
        .unwrap_or_else(error_result)
    }

    #[tool(
        description = "Run a skill with parameters and wait (up to wait_s, default 120 s) for its result: the recorded steps replay without a model (a step the site changed is healed by the model once). Returns the result, whether it succeeded, the steps and the cost, as run_task does."
    )]
    async fn run_skill(
        &self,
        Parameters(params): Parameters<RunSkillParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run_skill_execution(params, ctx)
            .await
            .unwrap_or_else(error_result)
    }

    #[tool(
        description = "Stop a queued, running, paused or waiting task (it ends with status stopped)."
    )]
    async fn stop_task(
        &self,
        Parameters(params): Parameters<TaskIdParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&ctx.extensions, &params.id, Transition::Stop)
            .await
    }

    #[tool(description = "Pause a queued or running task between two steps.")]
    async fn pause_task(
        &self,
        Parameters(params): Parameters<TaskIdParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&ctx.extensions, &params.id, Transition::Pause)
            .await
    }

    #[tool(
        description = "Answer the question a waiting task asks (its `question`: text, optional choices, whether it wants a secret): a free-text `answer` or one of the `choices` as `choice`, `secret: true` for a code or password. Then waits (up to wait_s, default 120 s) as run_task does: for the result, or the next question."
    )]
    async fn answer_task(
        &self,
        Parameters(params): Parameters<AnswerTaskParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        async {
            let id = parse_task_id(&params.id)?;
            let cx = &ctx.extensions;
            // Watch before answering: the next question or the end cannot slip past.
            let updates = self.backend.watch(cx, id).await?;
            let view = self.backend.answer(cx, id, params.to_request()).await?;
            tracing::info!(task_id = %id, "mcp answer_task answered");
            let wait = Duration::from_secs(params.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S));
            self.follow(&ctx, &view, updates, wait).await
        }
        .await
        .unwrap_or_else(error_result)
    }

    #[tool(description = "Resume a paused task.")]
    async fn resume_task(
        &self,
        Parameters(params): Parameters<TaskIdParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&ctx.extensions, &params.id, Transition::Resume)
            .await
    }

    #[tool(
        description = "The screenshot the agent saw at a step of a task (the latest step with one when step is omitted), as an image."
    )]
    async fn get_screenshot(
        &self,
        Parameters(params): Parameters<ScreenshotParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let cx = ctx.extensions;
        async {
            let id = parse_task_id(&params.id)?;
            if let Some(step) = params.step
                && step < 1
            {
                return Err(ToolError::new(
                    "invalid_step_number",
                    format!("`{step}` is not a step number (expected an integer ≥ 1)"),
                ));
            }
            let shot = self.backend.screenshot(&cx, id, params.step).await?;
            let data = base64::engine::general_purpose::STANDARD.encode(&shot.bytes);
            Ok(CallToolResult::success(vec![
                ContentBlock::image(data, shot.content_type),
                ContentBlock::text(format!("Screenshot of step {} of task {id}", shot.step)),
            ]))
        }
        .await
        .unwrap_or_else(error_result)
    }
}

impl BrowserdMcp {
    async fn run(
        &self,
        params: RunTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        let cx = &ctx.extensions;
        let wait = Duration::from_secs(params.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S));
        let created = self.backend.create_task(cx, params.to_request()).await?;
        tracing::info!(task_id = %created.id, "mcp run_task submitted");
        self.await_created(created, wait, ctx).await
    }

    /// `run_skill`: queues the execution, then waits for it as `run_task` does.
    async fn run_skill_execution(
        &self,
        params: RunSkillParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        let id = uuid::Uuid::parse_str(params.id.trim()).map_err(|_| {
            ToolError::new(
                "invalid_skill_id",
                format!("`{}` is not a valid skill id (expected a UUID)", params.id),
            )
        })?;
        let wait = Duration::from_secs(params.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S));
        let created = self
            .backend
            .run_skill(&ctx.extensions, id, params.parameters)
            .await?;
        tracing::info!(skill_id = %id, task_id = %created.id, "mcp run_skill submitted");
        self.await_created(created, wait, ctx).await
    }

    /// A task just created, reported at once (ended, or `wait` is zero) or after following it.
    async fn await_created(
        &self,
        created: TaskView,
        wait: Duration,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        let cx = &ctx.extensions;
        let id = created.id;
        if created.status.is_terminal() || wait.is_zero() {
            let view = self.backend.get_task(cx, id).await?;
            let steps = self.backend.steps(cx, id).await?;
            return Ok(run_result(&view, &steps, wait));
        }
        let updates = self.backend.watch(cx, id).await?;
        self.follow(&ctx, &created, updates, wait).await
    }

    /// Waits up to `wait` for the task to end or to ask a question (progress notifications
    /// meanwhile), then reports it as `run_task` does.
    async fn follow(
        &self,
        ctx: &RequestContext<RoleServer>,
        task: &TaskView,
        mut updates: tokio::sync::mpsc::Receiver<TaskUpdate>,
        wait: Duration,
    ) -> Result<CallToolResult, ToolError> {
        let cx = &ctx.extensions;
        let id = task.id;
        let deadline = tokio::time::Instant::now() + wait;
        let progress_token = ctx.meta.get_progress_token();
        if !task.status.is_terminal() && !wait.is_zero() {
            let total = f64::from(task.options.max_steps);
            loop {
                tokio::select! {
                    () = ctx.ct.cancelled() => break,
                    () = tokio::time::sleep_until(deadline) => break,
                    update = updates.recv() => match update {
                        Some(TaskUpdate::NextGoal { step, goal }) => {
                            if let Some(token) = &progress_token {
                                let param = ProgressNotificationParam::new(token.clone(), step as f64)
                                    .with_total(total)
                                    .with_message(format!("step {step}: {}", shorten(&goal, SUMMARY_CHARS)));
                                if let Err(err) = ctx.peer.notify_progress(param).await {
                                    tracing::debug!(%err, "progress notification not sent");
                                }
                            }
                        }
                        // The watch replays the task's events: only a question still open
                        // ends the wait.
                        Some(TaskUpdate::Question) => {
                            if self.backend.get_task(cx, id).await?.question.is_some() {
                                break;
                            }
                        }
                        Some(TaskUpdate::Ended) | None => break,
                    },
                }
            }
        }
        let view = self.backend.get_task(cx, id).await?;
        let steps = self.backend.steps(cx, id).await?;
        Ok(run_result(&view, &steps, wait))
    }

    async fn control(&self, cx: &CallContext, id: &str, transition: Transition) -> CallToolResult {
        async {
            let id = parse_task_id(id)?;
            let view = self.backend.control(cx, id, transition).await?;
            let steps = self.backend.steps(cx, id).await?;
            Ok(structured(task_summary(&view, &steps)))
        }
        .await
        .unwrap_or_else(error_result)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BrowserdMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("browserd", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// A tool error: `isError: true` with the REST API's error body (as text and as structured
/// content).
fn error_result(error: ToolError) -> CallToolResult {
    let body = serde_json::to_value(error.body()).unwrap_or(Value::Null);
    CallToolResult::structured_error(body)
}

fn structured(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}

/// Budgets end a task with an error naming the budget's field.
fn is_budget_error(error: &str) -> bool {
    ["max_tokens", "max_cost_usd", "timeout_s"]
        .iter()
        .any(|field| error.starts_with(&format!("{field}:")))
}

/// Number of agent steps (step 0, the initial navigation, is not one).
fn steps_taken(steps: &[StepView]) -> usize {
    steps.iter().filter(|s| s.number >= 1).count()
}

/// The task's outcome (or its progress), as `run_task`, `get_task` and the controls report it.
fn task_summary(view: &TaskView, steps: &[StepView]) -> Value {
    let output = view.output.as_deref().map(|text| {
        if view.options.output_schema.is_some() {
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        } else {
            Value::String(text.to_owned())
        }
    });
    json!({
        "id": view.id.to_string(),
        "status": view.status,
        "task": shorten(&view.task, SUMMARY_CHARS),
        "success": view.is_success,
        "output": output,
        "error": view.error,
        "steps": steps_taken(steps),
        "cost_usd": view.usage.as_ref().and_then(|u| u.get("total_cost_usd")).cloned().unwrap_or(Value::Null),
        "usage": view.usage.as_ref().and_then(|u| u.get("total")).cloned().unwrap_or(Value::Null),
        "question": view.question,
    })
}

fn run_result(view: &TaskView, steps: &[StepView], waited: Duration) -> CallToolResult {
    let mut body = task_summary(view, steps);
    if let Some(question) = &view.question {
        body["message"] = Value::String(format!(
            "the task asks: {} — answer with answer_task (id {}){}",
            question.question,
            view.id,
            if question.choices.is_empty() {
                String::new()
            } else {
                format!(", choice one of: {}", question.choices.join(", "))
            }
        ));
        return structured(body);
    }
    if !view.status.is_terminal() {
        body["message"] = Value::String(format!(
            "the task is still {} after {} s; follow it with get_task (id {})",
            view.status,
            waited.as_secs(),
            view.id
        ));
        return structured(body);
    }
    if view.status == TaskStatus::Failed {
        let message = view
            .error
            .clone()
            .unwrap_or_else(|| "the task failed".to_owned());
        let code = if is_budget_error(&message) {
            "budget_exceeded"
        } else {
            "task_failed"
        };
        body["error"] = json!({"code": code, "message": message});
        return CallToolResult::structured_error(body);
    }
    let text = match (&view.output, view.status) {
        (Some(output), _) => output.clone(),
        (None, TaskStatus::Stopped) => "The task was stopped before it finished.".to_owned(),
        (None, _) => "The task ended without a result.".to_owned(),
    };
    let mut result = CallToolResult::structured(body);
    // Readers of the text content get the result itself; the structured content has the rest.
    result.content.insert(0, ContentBlock::text(text));
    result
}

fn step_summary(step: &StepView) -> Value {
    let output = step.model_output.as_ref();
    let actions: Vec<String> = output
        .and_then(|o| o.get("action"))
        .and_then(Value::as_array)
        .map(|actions| {
            actions
                .iter()
                .filter_map(|a| a.as_object().and_then(|o| o.keys().next().cloned()))
                .collect()
        })
        .unwrap_or_default();
    let errors: Vec<Value> = step
        .results
        .as_array()
        .map(|results| {
            results
                .iter()
                .filter_map(|r| r.get("error").and_then(Value::as_str))
                .map(|e| Value::String(shorten(e, SUMMARY_CHARS)))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "number": step.number,
        "url": step.url,
        "title": step.title,
        "next_goal": output.and_then(|o| o.get("next_goal")).cloned().unwrap_or(Value::Null),
        "actions": actions,
        "errors": errors,
        "has_screenshot": step.screenshot_url.is_some(),
    })
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    } else {
        text.to_owned()
    }
}

fn rfc3339(at: time::OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_errors_are_recognised_by_their_field() {
        assert!(is_budget_error(
            "max_tokens: the task used 2100 tokens, over its budget of 2000"
        ));
        assert!(is_budget_error(
            "timeout_s: the task ran out of its wall-clock budget (5 s)"
        ));
        assert!(!is_budget_error("the agent failed 5 times in a row"));
    }

    #[test]
    fn tool_errors_carry_the_rest_error_body() {
        let result = error_result(ToolError::validation(
            "allowed_domains[0]",
            "invalid domain pattern",
        ));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content,
            Some(
                json!({"error": {"code": "validation_failed", "message": "invalid domain pattern", "field": "allowed_domains[0]"}})
            )
        );
    }
}
