//! Replays of a recorded history without a model: `browserd replay` and the service's
//! replay tasks.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use browserd_agent::replay::{ActionReplay, ReplayOptions, ReplayReport};
use browserd_agent::secrets::Secrets;
use browserd_agent::{AgentControl, AgentHistoryList, EventSink};

use super::{
    AbortOnDrop, LiveViewLink, RunEnd, RunError, RunOutcome, TaskRunner, TaskSpec, beside,
    release_browser, return_to_last_page,
};
use crate::TaskWorkspace;

impl TaskRunner {
    /// Replays `history` without a model (browser-use's `rerun_history`) in a fresh browser
    /// context configured from `spec` (its egress rules, viewport and secrets; the task text
    /// and model are not used). `on_action` sees each action's report as it happens.
    pub async fn replay(
        &self,
        spec: &TaskSpec,
        history: &AgentHistoryList,
        options: &ReplayOptions,
        workspace_dir: Option<&std::path::Path>,
        on_action: impl FnMut(&ActionReplay) + Send,
    ) -> Result<ReplayReport, RunError> {
        let workspace = TaskWorkspace::open(workspace_dir)
            .map_err(|err| RunError::Workspace(err.to_string()))?;
        let secrets = Secrets::try_new(&spec.secrets)
            .map_err(|err| RunError::InvalidTask(err.to_string()))?;
        let browser = self.lease_browser(spec, &workspace).await?;
        let report =
            browserd_agent::replay::replay(browser.as_ref(), history, &secrets, options, on_action)
                .await;
        release_browser(browser).await;
        Ok(report)
    }

    /// A replay as a service task: [`TaskRunner::replay`] with the task's sink (every replayed
    /// step is persisted and published like an agent step, with its screenshot), control
    /// (stop, pause, resume), wall-clock budget and workspace. A resumed replay skips the
    /// recorded steps an earlier attempt persisted and first goes back to `resume_url`.
    pub async fn run_replay(&self, request: ReplayRequest) -> Result<ReplayOutcome, RunError> {
        let ReplayRequest {
            spec,
            source,
            options,
            workspace_dir,
            sink,
            control,
            skip_steps,
            first_step,
            resume_url,
            live_view,
            skill,
        } = request;
        if let Some(timeout) = spec.timeout
            && timeout.is_zero()
        {
            return Err(RunError::InvalidTask(
                "the task's timeout_s has already elapsed".to_owned(),
            ));
        }
        let workspace = TaskWorkspace::open(workspace_dir.as_deref())
            .map_err(|err| RunError::Workspace(err.to_string()))?;
        let secrets = Secrets::try_new(&spec.secrets)
            .map_err(|err| RunError::InvalidTask(err.to_string()))?;
        let browser = self.lease_browser(&spec, &workspace).await?;
        return_to_last_page(&browser, resume_url).await;
        let timed_out = Arc::new(Mutex::new(None::<String>));
        let deadline = spec.timeout.map(|timeout| {
            let control = control.clone();
            let timed_out = timed_out.clone();
            AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                *timed_out.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!(
                    "timeout_s: the task ran out of its wall-clock budget ({} s)",
                    timeout.as_secs()
                ));
                control.stop();
            }))
        });
        // A replay's failure details and a healer's steps quote pages as shown.
        let sink = super::skill::redacting(sink, &spec.secrets);
        let healer = skill.as_ref().and_then(|s| s.healer(&browser, &sink));
        let run = browserd_agent::replay::ReplayRun {
            sink: sink.as_ref(),
            control: &control,
            screenshots: true,
            skip_steps,
            first_step,
            healer: healer
                .as_ref()
                .map(|h| h as &dyn browserd_agent::skill::StepHealer),
        };
        let replaying = browserd_agent::replay::replay_steps(
            browser.as_ref(),
            &source,
            &secrets,
            &options,
            &run,
            |_| {},
        );
        let (report, history) = match live_view {
            Some(link) => {
                let live = browser
                    .session()
                    .live_view(link.settings, link.watched, link.frames);
                beside(replaying, live).await
            }
            None => replaying.await,
        };
        drop(deadline);
        drop(healer);
        let browser_lost = browser.session().browser_lost();
        let skill = match &skill {
            Some(skill) if !browser_lost => {
                skill
                    .after_replay(&browser, &source, &history, &report, &secrets)
                    .await
            }
            _ => None,
        };
        release_browser(browser).await;
        let timed_out = timed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let end = if report.success {
            RunEnd::Done {
                success: Some(true),
            }
        } else if let Some(reason) = timed_out {
            RunEnd::Budget(reason)
        } else if control.is_stopped() && report.error.as_deref() == Some("stopped") {
            RunEnd::Stopped
        } else {
            let reason = report
                .error
                .clone()
                .unwrap_or_else(|| "the replay failed".to_owned());
            if browser_lost {
                RunEnd::BrowserLost(reason)
            } else {
                RunEnd::NotDone(reason)
            }
        };
        Ok(ReplayOutcome {
            run: RunOutcome {
                history,
                end,
                browser_state: None,
                skill,
            },
            report,
        })
    }
}

/// One service replay's inputs.
pub struct ReplayRequest {
    /// Egress rules, viewport, settle cap, proxy, secrets and timeout of the replay task.
    pub spec: TaskSpec,
    /// The recorded history to replay.
    pub source: AgentHistoryList,
    pub options: ReplayOptions,
    pub workspace_dir: Option<PathBuf>,
    pub sink: Arc<dyn EventSink>,
    pub control: AgentControl,
    /// Recorded steps (with actions) already replayed by an earlier attempt.
    pub skip_steps: usize,
    /// Number of the first step this attempt records.
    pub first_step: u32,
    /// Where the earlier attempt was.
    pub resume_url: Option<String>,
    /// Stream the focused tab while someone watches (the service's live view).
    pub live_view: Option<LiveViewLink>,
    /// The skill this replay generates (from a task) or executes (healed, its result read
    /// before the browser is released).
    pub skill: Option<super::SkillRun>,
}

/// A finished service replay.
#[derive(Clone, Debug)]
pub struct ReplayOutcome {
    /// The replay's own steps and how it ended (`Done` = every action that ran worked; the
    /// final result is the recording's, in `report.final_result`).
    pub run: RunOutcome,
    pub report: ReplayReport,
}
