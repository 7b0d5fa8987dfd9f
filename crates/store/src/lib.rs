//! Postgres persistence for browserd (sqlx): the schema migrations, API keys, tasks and their
//! status machine, steps, artifacts and the per-task event log with its LISTEN/NOTIFY fan-out.
//!
//! All SQL of the service lives in this crate. Every status change is one guarded `UPDATE`, and
//! every event gets its per-task `seq` inside the inserting transaction, so any number of api and
//! worker processes can share one database safely.

mod api_keys;
mod error;
mod events;
mod feed;
mod hub;
mod live;
mod object_limits;
mod output_files;
mod profiles;
mod questions;
mod queue;
mod quotas;
mod replays;
mod schedules;
mod sealed;
mod sessions;
mod skills;
mod status_sql;
mod steps;
mod takeover;
mod tasks;
mod telemetry;
#[cfg(feature = "test-util")]
mod testing;
mod webhooks;

use std::time::Duration;

use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

pub use api_keys::{
    API_KEYS_CHANNEL, ApiKeyRecord, CreatedApiKey, KEY_PREFIX, TICKET_PREFIX, WsTicket,
    hash_api_key,
};
pub use error::StoreError;
pub use events::NOTIFY_CHANNEL;
pub use feed::{EventFeed, FeedItem};
pub use hub::{
    EventHub, KeySignal, KeySignals, LiveSignal, LiveSubscription, Signal, Subscription, TaskSignal,
};
pub use live::{LIVE_CHANNEL, LiveFrame, LiveViewerId, LiveViewers};
pub use object_limits::{KeyObject, ObjectLimits};
pub use output_files::{
    NewOutputFile, OUTPUT_FILE_MAX_BYTES, OUTPUT_FILES_MAX_COUNT, OUTPUT_FILES_MAX_TASK_BYTES,
    OutputFile, OutputFileRecord,
};
pub use profiles::{ProfileRecord, ProfileSave, ProfileState};
pub use questions::{Answer, Answered, Asked, GivenAnswer, NewQuestion};
pub use queue::{ClaimedTask, QUEUE_CHANNEL, ReapedTask, StepWrite, pause_limit_error};
pub use quotas::{KeyUsage, QuotaOverrides, QuotaUpdate, Quotas, seconds_until_utc_midnight};
pub use replays::{NewReplay, TaskReplay};
pub use schedules::{
    NewSchedule, SCHEDULES_CHANNEL, ScheduleFiring, ScheduleRecord, ScheduleRun, ScheduleUpdate,
};
pub use sealed::{SealError, SealedFor, SecretsKeyring};
pub use sessions::{
    NewSession, SessionChoice, SessionRecord, SessionState, TaskSession, V2Task, V2TaskFilter,
};
pub use skills::{
    NewSkill, NewSkillVersion, SKILL_STATUSES, SkillAttach, SkillPage, SkillRecord, SkillRole,
    SkillUpdate, SkillVersionRecord, TaskSkill,
};
pub use steps::{ArtifactBody, ArtifactContent, NewArtifact, NewStep, StepRecord};
pub use tasks::{DeletedTask, NewTask, TaskCursor, TaskPage, TaskRecord, TransitionDetails};
pub use telemetry::StatusCount;
pub use webhooks::{ClaimedDelivery, DeliveryOutcome, DeliveryRecord, WebhookRecord};

/// The embedded migrations (`migrations/` at the repository root).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// How to reach the database.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Statement timeout set on every pooled connection.
    pub statement_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
        }
    }
}

/// Handle to the database; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// Seals task secrets on creation and opens them on claim; without one, tasks with
    /// secrets are refused.
    keyring: Option<std::sync::Arc<SecretsKeyring>>,
    /// Presented keys and tickets looked up in the database (see `api_key_lookups`).
    key_lookups: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The quotas of a key that sets none of its own (`quotas.rs`).
    default_quotas: Quotas,
    /// A key without a `max_running` of its own, and no default one, may hold at most half
    /// the live workers' slots (`quotas.rs`, `Store::with_fair_share`).
    fair_share: bool,
    /// Per-key profile and session counts and the profile size (`object_limits.rs`).
    object_limits: ObjectLimits,
}

impl Store {
    /// Connects to `database_url`, creating the database first when it does not exist.
    /// Does not run migrations (see [`Store::migrate`]).
    pub async fn connect(database_url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        ensure_database(database_url).await?;
        let connect: PgConnectOptions = database_url.parse()?;
        let statement_timeout_ms = options.statement_timeout.as_millis().to_string();
        let connect = connect.options([("statement_timeout", statement_timeout_ms.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(Self {
            pool,
            keyring: None,
            key_lookups: std::sync::Arc::default(),
            default_quotas: Quotas::default(),
            fair_share: false,
            object_limits: ObjectLimits::default(),
        })
    }

    /// Wraps an existing pool (tests use the per-test pool of `#[sqlx::test]`).
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            keyring: None,
            key_lookups: std::sync::Arc::default(),
            default_quotas: Quotas::default(),
            fair_share: false,
            object_limits: ObjectLimits::default(),
        }
    }

    /// Uses `keyring` to seal task secrets at creation and open them when a worker claims.
    #[must_use]
    pub fn with_secrets_keyring(mut self, keyring: SecretsKeyring) -> Self {
        self.keyring = Some(std::sync::Arc::new(keyring));
        self
    }

    /// Holds every key to `limits` (profiles, active sessions, profile size).
    #[must_use]
    pub fn with_object_limits(mut self, limits: ObjectLimits) -> Self {
        self.object_limits = limits;
        self
    }

    /// The per-key object limits in force.
    pub fn object_limits(&self) -> ObjectLimits {
        self.object_limits
    }

    /// A secrets key is configured.
    pub fn has_secrets_key(&self) -> bool {
        self.keyring.is_some()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// Round-trips a trivial query (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query_scalar!("select 1 as \"one!\"")
            .fetch_one(&self.pool)
            .await?;
        Ok(())
    }
}

/// Creates the database named in `database_url` when it does not exist yet.
pub async fn ensure_database(database_url: &str) -> Result<(), StoreError> {
    if !Postgres::database_exists(database_url).await? {
        match Postgres::create_database(database_url).await {
            Ok(()) => tracing::info!("created database"),
            // Another process created it between the check and the create.
            Err(err)
                if Postgres::database_exists(database_url)
                    .await
                    .unwrap_or(false) =>
            {
                tracing::debug!(%err, "database appeared concurrently");
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
