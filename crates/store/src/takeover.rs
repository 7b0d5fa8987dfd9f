//! Take-over (migration 0017): a person's inputs to a paused task's browser. The api records
//! each one as a `person_input` event — only while the task accepts them and a worker holds
//! its browser — and the worker that holds it applies them in the log's order. A secret typed
//! text is not in the event: it waits sealed in `task_secret_inputs` until that worker takes
//! it (and is dropped when the task ends).

use std::collections::BTreeMap;

use browserd_types::takeover::{PersonInput, accepts_person_input};
use browserd_types::{ApiKeyId, EventBody, TaskEvent, TaskId};
use secrecy::{ExposeSecret, SecretString};

use crate::events::{EventGuard, append_body_in};
use crate::tasks::parse_status;
use crate::{Store, StoreError};

/// The sealed map's one entry.
const TEXT: &str = "text";

impl Store {
    /// Records `input` for task `id` of `key` and answers its event. Refused with
    /// [`StoreError::TakeOverRefused`] unless the task is paused on a worker (which holds its
    /// browser); a secret text needs the secrets key.
    pub async fn record_person_input(
        &self,
        key: ApiKeyId,
        id: TaskId,
        input: &PersonInput,
    ) -> Result<TaskEvent, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query!(
            "select status, lease_owner from tasks where id = $1 and api_key_id = $2 for update",
            id.0,
            key.0,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::TaskNotFound(id))?;
        let status = parse_status(&row.status)?;
        if !accepts_person_input(status) {
            return Err(StoreError::TakeOverRefused(format!(
                "the task is {status}: pause it to drive its browser (or drive it while it waits for an answer)"
            )));
        }
        let Some(owner) = row.lease_owner else {
            return Err(StoreError::TakeOverRefused(
                "the task has no browser yet: it was paused before a worker started it".to_owned(),
            ));
        };
        let sealed = match input {
            PersonInput::Type { text, secret: true } => {
                let keyring = self.keyring.as_ref().ok_or_else(|| {
                    StoreError::TakeOverRefused(
                        "this server has no secrets key, so it cannot accept secret text"
                            .to_owned(),
                    )
                })?;
                let plain = BTreeMap::from([(TEXT.to_owned(), SecretString::from(text.clone()))]);
                Some(keyring.seal(crate::SealedFor::task(id, key), &plain))
            }
            _ => None,
        };
        let body = EventBody::PersonInput(input.recorded());
        let event = append_body_in(&mut tx, id, &body, EventGuard::Owner(&owner)).await?;
        if let Some(sealed) = sealed {
            sqlx::query!(
                "insert into task_secret_inputs (task_id, event_seq, sealed) values ($1, $2, $3)",
                id.0,
                event.seq,
                sealed,
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(event)
    }

    /// The secret text of the `person_input` event `seq` of task `id`, for the worker `owner`
    /// holding its lease; taken once (the row is deleted). `None` when there is none (taken
    /// already, or the task ended).
    pub async fn take_secret_input(
        &self,
        id: TaskId,
        owner: &str,
        seq: i64,
    ) -> Result<Option<SecretString>, StoreError> {
        let row = sqlx::query!(
            "delete from task_secret_inputs s using tasks t
             where s.task_id = $1 and s.event_seq = $2 and t.id = s.task_id and t.lease_owner = $3
             returning s.sealed, t.api_key_id",
            id.0,
            seq,
            owner,
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let keyring = self.keyring.as_ref().ok_or(StoreError::NoSecretsKey)?;
        let for_ = crate::SealedFor::task(id, ApiKeyId(row.api_key_id));
        let mut plain = keyring.open(for_, &row.sealed)?;
        Ok(plain.remove(TEXT).filter(|t| !t.expose_secret().is_empty()))
    }
}
