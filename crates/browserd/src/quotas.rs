//! Per-key quotas on the command line: the configured defaults (global flags, so that the api,
//! which checks `max_queued`, the daily budgets and `max_websockets`, and the worker, whose
//! claim checks `max_running`, read the same values) and a key's own settings for
//! `browserd keys create|update`.

use browserd_tasks::records::{ApiKeyRecord, ObjectLimits, QuotaOverrides, QuotaUpdate, Quotas};
use clap::Args;

/// The default quotas of every key that sets none of its own. `0` is unlimited.
#[derive(Debug, Args)]
pub(crate) struct QuotaArgs {
    /// Tasks the workers may hold for one key at once (running, or paused with their browser
    /// kept); a key's further tasks wait in the queue. `auto` (the default): half the task
    /// slots of the live workers (the sum of their `--concurrency`), rounded up, at least 1 —
    /// so one key's flood always leaves the other keys half the slots; a number: that many;
    /// 0: unlimited.
    #[arg(
        long,
        env = "BROWSERD_MAX_RUNNING_PER_KEY",
        default_value = "auto",
        value_parser = parse_running_default,
        global = true
    )]
    max_running_per_key: RunningDefault,

    /// Queued tasks per key; creating one more answers 429 `quota_exceeded` (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_QUEUED_PER_KEY",
        default_value_t = 1000,
        global = true
    )]
    max_queued_per_key: u32,

    /// Open task WebSockets (events and live view) per key and api process; more get 429
    /// `too_many_websockets` (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_WEBSOCKETS_PER_KEY",
        default_value_t = 20,
        global = true
    )]
    max_websockets_per_key: u32,

    /// Steps one key's tasks may take per UTC day; once used, creating a task answers 429
    /// `quota_exceeded` until midnight UTC (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_DAILY_STEPS_PER_KEY",
        default_value_t = 0,
        global = true
    )]
    daily_steps_per_key: u32,

    /// Model cost in USD one key's tasks may spend per UTC day; once spent, creating a task
    /// answers 429 `quota_exceeded` until midnight UTC (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_DAILY_COST_USD_PER_KEY",
        default_value_t = 0.0,
        global = true
    )]
    daily_cost_usd_per_key: f64,

    /// Browser profiles one key may have; creating one more answers 429 `quota_exceeded`
    /// until the key deletes one (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_PROFILES_PER_KEY",
        default_value_t = 100,
        global = true
    )]
    max_profiles_per_key: u32,

    /// Schedules (`/v1/schedules`) one key may have; creating one more answers 429
    /// `quota_exceeded` until the key deletes one (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_SCHEDULES_PER_KEY",
        default_value_t = 100,
        global = true
    )]
    max_schedules_per_key: u32,

    /// Active `/api/v2` sessions (created with `POST /api/v2/sessions`, not yet stopped) one
    /// key may have; creating one more answers 429 until the key stops or deletes one (0:
    /// unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_SESSIONS_PER_KEY",
        default_value_t = 10,
        global = true
    )]
    max_sessions_per_key: u32,

    /// Largest browser-profile state (cookies and localStorage, serialized as JSON) stored, in
    /// bytes; a task whose state grows past it keeps the profile's previous state and gets one
    /// `log` warning event (0: unlimited).
    #[arg(
        long,
        env = "BROWSERD_MAX_PROFILE_BYTES",
        default_value_t = browserd_worker::MAX_PROFILE_BYTES,
        global = true
    )]
    max_profile_bytes: usize,
}

/// `--max-running-per-key`: a fixed number (0: unlimited) or half the workers' slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunningDefault {
    HalfOfSlots,
    Limit(u32),
}

fn parse_running_default(raw: &str) -> Result<RunningDefault, String> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("auto") {
        return Ok(RunningDefault::HalfOfSlots);
    }
    raw.parse::<u32>().map(RunningDefault::Limit).map_err(|_| {
        format!("expected `auto` (half the workers' slots), a whole number or 0 (unlimited), got `{raw}`")
    })
}

fn count(n: u32) -> Option<i64> {
    (n > 0).then_some(i64::from(n))
}

impl QuotaArgs {
    /// The configured defaults.
    pub(crate) fn defaults(&self) -> anyhow::Result<Quotas> {
        anyhow::ensure!(
            self.daily_cost_usd_per_key.is_finite() && self.daily_cost_usd_per_key >= 0.0,
            "--daily-cost-usd-per-key must be a number of dollars, 0 or more"
        );
        Ok(Quotas {
            max_running: match self.max_running_per_key {
                RunningDefault::Limit(n) => count(n),
                RunningDefault::HalfOfSlots => None,
            },
            max_queued: count(self.max_queued_per_key),
            max_websockets: count(self.max_websockets_per_key),
            daily_steps: count(self.daily_steps_per_key),
            daily_cost_usd: (self.daily_cost_usd_per_key > 0.0)
                .then_some(self.daily_cost_usd_per_key),
        })
    }
}

impl QuotaArgs {
    /// The per-key profile, session and schedule counts and the profile size.
    pub(crate) fn object_limits(&self) -> ObjectLimits {
        ObjectLimits {
            max_profiles_per_key: self.max_profiles_per_key,
            max_sessions_per_key: self.max_sessions_per_key,
            max_profile_bytes: self.max_profile_bytes,
            max_schedules_per_key: self.max_schedules_per_key,
        }
    }

    /// Whether a key without a `max_running` of its own may hold half the workers' slots
    /// (`--max-running-per-key auto`).
    pub(crate) fn fair_share(&self) -> bool {
        self.max_running_per_key == RunningDefault::HalfOfSlots
    }
}

/// One quota of a key on the command line: a number (`0`: unlimited for this key) or
/// `default` (the configured default).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Setting<T> {
    Default,
    Limit(T),
}

fn parse_setting<T: std::str::FromStr>(raw: &str, what: &str) -> Result<Setting<T>, String> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("default") {
        return Ok(Setting::Default);
    }
    if raw.eq_ignore_ascii_case("unlimited") {
        return raw_zero::<T>().map(Setting::Limit);
    }
    raw.parse::<T>()
        .map(Setting::Limit)
        .map_err(|_| format!("expected {what}, `unlimited` (or 0) or `default`, got `{raw}`"))
}

fn raw_zero<T: std::str::FromStr>() -> Result<T, String> {
    "0".parse::<T>().map_err(|_| "0 is not a value".to_owned())
}

fn parse_count(raw: &str) -> Result<Setting<u32>, String> {
    parse_setting(raw, "a whole number")
}

fn parse_usd(raw: &str) -> Result<Setting<f64>, String> {
    match parse_setting::<f64>(raw, "a number of dollars")? {
        Setting::Limit(usd) if !usd.is_finite() || usd < 0.0 => Err(format!(
            "expected a number of dollars, 0 or more, got `{raw}`"
        )),
        setting => Ok(setting),
    }
}

/// A key's own quotas (`keys create`, `keys update`). Each takes a number (`0` or
/// `unlimited`: no limit for this key) or `default` (the configured default; `keys update`
/// resets the key's setting with it).
#[derive(Debug, Args)]
pub(crate) struct KeyQuotaArgs {
    /// Tasks a worker may hold for this key at once (running, or paused with their browser).
    #[arg(long, value_name = "N|unlimited|default", value_parser = parse_count)]
    max_running: Option<Setting<u32>>,
    /// Tasks of this key waiting in the queue.
    #[arg(long, value_name = "N|unlimited|default", value_parser = parse_count)]
    max_queued: Option<Setting<u32>>,
    /// Open task WebSockets of this key per api process.
    #[arg(long, value_name = "N|unlimited|default", value_parser = parse_count)]
    max_websockets: Option<Setting<u32>>,
    /// Steps this key's tasks may take per UTC day.
    #[arg(long, value_name = "N|unlimited|default", value_parser = parse_count)]
    daily_steps: Option<Setting<u32>>,
    /// Model cost in USD this key's tasks may spend per UTC day.
    #[arg(long, value_name = "USD|unlimited|default", value_parser = parse_usd)]
    daily_cost_usd: Option<Setting<f64>>,
}

fn change_count(setting: Option<Setting<u32>>) -> Option<Option<i64>> {
    setting.map(|s| match s {
        Setting::Default => None,
        Setting::Limit(n) => Some(i64::from(n)),
    })
}

impl KeyQuotaArgs {
    /// The change these flags make (flags left out change nothing).
    pub(crate) fn update(&self) -> QuotaUpdate {
        QuotaUpdate {
            max_running: change_count(self.max_running),
            max_queued: change_count(self.max_queued),
            max_websockets: change_count(self.max_websockets),
            daily_steps: change_count(self.daily_steps),
            daily_cost_usd: self.daily_cost_usd.map(|s| match s {
                Setting::Default => None,
                Setting::Limit(usd) => Some(usd),
            }),
        }
    }

    /// A new key's own quotas (flags left out, or `default`: the configured default).
    pub(crate) fn overrides(&self) -> QuotaOverrides {
        let update = self.update();
        QuotaOverrides {
            max_running: update.max_running.flatten(),
            max_queued: update.max_queued.flatten(),
            max_websockets: update.max_websockets.flatten(),
            daily_steps: update.daily_steps.flatten(),
            daily_cost_usd: update.daily_cost_usd.flatten(),
        }
    }
}

/// A limit as `keys list` shows it: the number, `unlimited`, and `*` when the key sets it
/// itself.
fn shown<T: std::fmt::Display>(limit: Option<T>, own: bool) -> String {
    let value = limit.map_or_else(|| "unlimited".to_owned(), |v| v.to_string());
    if own { format!("{value}*") } else { value }
}

/// The header of the quota columns of `keys list`.
pub(crate) const QUOTA_HEADER: &str = "RUNNING    QUEUED     SOCKETS    STEPS/DAY  USD/DAY   ";

/// `key`'s effective quotas under `defaults`, in the columns of [`QUOTA_HEADER`].
/// `fair_share`: a key without a running limit of its own gets half the workers' slots.
pub(crate) fn quota_columns(key: &ApiKeyRecord, defaults: &Quotas, fair_share: bool) -> String {
    let own = &key.quotas;
    let quotas = own.apply(defaults);
    let running = if fair_share && own.max_running.is_none() && quotas.max_running.is_none() {
        "half".to_owned()
    } else {
        shown(quotas.max_running, own.max_running.is_some())
    };
    format!(
        "{:<10} {:<10} {:<10} {:<10} {:<10}",
        running,
        shown(quotas.max_queued, own.max_queued.is_some()),
        shown(quotas.max_websockets, own.max_websockets.is_some()),
        shown(quotas.daily_steps, own.daily_steps.is_some()),
        shown(quotas.daily_cost_usd, own.daily_cost_usd.is_some()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse() {
        assert_eq!(parse_count("5"), Ok(Setting::Limit(5)));
        assert_eq!(parse_count("unlimited"), Ok(Setting::Limit(0)));
        assert_eq!(parse_count("Default"), Ok(Setting::Default));
        assert!(parse_count("-1").unwrap_err().contains("whole number"));
        assert_eq!(parse_usd("2.5"), Ok(Setting::Limit(2.5)));
        assert!(parse_usd("-3").is_err());
        assert!(parse_usd("NaN").is_err());
        assert_eq!(
            parse_running_default("auto"),
            Ok(RunningDefault::HalfOfSlots)
        );
        assert_eq!(parse_running_default("0"), Ok(RunningDefault::Limit(0)));
        assert_eq!(parse_running_default("3"), Ok(RunningDefault::Limit(3)));
        assert!(parse_running_default("half").is_err());
    }
}
