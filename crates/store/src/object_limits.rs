//! Per-key limits on the objects a key keeps between tasks: how many profiles, how many active
//! `/api/v2` sessions, how many schedules, and how large a profile's saved state may be. Checked
//! where the objects are stored (`Store::create_profile`, `Store::create_session`,
//! `Store::create_schedule`, `Store::save_profile_state`),
//! so every caller — the api, the worker — is held to them. 0 is unlimited.

use browserd_types::ApiKeyId;
use sqlx::{Postgres, Transaction};

use crate::StoreError;

/// The limits (0: none). [`Default`] is no limits; the binary sets its flags' values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectLimits {
    /// Profiles a key may have (`--max-profiles-per-key`).
    pub max_profiles_per_key: u32,
    /// Active sessions a key may have (`--max-sessions-per-key`): sessions created with
    /// `POST /api/v2/sessions` and not stopped; the one-off session a v2 task creates for
    /// itself is not counted.
    pub max_sessions_per_key: u32,
    /// Bytes of a profile's saved state, serialized as JSON (`--max-profile-bytes`).
    pub max_profile_bytes: usize,
    /// Schedules a key may have (`--max-schedules-per-key`): each one's ticks cost the
    /// schedulers work whether or not its tasks are admitted.
    pub max_schedules_per_key: u32,
}

/// The objects counted per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyObject {
    Profiles,
    Sessions,
    Schedules,
}

impl KeyObject {
    /// What the error message calls them.
    pub fn noun(self) -> &'static str {
        match self {
            KeyObject::Profiles => "profiles",
            KeyObject::Sessions => "active sessions",
            KeyObject::Schedules => "schedules",
        }
    }

    /// The quota's name (the flag without its dashes).
    pub fn quota(self) -> &'static str {
        match self {
            KeyObject::Profiles => "max_profiles_per_key",
            KeyObject::Sessions => "max_sessions_per_key",
            KeyObject::Schedules => "max_schedules_per_key",
        }
    }

    /// How a key frees a slot.
    pub fn remedy(self) -> &'static str {
        match self {
            KeyObject::Profiles => "delete one first",
            KeyObject::Sessions => "stop or delete one first",
            KeyObject::Schedules => "delete one first",
        }
    }
}

/// Takes key `owner`'s lock for `what` until the end of `tx`: creations of one kind by one key
/// are counted and inserted one after the other (other keys, and other kinds, do not wait).
pub(crate) async fn lock_key_objects(
    tx: &mut Transaction<'_, Postgres>,
    owner: ApiKeyId,
    what: KeyObject,
) -> Result<(), StoreError> {
    let name = format!("browserd:{}:{}", what.quota(), owner.0);
    // Not `query!`: the function returns `void`, which the macros cannot type.
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// [`StoreError::KeyObjectLimit`] when `count` objects already reach `max` (0: unlimited).
pub(crate) fn check_count(what: KeyObject, count: i64, max: u32) -> Result<(), StoreError> {
    if max > 0 && count >= i64::from(max) {
        return Err(StoreError::KeyObjectLimit { what, max });
    }
    Ok(())
}
