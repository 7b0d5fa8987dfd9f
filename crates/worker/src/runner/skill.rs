//! A skill's work in a run, done on the run's browser after its last step and before the
//! browser is released: a generating run learns how its result is read from the final page
//! and becomes a script ([`SkillRun::Generate`]); an execution heals the steps the site broke
//! (its [`ModelHealer`]) and reads its result ([`SkillRun::Execute`]).
//!
//! The healer's agent is given no secrets (a step that must type one cannot be healed), so it
//! cannot redact them either, and a replay's failure details quote URLs as the browser shows
//! them: a service replay's events pass through a [`RedactingSink`] and a healed script is
//! redacted with the task's secrets before it is kept, so a secret value a page shows (in a URL
//! after a GET form, in its text) never reaches the stored steps or the next version.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use browserd_agent::replay::ReplayReport;
use browserd_agent::secrets::Secrets;
use browserd_agent::skill::{
    self, HealedStep, ModelHealer, SkillParameter, SkillScript, learn_result,
};
use browserd_agent::{AgentBrowser, AgentEvent, AgentHistoryList, EventSink};
use browserd_llm::ChatModel;
use browserd_views::Screenshot;
use serde_json::Value;

use crate::SessionBrowser;

/// Model calls a skill execution may make to heal one step.
pub const HEAL_MAX_MODEL_CALLS: u32 = 2;

/// What a run does for its skill.
pub enum SkillRun {
    /// A generating run (an agent run of the prompt, or a replay of the source task): when it
    /// ends done and successful, learn how its result is read and make the script.
    Generate {
        model: Arc<dyn ChatModel>,
        goal: String,
        output_schema: Option<Value>,
        /// The declared parameters.
        declared: Vec<SkillParameter>,
        /// The value the run used for each parameter.
        values: BTreeMap<String, String>,
    },
    /// An execution of `script` bound with `values`: heal with `model`, then read the result.
    Execute {
        model: Arc<dyn ChatModel>,
        goal: String,
        output_schema: Option<Value>,
        script: SkillScript,
        values: BTreeMap<String, String>,
    },
}

/// What a run did for its skill.
#[derive(Clone, Debug)]
pub enum SkillEnd {
    /// The script of a successful generating run, its result reader learned.
    Generated {
        script: SkillScript,
        /// Why the learned reader fell back to the recorded text, if it did.
        note: Option<String>,
    },
    /// An execution: its result read from the final page (text: JSON when the skill has an
    /// output schema), or why it could not be; and the next version when steps were healed.
    Executed {
        result: Result<String, String>,
        healed: Option<(SkillScript, Vec<HealedStep>)>,
    },
}

impl SkillRun {
    /// The healer of an execution on `browser`, its steps recorded through `sink`.
    pub(super) fn healer(
        &self,
        browser: &Arc<SessionBrowser>,
        sink: &Arc<dyn EventSink>,
    ) -> Option<ModelHealer> {
        match self {
            SkillRun::Execute {
                model,
                goal,
                values,
                ..
            } => Some(ModelHealer {
                model: model.clone(),
                browser: browser.clone() as Arc<dyn AgentBrowser>,
                sink: sink.clone(),
                goal: goal.clone(),
                values: values.clone(),
                max_model_calls: HEAL_MAX_MODEL_CALLS,
            }),
            SkillRun::Generate { .. } => None,
        }
    }

    /// After a generating agent run (`history`): its script, when it ended done and
    /// successful.
    pub(super) async fn after_agent(
        &self,
        browser: &SessionBrowser,
        history: &AgentHistoryList,
    ) -> Option<SkillEnd> {
        if !history.is_done() || history.is_successful() != Some(true) {
            return None;
        }
        let final_result = history.final_result().unwrap_or_default().to_owned();
        self.generated(browser, history, &final_result).await
    }

    /// After a replay: a generation from a task (the recorded `source` and its final result)
    /// or an execution (`history` is what it did).
    pub(super) async fn after_replay(
        &self,
        browser: &SessionBrowser,
        source: &AgentHistoryList,
        history: &AgentHistoryList,
        report: &ReplayReport,
        secrets: &Secrets,
    ) -> Option<SkillEnd> {
        if !report.success {
            return None;
        }
        match self {
            SkillRun::Generate { .. } => {
                let final_result = report
                    .final_result
                    .clone()
                    .or_else(|| source.final_result().map(str::to_owned))
                    .unwrap_or_default();
                self.generated(browser, source, &final_result).await
            }
            SkillRun::Execute {
                output_schema,
                script,
                values,
                ..
            } => {
                let read =
                    skill::read_result(browser, &script.result, values, output_schema.as_ref())
                        .await;
                let result = match read {
                    Ok(Value::String(text)) if output_schema.is_none() => Ok(text),
                    Ok(value) => Ok(value.to_string()),
                    Err(err) => Err(format!("reading the skill's result: {err}")),
                };
                let healed = (!report.healed.is_empty()).then(|| {
                    let next = skill::healed_script(script, history, report, values);
                    (redacted(next, secrets), report.healed.clone())
                });
                Some(SkillEnd::Executed { result, healed })
            }
        }
    }

    async fn generated(
        &self,
        browser: &SessionBrowser,
        recorded: &AgentHistoryList,
        final_result: &str,
    ) -> Option<SkillEnd> {
        let SkillRun::Generate {
            model,
            goal,
            output_schema,
            declared,
            values,
        } = self
        else {
            return None;
        };
        let learned = learn_result(
            model.as_ref(),
            browser,
            goal,
            final_result,
            output_schema.as_ref(),
            values,
        )
        .await;
        if let Some(note) = &learned.note {
            tracing::info!(%note, calls = learned.model_calls, "the skill reads its result as recorded");
        }
        let mut script = skill::make_script(recorded, declared, values);
        script.result = learned.reader;
        Some(SkillEnd::Generated {
            script,
            note: learned.note,
        })
    }
}

/// `script` with every secret value replaced by its placeholder.
fn redacted(script: SkillScript, secrets: &Secrets) -> SkillScript {
    let Ok(mut value) = serde_json::to_value(&script) else {
        return script;
    };
    secrets.redact_value(&mut value);
    serde_json::from_value(value).unwrap_or(script)
}

/// `sink`, passing events on with the values of `secrets` replaced by their placeholders
/// (itself when there are none).
pub(super) fn redacting(
    sink: Arc<dyn EventSink>,
    secrets: &browserd_agent::SensitiveData,
) -> Arc<dyn EventSink> {
    let secrets = Secrets::new(secrets);
    if secrets.is_empty() {
        return sink;
    }
    Arc::new(RedactingSink {
        inner: sink,
        secrets,
    })
}

/// Passes events on with the task's secret values replaced by their placeholders.
struct RedactingSink {
    inner: Arc<dyn EventSink>,
    secrets: Secrets,
}

#[async_trait]
impl EventSink for RedactingSink {
    async fn emit(&self, event: AgentEvent) {
        let event = match serde_json::to_value(&event) {
            Ok(mut value) => {
                self.secrets.redact_value(&mut value);
                serde_json::from_value(value).unwrap_or(event)
            }
            Err(_) => event,
        };
        self.inner.emit(event).await;
    }

    async fn store_screenshot(&self, step: u32, screenshot: &Screenshot) -> Option<String> {
        self.inner.store_screenshot(step, screenshot).await
    }
}
