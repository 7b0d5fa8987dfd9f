//! Ask a human: the questions the agent's `ask_human` action asks and a person's answers
//! (`task_questions`, migration 0016).
//!
//! The worker holding the lease asks ([`Store::ask_question`]): in one transaction the question
//! is stored under its id (`s{step}a{action index}`), the task goes `running → waiting`
//! (status event `ask`, then a `question` event; the webhook outbox trigger reads the
//! question). A person answers ([`Store::answer_question`]): the answer is stored — sealed
//! like task secrets when it is secret, never in clear — with an `answered` event (without a
//! secret answer) and `waiting → running` (`answer`). The worker hears the events through its
//! hub and reads the answer ([`Store::question_answer`]). A worker lost while its task waits:
//! the task is requeued, the next worker's agent asks the same question id again, and gets the
//! answer given meanwhile at once (or waits again). Sealed answers are wiped when the task
//! ends (a trigger).

use std::collections::BTreeMap;

use browserd_types::{
    AnsweredEvent, ApiKeyId, EventBody, QuestionEvent, StatusEvent, TaskId, TaskStatus, Transition,
};
use secrecy::{ExposeSecret, SecretString};

use crate::events::{EventGuard, append_body_in};
use crate::tasks::{TaskRecord, parse_status};
use crate::{SealedFor, Store, StoreError};

/// The key of a sealed answer inside its sealed map.
const SEALED_KEY: &str = "answer";

/// A question the agent asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewQuestion {
    /// `s{step}a{action index}`: the same when a resumed run asks again.
    pub question_id: String,
    pub question: String,
    /// Offered answers; empty: free text.
    pub choices: Vec<String>,
    /// The agent asks for a secret: the answer is sealed whatever the person says.
    pub secret: bool,
    /// How long the agent waits at most.
    pub timeout_s: u64,
}

impl NewQuestion {
    /// The `question` event of this question.
    pub fn event(&self) -> QuestionEvent {
        QuestionEvent {
            question_id: self.question_id.clone(),
            question: self.question.clone(),
            choices: self.choices.clone(),
            secret: self.secret,
            timeout_s: self.timeout_s,
        }
    }
}

/// An answer as the worker reads it back.
#[derive(Clone)]
pub struct Answer {
    pub question_id: String,
    pub text: SecretString,
    /// Sealed at rest: the agent gets it as a `<secret>…</secret>` placeholder only.
    pub secret: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Answer");
        d.field("question_id", &self.question_id)
            .field("secret", &self.secret);
        if self.secret {
            d.field("text", &"[REDACTED]");
        } else {
            d.field("text", &self.text.expose_secret());
        }
        d.finish()
    }
}

/// What asking found.
#[derive(Clone, Debug)]
pub enum Asked {
    /// The task waits for the answer now (or already did).
    Waiting,
    /// The question was answered already (asked again by a resumed run).
    Answered(Answer),
}

/// What a person gives to `POST /v1/tasks/{id}/input`.
#[derive(Clone)]
pub struct GivenAnswer {
    pub text: SecretString,
    /// `text` is a `choice`: it must be one the question offers.
    pub is_choice: bool,
    /// Seal it (also when the question asked for a secret).
    pub secret: bool,
}

impl std::fmt::Debug for GivenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GivenAnswer")
            .field("is_choice", &self.is_choice)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// What answering did: the task after it and the question answered.
#[derive(Clone, Debug)]
pub struct Answered {
    pub task: TaskRecord,
    pub question_id: String,
    /// The answer was sealed.
    pub secret: bool,
}

/// The `answered` event of an answer (a secret one without its text).
pub(crate) fn answered_event(question_id: &str, answer: &GivenAnswer, secret: bool) -> EventBody {
    EventBody::Answered(AnsweredEvent {
        question_id: question_id.to_owned(),
        secret,
        answer: (!secret).then(|| answer.text.expose_secret().to_owned()),
    })
}

/// The status event of `ask` / `answer`.
pub(crate) fn question_status_event(transition: Transition) -> EventBody {
    EventBody::Status(StatusEvent::new(transition.target(true), transition.name()))
}

impl Store {
    fn open_answer(
        &self,
        for_: SealedFor,
        question_id: String,
        answer: Option<String>,
        sealed: Option<Vec<u8>>,
    ) -> Result<Option<Answer>, StoreError> {
        match (answer, sealed) {
            (Some(text), _) => Ok(Some(Answer {
                question_id,
                text: SecretString::from(text),
                secret: false,
            })),
            (None, Some(sealed)) => {
                let keyring = self.keyring.as_ref().ok_or(StoreError::NoSecretsKey)?;
                let mut opened = keyring.open(for_, &sealed)?;
                let text = opened
                    .remove(SEALED_KEY)
                    .ok_or_else(|| StoreError::Corrupt("sealed answer without a value".into()))?;
                Ok(Some(Answer {
                    question_id,
                    text,
                    secret: true,
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// The worker holding task `id`'s lease asks `question`: stored (again) under its id; if it
    /// was answered already, the answer; else the task goes `waiting` (from `running`, or
    /// `paused`) with its `ask` status event and the `question` event.
    pub async fn ask_question(
        &self,
        id: TaskId,
        owner: &str,
        question: &NewQuestion,
    ) -> Result<Asked, StoreError> {
        let mut tx = self.pool.begin().await?;
        let task = sqlx::query!(
            "select status, lease_owner, api_key_id from tasks where id = $1 for update",
            id.0
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::TaskNotFound(id))?;
        if task.lease_owner.as_deref() != Some(owner) {
            return Err(StoreError::LeaseLost(id));
        }
        let status = parse_status(&task.status)?;
        if status.is_terminal() {
            return Err(StoreError::TaskEnded { id, status });
        }
        let timeout_s = i32::try_from(question.timeout_s.max(1)).unwrap_or(i32::MAX);
        sqlx::query!(
            "insert into task_questions (task_id, question_id, question, choices, secret, timeout_s)
             values ($1, $2, $3, $4, $5, $6)
             on conflict (task_id, question_id) do update set
                 question = excluded.question, choices = excluded.choices,
                 secret = excluded.secret, timeout_s = excluded.timeout_s
             where task_questions.answered_at is null",
            id.0,
            question.question_id,
            question.question,
            serde_json::json!(question.choices),
            question.secret,
            timeout_s,
        )
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query!(
            "select answer, answer_sealed, answered_at from task_questions
             where task_id = $1 and question_id = $2",
            id.0,
            question.question_id,
        )
        .fetch_one(&mut *tx)
        .await?;
        if row.answered_at.is_some() {
            tx.commit().await?;
            return self
                .open_answer(
                    SealedFor::task(id, ApiKeyId(task.api_key_id)),
                    question.question_id.clone(),
                    row.answer,
                    row.answer_sealed,
                )?
                .map(Asked::Answered)
                .ok_or_else(|| {
                    StoreError::Corrupt("the answer was wiped (the task ended)".into())
                });
        }
        if Transition::Ask.is_allowed_from(status) {
            sqlx::query!(
                "update tasks set status = 'waiting', updated_at = now() where id = $1",
                id.0
            )
            .execute(&mut *tx)
            .await?;
            append_body_in(
                &mut tx,
                id,
                &question_status_event(Transition::Ask),
                EventGuard::Any,
            )
            .await?;
        } else if status != TaskStatus::Waiting {
            return Err(StoreError::IllegalTransition {
                transition: Transition::Ask.name(),
                current: status,
            });
        }
        append_body_in(
            &mut tx,
            id,
            &EventBody::Question(question.event()),
            EventGuard::Owner(owner),
        )
        .await?;
        tx.commit().await?;
        Ok(Asked::Waiting)
    }

    /// A person (key `owner`) answers the open question of task `id`. Refused with
    /// [`StoreError::NotWaiting`] when the task asks none (it is not waiting, and no question
    /// of a lost worker is open), [`StoreError::ChoiceNotOffered`] for a choice not offered,
    /// [`StoreError::NoSecretsKeyForAnswer`] for a secret answer without a secrets key.
    pub async fn answer_question(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        answer: &GivenAnswer,
    ) -> Result<Answered, StoreError> {
        let mut tx = self.pool.begin().await?;
        let task = sqlx::query!(
            "select status, api_key_id from tasks
             where id = $1 and ($2::uuid is null or api_key_id = $2)
             for update",
            id.0,
            owner.map(|o| o.0),
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::TaskNotFound(id))?;
        let status = parse_status(&task.status)?;
        let open = if status.is_terminal() {
            None
        } else {
            sqlx::query!(
                r#"select question_id, choices as "choices: sqlx::types::Json<Vec<String>>", secret
                   from task_questions where task_id = $1 and answered_at is null
                   order by asked_at desc limit 1"#,
                id.0,
            )
            .fetch_optional(&mut *tx)
            .await?
        };
        let Some(open) = open else {
            return Err(StoreError::NotWaiting { id, status });
        };
        let choices = open.choices.0;
        if answer.is_choice
            && !choices
                .iter()
                .any(|c| c.as_str() == answer.text.expose_secret())
        {
            return Err(StoreError::ChoiceNotOffered {
                choice: answer.text.expose_secret().chars().take(200).collect(),
                choices,
            });
        }
        let secret = answer.secret || open.secret;
        let (plain, sealed) = if secret {
            let keyring = self
                .keyring
                .as_ref()
                .ok_or(StoreError::NoSecretsKeyForAnswer)?;
            let map = BTreeMap::from([(SEALED_KEY.to_owned(), answer.text.clone())]);
            let for_ = SealedFor::task(id, ApiKeyId(task.api_key_id));
            (None, Some(keyring.seal(for_, &map)))
        } else {
            (Some(answer.text.expose_secret().to_owned()), None)
        };
        sqlx::query!(
            "update task_questions set answer = $3, answer_sealed = $4, answered_at = now()
             where task_id = $1 and question_id = $2",
            id.0,
            open.question_id,
            plain,
            sealed,
        )
        .execute(&mut *tx)
        .await?;
        append_body_in(
            &mut tx,
            id,
            &answered_event(&open.question_id, answer, secret),
            EventGuard::Any,
        )
        .await?;
        if status == TaskStatus::Waiting {
            sqlx::query!(
                "update tasks set status = 'running', updated_at = now() where id = $1",
                id.0
            )
            .execute(&mut *tx)
            .await?;
            append_body_in(
                &mut tx,
                id,
                &question_status_event(Transition::Answer),
                EventGuard::Any,
            )
            .await?;
        }
        tx.commit().await?;
        let task = self
            .get_task(None, id)
            .await?
            .ok_or(StoreError::TaskNotFound(id))?;
        Ok(Answered {
            task,
            question_id: open.question_id,
            secret,
        })
    }

    /// The answer to question `question_id` of task `id`, once given.
    pub async fn question_answer(
        &self,
        id: TaskId,
        question_id: &str,
    ) -> Result<Option<Answer>, StoreError> {
        let row = sqlx::query!(
            "select q.answer, q.answer_sealed, t.api_key_id
             from task_questions q join tasks t on t.id = q.task_id
             where q.task_id = $1 and q.question_id = $2 and q.answered_at is not null",
            id.0,
            question_id,
        )
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => self.open_answer(
                SealedFor::task(id, ApiKeyId(row.api_key_id)),
                question_id.to_owned(),
                row.answer,
                row.answer_sealed,
            ),
            None => Ok(None),
        }
    }

    /// The question task `id` asks now (the newest unanswered one), if any.
    pub async fn open_question(&self, id: TaskId) -> Result<Option<QuestionEvent>, StoreError> {
        let row = sqlx::query!(
            r#"select question_id, question, choices as "choices: sqlx::types::Json<Vec<String>>",
                      secret, timeout_s
               from task_questions where task_id = $1 and answered_at is null
               order by asked_at desc limit 1"#,
            id.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| QuestionEvent {
            question_id: row.question_id,
            question: row.question,
            choices: row.choices.0,
            secret: row.secret,
            timeout_s: u64::try_from(row.timeout_s).unwrap_or(1),
        }))
    }

    /// The secret answers task `id` was given so far: a resumed run fills their placeholders.
    pub async fn secret_answers(&self, id: TaskId) -> Result<Vec<Answer>, StoreError> {
        let rows = sqlx::query!(
            "select q.question_id, q.answer_sealed, t.api_key_id
             from task_questions q join tasks t on t.id = q.task_id
             where q.task_id = $1 and q.answer_sealed is not null order by q.asked_at",
            id.0,
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .filter_map(|row| {
                let for_ = SealedFor::task(id, ApiKeyId(row.api_key_id));
                self.open_answer(for_, row.question_id, None, row.answer_sealed)
                    .transpose()
            })
            .collect()
    }
}
