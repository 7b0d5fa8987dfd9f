//! The cron expressions of schedules: parsed by `croner` (5 fields, or 6 with seconds first;
//! `@daily`-style nicknames; `L`, `#`, `W`; OCPS semantics, day-of-month OR day-of-week as in
//! Vixie cron) and read in an IANA time zone (`chrono-tz`), so `0 9 * * *` in `Europe/Paris`
//! is 09:00 there on both sides of a daylight-saving change. A tick that does not exist
//! locally (skipped by a spring-forward) fires once at the first instant after the gap, one
//! that exists twice fires once (croner's DST rules).

use chrono::TimeZone as _;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use time::OffsetDateTime;

use crate::error::TaskError;

/// A schedule's timing: its expression in its time zone.
#[derive(Clone, Debug)]
pub struct CronTiming {
    cron: Cron,
    zone: chrono_tz::Tz,
}

/// The time zone of a schedule that names none.
pub const DEFAULT_TIME_ZONE: &str = "UTC";
/// The longest time zone name accepted.
const TIME_ZONE_MAX_CHARS: usize = 64;

impl CronTiming {
    /// Parses `expression` in time zone `zone`; a refusal names the field (`cron`,
    /// `time_zone`) and the reason.
    pub fn parse(expression: &str, zone: &str) -> Result<Self, TaskError> {
        let zone = parse_time_zone(zone)?;
        let expression = expression.trim();
        if expression.is_empty() {
            return Err(TaskError::validation("cron", "cron must not be empty"));
        }
        if expression.chars().count() > browserd_types::schedules::SCHEDULE_CRON_MAX_CHARS {
            return Err(TaskError::validation(
                "cron",
                "cron must be at most 200 characters",
            ));
        }
        let fields = expression.split_whitespace().count();
        if !expression.starts_with('@') && !(5..=6).contains(&fields) {
            return Err(TaskError::validation(
                "cron",
                format!(
                    "cron must have 5 fields (minute hour day-of-month month day-of-week) or 6 \
                     (seconds first), not {fields}"
                ),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|err| {
                TaskError::validation("cron", format!("cron `{expression}` is not valid: {err}"))
            })?;
        let timing = Self { cron, zone };
        if timing.next_after(OffsetDateTime::now_utc()).is_none() {
            return Err(TaskError::validation(
                "cron",
                format!("cron `{expression}` never matches a date"),
            ));
        }
        Ok(timing)
    }

    /// The first tick strictly after `after`; `None` when there is none.
    pub fn next_after(&self, after: OffsetDateTime) -> Option<OffsetDateTime> {
        let nanos = after.unix_timestamp_nanos();
        let seconds = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
        let subsec = u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?;
        let start = self.zone.timestamp_opt(seconds, subsec).single()?;
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        let nanos = i128::from(next.timestamp()) * 1_000_000_000
            + i128::from(next.timestamp_subsec_nanos());
        OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
    }
}

/// An IANA time zone name (`UTC`, `Europe/Paris`, `America/New_York`).
fn parse_time_zone(zone: &str) -> Result<chrono_tz::Tz, TaskError> {
    let shown: String = zone.chars().take(TIME_ZONE_MAX_CHARS).collect();
    if zone.chars().count() > TIME_ZONE_MAX_CHARS {
        return Err(TaskError::validation(
            "time_zone",
            format!("time_zone must be at most {TIME_ZONE_MAX_CHARS} characters"),
        ));
    }
    zone.parse::<chrono_tz::Tz>().map_err(|_| {
        TaskError::validation(
            "time_zone",
            format!(
                "time_zone `{shown}` is not an IANA time zone name (such as `UTC` or \
                 `Europe/Paris`)"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    }

    fn field(err: TaskError) -> String {
        match err {
            TaskError::Validation { field, message } => format!("{}: {message}", field.unwrap()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn five_and_six_fields_in_a_time_zone() {
        let daily = CronTiming::parse("0 9 * * *", "Europe/Paris").unwrap();
        // Winter: UTC+1; summer: UTC+2.
        assert_eq!(
            daily.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T08:00:00Z"))
        );
        assert_eq!(
            daily.next_after(at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T07:00:00Z"))
        );
        let seconds = CronTiming::parse("*/2 * * * * *", "UTC").unwrap();
        assert_eq!(
            seconds.next_after(at("2026-01-10T12:00:00.5Z")),
            Some(at("2026-01-10T12:00:02Z"))
        );
        // Strictly after: a tick at `after` itself is not the next one.
        assert_eq!(
            seconds.next_after(at("2026-01-10T12:00:02Z")),
            Some(at("2026-01-10T12:00:04Z"))
        );
        let nickname = CronTiming::parse("@hourly", "UTC").unwrap();
        assert_eq!(
            nickname.next_after(at("2026-01-10T12:30:00Z")),
            Some(at("2026-01-10T13:00:00Z"))
        );
    }

    #[test]
    fn a_tick_skipped_by_daylight_saving_fires_once() {
        // 02:30 does not exist in Paris on 2026-03-29 (02:00 → 03:00).
        let timing = CronTiming::parse("30 2 * * *", "Europe/Paris").unwrap();
        let next = timing.next_after(at("2026-03-28T12:00:00Z")).unwrap();
        assert!(next > at("2026-03-28T12:00:00Z"));
        assert!(next < at("2026-03-29T12:00:00Z"), "{next}");
        let after = timing.next_after(next).unwrap();
        assert_eq!(after, at("2026-03-30T00:30:00Z"));
    }

    #[test]
    fn refusals_name_the_field_and_the_reason() {
        let cases = [
            ("", "UTC", "cron: cron must not be empty"),
            ("* * *", "UTC", "cron: cron must have 5 fields"),
            ("* * * * * * *", "UTC", "cron: cron must have 5 fields"),
            ("61 * * * *", "UTC", "cron: cron `61 * * * *` is not valid"),
            ("0 0 30 2 *", "UTC", "cron: cron `0 0 30 2 *` never matches"),
            (
                "0 9 * * *",
                "Mars/Olympus",
                "time_zone: time_zone `Mars/Olympus`",
            ),
            ("0 9 * * *", "", "time_zone: time_zone ``"),
        ];
        for (cron, zone, expected) in cases {
            let err = field(CronTiming::parse(cron, zone).unwrap_err());
            assert!(err.starts_with(expected), "{cron:?} {zone:?}: {err}");
        }
    }
}
