//! Small shared helpers: durations, the fingerprint hash, number formatting, wall time.

/// Milliseconds since the Unix epoch from the system clock (0 before it).
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A duration in milliseconds: `0`, seconds (`90`, `0.5`) or CAQL duration text (`5m`,
/// `1h 30m`, `250ms`).
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    // `0`, `0s`, `0m`: zero in any unit (the period parser wants a positive length).
    let number = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if number.parse::<f64>() == Ok(0.0) && t.len() - number.len() <= 2 {
        return Ok(0);
    }
    query::output::parse_period_ms(t)
        .map_err(|_| format!("{t:?} is not a duration (expected e.g. 30s, 5m, 1h 30m, or seconds)"))
}

/// `5m`, `1m 30s`, `250ms`: the shortest exact text of a duration (CAQL reads it back).
pub fn format_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let mut s = ms / 1000;
    let mut parts = Vec::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if s >= size {
            parts.push(format!("{}{unit}", s / size));
            s %= size;
        }
    }
    parts.join(" ")
}

/// FNV-1a, 64 bits: fixed for all time, so fingerprints are stable across versions and
/// machines (a seeded hasher would not be).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            // A separator byte, so ("ab", "c") and ("a", "bc") differ.
            h ^= 0;
            h = h.wrapping_mul(PRIME);
        }
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// A number for people: integers as integers, others with up to 4 significant digits.
pub fn human_number(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let digits = if v.abs() >= 1000.0 {
        1
    } else if v.abs() >= 1.0 {
        3
    } else {
        4
    };
    let s = format!("{v:.digits$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
pub fn rfc3339(ms: i64) -> String {
    query::output::rfc3339(ms)
}

/// `x` rounded down to a multiple of `step` (> 0).
pub fn align_down(x: i64, step: i64) -> i64 {
    x.div_euclid(step) * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip() {
        for (text, ms) in [
            ("0", 0),
            ("5m", 300_000),
            ("1h 30m", 5_400_000),
            ("250ms", 250),
        ] {
            assert_eq!(parse_duration_ms(text), Ok(ms));
        }
        assert_eq!(format_duration(5_400_000), "1h 30m");
        assert_eq!(
            parse_duration_ms(&format_duration(5_400_250)),
            Ok(5_400_250)
        );
        assert!(parse_duration_ms("soon").is_err());
    }

    #[test]
    fn fnv_is_fixed() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(human_number(523.0), "523");
        assert_eq!(human_number(0.123_456), "0.1235");
        assert_eq!(human_number(12.5), "12.5");
        assert_eq!(human_number(f64::NAN), "n/a");
    }
}
