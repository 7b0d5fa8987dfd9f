//! The scheduler: fires due schedules, each tick exactly once whichever process gets it, and
//! sleeps until the earliest next tick.
//!
//! [`TaskCore::fire_due_schedules`] claims due schedules one by one (the store locks each with
//! `for update skip locked`); for each it computes the first tick after the database's now,
//! admits the target through the task service's own path ([`TaskService::admitted`]: the key's
//! quotas, the machine's queue cap) and inserts the task in the claim's transaction, or records
//! why not (`last_error`) — either way the schedule moves on, so a refused tick is not retried
//! and a down time of many ticks fires once.
//!
//! [`TaskCore::run_scheduler`] runs in every api process (`browserd api`, `browserd serve`): the
//! api holds the admission settings of tasks created over `/v1` (model catalog, proxies,
//! `--max-queued-tasks`) and always has a replica, while workers may scale to zero with their
//! queue. It wakes at the earliest next tick by the database's clock (capped at
//! [`MAX_SLEEP`]), on a `schedules` notification (a schedule created, changed or fired by any
//! process), or on shutdown; it never polls faster.
//!
//! [`TaskService::admitted`]: crate::TaskService

use std::time::Duration;

use browserd_store::{NewTask, ScheduleFiring, SkillAttach};
use browserd_types::schedules::{ScheduleTarget, SkillTarget};
use browserd_types::skills::RunSkillRequest;
use tokio_util::sync::CancellationToken;

use super::TaskCore;
use super::schedules::stored_target;
use crate::caller::Caller;
use crate::cron::CronTiming;
use crate::error::TaskError;

/// The longest the scheduler sleeps without a notification.
pub const MAX_SLEEP: Duration = Duration::from_secs(30);
/// The longest wait for another process's firing of a due schedule to commit (its commit
/// notifies, which ends the wait at once).
const FIRING_ELSEWHERE_WAIT: Duration = Duration::from_secs(1);
/// The first wait after a failure of the database, doubled up to [`MAX_SLEEP`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The skill parameters a schedule may store: the skill is resolved at each tick (its current
/// version then, whose parameters are checked then).
pub(crate) fn check_skill_target(target: &SkillTarget) -> Result<(), TaskError> {
    let size = serde_json::to_vec(&target.parameters).map_or(usize::MAX, |bytes| bytes.len());
    if size > 64 * 1024 {
        return Err(TaskError::validation(
            "target.skill.parameters",
            "parameters must be at most 64 KiB of JSON",
        ));
    }
    Ok(())
}

/// The outcome of one tick of one schedule, for the logs and metrics.
enum Fired {
    Task,
    Refused,
}

impl TaskCore {
    /// The task of a tick of a skill target: the skill's execution with `target.parameters`
    /// (its current version), validated and admitted for `caller` as `run_skill` admits one,
    /// with its link to the skill, for the firing to insert in its transaction (a tick stays
    /// exactly once).
    async fn fire_skill_target(
        &self,
        caller: &Caller,
        target: &SkillTarget,
    ) -> Result<(NewTask, Option<SkillAttach>), TaskError> {
        let request = RunSkillRequest {
            parameters: target.parameters.clone(),
            ..RunSkillRequest::default()
        };
        let (task_request, attach) = self
            .skill_execution(caller, target.skill_id, &request)
            .await?;
        let new_task = self.tasks.admitted(caller, task_request, None).await?;
        Ok((new_task, Some(attach)))
    }

    /// The task of the locked tick, validated and admitted as `POST /v1/tasks` admits one.
    async fn tick_task(
        &self,
        firing: &ScheduleFiring,
    ) -> Result<(NewTask, Option<SkillAttach>), TaskError> {
        let caller = Caller::key(firing.schedule.api_key_id);
        match stored_target(&firing.schedule.target)? {
            ScheduleTarget::Task(request) => {
                Ok((self.tasks.admitted(&caller, *request, None).await?, None))
            }
            ScheduleTarget::Skill(skill) => self.fire_skill_target(&caller, &skill).await,
        }
    }

    /// Fires one claimed schedule: its task inserted, or the refusal recorded; the schedule
    /// moved to its first tick after now either way.
    async fn fire(&self, mut firing: ScheduleFiring) -> Result<Fired, TaskError> {
        let schedule_id = firing.schedule.id;
        let next = CronTiming::parse(&firing.schedule.cron, &firing.schedule.time_zone)
            .ok()
            .and_then(|timing| timing.next_after(firing.now));
        let inserted = match self.tick_task(&firing).await {
            Ok((new_task, skill)) => firing
                .insert_task(new_task, skill.as_ref())
                .await
                .map_err(TaskError::from),
            Err(err) => Err(err),
        };
        match inserted {
            Ok(task) => {
                // A schedule without a tick left (its expression no longer parses, or its
                // last date passed) is disabled, and says why.
                let ended = next
                    .is_none()
                    .then_some("no_next_tick: no tick is left after this one; disabled");
                firing.finish(Some(task.id), ended, next).await?;
                tracing::info!(%schedule_id, task_id = %task.id, "schedule fired");
                Ok(Fired::Task)
            }
            Err(err) => {
                let shown = match &err {
                    TaskError::Internal(detail) => {
                        tracing::warn!(%schedule_id, detail, "schedule's tick failed");
                        "internal_error: internal error (see the server's log)".to_owned()
                    }
                    other => format!("{}: {other}", other.code()),
                };
                firing.finish(None, Some(&shown), next).await?;
                tracing::info!(%schedule_id, error = %shown, "schedule's tick created no task");
                Ok(Fired::Refused)
            }
        }
    }

    /// Fires every due schedule that no other process is firing; answers how many.
    pub async fn fire_due_schedules(&self) -> Result<usize, TaskError> {
        let mut fired = 0;
        while let Some(firing) = self.store.claim_due_schedule().await? {
            let outcome = match self.fire(firing).await? {
                Fired::Task => "task",
                Fired::Refused => "refused",
            };
            metrics::counter!("browserd_schedule_ticks_total", "outcome" => outcome).increment(1);
            fired += 1;
        }
        Ok(fired)
    }

    /// Fires due schedules until `shutdown`, sleeping until the next tick in between.
    pub async fn run_scheduler(self, shutdown: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let next = match self.fire_due_schedules().await {
                Ok(_) => self
                    .store
                    .next_schedule_due_in()
                    .await
                    .map_err(TaskError::from),
                Err(err) => Err(err),
            };
            let wait = match next {
                Ok(next) => {
                    backoff = FIRST_BACKOFF;
                    match next {
                        Some(due) if due.is_zero() => FIRING_ELSEWHERE_WAIT,
                        Some(due) => due.min(MAX_SLEEP),
                        None => MAX_SLEEP,
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, ?backoff, "firing schedules failed; retrying");
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_SLEEP);
                    wait
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = self.hub.schedule_wakeup() => {}
            }
        }
    }
}
