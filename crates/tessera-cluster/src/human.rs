//! Sizes, durations and times as people read them (`ls -l`, `stat`, `status`, `df`, the
//! experiments' tables), and times as `--json` writes them (RFC 3339, UTC).
//!
//! Sizes are binary (`1.5 MiB`): the stripe units and limits they are compared with are
//! powers of two. The exact bytes stay available in every command's `--json`.

use std::time::Duration;

/// Binary units past bytes, each 1024 times the one before.
const SIZE_UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `bytes` as `512 B`, `1.5 MiB`, `40 GiB`: one decimal below 10 units, none above.
pub fn size(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < SIZE_UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    // 1023.96 KiB would print as "1024 KiB": say 1.0 MiB instead.
    if value >= 1023.95 && unit + 1 < SIZE_UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 9.95 {
        format!("{value:.1} {}", SIZE_UNITS[unit])
    } else {
        format!("{value:.0} {}", SIZE_UNITS[unit])
    }
}

/// `elapsed` as `850 ns`, `12 µs`, `3.4 ms`, `2.1 s`, `4.5 min` or `3.0 h`.
pub fn duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    let scaled = |value: f64, unit: &str| {
        if value < 9.95 {
            format!("{value:.1} {unit}")
        } else {
            format!("{value:.0} {unit}")
        }
    };
    if seconds < 1e-6 {
        format!("{} ns", elapsed.as_nanos())
    } else if seconds < 1e-3 {
        scaled(seconds * 1e6, "µs")
    } else if seconds < 1.0 {
        scaled(seconds * 1e3, "ms")
    } else if seconds < 120.0 {
        scaled(seconds, "s")
    } else if seconds < 7200.0 {
        scaled(seconds / 60.0, "min")
    } else {
        scaled(seconds / 3600.0, "h")
    }
}

/// The civil UTC date and time of `ns` since the epoch: year, month, day, hour, minute,
/// second, nanosecond (days to date by the proleptic Gregorian calendar).
fn civil(ns: u64) -> (i64, i64, i64, u64, u64, u64, u64) {
    let seconds = ns / 1_000_000_000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Howard Hinnant's days-from-civil, inverted.
    let z = i64::try_from(days).unwrap_or(i64::MAX / 2) + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ns % 1_000_000_000,
    )
}

/// A time in ns since the epoch as `YYYY-MM-DD HH:MM:SS.nnnnnnnnn UTC`.
pub fn utc_time(ns: u64) -> String {
    let (year, month, day, hour, minute, second, nanos) = civil(ns);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}.{nanos:09} UTC")
}

/// Now, in ns since the epoch (0 before it, saturated far after it).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A time in ns since the epoch as RFC 3339 in UTC: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub fn rfc3339(ns: u64) -> String {
    let (year, month, day, hour, minute, second, nanos) = civil(ns);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{nanos:09}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.0 KiB");
        assert_eq!(size(1536 << 10), "1.5 MiB");
        assert_eq!(size(40 << 30), "40 GiB");
        assert_eq!(size((1 << 20) - 1), "1.0 MiB");
        assert_eq!(size(u64::MAX), "16 EiB");
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(duration(Duration::from_nanos(850)), "850 ns");
        assert_eq!(duration(Duration::from_micros(12)), "12 µs");
        assert_eq!(duration(Duration::from_micros(3400)), "3.4 ms");
        assert_eq!(duration(Duration::from_millis(2100)), "2.1 s");
        assert_eq!(duration(Duration::from_secs(270)), "4.5 min");
        assert_eq!(duration(Duration::from_hours(3)), "3.0 h");
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00.000000000 UTC");
        // 2000-02-29 (a leap day) 12:34:56.5
        assert_eq!(
            utc_time(951_827_696_500_000_000),
            "2000-02-29 12:34:56.500000000 UTC"
        );
        assert_eq!(
            utc_time(1_795_619_848_324_123_602),
            "2026-11-25 15:17:28.324123602 UTC"
        );
        assert_eq!(
            rfc3339(1_795_619_848_324_123_602),
            "2026-11-25T15:17:28.324123602Z"
        );
    }
}
