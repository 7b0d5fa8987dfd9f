//! The worker's [`HumanChannel`]: an `ask_human` question goes to the store (the task becomes
//! `waiting`, a `question` event and webhook `waiting_for_input` go out), and the answer is
//! awaited on the task's event feed (the `answered` event, through the process's hub fed by
//! LISTEN/NOTIFY — no polling), then read back from the store (opened from its seal when it
//! is secret). The agent bounds the wait; the task's lease is kept by the worker's heartbeat
//! meanwhile, and its browser context stays up.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{HumanAnswer, HumanChannel, HumanError, HumanQuestion, HumanSettings};
use browserd_store::{Answer, Asked, EventFeed, EventHub, FeedItem, NewQuestion, Store};
use browserd_types::{EventBody, TaskId, TaskOptions};
use secrecy::ExposeSecret;

/// The operator's `ask_human` settings (`--no-ask-human`, `--ask-human-timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AskHumanSettings {
    /// The action is offered at all.
    pub enabled: bool,
    /// The longest wait for an answer; a task may ask for less.
    pub max_wait: Duration,
}

impl Default for AskHumanSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_wait: Duration::from_secs(30 * 60),
        }
    }
}

impl AskHumanSettings {
    /// How long a task with `options` waits for an answer; `None` when the action is off (by
    /// the operator or the task).
    pub fn wait_for(&self, options: &TaskOptions) -> Option<Duration> {
        if !self.enabled || !options.ask_human {
            return None;
        }
        Some(
            options
                .ask_human_timeout()
                .map_or(self.max_wait, |asked| asked.min(self.max_wait)),
        )
    }
}

/// `ask_human` of one task on a worker holding its lease.
pub struct StoreHuman {
    store: Store,
    hub: EventHub,
    id: TaskId,
    owner: String,
}

impl StoreHuman {
    pub fn new(store: Store, hub: EventHub, id: TaskId, owner: String) -> Self {
        Self {
            store,
            hub,
            id,
            owner,
        }
    }

    /// The agent's settings for a task with `options`, if the action is on.
    pub fn settings(
        self,
        ask_human: &AskHumanSettings,
        options: &TaskOptions,
    ) -> Option<HumanSettings> {
        ask_human.wait_for(options).map(|timeout| HumanSettings {
            channel: Arc::new(self),
            timeout,
        })
    }

    async fn answer(&self, question_id: &str) -> Result<Option<HumanAnswer>, HumanError> {
        match self.store.question_answer(self.id, question_id).await {
            Ok(answer) => Ok(answer.map(to_human)),
            Err(err) => Err(HumanError::Fatal(format!(
                "reading the answer failed: {err}"
            ))),
        }
    }
}

fn to_human(answer: Answer) -> HumanAnswer {
    HumanAnswer {
        text: answer.text.expose_secret().to_owned(),
        secret: answer.secret,
    }
}

#[async_trait]
impl HumanChannel for StoreHuman {
    async fn ask(&self, question: &HumanQuestion) -> Result<HumanAnswer, HumanError> {
        let fatal = |what: &str, err: browserd_store::StoreError| {
            HumanError::Fatal(format!("{what} failed: {err}"))
        };
        // Follow the events from now on before asking, so the answer cannot slip past.
        let seq = match self.store.get_task(None, self.id).await {
            Ok(Some(task)) => task.last_event_seq,
            Ok(None) => return Err(HumanError::Fatal("the task was deleted".into())),
            Err(err) => return Err(fatal("reading the task", err)),
        };
        let mut feed = EventFeed::follow(self.store.clone(), &self.hub, self.id, seq);
        let new = NewQuestion {
            question_id: question.id.clone(),
            question: question.question.clone(),
            choices: question.choices.clone(),
            secret: question.secret,
            timeout_s: question.timeout.as_secs().max(1),
        };
        match self.store.ask_question(self.id, &self.owner, &new).await {
            Ok(Asked::Answered(answer)) => {
                tracing::info!(question_id = %question.id, "the question was answered before");
                return Ok(to_human(answer));
            }
            Ok(Asked::Waiting) => {
                tracing::info!(question_id = %question.id, "waiting for a person's answer");
            }
            Err(err) => return Err(fatal("asking the question", err)),
        }
        loop {
            match feed.next().await {
                Ok(FeedItem::Event(event)) => match event.body() {
                    Some(EventBody::Answered(answered)) if answered.question_id == question.id => {
                        if let Some(answer) = self.answer(&question.id).await? {
                            tracing::info!(question_id = %question.id, "answered");
                            return Ok(answer);
                        }
                    }
                    Some(EventBody::Status(status)) if status.status.is_terminal() => {
                        return Err(HumanError::Fatal(format!(
                            "the task ended ({}) while waiting for the answer",
                            status.status
                        )));
                    }
                    _ => {}
                },
                Ok(FeedItem::Resync) => {
                    if let Some(answer) = self.answer(&question.id).await? {
                        return Ok(answer);
                    }
                }
                Ok(FeedItem::Deleted) => {
                    return Err(HumanError::Fatal("the task was deleted".into()));
                }
                Ok(FeedItem::Closed) => {
                    return Err(HumanError::Fatal(
                        "the task's event log ended while waiting for the answer".into(),
                    ));
                }
                Err(err) => return Err(fatal("following the task's events", err)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_may_shorten_the_wait_and_switch_the_action_off() {
        let settings = AskHumanSettings {
            enabled: true,
            max_wait: Duration::from_secs(600),
        };
        let mut options = TaskOptions::default();
        assert_eq!(settings.wait_for(&options), Some(Duration::from_secs(600)));
        options.ask_human_timeout_s = Some(30);
        assert_eq!(settings.wait_for(&options), Some(Duration::from_secs(30)));
        options.ask_human_timeout_s = Some(6000);
        assert_eq!(settings.wait_for(&options), Some(Duration::from_secs(600)));
        options.ask_human = false;
        assert_eq!(settings.wait_for(&options), None);
        let off = AskHumanSettings {
            enabled: false,
            ..settings
        };
        assert_eq!(off.wait_for(&TaskOptions::default()), None);
    }
}
