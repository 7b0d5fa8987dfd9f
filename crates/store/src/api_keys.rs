//! API keys: `bd_` + 43 characters of base64url (256 random bits). Only the SHA-256 hash is
//! stored, plus a short prefix that lets operators tell keys apart.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use browserd_types::ApiKeyId;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::{Store, StoreError};

/// Every key starts with this, so leaked keys are easy to recognise (e.g. by secret scanners).
pub const KEY_PREFIX: &str = "bd_";
/// Characters of the key (including `bd_`) kept in clear as its display prefix.
const DISPLAY_PREFIX_CHARS: usize = 11;

/// A stored API key (never the key itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: ApiKeyId,
    pub name: String,
    /// The first characters of the key, e.g. `bd_AbC12xYz`.
    pub prefix: String,
    pub created_at: OffsetDateTime,
}

/// A freshly created key. `key` is shown once and not stored anywhere.
#[derive(Debug)]
pub struct CreatedApiKey {
    pub record: ApiKeyRecord,
    pub key: SecretString,
}

/// SHA-256 of the presented key. A fast hash is right here: keys carry 256 bits of entropy, so
/// there is nothing to brute-force, and lookups stay cheap.
pub fn hash_api_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn generate_key() -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|err| StoreError::Corrupt(format!("no randomness available: {err}")))?;
    Ok(format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

impl Store {
    /// Creates a key named `name` and returns it in clear text, once.
    pub async fn create_api_key(&self, name: &str) -> Result<CreatedApiKey, StoreError> {
        let key = generate_key()?;
        let hash = hash_api_key(&key);
        let prefix: String = key.chars().take(DISPLAY_PREFIX_CHARS).collect();
        let id = ApiKeyId::new();
        let created_at = sqlx::query_scalar!(
            "insert into api_keys (id, name, prefix, key_hash) values ($1, $2, $3, $4)
             returning created_at",
            id.0,
            name,
            prefix,
            &hash[..],
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(CreatedApiKey {
            record: ApiKeyRecord {
                id,
                name: name.to_owned(),
                prefix,
                created_at,
            },
            key: SecretString::from(key),
        })
    }

    /// The active key matching `presented`, if any.
    pub async fn authenticate_api_key(
        &self,
        presented: &SecretString,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let key = presented.expose_secret();
        if !key.starts_with(KEY_PREFIX) {
            return Ok(None);
        }
        let hash = hash_api_key(key);
        let row = sqlx::query!(
            "select id, name, prefix, created_at from api_keys
             where key_hash = $1 and revoked_at is null",
            &hash[..],
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| ApiKeyRecord {
            id: ApiKeyId(row.id),
            name: row.name,
            prefix: row.prefix,
            created_at: row.created_at,
        }))
    }

    /// Revokes a key; its tasks stay but it can no longer authenticate.
    pub async fn revoke_api_key(&self, id: ApiKeyId) -> Result<bool, StoreError> {
        let result = sqlx::query!(
            "update api_keys set revoked_at = now() where id = $1 and revoked_at is null",
            id.0
        )
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }
}
