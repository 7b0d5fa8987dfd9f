//! Skills in the task core: a key's skills made from a prompt (an agent run of it, with each
//! `{{name=example}}` parameter's example) or from an ended task (a replay of it), read,
//! listed, edited, deleted, cancelled, rolled back, refined, and run with parameters. Every
//! generation and execution is a task created through [`crate::TaskService::create`]
//! (validation, admission and quotas apply) and linked to its skill in the task's
//! transaction; the worker saves the versions. Another key's skill is `skill_not_found`.

use std::collections::BTreeMap;

use browserd_agent::skill::{self, SkillParameter, SkillScript};
use browserd_store::{
    NewSkill, SkillAttach, SkillRecord, SkillRole, SkillUpdate, SkillVersionRecord, TaskCursor,
};
use browserd_types::dto::{CreateTaskRequest, TaskView};
use browserd_types::skills::{
    CreateSkillRequest, HealedStepView, RefineSkillRequest, RunSkillRequest, SkillList,
    SkillParameterView, SkillRunList, SkillVersionList, SkillVersionView, SkillView,
    UpdateSkillRequest,
};
use browserd_types::{TaskId, TaskOptions, TaskStatus, Transition};
use uuid::Uuid;

use super::TaskCore;
use crate::caller::Caller;
use crate::error::TaskError;
use crate::service::Placement;

/// Longest title, description and feedback accepted.
const TITLE_MAX_CHARS: usize = 200;
const DESCRIPTION_MAX_CHARS: usize = 2000;
const FEEDBACK_MAX_CHARS: usize = 5000;
const PROMPT_MAX_CHARS: usize = 20_000;
const QUERY_MAX_CHARS: usize = 200;

/// `text` checked: not longer than `max` characters, no NUL; `non_empty` also refuses blank.
fn checked(field: &str, text: &str, max: usize, non_empty: bool) -> Result<(), TaskError> {
    let chars = text.chars().count();
    if non_empty && text.trim().is_empty() {
        return Err(TaskError::validation(
            field,
            format!("{field} must not be empty"),
        ));
    }
    if chars > max {
        return Err(TaskError::validation(
            field,
            format!("{field} must be at most {max} characters, got {chars}"),
        ));
    }
    if text.contains('\0') {
        return Err(TaskError::validation(
            field,
            format!("{field} must not contain NUL characters"),
        ));
    }
    Ok(())
}

/// A title from `goal` when none was given: its first line, cut to the limit.
fn default_title(goal: &str) -> String {
    let line = goal.lines().find(|l| !l.trim().is_empty()).unwrap_or(goal);
    let mut title: String = line.trim().chars().take(80).collect();
    if line.trim().chars().count() > 80 {
        title.push('…');
    }
    title
}

/// Whether `name` is a parameter name (`[A-Za-z_][A-Za-z0-9_]*`).
fn is_parameter_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn internal(what: &str, err: impl std::fmt::Display) -> TaskError {
    TaskError::Internal(format!("{what}: {err}"))
}

fn version_view(record: SkillVersionRecord) -> SkillVersionView {
    let healed: Vec<HealedStepView> = serde_json::from_value(record.healed).unwrap_or_default();
    let steps = record
        .script
        .pointer("/steps/history")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    SkillVersionView {
        version: record.version,
        origin: record.origin,
        source_task_id: record.source_task_id,
        healed,
        steps,
        script: record.script,
        created_at: record.created_at,
    }
}

fn skill_view(record: SkillRecord, versions: Vec<SkillVersionRecord>) -> SkillView {
    let parameters: Vec<SkillParameterView> =
        serde_json::from_value(record.parameters).unwrap_or_default();
    SkillView {
        id: record.id,
        title: record.title,
        description: record.description,
        goal: record.goal,
        agent_prompt: record.agent_prompt,
        output_schema: record.output_schema,
        status: record.status,
        error: record.error,
        parameters,
        current_version: record.current_version,
        is_enabled: record.is_enabled,
        generation_task_id: record.generation_task_id,
        versions: versions.into_iter().map(version_view).collect(),
        created_at: record.created_at,
        updated_at: record.updated_at,
        current_version_started_at: record.current_version_started_at,
        current_version_finished_at: record.current_version_finished_at,
    }
}

/// The generating run's options of `request`, as a task request with `task`.
fn generation_request(request: &CreateSkillRequest, task: String) -> CreateTaskRequest {
    CreateTaskRequest {
        task: Some(task),
        start_url: request.start_url.clone(),
        max_steps: request.max_steps,
        model: request.model.clone(),
        allowed_domains: request.allowed_domains.clone(),
        prohibited_domains: request.prohibited_domains.clone(),
        secrets: request.secrets.clone(),
        allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
        output_schema: request.output_schema.clone(),
        use_vision: request.use_vision,
        timeout_s: request.timeout_s,
        viewport: request.viewport,
        settle_timeout_ms: request.settle_timeout_ms,
        proxy: request.proxy.clone(),
        ..CreateTaskRequest::default()
    }
}

/// `request` with the browser options of an earlier task of the skill (`options`): its
/// domain rules, viewport, settle cap and proxy.
fn inherit_options(request: &mut CreateTaskRequest, options: &TaskOptions) {
    request.allowed_domains = Some(options.allowed_domains.clone());
    request.prohibited_domains = Some(options.prohibited_domains.clone());
    request.viewport = options.viewport;
    request.settle_timeout_ms = options.settle_timeout_ms.map(i64::from);
    request.proxy = options.proxy.clone();
}

/// The source task's text with each parameter's value made its `{{name=value}}` declaration
/// (the prompt of a skill made from a task, used when it is refined).
fn prompt_of_task(task: &str, parameters: &BTreeMap<String, String>) -> String {
    let mut prompt = task.replace("{{", "{ {");
    for (name, value) in parameters {
        if !value.is_empty() {
            prompt = prompt.replace(value.as_str(), &format!("{{{{{name}={value}}}}}"));
        }
    }
    prompt
}

impl TaskCore {
    async fn skill_view_of(&self, caller: &Caller, id: Uuid) -> Result<SkillView, TaskError> {
        let skill = self.store.get_skill(caller.key_id, id).await?;
        let versions = self.store.skill_versions(caller.key_id, id).await?;
        Ok(skill_view(skill, versions))
    }

    /// Creates a skill and queues its generation: an agent run of `prompt` with each
    /// parameter's example, or (`from_task`) a replay of an ended, successful task of the
    /// caller's. The skill is `generating` until the worker saves its first version.
    pub async fn create_skill(
        &self,
        caller: &Caller,
        request: CreateSkillRequest,
        trace_context: Option<String>,
    ) -> Result<SkillView, TaskError> {
        if let Some(title) = &request.title {
            checked("title", title, TITLE_MAX_CHARS, true)?;
        }
        if let Some(description) = &request.description {
            checked("description", description, DESCRIPTION_MAX_CHARS, false)?;
        }
        if let Some(goal) = &request.goal {
            checked("goal", goal, PROMPT_MAX_CHARS, true)?;
        }
        match (&request.prompt, request.from_task) {
            (Some(_), Some(_)) => Err(TaskError::validation(
                "from_task",
                "give either `prompt` (a new run) or `from_task` (an ended task), not both",
            )),
            (None, None) => Err(TaskError::validation(
                "prompt",
                "`prompt` (with {{name=example}} parameters) or `from_task` is required",
            )),
            (Some(_), None) => self.skill_from_prompt(caller, request, trace_context).await,
            (None, Some(source)) => {
                self.skill_from_task(caller, source, request, trace_context)
                    .await
            }
        }
    }

    async fn skill_from_prompt(
        &self,
        caller: &Caller,
        request: CreateSkillRequest,
        trace_context: Option<String>,
    ) -> Result<SkillView, TaskError> {
        let prompt = request.prompt.clone().unwrap_or_default();
        checked("prompt", &prompt, PROMPT_MAX_CHARS, true)?;
        if request.parameters.is_some() {
            return Err(TaskError::validation(
                "parameters",
                "`parameters` go with `from_task`; declare a prompt's parameters in it as \
                 {{name=example}}",
            ));
        }
        let parsed = skill::parse_prompt(&prompt)
            .map_err(|e| TaskError::validation("prompt", e.to_string()))?;
        let text = skill::fill_prompt(&prompt, &BTreeMap::new())
            .map_err(|e| TaskError::validation("prompt", e.to_string()))?;
        let goal = request.goal.clone().unwrap_or_else(|| text.clone());
        let task_request = generation_request(&request, text);
        let skill = NewSkill {
            id: Uuid::now_v7(),
            title: request
                .title
                .clone()
                .unwrap_or_else(|| default_title(&goal)),
            description: request.description.clone().unwrap_or_default(),
            goal,
            agent_prompt: prompt,
            output_schema: request.output_schema.clone(),
            parameters: serde_json::to_value(&parsed.parameters)
                .map_err(|e| internal("parameters", e))?,
        };
        let id = skill.id;
        let attach = SkillAttach::Create {
            skill: Box::new(skill),
            parameters: serde_json::to_value(&parsed.examples)
                .map_err(|e| internal("parameters", e))?,
        };
        self.tasks
            .create(
                caller,
                task_request,
                trace_context,
                Placement::Skill(attach),
            )
            .await?;
        tracing::info!(skill_id = %id, "skill created from a prompt");
        self.skill_view_of(caller, id).await
    }

    async fn skill_from_task(
        &self,
        caller: &Caller,
        source_id: TaskId,
        request: CreateSkillRequest,
        trace_context: Option<String>,
    ) -> Result<SkillView, TaskError> {
        let source = self.tasks.owned_task(caller, source_id).await?;
        if !source.status.is_terminal() {
            return Err(TaskError::Conflict {
                code: "source_not_ended",
                message: format!(
                    "task {source_id} is {}: a skill is made from a task that has ended",
                    source.status
                ),
                current_status: Some(source.status),
            });
        }
        if source.status != TaskStatus::Finished || source.is_success != Some(true) {
            return Err(TaskError::validation(
                "from_task",
                format!(
                    "task {source_id} did not finish successfully: a skill is made from a task \
                     that did"
                ),
            ));
        }
        let parameters = request.parameters.clone().unwrap_or_default();
        for (name, value) in &parameters {
            if !is_parameter_name(name) {
                return Err(TaskError::validation(
                    "parameters",
                    format!("parameter name `{name}` must match [A-Za-z_][A-Za-z0-9_]*"),
                ));
            }
            if value.is_empty() {
                return Err(TaskError::validation(
                    "parameters",
                    format!("parameter `{name}` needs the value the task used"),
                ));
            }
        }
        let declared: Vec<SkillParameter> = parameters
            .keys()
            .map(|name| SkillParameter {
                name: name.clone(),
                kind: skill::ParameterKind::String,
                required: true,
                default: None,
                description: None,
            })
            .collect();
        let goal = request.goal.clone().unwrap_or_else(|| source.task.clone());
        // The source's secrets were wiped when it ended: the replay brings its own. Task
        // options a replay does not use are refused by its validation, naming them.
        let task_request = CreateTaskRequest {
            replay_of: Some(source_id),
            secrets: request.secrets.clone(),
            allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
            start_url: request.start_url.clone(),
            max_steps: request.max_steps,
            model: request.model.clone(),
            use_vision: request.use_vision,
            timeout_s: request.timeout_s,
            viewport: request.viewport,
            settle_timeout_ms: request.settle_timeout_ms,
            proxy: request.proxy.clone(),
            ..CreateTaskRequest::default()
        };
        let output_schema = request
            .output_schema
            .clone()
            .or(source.options.output_schema.clone());
        let skill = NewSkill {
            id: Uuid::now_v7(),
            title: request
                .title
                .clone()
                .unwrap_or_else(|| default_title(&goal)),
            description: request.description.clone().unwrap_or_default(),
            agent_prompt: prompt_of_task(&source.task, &parameters),
            goal,
            output_schema,
            parameters: serde_json::to_value(&declared).map_err(|e| internal("parameters", e))?,
        };
        let id = skill.id;
        let attach = SkillAttach::Create {
            skill: Box::new(skill),
            parameters: serde_json::to_value(&parameters).map_err(|e| internal("parameters", e))?,
        };
        self.tasks
            .create(
                caller,
                task_request,
                trace_context,
                Placement::Skill(attach),
            )
            .await?;
        tracing::info!(skill_id = %id, source = %source_id, "skill created from a task");
        self.skill_view_of(caller, id).await
    }

    /// One skill with its parameters and versions.
    pub async fn get_skill(&self, caller: &Caller, id: Uuid) -> Result<SkillView, TaskError> {
        self.skill_view_of(caller, id).await
    }

    /// A page of the caller's skills, newest first (`query`: a substring of the title, goal
    /// or description); `limit` 1–100, default 20.
    pub async fn list_skills(
        &self,
        caller: &Caller,
        query: Option<&str>,
        limit: Option<i64>,
        cursor: Option<&str>,
    ) -> Result<SkillList, TaskError> {
        let limit = crate::validation::list_limit(limit)?;
        if let Some(query) = query {
            checked("query", query, QUERY_MAX_CHARS, false)?;
        }
        let cursor = cursor.map(TaskCursor::decode).transpose()?;
        let page = self
            .store
            .list_skills(
                caller.key_id,
                query.filter(|q| !q.is_empty()),
                limit,
                cursor,
            )
            .await?;
        Ok(SkillList {
            items: page
                .items
                .into_iter()
                .map(|s| skill_view(s, Vec::new()))
                .collect(),
            next_cursor: page.next_cursor.map(|c| c.encode()),
        })
    }

    /// Changes the skill's title, description or enabled flag.
    pub async fn update_skill(
        &self,
        caller: &Caller,
        id: Uuid,
        request: UpdateSkillRequest,
    ) -> Result<SkillView, TaskError> {
        if let Some(title) = &request.title {
            checked("title", title, TITLE_MAX_CHARS, true)?;
        }
        if let Some(description) = &request.description {
            checked("description", description, DESCRIPTION_MAX_CHARS, false)?;
        }
        let update = SkillUpdate {
            title: request.title,
            description: request.description,
            is_enabled: request.is_enabled,
        };
        self.store.update_skill(caller.key_id, id, &update).await?;
        self.skill_view_of(caller, id).await
    }

    /// Deletes the skill and its versions (a generation still running is stopped first);
    /// its executions stay as tasks.
    pub async fn delete_skill(&self, caller: &Caller, id: Uuid) -> Result<(), TaskError> {
        let skill = self.store.get_skill(caller.key_id, id).await?;
        if skill.status == "generating" {
            self.stop_generation(caller, &skill).await;
        }
        self.store.delete_skill(caller.key_id, id).await?;
        tracing::info!(skill_id = %id, "skill deleted");
        Ok(())
    }

    /// Stops the skill's generation task, if it has not ended (best effort: an ended one is
    /// already accounted for by the store's trigger).
    async fn stop_generation(&self, caller: &Caller, skill: &SkillRecord) {
        if let Some(task) = skill.generation_task_id
            && let Err(err) = self.tasks.control(caller, task, Transition::Stop).await
        {
            tracing::info!(%err, task_id = %task, "the skill's generation task was not stopped");
        }
    }

    /// Stops the skill's generation; the skill is `cancelled` (or, when refining a skill
    /// that has a version, `finished` again). 409 when it is not generating.
    pub async fn cancel_skill(&self, caller: &Caller, id: Uuid) -> Result<SkillView, TaskError> {
        let skill = self.store.get_skill(caller.key_id, id).await?;
        if skill.status != "generating" {
            return Err(TaskError::Conflict {
                code: "skill_not_generating",
                message: format!(
                    "the skill is {}: only a generation can be cancelled",
                    skill.status
                ),
                current_status: None,
            });
        }
        self.stop_generation(caller, &skill).await;
        // The generation task had ended (or was gone) without marking the skill.
        let next = if skill.current_version.is_some() {
            "finished"
        } else {
            "cancelled"
        };
        self.store
            .set_skill_status(caller.key_id, id, "generating", next, Some("cancelled"))
            .await?;
        self.skill_view_of(caller, id).await
    }

    /// Makes the version before the current one current again (409 when there is none).
    pub async fn rollback_skill(&self, caller: &Caller, id: Uuid) -> Result<SkillView, TaskError> {
        match self.store.rollback_skill(caller.key_id, id).await? {
            Some(_) => {
                tracing::info!(skill_id = %id, "skill rolled back");
                self.skill_view_of(caller, id).await
            }
            None => Err(TaskError::Conflict {
                code: "no_previous_version",
                message: "the skill has no version before its current one to roll back to"
                    .to_owned(),
                current_status: None,
            }),
        }
    }

    /// Generates the skill again with `feedback` added to its prompt; the new run's version
    /// (origin `refined`) becomes current. 409 while a generation runs.
    pub async fn refine_skill(
        &self,
        caller: &Caller,
        id: Uuid,
        request: RefineSkillRequest,
        trace_context: Option<String>,
    ) -> Result<SkillView, TaskError> {
        checked("feedback", &request.feedback, FEEDBACK_MAX_CHARS, true)?;
        let skill = self.store.get_skill(caller.key_id, id).await?;
        if skill.status == "generating" {
            return Err(browserd_store::StoreError::SkillBusy {
                id,
                status: skill.status,
            }
            .into());
        }
        let prompt = skill::fill_prompt(&skill.agent_prompt, &BTreeMap::new())
            .map_err(|e| TaskError::validation("feedback", e.to_string()))?;
        let text = format!(
            "{prompt}\n\nFeedback on an earlier run of this task, to follow: {}",
            request.feedback
        );
        let mut task_request = CreateTaskRequest {
            task: Some(text),
            output_schema: skill.output_schema.clone(),
            secrets: request.secrets.clone(),
            allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
            ..CreateTaskRequest::default()
        };
        if let Some(previous) = self.previous_options(caller, &skill).await? {
            inherit_options(&mut task_request, &previous);
            task_request.start_url = previous.start_url.clone();
            task_request.model = previous.model.clone();
        }
        let examples = skill::parse_prompt(&skill.agent_prompt)
            .map(|p| p.examples)
            .unwrap_or_default();
        let attach = SkillAttach::Regenerate {
            skill_id: id,
            parameters: serde_json::to_value(&examples).map_err(|e| internal("parameters", e))?,
        };
        self.tasks
            .create(
                caller,
                task_request,
                trace_context,
                Placement::Skill(attach),
            )
            .await?;
        tracing::info!(skill_id = %id, "skill refinement queued");
        self.skill_view_of(caller, id).await
    }

    /// The options of the skill's last generation task, while it exists.
    async fn previous_options(
        &self,
        caller: &Caller,
        skill: &SkillRecord,
    ) -> Result<Option<TaskOptions>, TaskError> {
        let Some(task) = skill.generation_task_id else {
            return Ok(None);
        };
        match self.tasks.owned_task(caller, task).await {
            Ok(task) => Ok(Some(task.options)),
            Err(err) if err.is_task_not_found() => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The skill's versions, oldest first.
    pub async fn skill_versions(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<SkillVersionList, TaskError> {
        let versions = self.store.skill_versions(caller.key_id, id).await?;
        Ok(SkillVersionList {
            items: versions.into_iter().map(version_view).collect(),
        })
    }

    /// Queues an execution of the skill's current version with `request.parameters`
    /// (checked against the version's parameters: 422 naming the parameter). 409 when the
    /// skill is disabled or has no finished version (one being refined runs its current one).
    pub async fn run_skill(
        &self,
        caller: &Caller,
        id: Uuid,
        request: RunSkillRequest,
        trace_context: Option<String>,
    ) -> Result<TaskView, TaskError> {
        let (task_request, attach) = self.skill_execution(caller, id, &request).await?;
        let version = match &attach {
            SkillAttach::Execute { version, .. } => *version,
            _ => 0,
        };
        let created = self
            .tasks
            .create(
                caller,
                task_request,
                trace_context,
                Placement::Skill(attach),
            )
            .await?;
        tracing::info!(skill_id = %id, version, task_id = %created.view.id, "skill run queued");
        Ok(created.view)
    }

    /// The task an execution of skill `id` with `request` is, and its link to the skill (the
    /// current version pinned), checked but not admitted: [`TaskCore::run_skill`] creates it, a
    /// schedule's tick inserts it in its own transaction.
    pub(crate) async fn skill_execution(
        &self,
        caller: &Caller,
        id: Uuid,
        request: &RunSkillRequest,
    ) -> Result<(CreateTaskRequest, SkillAttach), TaskError> {
        let skill = self.store.get_skill(caller.key_id, id).await?;
        if !skill.is_enabled {
            return Err(TaskError::Conflict {
                code: "skill_disabled",
                message: "the skill is disabled; enable it (PATCH is_enabled) to run it".to_owned(),
                current_status: None,
            });
        }
        // A skill being refined keeps running its current version meanwhile.
        let version = match (skill.status.as_str(), skill.current_version) {
            ("finished" | "generating", Some(version)) => version,
            (status, _) => {
                return Err(TaskError::Conflict {
                    code: "skill_not_ready",
                    message: format!("the skill is {status}: only a finished skill can run"),
                    current_status: None,
                });
            }
        };
        let record = self
            .store
            .skill_version(id, version)
            .await?
            .ok_or_else(|| internal("skill version", format!("{version} is missing")))?;
        let script: SkillScript =
            serde_json::from_value(record.script).map_err(|e| internal("skill script", e))?;
        // Checked now; the worker binds the same values again (the stored ones, as given).
        skill::bind(&script, &request.parameters)
            .map_err(|e| TaskError::validation("parameters", e.to_string()))?;
        let mut task_request = CreateTaskRequest {
            task: Some(format!("Run the skill \"{}\": {}", skill.title, skill.goal)),
            model: request.model.clone(),
            secrets: request.secrets.clone(),
            allow_secrets_on_any_domain: request.allow_secrets_on_any_domain,
            timeout_s: request.timeout_s,
            metadata: request.metadata.clone(),
            output_schema: skill.output_schema.clone(),
            use_vision: Some(false),
            ..CreateTaskRequest::default()
        };
        if let Some(previous) = self.previous_options(caller, &skill).await? {
            inherit_options(&mut task_request, &previous);
            if task_request.model.is_none() {
                task_request.model = previous.model.clone();
            }
        }
        let attach = SkillAttach::Execute {
            skill_id: id,
            version,
            parameters: serde_json::Value::Object(request.parameters.clone()),
        };
        Ok((task_request, attach))
    }

    /// A page of the skill's executions (tasks with their results), newest first.
    pub async fn skill_runs(
        &self,
        caller: &Caller,
        id: Uuid,
        limit: Option<i64>,
        cursor: Option<&str>,
    ) -> Result<SkillRunList, TaskError> {
        let limit = crate::validation::list_limit(limit)?;
        let cursor = cursor.map(TaskCursor::decode).transpose()?;
        let (items, next) = self
            .store
            .skill_runs(caller.key_id, id, limit, cursor)
            .await?;
        Ok(SkillRunList {
            items: items.into_iter().map(TaskView::from).collect(),
            next_cursor: next.map(|c| c.encode()),
        })
    }

    /// One execution of the skill: its task, with its output.
    pub async fn skill_run(
        &self,
        caller: &Caller,
        id: Uuid,
        task: TaskId,
    ) -> Result<TaskView, TaskError> {
        self.store.get_skill(caller.key_id, id).await?;
        match self.store.skill_of_task(caller.key_id, task).await? {
            Some((skill, SkillRole::Execute)) if skill == id => self.tasks.get(caller, task).await,
            _ => Err(TaskError::task_not_found()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_becomes_a_prompt_with_its_parameters_declared() {
        let parameters = BTreeMap::from([("order".to_owned(), "1042".to_owned())]);
        assert_eq!(
            prompt_of_task("Find order 1042 and report its status", &parameters),
            "Find order {{order=1042}} and report its status"
        );
        assert_eq!(default_title("Find order\nmore"), "Find order");
        assert!(is_parameter_name("order_2"));
        assert!(!is_parameter_name("2order"));
        assert!(!is_parameter_name(""));
    }
}
