//! A claimed task's skill: what its run does for the skill (read before it starts) and the
//! version its end saves, in the transaction of its terminal transition.
//!
//! - A generation (an agent run of the prompt, or a replay of the source task) that ends
//!   done and successful saves version N (`generated`, `from_task` or `refined`) and makes the
//!   skill `finished`; any other end leaves the skill to the store's trigger (`failed`,
//!   `cancelled`, `timed_out`).
//! - An execution replays the version's script bound with the task's parameters, healing with
//!   the task's model; its result is read from the final page; a healed run saves the next
//!   version (`healed`, with the healed steps).

use std::collections::BTreeMap;

use browserd_agent::AgentHistoryList;
use browserd_agent::skill::{self, SkillParameter, SkillScript};
use browserd_store::{NewSkillVersion, SkillRecord, SkillRole, StoreError, TaskRecord, TaskReplay};
use browserd_types::{TaskId, Transition};
use serde_json::{Value, json};
use uuid::Uuid;

use super::TaskJob;
use super::prepare::NotRun;
use crate::runner::{RunOutcome, SkillEnd, SkillRun, failed};

/// What a claimed skill task's end saves.
pub(super) struct SkillJob {
    pub(super) skill_id: Uuid,
    /// The origin of a generation's version (`generated`, `from_task`, `refined`).
    pub(super) origin: &'static str,
    /// The task a generation's version comes from.
    pub(super) source_task_id: TaskId,
}

/// A skill task prepared: the run's part (taken by the run request) and the end's.
pub(super) struct PreparedSkill {
    pub(super) run: SkillRun,
    pub(super) job: SkillJob,
}

/// A replay task's settings and the history it replays.
type Replay = Option<(TaskReplay, AgentHistoryList)>;

/// The task's parameter values as text (`{name: value}`).
fn values_of(parameters: &Value) -> BTreeMap<String, String> {
    parameters
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(name, value)| {
                    let text = match value {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    (name.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

impl TaskJob {
    /// The skill part of a claimed task (`None`: not a skill's task), and the replay it runs
    /// (an execution replays its version's bound script).
    pub(super) async fn prepare_skill(
        &self,
        record: &TaskRecord,
        replay: Replay,
    ) -> Result<(Option<PreparedSkill>, Replay), NotRun> {
        let link = self.store.task_skill(record.id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's skill");
            NotRun::HandBack("skill unreadable")
        })?;
        let Some(link) = link else {
            return Ok((None, replay));
        };
        let Some(skill) = link.skill else {
            return Err(NotRun::Fail(
                "skill: the skill was deleted before the task ran".to_owned(),
            ));
        };
        match link.role {
            SkillRole::Generate => {
                let prepared =
                    self.prepare_generation(record, &skill, &link.parameters, &replay)?;
                Ok((Some(prepared), replay))
            }
            SkillRole::Execute => {
                let version = link.version.unwrap_or_default();
                let (prepared, replay) = self
                    .prepare_execution(record, &skill, version, &link.parameters)
                    .await?;
                Ok((Some(prepared), Some(replay)))
            }
        }
    }

    fn prepare_generation(
        &self,
        record: &TaskRecord,
        skill: &SkillRecord,
        parameters: &Value,
        replay: &Replay,
    ) -> Result<PreparedSkill, NotRun> {
        // A replay of the source task (from_task) names no model: the server's default learns
        // how its result is read.
        let model_name = match replay {
            Some(_) => None,
            None => record.options.model.as_deref(),
        };
        let model = self
            .runner
            .model(model_name)
            .map_err(|err| NotRun::Fail(err.to_string()))?;
        let stored: Vec<SkillParameter> =
            serde_json::from_value(skill.parameters.clone()).unwrap_or_default();
        let (declared, origin, source_task_id) = match replay {
            Some((replay, _)) => (stored, "from_task", replay.source),
            None => {
                let declared = skill::parse_prompt(&skill.agent_prompt)
                    .map(|p| p.parameters)
                    .unwrap_or(stored);
                let origin = if skill.current_version.is_some() {
                    "refined"
                } else {
                    "generated"
                };
                (declared, origin, record.id)
            }
        };
        Ok(PreparedSkill {
            run: SkillRun::Generate {
                model,
                goal: skill.goal.clone(),
                output_schema: skill.output_schema.clone(),
                declared,
                values: values_of(parameters),
            },
            job: SkillJob {
                skill_id: skill.id,
                origin,
                source_task_id,
            },
        })
    }

    async fn prepare_execution(
        &self,
        record: &TaskRecord,
        skill: &SkillRecord,
        version: i32,
        parameters: &Value,
    ) -> Result<(PreparedSkill, (TaskReplay, AgentHistoryList)), NotRun> {
        let stored = match self.store.skill_version(skill.id, version).await {
            Ok(Some(stored)) => stored,
            Ok(None) => {
                return Err(NotRun::Fail(format!(
                    "skill: version {version} of the skill no longer exists"
                )));
            }
            Err(err) => {
                tracing::warn!(%err, "could not read the skill's version");
                return Err(NotRun::HandBack("skill version unreadable"));
            }
        };
        let script: SkillScript = serde_json::from_value(stored.script)
            .map_err(|err| NotRun::Fail(format!("skill: version {version} is unusable: {err}")))?;
        let given = parameters.as_object().cloned().unwrap_or_default();
        let (values, steps) = skill::bind(&script, &given)
            .map_err(|err| NotRun::Fail(format!("parameters: {err}")))?;
        let model = self
            .runner
            .model(record.options.model.as_deref())
            .map_err(|err| NotRun::Fail(err.to_string()))?;
        tracing::info!(skill_id = %skill.id, version, "executing the skill");
        let replay = TaskReplay {
            source: record.id,
            options: browserd_types::dto::ReplaySettings::default(),
        };
        let prepared = PreparedSkill {
            run: SkillRun::Execute {
                model,
                goal: skill.goal.clone(),
                output_schema: skill.output_schema.clone(),
                script,
                values,
            },
            job: SkillJob {
                skill_id: skill.id,
                origin: "healed",
                source_task_id: record.id,
            },
        };
        Ok((prepared, (replay, steps)))
    }

    /// The end of a skill's task: its terminal transition, with the version it saves in the
    /// same transaction (an execution's result replaces the recorded final text).
    pub(super) async fn end_skill(&self, id: TaskId, mut outcome: RunOutcome, job: &SkillJob) {
        let Some(end) = outcome.skill.take() else {
            return self.end_with(id, outcome).await;
        };
        let (mut transition, mut details) = outcome.end_transition();
        let version = match end {
            SkillEnd::Generated { script, note } => {
                if let Some(note) = note {
                    tracing::info!(%note, "the skill's result reader");
                }
                self.new_version(
                    job,
                    &script,
                    job.origin,
                    job.source_task_id,
                    json!([]),
                    true,
                )
            }
            SkillEnd::Executed { result, healed } => match (result, healed) {
                (Err(error), _) => {
                    return self.end(id, Transition::Fail, failed(error)).await;
                }
                (Ok(text), healed) => {
                    details.output = Some(text);
                    match healed {
                        Some((script, steps)) => {
                            let steps = serde_json::to_value(&steps).unwrap_or_else(|_| json!([]));
                            self.new_version(job, &script, "healed", id, steps, false)
                        }
                        None => return self.end(id, transition, details).await,
                    }
                }
            },
        };
        let Some(version) = version else {
            transition = Transition::Fail;
            details = failed("skill: the script could not be stored");
            return self.end(id, transition, details).await;
        };
        match self
            .store
            .transition_claimed_task_with_version(
                &self.config.id,
                id,
                transition,
                details,
                &version,
            )
            .await
        {
            Ok((task, saved)) => {
                crate::telemetry::task_ended(task.status);
                tracing::info!(status = %task.status, version = ?saved, origin = version.origin,
                    "task ended; skill version saved");
            }
            Err(StoreError::IllegalTransition { current, .. }) => {
                tracing::info!(%current, "task already ended");
            }
            Err(err) => tracing::warn!(%err, "could not record the end of the task"),
        }
    }

    fn new_version(
        &self,
        job: &SkillJob,
        script: &SkillScript,
        origin: &'static str,
        source_task_id: TaskId,
        healed: Value,
        generation: bool,
    ) -> Option<NewSkillVersion> {
        let value = serde_json::to_value(script)
            .inspect_err(|err| tracing::warn!(%err, "could not serialize the skill's script"))
            .ok()?;
        let parameters = serde_json::to_value(&script.parameters).ok()?;
        Some(NewSkillVersion {
            skill_id: job.skill_id,
            script: value,
            origin,
            source_task_id: Some(source_task_id),
            healed,
            parameters,
            generation,
        })
    }
}
