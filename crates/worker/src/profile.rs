//! Browser profiles in a run: the saved cookies and localStorage a task starts from, and the
//! checkpoints that write what it changed back — at every step boundary (after the step is
//! stored, so a crash keeps the login of every finished step) and once more at the end, and
//! only when something changed (a hash of the state is compared first, so an unchanged step
//! costs two CDP reads and no write).
//!
//! Where a profile lives is a [`ProfileSaver`]: Postgres for the service
//! ([`StoreProfileSaver`], sealed with the secrets key), a local JSON file for `browserd run
//! --profile FILE` ([`FileProfileSaver`]).
//!
//! Two tasks on one profile at once: each starts from the latest saved state; each write names
//! the version it is based on. A write based on an older version (another task wrote since)
//! does not overwrite: the task's own changes since its previous checkpoint — cookies set,
//! changed or gone, localStorage entries set, changed or removed — are applied onto the newer
//! state and written as the next version. So logins made by two tasks at once are both kept;
//! where both changed the same cookie (name, domain, path) or the same entry, the later write
//! wins. A running task does not see the other's writes (its browser keeps what it has).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{AgentEvent, EventSink, Screenshot};
use browserd_browser::{BrowserSession, OriginStorage, StorageItem, StorageState};
use browserd_store::{ProfileSave, Store, StoreError, TaskRecord};
use browserd_types::{ApiKeyId, EventBody, LogEvent, TaskId};
use serde_json::Value;
use tokio::sync::Mutex;
use uuid::Uuid;

/// Reading the browser's state takes at most this long at a checkpoint.
const CAPTURE_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes retried after a version conflict at most this many times per checkpoint.
const MAX_CONFLICT_RETRIES: usize = 8;
/// The default largest state (serialized) saved: the service's `--max-profile-bytes`, and the
/// limit of a profile file (Chrome allows 5 MiB of localStorage per origin; a profile is meant
/// for logins). The service enforces its limit where profiles are stored (the store).
pub const MAX_PROFILE_BYTES: usize = 8 * 1024 * 1024;

/// Where a profile is kept.
#[async_trait]
pub trait ProfileSaver: Send + Sync {
    /// Writes `state` as the version after `version` if the profile is still at `version`.
    async fn save(&self, state: &StorageState, version: i64) -> Result<SaveResult, String>;

    /// Tells the task's owner something about its profile (once per matter; logged by default).
    async fn warn(&self, message: &str) {
        tracing::warn!(message, "profile");
    }
}

/// The answer of [`ProfileSaver::save`].
#[derive(Clone, Debug, PartialEq)]
pub enum SaveResult {
    Saved {
        version: i64,
    },
    /// Someone else wrote since: the newer state and its version.
    Conflict {
        version: i64,
        state: StorageState,
    },
    /// The profile was deleted: nothing more is saved.
    Gone,
    /// The state is larger than the store accepts: nothing was written, the profile keeps its
    /// previous state.
    TooLarge {
        size: usize,
        max: usize,
    },
}

/// A run's profile: the state it starts from, its version, and where to save.
#[derive(Clone)]
pub struct ProfileLink {
    pub state: StorageState,
    pub version: i64,
    pub saver: Arc<dyn ProfileSaver>,
}

impl std::fmt::Debug for ProfileLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The state holds credentials.
        f.debug_struct("ProfileLink")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A state as JSON (`null` for an empty one, which the store reads back as empty).
pub fn state_json(state: &StorageState) -> Value {
    serde_json::to_value(state).unwrap_or(Value::Null)
}

/// A stored state (`null` or an older shape reads as empty).
pub fn state_from_json(value: &Value) -> StorageState {
    if value.is_null() {
        return StorageState::default();
    }
    serde_json::from_value(value.clone()).unwrap_or_default()
}

type CookieKey = (String, String, String);

fn cookie_key(cookie: &Value) -> Option<CookieKey> {
    let field = |name: &str| {
        cookie
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let name = cookie.get("name")?.as_str()?.to_owned();
    Some((name, field("domain"), field("path")))
}

fn cookie_map(state: &StorageState) -> BTreeMap<CookieKey, Value> {
    state
        .cookies
        .iter()
        .filter_map(|c| Some((cookie_key(c)?, c.clone())))
        .collect()
}

fn storage_map(state: &StorageState) -> BTreeMap<(String, String), String> {
    state
        .origins
        .iter()
        .flat_map(|o| {
            o.local_storage
                .iter()
                .map(|i| ((o.origin.clone(), i.name.clone()), i.value.clone()))
        })
        .collect()
}

/// Applies to `onto` every key whose value differs between `before` and `after` (set,
/// changed, or removed).
fn apply_changes<K: Ord + Clone, V: PartialEq + Clone>(
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
    onto: &mut BTreeMap<K, V>,
) {
    for (key, value) in after {
        if before.get(key) != Some(value) {
            onto.insert(key.clone(), value.clone());
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            onto.remove(key);
        }
    }
}

/// `latest` with the changes from `before` to `after` applied (the merge of a write based on
/// an older version): cookies by (name, domain, path), localStorage by (origin, key).
pub fn merge(before: &StorageState, after: &StorageState, latest: &StorageState) -> StorageState {
    let mut cookies = cookie_map(latest);
    apply_changes(&cookie_map(before), &cookie_map(after), &mut cookies);
    let mut storage = storage_map(latest);
    apply_changes(&storage_map(before), &storage_map(after), &mut storage);
    from_maps(cookies, storage)
}

fn from_maps(
    cookies: BTreeMap<CookieKey, Value>,
    storage: BTreeMap<(String, String), String>,
) -> StorageState {
    let mut origins: BTreeMap<String, Vec<StorageItem>> = BTreeMap::new();
    for ((origin, name), value) in storage {
        origins
            .entry(origin)
            .or_default()
            .push(StorageItem { name, value });
    }
    StorageState {
        cookies: cookies.into_values().collect(),
        origins: origins
            .into_iter()
            .map(|(origin, local_storage)| OriginStorage {
                origin,
                local_storage,
            })
            .collect(),
    }
}

/// `state` in a canonical order (cookies by key, origins and entries sorted, empty origins
/// dropped), so equal states hash equal.
pub fn canonical(state: &StorageState) -> StorageState {
    from_maps(cookie_map(state), storage_map(state))
}

fn hash_of(state: &StorageState) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    state_json(state).to_string().hash(&mut hasher);
    hasher.finish()
}

/// A capture of the context completed with the origins it does not have open now: each
/// captured origin replaces its earlier entries, the others keep theirs.
fn with_closed_origins(captured: StorageState, previous: &StorageState) -> StorageState {
    let mut origins: BTreeMap<String, OriginStorage> = previous
        .origins
        .iter()
        .map(|o| (o.origin.clone(), o.clone()))
        .collect();
    for origin in captured.origins {
        origins.insert(origin.origin.clone(), origin);
    }
    canonical(&StorageState {
        cookies: captured.cookies,
        origins: origins.into_values().collect(),
    })
}

struct KeeperState {
    /// The context's state at the previous checkpoint (at first: what was restored).
    context: StorageState,
    context_hash: u64,
    /// The profile's state as last written or read, and its version.
    stored: StorageState,
    version: i64,
    gone: bool,
    /// The task was told its state is too large to save (told once).
    warned_too_large: bool,
}

/// Writes a run's profile back at its checkpoints.
pub struct ProfileKeeper {
    saver: Arc<dyn ProfileSaver>,
    state: Mutex<KeeperState>,
}

impl ProfileKeeper {
    /// A keeper for a run that started from `link.state` (restored into its context).
    pub fn new(link: &ProfileLink) -> Self {
        let start = canonical(&link.state);
        Self {
            saver: link.saver.clone(),
            state: Mutex::new(KeeperState {
                context_hash: hash_of(&start),
                context: start.clone(),
                stored: start,
                version: link.version,
                gone: false,
                warned_too_large: false,
            }),
        }
    }

    /// Reads the context's state and writes what changed since the previous checkpoint (see
    /// the module). Failures are logged: the task goes on.
    pub async fn checkpoint(&self, session: &BrowserSession) {
        let mut keeper = self.state.lock().await;
        if keeper.gone || session.browser_lost() {
            return;
        }
        let captured = match tokio::time::timeout(CAPTURE_TIMEOUT, session.storage_state()).await {
            Ok(Ok(captured)) => captured,
            Ok(Err(err)) => {
                tracing::warn!(%err, "could not read the browser's state for the profile");
                return;
            }
            Err(_) => {
                tracing::warn!("reading the browser's state for the profile timed out");
                return;
            }
        };
        let now = with_closed_origins(captured, &keeper.context);
        let hash = hash_of(&now);
        if hash == keeper.context_hash {
            return;
        }
        let mut candidate = merge(&keeper.context, &now, &keeper.stored);
        for _ in 0..MAX_CONFLICT_RETRIES {
            match self.saver.save(&candidate, keeper.version).await {
                Ok(SaveResult::Saved { version }) => {
                    tracing::debug!(version, "profile saved");
                    keeper.stored = candidate;
                    keeper.version = version;
                    keeper.context = now;
                    keeper.context_hash = hash;
                    return;
                }
                Ok(SaveResult::Conflict { version, state }) => {
                    tracing::debug!(version, "profile written by another task; merging");
                    candidate = merge(&keeper.context, &now, &state);
                    keeper.stored = canonical(&state);
                    keeper.version = version;
                }
                Ok(SaveResult::Gone) => {
                    tracing::warn!("the task's profile was deleted; no longer saving it");
                    keeper.gone = true;
                    return;
                }
                // The stored state stays as it was; a later checkpoint whose state fits again
                // is saved.
                Ok(SaveResult::TooLarge { size, max }) => {
                    tracing::warn!(size, max, "the profile's state is too large; not saved");
                    if !keeper.warned_too_large {
                        keeper.warned_too_large = true;
                        self.saver
                            .warn(&format!(
                                "the browser profile was not saved: its state is {size} bytes, \
                                 over the limit of {max} bytes; it keeps its previous state"
                            ))
                            .await;
                    }
                    return;
                }
                Err(err) => {
                    tracing::warn!(%err, "could not save the profile");
                    return;
                }
            }
        }
        tracing::warn!("the profile kept changing under this task; this checkpoint is skipped");
    }
}

/// Around a run's sink: a checkpoint of the profile after each stored step.
pub(crate) struct ProfileSink {
    pub(crate) inner: Arc<dyn EventSink>,
    pub(crate) keeper: Arc<ProfileKeeper>,
    pub(crate) browser: Arc<crate::SessionBrowser>,
}

#[async_trait]
impl EventSink for ProfileSink {
    async fn emit(&self, event: AgentEvent) {
        let step_end = matches!(event, AgentEvent::StepFinished { .. });
        self.inner.emit(event).await;
        if step_end {
            self.keeper.checkpoint(self.browser.session()).await;
        }
    }

    async fn store_screenshot(&self, step: u32, screenshot: &Screenshot) -> Option<String> {
        self.inner.store_screenshot(step, screenshot).await
    }
}

/// A profile in Postgres (`profiles`, sealed with the store's secrets key when it has one),
/// saved by task `task` of key `owner`.
pub struct StoreProfileSaver {
    pub store: Store,
    pub owner: ApiKeyId,
    pub profile_id: Uuid,
    pub task: TaskId,
    /// The worker holding the task's lease (its warnings are the task's events).
    pub lease_owner: String,
}

#[async_trait]
impl ProfileSaver for StoreProfileSaver {
    async fn save(&self, state: &StorageState, version: i64) -> Result<SaveResult, String> {
        let saved = self
            .store
            .save_profile_state(
                self.owner,
                self.profile_id,
                version,
                &state_json(state),
                &state.cookie_domains(),
            )
            .await;
        let saved = match saved {
            Ok(saved) => saved,
            Err(StoreError::ProfileTooLarge { size, max }) => {
                return Ok(SaveResult::TooLarge { size, max });
            }
            Err(err) => return Err(err.to_string()),
        };
        Ok(match saved {
            ProfileSave::Saved { version } => SaveResult::Saved { version },
            ProfileSave::Conflict(newer) => SaveResult::Conflict {
                version: newer.version,
                state: state_from_json(&newer.state),
            },
            ProfileSave::Gone => SaveResult::Gone,
        })
    }

    /// A `log` event (level `warn`) of the task.
    async fn warn(&self, message: &str) {
        let body = EventBody::Log(LogEvent {
            level: "warn".to_owned(),
            message: message.to_owned(),
        });
        if let Err(err) = self
            .store
            .append_worker_event(self.task, &self.lease_owner, &body)
            .await
        {
            tracing::warn!(%err, message, "could not record the profile warning");
        }
    }
}

/// The profile task `task` starts from, read from Postgres (`None`: it was deleted).
pub async fn load_store_profile(
    store: &Store,
    task: &TaskRecord,
    profile_id: Uuid,
) -> Result<Option<ProfileLink>, StoreError> {
    let Some(loaded) = store
        .load_profile_state(task.api_key_id, profile_id)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(ProfileLink {
        state: state_from_json(&loaded.state),
        version: loaded.version,
        saver: Arc::new(StoreProfileSaver {
            store: store.clone(),
            owner: task.api_key_id,
            profile_id,
            task: task.id,
            lease_owner: task.lease_owner.clone().unwrap_or_default(),
        }),
    }))
}

/// A profile in a local JSON file (`browserd run --profile FILE`): Playwright's
/// `storageState` layout, written whole (a temporary file renamed over it) at each checkpoint;
/// one process owns it, so every write is accepted.
pub struct FileProfileSaver {
    path: PathBuf,
}

impl FileProfileSaver {
    /// The profile at `path`: its state (empty when the file does not exist yet) and its saver.
    pub fn open(path: PathBuf) -> Result<ProfileLink, String> {
        let state = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<StorageState>(&bytes).map_err(|err| {
                format!(
                    "{} is not a profile (a storage state JSON file): {err}",
                    path.display()
                )
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => StorageState::default(),
            Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
        };
        Ok(ProfileLink {
            state,
            version: 0,
            saver: Arc::new(FileProfileSaver { path }),
        })
    }
}

#[async_trait]
impl ProfileSaver for FileProfileSaver {
    async fn save(&self, state: &StorageState, version: i64) -> Result<SaveResult, String> {
        let size = state_json(state).to_string().len();
        if size > MAX_PROFILE_BYTES {
            return Ok(SaveResult::TooLarge {
                size,
                max: MAX_PROFILE_BYTES,
            });
        }
        let bytes = serde_json::to_vec_pretty(state).map_err(|err| err.to_string())?;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), PathBuf::from);
            let mut file = tempfile::NamedTempFile::new_in(&dir)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.as_file().sync_all()?;
            file.persist(&path).map_err(|err| err.error)?;
            Ok(())
        })
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| format!("cannot write {}: {err}", self.path.display()))?;
        Ok(SaveResult::Saved {
            version: version + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cookie(name: &str, value: &str) -> Value {
        json!({"name": name, "value": value, "domain": "a.test", "path": "/"})
    }

    fn state(cookies: &[(&str, &str)], items: &[(&str, &str, &str)]) -> StorageState {
        canonical(&StorageState {
            cookies: cookies.iter().map(|(n, v)| cookie(n, v)).collect(),
            origins: items
                .iter()
                .map(|(o, n, v)| OriginStorage {
                    origin: (*o).to_owned(),
                    local_storage: vec![StorageItem {
                        name: (*n).to_owned(),
                        value: (*v).to_owned(),
                    }],
                })
                .collect(),
        })
    }

    #[test]
    fn a_write_based_on_an_older_version_applies_only_its_own_changes() {
        let base = state(
            &[("keep", "1"), ("gone", "1")],
            &[("http://a.test", "k", "1")],
        );
        // This task: sets `mine`, changes `keep`, deletes `gone`, sets a storage entry.
        let mine = state(
            &[("keep", "2"), ("mine", "1")],
            &[("http://a.test", "k", "1"), ("http://b.test", "t", "x")],
        );
        // Meanwhile the other task logged in elsewhere and changed `keep` too.
        let latest = state(
            &[("keep", "3"), ("gone", "1"), ("theirs", "1")],
            &[("http://a.test", "k", "1"), ("http://c.test", "u", "y")],
        );
        let merged = merge(&base, &mine, &latest);
        assert_eq!(
            merged,
            state(
                &[("keep", "2"), ("mine", "1"), ("theirs", "1")],
                &[
                    ("http://a.test", "k", "1"),
                    ("http://b.test", "t", "x"),
                    ("http://c.test", "u", "y")
                ],
            )
        );
        // Without a concurrent write the merge is the task's state.
        assert_eq!(merge(&base, &mine, &base), mine);
    }

    #[test]
    fn origins_not_open_keep_their_entries() {
        let previous = state(
            &[],
            &[("http://a.test", "k", "1"), ("http://b.test", "t", "x")],
        );
        let captured = StorageState {
            cookies: vec![],
            origins: vec![OriginStorage {
                origin: "http://a.test".into(),
                local_storage: vec![],
            }],
        };
        // a.test is open and was cleared; b.test is not open.
        assert_eq!(
            with_closed_origins(captured, &previous),
            state(&[], &[("http://b.test", "t", "x")])
        );
    }

    #[test]
    fn canonical_states_hash_alike() {
        let a = state(&[("x", "1"), ("y", "2")], &[]);
        let mut b = a.clone();
        b.cookies.reverse();
        assert_eq!(hash_of(&canonical(&b)), hash_of(&a));
        assert_eq!(state_from_json(&state_json(&a)), a);
        assert_eq!(state_from_json(&Value::Null), StorageState::default());
    }

    #[tokio::test]
    async fn a_file_profile_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.json");
        let link = FileProfileSaver::open(path.clone()).unwrap();
        assert!(link.state.is_empty());
        let saved = state(&[("sid", "1")], &[("http://a.test", "k", "v")]);
        assert_eq!(
            link.saver.save(&saved, 0).await.unwrap(),
            SaveResult::Saved { version: 1 }
        );
        assert_eq!(FileProfileSaver::open(path.clone()).unwrap().state, saved);
        std::fs::write(&path, "[1]").unwrap();
        assert!(FileProfileSaver::open(path).is_err());
    }
}
