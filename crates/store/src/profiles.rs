//! Browser profiles (migration 0015): the browser state a login needs — cookies and
//! localStorage per origin — named per API key. The api creates, lists, renames and deletes
//! them; the worker loads one into a task's new context and writes it back at every step
//! boundary where it changed, with an optimistic version check ([`Store::save_profile_state`]).
//!
//! The state is credentials: with a secrets key it is sealed with the [`SecretsKeyring`] (the
//! profile id and its key's id as associated data) exactly like an `/api/v2` session's cookies, and only the
//! cookie domains stay in clear (for the views).
//!
//! [`SecretsKeyring`]: crate::SecretsKeyring

use std::collections::BTreeMap;

use browserd_types::ApiKeyId;
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::object_limits::{KeyObject, check_count, lock_key_objects};
use crate::{SealedFor, Store, StoreError};

/// The one entry of a profile's sealed state.
const STATE_ENTRY: &str = "state";

/// A profile as the api shows it (its state is never read here).
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileRecord {
    pub id: Uuid,
    pub api_key_id: ApiKeyId,
    pub name: Option<String>,
    pub user_id: Option<String>,
    /// Writes of the state so far (0: never written).
    pub version: i64,
    /// The domains of the saved cookies, sorted, without duplicates.
    pub cookie_domains: Vec<String>,
    /// When a task last started with it.
    pub last_used_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A profile's saved state and its version, as a task's worker reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileState {
    pub version: i64,
    /// `{"cookies": […], "origins": […]}`; `null` before the first write.
    pub state: serde_json::Value,
}

/// The answer to [`Store::save_profile_state`].
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileSave {
    /// Written; the profile is now at this version.
    Saved { version: i64 },
    /// Someone wrote since `expected_version`: here is the newer state, to merge into.
    Conflict(ProfileState),
    /// The profile was deleted.
    Gone,
}

struct ProfileRow {
    id: Uuid,
    api_key_id: Uuid,
    name: Option<String>,
    user_id: Option<String>,
    version: i64,
    cookie_domains: Vec<String>,
    last_used_at: Option<OffsetDateTime>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

impl From<ProfileRow> for ProfileRecord {
    fn from(row: ProfileRow) -> Self {
        ProfileRecord {
            id: row.id,
            api_key_id: ApiKeyId(row.api_key_id),
            name: row.name,
            user_id: row.user_id,
            version: row.version,
            cookie_domains: row.cookie_domains,
            last_used_at: row.last_used_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl Store {
    /// Creates an empty profile owned by `owner`.
    ///
    /// Errors: [`StoreError::KeyObjectLimit`] when `owner` has its limit of profiles
    /// ([`crate::ObjectLimits`]); concurrent creations by one key are counted one at a time.
    pub async fn create_profile(
        &self,
        owner: ApiKeyId,
        name: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<ProfileRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let max = self.object_limits.max_profiles_per_key;
        if max > 0 {
            lock_key_objects(&mut tx, owner, KeyObject::Profiles).await?;
            let count = sqlx::query_scalar!(
                "select count(*) as \"n!\" from profiles where api_key_id = $1",
                owner.0,
            )
            .fetch_one(&mut *tx)
            .await?;
            check_count(KeyObject::Profiles, count, max)?;
        }
        let row = sqlx::query_as!(
            ProfileRow,
            "insert into profiles (id, api_key_id, name, user_id) values ($1, $2, $3, $4)
             returning id, api_key_id, name, user_id, version, cookie_domains, last_used_at,
                 created_at, updated_at",
            Uuid::now_v7(),
            owner.0,
            name,
            user_id,
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    /// `owner`'s profile `id` (another key's is `None`, like a missing one).
    pub async fn get_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<ProfileRecord>, StoreError> {
        let row = sqlx::query_as!(
            ProfileRow,
            "select id, api_key_id, name, user_id, version, cookie_domains, last_used_at,
                 created_at, updated_at
             from profiles where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// A page (1-based `page_number`) of `owner`'s profiles, newest first, with the total
    /// count; `query` keeps those whose name contains it (case-insensitive).
    pub async fn list_profiles(
        &self,
        owner: ApiKeyId,
        query: Option<&str>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<ProfileRecord>, i64), StoreError> {
        // `%`, `_` and `\` in the query are literal characters, not patterns.
        let pattern = query.map(|q| {
            let escaped = q
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let rows = sqlx::query_as!(
            ProfileRow,
            "select id, api_key_id, name, user_id, version, cookie_domains, last_used_at,
                 created_at, updated_at
             from profiles
             where api_key_id = $1 and ($2::text is null or name ilike $2)
             order by created_at desc, id desc
             limit $3 offset $4",
            owner.0,
            pattern,
            page_size,
            (page_number - 1).saturating_mul(page_size),
        )
        .fetch_all(&self.pool)
        .await?;
        let total = sqlx::query_scalar!(
            "select count(*) as \"n!\" from profiles
             where api_key_id = $1 and ($2::text is null or name ilike $2)",
            owner.0,
            pattern,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((rows.into_iter().map(Into::into).collect(), total))
    }

    /// Renames `owner`'s profile (`Some(None)` clears a field, `None` keeps it); `None` when
    /// it does not exist.
    pub async fn update_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        name: Option<Option<&str>>,
        user_id: Option<Option<&str>>,
    ) -> Result<Option<ProfileRecord>, StoreError> {
        let row = sqlx::query_as!(
            ProfileRow,
            "update profiles set
                 name = case when $3 then $4 else name end,
                 user_id = case when $5 then $6 else user_id end,
                 updated_at = now()
             where id = $1 and api_key_id = $2
             returning id, api_key_id, name, user_id, version, cookie_domains, last_used_at,
                 created_at, updated_at",
            id,
            owner.0,
            name.is_some(),
            name.flatten(),
            user_id.is_some(),
            user_id.flatten(),
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// Deletes `owner`'s profile and its state; `false` when it does not exist. A task
    /// running with it stops saving (its next write finds it gone).
    pub async fn delete_profile(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        let deleted = sqlx::query!(
            "delete from profiles where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .execute(&self.pool)
        .await?;
        Ok(deleted.rows_affected() > 0)
    }

    /// The latest saved state of `owner`'s profile `id` for a task that starts with it (and
    /// its `last_used_at` set to now); `None` when the profile is gone.
    ///
    /// Errors: [`StoreError::Seal`] when the state is sealed and cannot be opened (no key,
    /// a key that was dropped, damaged data), [`StoreError::NoSecretsKey`] when sealed and
    /// this store has no key.
    pub async fn load_profile_state(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<ProfileState>, StoreError> {
        let row = sqlx::query!(
            "update profiles set last_used_at = now()
             where id = $1 and api_key_id = $2
             returning version, state, state_sealed",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let state = self.open_state(
            SealedFor::new(id, owner),
            row.state,
            row.state_sealed.as_deref(),
        )?;
        Ok(Some(ProfileState {
            version: row.version,
            state,
        }))
    }

    /// Writes `state` (and its `cookie_domains`) as `owner`'s profile `id`'s new version if it
    /// is still at `expected_version`; otherwise answers the newer state (or that it is gone),
    /// for the caller to merge its changes into and try again.
    ///
    /// Errors: [`StoreError::ProfileTooLarge`] when `state` (serialized) is larger than
    /// [`crate::ObjectLimits::max_profile_bytes`]: nothing is written, the previous state stays.
    pub async fn save_profile_state(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        expected_version: i64,
        state: &serde_json::Value,
        cookie_domains: &[String],
    ) -> Result<ProfileSave, StoreError> {
        let max = self.object_limits.max_profile_bytes;
        if max > 0 {
            let size = state.to_string().len();
            if size > max {
                return Err(StoreError::ProfileTooLarge { size, max });
            }
        }
        let for_ = SealedFor::new(id, owner);
        let (plain, sealed) = self.seal_state(for_, state);
        let saved = sqlx::query_scalar!(
            "update profiles set state = $4, state_sealed = $5, cookie_domains = $6,
                 version = version + 1, updated_at = now()
             where id = $1 and api_key_id = $2 and version = $3
             returning version",
            id,
            owner.0,
            expected_version,
            plain,
            sealed,
            cookie_domains,
        )
        .fetch_optional(&self.pool)
        .await?;
        if let Some(version) = saved {
            return Ok(ProfileSave::Saved { version });
        }
        let row = sqlx::query!(
            "select version, state, state_sealed from profiles where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(ProfileSave::Gone);
        };
        let state = self.open_state(for_, row.state, row.state_sealed.as_deref())?;
        Ok(ProfileSave::Conflict(ProfileState {
            version: row.version,
            state,
        }))
    }

    /// The column values of `state`: in clear without a key, else sealed.
    fn seal_state(
        &self,
        for_: SealedFor,
        state: &serde_json::Value,
    ) -> (Option<serde_json::Value>, Option<Vec<u8>>) {
        match &self.keyring {
            Some(keyring) => {
                let plain = BTreeMap::from([(
                    STATE_ENTRY.to_owned(),
                    SecretString::from(state.to_string()),
                )]);
                (None, Some(keyring.seal(for_, &plain)))
            }
            None => (Some(state.clone()), None),
        }
    }

    fn open_state(
        &self,
        for_: SealedFor,
        plain: Option<serde_json::Value>,
        sealed: Option<&[u8]>,
    ) -> Result<serde_json::Value, StoreError> {
        let Some(sealed) = sealed else {
            return Ok(plain.unwrap_or(serde_json::Value::Null));
        };
        let keyring = self.keyring.as_ref().ok_or(StoreError::NoSecretsKey)?;
        let opened = keyring.open(for_, sealed)?;
        Ok(opened
            .get(STATE_ENTRY)
            .and_then(|text| serde_json::from_str(text.expose_secret()).ok())
            .unwrap_or(serde_json::Value::Null))
    }

    /// The profile of `owner`'s `/api/v2` session `id` (`None`: it has none, or it is not
    /// `owner`'s).
    pub async fn session_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<Uuid>, StoreError> {
        let profile = sqlx::query_scalar!(
            "select profile_id from browser_sessions where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(profile.flatten())
    }
}
