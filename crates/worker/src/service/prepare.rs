//! What a claimed task needs before it starts, all read at once, or why it does not run.

use browserd_agent::{AgentHistory, AgentHistoryList, SecretEntry, UsageSummary};
use browserd_store::{ClaimedTask, StoreError, TaskRecord, TaskReplay, TaskSession};
use browserd_types::TaskId;
use secrecy::ExposeSecret;
use time::OffsetDateTime;

use super::{TaskJob, apply_session, task_spec};
use crate::runner::TaskSpec;

/// Why a claimed task does not run here: it fails at once (its secrets cannot be opened, its
/// model is unknown, its budget is spent, its replay source is gone), or it goes back to the
/// queue (what it needs could not be read now; another attempt may succeed).
pub(super) enum NotRun {
    Fail(String),
    HandBack(&'static str),
}

/// What a claimed task runs with, all read before anything starts.
pub(super) struct Prepared {
    pub(super) spec: TaskSpec,
    /// A replay task's settings and the recorded history it replays.
    pub(super) replay: Option<(TaskReplay, AgentHistoryList)>,
    /// The `/api/v2` session the task runs in.
    pub(super) session: Option<TaskSession>,
    /// The history an earlier attempt persisted (a resumed run).
    pub(super) prior: Option<AgentHistoryList>,
    /// Where the earlier attempt was.
    pub(super) resume_url: Option<String>,
    /// The task's browser profile, read now (its latest saved state).
    pub(super) profile: Option<crate::ProfileLink>,
    /// What the run does for its skill, and what its end saves.
    pub(super) skill: Option<super::skills::PreparedSkill>,
}

impl TaskJob {
    /// Reads everything the task needs before it starts, or says why it does not run.
    pub(super) async fn prepare(&self, claimed: ClaimedTask) -> Result<Prepared, NotRun> {
        let ClaimedTask {
            record,
            secrets,
            secrets_error,
        } = claimed;
        let id = record.id;
        if let Some(error) = secrets_error {
            return Err(NotRun::Fail(error));
        }
        let replay = self.store.task_replay(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's replay settings");
            NotRun::HandBack("replay settings unreadable")
        })?;
        // A replay makes no model call: it needs no model.
        if replay.is_none() {
            let model = self
                .runner
                .model(record.options.model.as_deref())
                .map_err(|err| NotRun::Fail(err.to_string()))?;
            tracing::Span::current().record("model", model.name());
        }
        let replay = match replay {
            Some(replay) => match self.replay_source(replay.source).await {
                Ok(Ok(source)) => Some((replay, source)),
                Ok(Err(error)) => return Err(NotRun::Fail(error)),
                Err(err) => {
                    tracing::warn!(%err, "could not read the replayed task's history");
                    return Err(NotRun::HandBack("replay source unreadable"));
                }
            },
            None => None,
        };
        let (skill, replay) = self.prepare_skill(&record, replay).await?;
        let mut spec = task_spec(&record, &secrets, OffsetDateTime::now_utc());
        drop(secrets);
        let session = self.store.task_session(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's session");
            NotRun::HandBack("session unreadable")
        })?;
        if let Some(session) = &session {
            apply_session(&mut spec, session);
        }
        // Secret answers an earlier attempt was given: their placeholders fill again.
        let answers = self.store.secret_answers(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's secret answers");
            NotRun::HandBack("secret answers unreadable")
        })?;
        for answer in answers {
            spec.secrets.0.insert(
                browserd_agent::human::answer_secret_name(&answer.question_id),
                SecretEntry::Value(answer.text.expose_secret().to_owned()),
            );
        }
        if spec.timeout.is_some_and(|t| t.is_zero()) {
            return Err(NotRun::Fail(format!(
                "timeout_s: the task ran out of its wall-clock budget ({} s) before it could resume",
                record.options.timeout_s.unwrap_or_default()
            )));
        }
        let prior = self.prior_history(&record).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's history");
            NotRun::HandBack("history unreadable")
        })?;
        // Where the lost attempt was: the URL of its latest step start, else where its last
        // stored step began (a run lost right after its initial navigation).
        let resume_url = prior.as_ref().and_then(|prior| {
            record.last_url.clone().or_else(|| {
                prior
                    .history
                    .last()
                    .map(|h| h.state.url.clone())
                    .filter(|u| !u.is_empty())
            })
        });
        if let Some(prior) = &prior {
            tracing::info!(steps = prior.history.len(), url = ?resume_url, "resuming the task");
        }
        let profile = match spec.options.profile_id {
            // A replay runs without one (it repeats recorded actions).
            Some(profile_id) if replay.is_none() => {
                match crate::profile::load_store_profile(&self.store, &record, profile_id).await {
                    Ok(Some(link)) => Some(link),
                    Ok(None) => {
                        return Err(NotRun::Fail(format!(
                            "profile_id: the task's profile {profile_id} was deleted"
                        )));
                    }
                    Err(err @ (StoreError::Seal(_) | StoreError::NoSecretsKey)) => {
                        return Err(NotRun::Fail(format!(
                            "profile_id: the task's profile cannot be opened: {err}"
                        )));
                    }
                    Err(err) => {
                        tracing::warn!(%err, "could not read the task's profile");
                        return Err(NotRun::HandBack("profile unreadable"));
                    }
                }
            }
            _ => None,
        };
        Ok(Prepared {
            spec,
            replay,
            session,
            prior,
            resume_url,
            profile,
            skill,
        })
    }

    /// The persisted steps of an earlier attempt, when there are any.
    async fn prior_history(
        &self,
        record: &TaskRecord,
    ) -> Result<Option<AgentHistoryList>, StoreError> {
        if record.attempts <= 1 {
            return Ok(None);
        }
        let records = self.store.step_records(record.id).await?;
        if records.is_empty() {
            return Ok(None);
        }
        let history = records
            .into_iter()
            .map(serde_json::from_value::<AgentHistory>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| StoreError::Corrupt(format!("step record: {err}")))?;
        let usage = record
            .usage
            .clone()
            .and_then(|u| serde_json::from_value::<UsageSummary>(u).ok())
            .unwrap_or_default();
        Ok(Some(AgentHistoryList { history, usage }))
    }

    /// The recorded history a replay re-runs (the source's persisted steps), or why there is
    /// none to replay.
    async fn replay_source(
        &self,
        source: TaskId,
    ) -> Result<Result<AgentHistoryList, String>, StoreError> {
        let Some(task) = self.store.get_task(None, source).await? else {
            return Ok(Err(format!(
                "replay_of: task {source} was deleted before the replay ran"
            )));
        };
        let records = self.store.step_records(source).await?;
        let history = records
            .into_iter()
            .map(serde_json::from_value::<AgentHistory>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| StoreError::Corrupt(format!("step record: {err}")))?;
        if !history.iter().any(|h| h.model_output.is_some()) {
            return Ok(Err(format!(
                "replay_of: task {source} recorded no steps with actions to replay"
            )));
        }
        let usage = task
            .usage
            .and_then(|u| serde_json::from_value::<UsageSummary>(u).ok())
            .unwrap_or_default();
        Ok(Ok(AgentHistoryList { history, usage }))
    }
}
