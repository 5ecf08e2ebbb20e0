//! The trace header's calendar time (SYSTEMTIME) and its conversion, without floating
//! point.

/// A calendar time as the trace header stores it (a Windows SYSTEMTIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)] // the field names say it all
pub struct SystemTime {
    pub year: i16,
    pub month: i16,
    pub day_of_week: i16,
    pub day: i16,
    pub hour: i16,
    pub minute: i16,
    pub second: i16,
    pub millisecond: i16,
}

impl SystemTime {
    /// The calendar time (UTC) `nanos` after the Unix epoch, to the millisecond.
    pub fn from_unix_nanos(nanos: i128) -> SystemTime {
        let millis = nanos.div_euclid(1_000_000);
        let secs = millis.div_euclid(1000);
        let days = secs.div_euclid(86_400) as i64;
        let rem = secs.rem_euclid(86_400) as i64;
        let (y, m, d) = civil_from_days(days);
        SystemTime {
            year: y as i16,
            month: m as i16,
            day_of_week: (days + 4).rem_euclid(7) as i16,
            day: d as i16,
            hour: (rem / 3600) as i16,
            minute: (rem / 60 % 60) as i16,
            second: (rem % 60) as i16,
            millisecond: millis.rem_euclid(1000) as i16,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nanoseconds since the Unix epoch of `t`, or `None` when a field is out of range.
pub(crate) fn system_time_to_unix_nanos(t: &SystemTime) -> Option<i128> {
    let valid = (1..=12).contains(&t.month)
        && (1..=31).contains(&t.day)
        && (0..24).contains(&t.hour)
        && (0..60).contains(&t.minute)
        && (0..61).contains(&t.second)
        && (0..1000).contains(&t.millisecond);
    if !valid {
        return None;
    }
    let days = days_from_civil(i64::from(t.year), i64::from(t.month), i64::from(t.day));
    let secs =
        days * 86_400 + i64::from(t.hour) * 3600 + i64::from(t.minute) * 60 + i64::from(t.second);
    Some(i128::from(secs) * 1_000_000_000 + i128::from(t.millisecond) * 1_000_000)
}

/// Formats nanoseconds since the Unix epoch as RFC 3339 UTC with nanoseconds.
pub fn format_unix_nanos(nanos: i128) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let sub = nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400) as i64;
    let rem = secs.rem_euclid(86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{sub:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let t = SystemTime {
            year: 2026,
            month: 11,
            day: 22,
            hour: 11,
            minute: 1,
            second: 46,
            millisecond: 431,
            ..Default::default()
        };
        let n = system_time_to_unix_nanos(&t).unwrap();
        assert_eq!(format_unix_nanos(n), "2026-11-22T11:01:46.431000000Z");
        let epoch = SystemTime {
            year: 1970,
            month: 1,
            day: 1,
            ..Default::default()
        };
        assert_eq!(system_time_to_unix_nanos(&epoch), Some(0));
        assert_eq!(format_unix_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn a_unix_time_becomes_its_calendar_time_and_back() {
        // 2026-11-22 was a Sunday (day 0).
        let n = 1_795_345_306_431_999_999i128;
        let t = SystemTime::from_unix_nanos(n);
        assert_eq!(
            (t.year, t.month, t.day, t.day_of_week),
            (2026, 11, 22, 0),
            "{t:?}"
        );
        assert_eq!(
            format_unix_nanos(system_time_to_unix_nanos(&t).unwrap()),
            "2026-11-22T11:01:46.431000000Z"
        );
        let before = SystemTime::from_unix_nanos(-1);
        assert_eq!(
            (before.year, before.second, before.millisecond),
            (1969, 59, 999)
        );
    }

    #[test]
    fn invalid_fields_are_rejected() {
        let t = SystemTime {
            year: 2020,
            month: 13,
            day: 1,
            ..Default::default()
        };
        assert_eq!(system_time_to_unix_nanos(&t), None);
    }
}
