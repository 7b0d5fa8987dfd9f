//! Per-key quotas (migration 0014): how many tasks a key may have running and queued, how many
//! WebSockets it may hold open, and how many steps (and dollars) its tasks may spend per UTC
//! day. The operator configures the defaults ([`Store::with_default_quotas`]); a key's own
//! columns override them ([`QuotaOverrides`]: NULL = the default, 0 = unlimited, N = N).
//!
//! Where each is enforced: `max_running` by [`Store::claim_task`] (a key's task stays queued
//! while a worker holds `max_running` of its tasks — counted in `api_key_held_tasks`, exact
//! at every commit); `max_queued` and the daily budgets by the api's task service at creation,
//! from [`Store::key_usage`]; `max_websockets` by the api when a task WebSocket opens.

use browserd_types::ApiKeyId;
use time::OffsetDateTime;

use crate::{Store, StoreError};

/// The limits that apply to one key; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quotas {
    /// Tasks a worker holds for the key at once (running, or paused with their browser kept).
    pub max_running: Option<i64>,
    /// Tasks of the key waiting in the queue.
    pub max_queued: Option<i64>,
    /// Task WebSockets (events, live view) the key has open on one api process.
    pub max_websockets: Option<i64>,
    /// Steps the key's tasks may take per UTC day (checked when a task is created).
    pub daily_steps: Option<i64>,
    /// Model cost in USD the key's tasks may spend per UTC day (checked when a task is
    /// created).
    pub daily_cost_usd: Option<f64>,
}

impl Quotas {
    /// Whether anything is checked when a task is created.
    pub fn limits_creation(&self) -> bool {
        self.max_queued.is_some() || self.daily_steps.is_some() || self.daily_cost_usd.is_some()
    }
}

/// A key's own quota settings, as stored: `None` = the configured default, `Some(0)` =
/// unlimited for this key, `Some(n)` = at most `n`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaOverrides {
    pub max_running: Option<i64>,
    pub max_queued: Option<i64>,
    pub max_websockets: Option<i64>,
    pub daily_steps: Option<i64>,
    pub daily_cost_usd: Option<f64>,
}

/// A change of a key's [`QuotaOverrides`], field by field: `None` leaves the field as it is,
/// `Some(None)` resets it to the configured default, `Some(Some(n))` sets it (`0` =
/// unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaUpdate {
    pub max_running: Option<Option<i64>>,
    pub max_queued: Option<Option<i64>>,
    pub max_websockets: Option<Option<i64>>,
    pub daily_steps: Option<Option<i64>>,
    pub daily_cost_usd: Option<Option<f64>>,
}

impl QuotaUpdate {
    /// Nothing would change.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn effective_count(own: Option<i64>, default: Option<i64>) -> Option<i64> {
    match own {
        None => default,
        Some(n) if n <= 0 => None,
        Some(n) => Some(n),
    }
}

impl QuotaOverrides {
    /// The limits that apply: each override, or `defaults` where there is none.
    pub fn apply(&self, defaults: &Quotas) -> Quotas {
        Quotas {
            max_running: effective_count(self.max_running, defaults.max_running),
            max_queued: effective_count(self.max_queued, defaults.max_queued),
            max_websockets: effective_count(self.max_websockets, defaults.max_websockets),
            daily_steps: effective_count(self.daily_steps, defaults.daily_steps),
            daily_cost_usd: match self.daily_cost_usd {
                None => defaults.daily_cost_usd,
                Some(usd) if usd <= 0.0 => None,
                Some(usd) => Some(usd),
            },
        }
    }
}

/// What a key has and has spent right now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyUsage {
    /// Its tasks in the queue.
    pub queued: i64,
    /// Its tasks a worker holds (running, or paused with their browser kept).
    pub held: i64,
    /// Steps its tasks took today (UTC).
    pub steps_today: i64,
    /// Model cost its tasks spent today (UTC), in USD.
    pub cost_today_usd: f64,
}

/// Seconds from `now` until the next midnight UTC, when the daily budgets start afresh.
pub fn seconds_until_utc_midnight(now: OffsetDateTime) -> u64 {
    let now = now.to_offset(time::UtcOffset::UTC);
    let since_midnight =
        u64::from(now.hour()) * 3600 + u64::from(now.minute()) * 60 + u64::from(now.second());
    (86_400 - since_midnight).max(1)
}

/// A quota value for `i32` columns (they are `integer`): larger values are stored as the
/// largest one, which no count reaches.
pub(crate) fn column(value: Option<i64>) -> Option<i32> {
    value.map(|n| i32::try_from(n.max(0)).unwrap_or(i32::MAX))
}

impl Store {
    /// Uses `defaults` for every key that does not override a quota (the operator's flags).
    #[must_use]
    pub fn with_default_quotas(mut self, defaults: Quotas) -> Self {
        self.default_quotas = defaults;
        self
    }

    /// With `on`, a key that has no `max_running` of its own while the defaults set none
    /// either may hold at most half the task slots of the live workers (the sum of their
    /// registered `--concurrency`, [`Store::register_worker_slots`]), rounded up, at least
    /// one: the operator's `--max-running-per-key auto`, the default. A shared install stays
    /// fair without configuration: one key's flood leaves half the slots to the others.
    #[must_use]
    pub fn with_fair_share(mut self, on: bool) -> Self {
        self.fair_share = on;
        self
    }

    /// Whether [`Store::with_fair_share`] is on.
    pub fn fair_share(&self) -> bool {
        self.fair_share
    }

    /// Registers (or refreshes) worker `worker`'s `slots` (its concurrency) for `ttl`: the
    /// slots the fair share is half of. Workers refresh it with their maintenance loop; a
    /// worker that died stops counting once it expires.
    pub async fn register_worker_slots(
        &self,
        worker: &str,
        slots: usize,
        ttl: std::time::Duration,
    ) -> Result<(), StoreError> {
        let slots = i32::try_from(slots.max(1)).unwrap_or(i32::MAX);
        sqlx::query!(
            "insert into worker_slots (worker, slots, expires_at)
             values ($1, $2, now() + make_interval(secs => $3))
             on conflict (worker) do update set slots = excluded.slots,
                 expires_at = excluded.expires_at",
            worker,
            slots,
            ttl.as_secs_f64(),
        )
        .execute(&self.pool)
        .await?;
        sqlx::query!("delete from worker_slots where expires_at < now() - interval '1 hour'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Removes worker `worker`'s slots (it is shutting down).
    pub async fn remove_worker_slots(&self, worker: &str) -> Result<(), StoreError> {
        sqlx::query!("delete from worker_slots where worker = $1", worker)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The task slots of the live workers, and the fair share of one key (half, rounded up,
    /// at least one).
    pub async fn worker_slots(&self) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query!(
            r#"select coalesce(sum(slots), 0)::bigint as "slots!",
                      greatest(1, ceil(coalesce(sum(slots), 0) / 2.0))::bigint as "share!"
               from worker_slots where expires_at > now()"#
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.slots, row.share))
    }

    /// The configured default quotas.
    pub fn default_quotas(&self) -> Quotas {
        self.default_quotas
    }

    /// The quotas that apply to key `key` (the configured defaults for an unknown key).
    pub async fn key_quotas(&self, key: ApiKeyId) -> Result<Quotas, StoreError> {
        let row = sqlx::query!(
            "select max_running, max_queued, max_websockets, daily_steps, daily_cost_usd
             from api_keys where id = $1",
            key.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        let overrides = row.map_or_else(QuotaOverrides::default, |row| QuotaOverrides {
            max_running: row.max_running.map(i64::from),
            max_queued: row.max_queued.map(i64::from),
            max_websockets: row.max_websockets.map(i64::from),
            daily_steps: row.daily_steps.map(i64::from),
            daily_cost_usd: row.daily_cost_usd,
        });
        Ok(overrides.apply(&self.default_quotas))
    }

    /// Key `key`'s queued and held tasks and today's (UTC) steps and cost.
    pub async fn key_usage(&self, key: ApiKeyId) -> Result<KeyUsage, StoreError> {
        let row = sqlx::query!(
            r#"select
                 (select count(*) from tasks where api_key_id = $1 and status = 'queued')
                     as "queued!",
                 coalesce((select held from api_key_held_tasks where api_key_id = $1), 0)
                     as "held!",
                 coalesce((select steps from api_key_daily_usage
                           where api_key_id = $1 and day = (now() at time zone 'utc')::date), 0)
                     as "steps_today!",
                 coalesce((select cost_usd from api_key_daily_usage
                           where api_key_id = $1 and day = (now() at time zone 'utc')::date), 0)
                     as "cost_today_usd!""#,
            key.0,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(KeyUsage {
            queued: row.queued,
            held: i64::from(row.held),
            steps_today: row.steps_today,
            cost_today_usd: row.cost_today_usd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_beat_defaults_and_zero_is_unlimited() {
        let defaults = Quotas {
            max_running: Some(4),
            max_queued: Some(100),
            max_websockets: Some(20),
            daily_steps: None,
            daily_cost_usd: Some(5.0),
        };
        let own = QuotaOverrides {
            max_running: Some(1),
            max_queued: Some(0),
            daily_steps: Some(50),
            daily_cost_usd: Some(0.0),
            ..QuotaOverrides::default()
        };
        assert_eq!(
            own.apply(&defaults),
            Quotas {
                max_running: Some(1),
                max_queued: None,
                max_websockets: Some(20),
                daily_steps: Some(50),
                daily_cost_usd: None,
            }
        );
        assert_eq!(QuotaOverrides::default().apply(&defaults), defaults);
    }

    #[test]
    fn the_day_ends_at_midnight_utc() {
        let day = time::Date::from_calendar_date(2026, time::Month::December, 1).unwrap();
        let at = |h, m, s| day.with_hms(h, m, s).unwrap();
        assert_eq!(seconds_until_utc_midnight(at(23, 59, 30).assume_utc()), 30);
        assert_eq!(seconds_until_utc_midnight(at(0, 0, 0).assume_utc()), 86_400);
        let minus_two = time::UtcOffset::from_hms(-2, 0, 0).unwrap();
        // 21:00 at UTC-2 is 23:00 UTC.
        assert_eq!(
            seconds_until_utc_midnight(at(21, 0, 0).assume_offset(minus_two)),
            3600
        );
    }
}
