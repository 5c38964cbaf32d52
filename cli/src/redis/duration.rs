//! Durations on the command line: a whole number and a unit, `500ms`, `90s`, `30m`, `12h`,
//! `7d` (also `w` for weeks).

use std::time::Duration;

/// Parses `N<unit>`; the error says what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = || {
        format!("{text:?} is not a duration: use a whole number and a unit, e.g. 500ms, 90s, 30m, 12h, 7d")
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let ms_per: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(ms_per).ok_or_else(bad)?;
    if ms == 0 {
        return Err(format!("{text:?}: a duration must be longer than zero"));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        for (t, ms) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("30m", 1_800_000),
            ("12h", 43_200_000),
            ("7d", 604_800_000),
            ("1w", 604_800_000),
            (" 2s ", 2_000),
        ] {
            assert_eq!(parse(t), Ok(Duration::from_millis(ms)), "{t}");
        }
        for t in [
            "",
            "7",
            "d",
            "7 d",
            "1.5h",
            "-1s",
            "7y",
            "0s",
            "99999999999999999999d",
        ] {
            assert!(parse(t).is_err(), "{t:?}");
        }
    }
}
