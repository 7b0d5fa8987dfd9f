//! Task secrets at rest: sealed with XChaCha20-Poly1305 under the operator's key before they
//! reach the database, opened only by the worker that claimed the task, in memory.
//!
//! A sealed value is `b"bds2" ‖ key id (8 bytes, SHA-256 of the key) ‖ nonce (24 bytes) ‖
//! ciphertext`, with the owning object's id and its API key's id as associated data
//! ([`SealedFor`]), so a sealed value copied onto another object — or onto an object of another
//! key — does not open. Values written before the owner was bound (`b"bds1"`, the object id
//! alone as associated data) still open; every new value is `bds2`. The key id lets a keyring
//! hold the current key and previous ones: new values are sealed with the current key, values
//! sealed with a previous key still open (rotation).

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use browserd_types::{ApiKeyId, TaskId, TaskSecret, TaskSecrets};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use uuid::Uuid;
use zeroize::Zeroizing;

/// The format sealed now: the object and its owning key as associated data.
const MAGIC: &[u8; 4] = b"bds2";
/// The format sealed before: the object alone as associated data (still opened).
const MAGIC_OBJECT_ONLY: &[u8; 4] = b"bds1";
const KEY_ID_LEN: usize = 8;
const NONCE_LEN: usize = 24;

/// Why a key could not be loaded or a sealed value could not be opened. Never carries key
/// material or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("a secrets key must be 32 bytes encoded in base64 (e.g. `openssl rand -base64 32`){0}")]
    BadKey(String),
    #[error("the secrets were sealed with a key this server does not have (key id {0})")]
    UnknownKey(String),
    #[error("the sealed secrets are damaged or belong to another object or key")]
    Damaged,
}

/// What a sealed value belongs to: the object that stores it (a task, session, profile or
/// webhook id) and the API key owning that object. Both are its associated data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedFor {
    pub object: Uuid,
    pub owner: ApiKeyId,
}

impl SealedFor {
    pub fn new(object: Uuid, owner: ApiKeyId) -> Self {
        Self { object, owner }
    }

    /// Task `task` of key `owner`.
    pub fn task(task: TaskId, owner: ApiKeyId) -> Self {
        Self::new(task.0, owner)
    }

    /// The associated data of a `bds2` value: object id ‖ owner key id.
    fn aad(&self) -> [u8; 32] {
        let mut aad = [0u8; 32];
        aad[..16].copy_from_slice(self.object.as_bytes());
        aad[16..].copy_from_slice(self.owner.0.as_bytes());
        aad
    }
}

struct Key {
    id: [u8; KEY_ID_LEN],
    cipher: XChaCha20Poly1305,
}

impl Key {
    fn from_base64(text: &str) -> Result<Self, SealError> {
        let bytes = Zeroizing::new(
            STANDARD
                .decode(text.trim())
                .map_err(|_| SealError::BadKey(String::new()))?,
        );
        if bytes.len() != 32 {
            return Err(SealError::BadKey(format!(", got {} bytes", bytes.len())));
        }
        let digest = Sha256::digest(bytes.as_slice());
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
            .map_err(|_| SealError::BadKey(String::new()))?;
        Ok(Self { id, cipher })
    }
}

/// The current secrets key and the previous ones still accepted for opening.
pub struct SecretsKeyring {
    current: Key,
    previous: Vec<Key>,
}

impl fmt::Debug for SecretsKeyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKeyring")
            .field("current", &hex::encode(self.current.id))
            .field(
                "previous",
                &self
                    .previous
                    .iter()
                    .map(|k| hex::encode(k.id))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl SecretsKeyring {
    /// A keyring from base64 keys: `current` seals and opens, `previous` only open.
    pub fn from_base64(current: &str, previous: &[&str]) -> Result<Self, SealError> {
        Ok(Self {
            current: Key::from_base64(current)?,
            previous: previous
                .iter()
                .filter(|k| !k.trim().is_empty())
                .map(|k| Key::from_base64(k))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Hex id of the current key (safe to log).
    pub fn current_key_id(&self) -> String {
        hex::encode(self.current.id)
    }

    /// Whether `sealed` was sealed with the current key in the current format (values sealed
    /// with a previous key, or before the owner was bound, open, and may be sealed again).
    pub fn sealed_with_current(&self, sealed: &[u8]) -> bool {
        sealed.get(..4) == Some(MAGIC.as_slice())
            && sealed.get(4..4 + KEY_ID_LEN) == Some(self.current.id.as_slice())
    }

    /// Seals a map of secrets for `owner`.
    pub fn seal(&self, owner: SealedFor, secrets: &BTreeMap<String, SecretString>) -> Vec<u8> {
        let plain: serde_json::Map<String, serde_json::Value> = secrets
            .iter()
            .map(|(name, value)| (name.clone(), value.expose_secret().into()))
            .collect();
        let plain = Zeroizing::new(serde_json::to_vec(&plain).unwrap_or_default());
        self.seal_bytes(owner, &plain)
    }

    /// Seals a task's secrets, domain-bound ones included: the same JSON object as
    /// [`SecretsKeyring::seal`] (`{name: value}`), with `{pattern: {name: value}}` entries.
    pub fn seal_task_secrets(&self, owner: SealedFor, secrets: &TaskSecrets) -> Vec<u8> {
        let mut plain = serde_json::Map::new();
        for (key, entry) in &secrets.0 {
            let value = match entry {
                TaskSecret::Value(value) => value.expose_secret().into(),
                TaskSecret::Bound(map) => serde_json::Value::Object(
                    map.iter()
                        .map(|(name, value)| (name.clone(), value.expose_secret().into()))
                        .collect(),
                ),
            };
            plain.insert(key.clone(), value);
        }
        let plain = Zeroizing::new(serde_json::to_vec(&plain).unwrap_or_default());
        self.seal_bytes(owner, &plain)
    }

    fn seal_bytes(&self, owner: SealedFor, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).expect("the operating system's random source failed");
        let aad = owner.aad();
        let ciphertext = self
            .current
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plain,
                    aad: aad.as_slice(),
                },
            )
            .expect("XChaCha20-Poly1305 encryption cannot fail for in-memory input");
        let mut sealed = Vec::with_capacity(4 + KEY_ID_LEN + NONCE_LEN + ciphertext.len());
        sealed.extend_from_slice(MAGIC);
        sealed.extend_from_slice(&self.current.id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        sealed
    }

    /// Opens secrets sealed for `owner` (a `bds1` value: for its object alone).
    pub fn open(
        &self,
        owner: SealedFor,
        sealed: &[u8],
    ) -> Result<BTreeMap<String, SecretString>, SealError> {
        let plain = self.open_bytes(owner, sealed)?;
        let map: BTreeMap<String, String> =
            serde_json::from_slice(&plain).map_err(|_| SealError::Damaged)?;
        Ok(map
            .into_iter()
            .map(|(name, value)| (name, SecretString::from(value)))
            .collect())
    }

    /// Opens a task's secrets sealed by [`SecretsKeyring::seal_task_secrets`] (or, before
    /// secrets could be bound to domains, by [`SecretsKeyring::seal`]).
    pub fn open_task_secrets(
        &self,
        owner: SealedFor,
        sealed: &[u8],
    ) -> Result<TaskSecrets, SealError> {
        let plain = self.open_bytes(owner, sealed)?;
        serde_json::from_slice(&plain).map_err(|_| SealError::Damaged)
    }

    fn open_bytes(&self, owner: SealedFor, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let header = 4 + KEY_ID_LEN + NONCE_LEN;
        if sealed.len() < header {
            return Err(SealError::Damaged);
        }
        let bound = owner.aad();
        let aad: &[u8] = match &sealed[..4] {
            magic if magic == MAGIC => &bound,
            magic if magic == MAGIC_OBJECT_ONLY => owner.object.as_bytes(),
            _ => return Err(SealError::Damaged),
        };
        let key_id = &sealed[4..4 + KEY_ID_LEN];
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == key_id)
            .ok_or_else(|| SealError::UnknownKey(hex::encode(key_id)))?;
        let nonce: [u8; NONCE_LEN] = sealed[4 + KEY_ID_LEN..header]
            .try_into()
            .map_err(|_| SealError::Damaged)?;
        let nonce = XNonce::from(nonce);
        Ok(Zeroizing::new(
            key.cipher
                .decrypt(
                    &nonce,
                    Payload {
                        msg: &sealed[header..],
                        aad,
                    },
                )
                .map_err(|_| SealError::Damaged)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY_B: &str = "HxweHRwbGhkYFxYVFBMSERAPDg0MCwoJCAcGBQQDAgE=";

    fn secrets() -> BTreeMap<String, SecretString> {
        BTreeMap::from([("pw".to_owned(), SecretString::from("hunter2-xyz"))])
    }

    fn owner() -> SealedFor {
        SealedFor::task(TaskId::new(), ApiKeyId(Uuid::now_v7()))
    }

    /// A value as sealed before the owner was bound: `bds1`, the object id alone as
    /// associated data.
    fn seal_object_only(ring: &SecretsKeyring, object: Uuid, plain: &[u8]) -> Vec<u8> {
        let nonce = [7u8; NONCE_LEN];
        let ciphertext = ring
            .current
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plain,
                    aad: object.as_bytes(),
                },
            )
            .unwrap();
        [
            MAGIC_OBJECT_ONLY.as_slice(),
            &ring.current.id,
            &nonce,
            &ciphertext,
        ]
        .concat()
    }

    #[test]
    fn bds2_binds_the_object_and_its_owning_key() {
        let ring = SecretsKeyring::from_base64(KEY_A, &[]).unwrap();
        let owner = owner();
        let sealed = ring.seal(owner, &secrets());
        assert_eq!(&sealed[..4], b"bds2");
        assert!(ring.sealed_with_current(&sealed));
        let opened = ring.open(owner, &sealed).unwrap();
        assert_eq!(opened["pw"].expose_secret(), "hunter2-xyz");
        // The same object under another key, and another object of the same key: neither opens.
        let other_key = SealedFor::new(owner.object, ApiKeyId(Uuid::now_v7()));
        assert!(matches!(
            ring.open(other_key, &sealed),
            Err(SealError::Damaged)
        ));
        let other_object = SealedFor::new(Uuid::now_v7(), owner.owner);
        assert!(matches!(
            ring.open(other_object, &sealed),
            Err(SealError::Damaged)
        ));
        // A bds2 value relabelled bds1 does not open either (the AAD differs).
        let mut relabelled = sealed.clone();
        relabelled[..4].copy_from_slice(MAGIC_OBJECT_ONLY);
        assert!(matches!(
            ring.open(owner, &relabelled),
            Err(SealError::Damaged)
        ));
    }

    #[test]
    fn bds1_values_still_open_for_their_object() {
        let ring = SecretsKeyring::from_base64(KEY_A, &[]).unwrap();
        let owner = owner();
        let sealed = seal_object_only(&ring, owner.object, br#"{"pw":"old-pw"}"#);
        let opened = ring.open(owner, &sealed).unwrap();
        assert_eq!(opened["pw"].expose_secret(), "old-pw");
        let secrets = ring.open_task_secrets(owner, &sealed).unwrap();
        assert_eq!(secrets.count(), 1);
        // Not the current format: a re-seal path upgrades it.
        assert!(!ring.sealed_with_current(&sealed));
        let other_object = SealedFor::new(Uuid::now_v7(), owner.owner);
        assert!(matches!(
            ring.open(other_object, &sealed),
            Err(SealError::Damaged)
        ));
    }

    /// Domain-bound secrets seal and open whole; secrets sealed before they could be bound
    /// open as unbound ones.
    #[test]
    fn task_secrets_with_domains_seal_and_old_flat_ones_still_open() {
        let ring = SecretsKeyring::from_base64(KEY_A, &[]).unwrap();
        let task = owner();
        let bound: TaskSecrets = serde_json::from_value(serde_json::json!({
            "https://*.bank.example": {"pw": "bank-pw"},
            "token": "t0k",
        }))
        .unwrap();
        let opened = ring
            .open_task_secrets(task, &ring.seal_task_secrets(task, &bound))
            .unwrap();
        let entries: Vec<(Option<&str>, &str, &str)> = opened
            .entries()
            .map(|(p, n, v)| (p, n, v.expose_secret()))
            .collect();
        assert_eq!(
            entries,
            [
                (Some("https://*.bank.example"), "pw", "bank-pw"),
                (None, "token", "t0k"),
            ]
        );
        let old = ring.seal(task, &secrets());
        let opened = ring.open_task_secrets(task, &old).unwrap();
        assert_eq!(opened.unbound_names().len(), opened.count());
    }

    #[test]
    fn seals_opens_and_binds_to_the_task() {
        let ring = SecretsKeyring::from_base64(KEY_A, &[]).unwrap();
        let task = owner();
        let sealed = ring.seal(task, &secrets());
        assert!(!sealed.windows(11).any(|w| w == b"hunter2-xyz"));
        let opened = ring.open(task, &sealed).unwrap();
        assert_eq!(opened["pw"].expose_secret(), "hunter2-xyz");
        assert!(matches!(
            ring.open(owner(), &sealed),
            Err(SealError::Damaged)
        ));
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(ring.open(task, &flipped), Err(SealError::Damaged)));
    }

    #[test]
    fn rotation_keeps_old_values_readable() {
        let old = SecretsKeyring::from_base64(KEY_A, &[]).unwrap();
        let task = owner();
        let sealed = old.seal(task, &secrets());
        let rotated = SecretsKeyring::from_base64(KEY_B, &[KEY_A]).unwrap();
        assert!(rotated.open(task, &sealed).is_ok());
        assert!(old.sealed_with_current(&sealed));
        assert!(!rotated.sealed_with_current(&sealed));
        let without_old = SecretsKeyring::from_base64(KEY_B, &[]).unwrap();
        assert!(matches!(
            without_old.open(task, &sealed),
            Err(SealError::UnknownKey(_))
        ));
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        let err = SecretsKeyring::from_base64("c2hvcnQ=", &[]).unwrap_err();
        assert!(err.to_string().contains("got 5 bytes"), "{err}");
        assert!(SecretsKeyring::from_base64("not base64!", &[]).is_err());
    }
}
