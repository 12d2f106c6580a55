//! Human units: durations (`250ms`, `30s`, `10m`, `24h`, `1h30m`) and sizes (`64KiB`,
//! `1MiB`, `1MB`, `65536`).
//!
//! A duration needs a unit on every number, because a bare `30` is ambiguous (seconds?
//! milliseconds?) and guessing wrong turns a 30 s lease into 30 ms. Only `0` may stand
//! alone. Sizes may be bare byte counts, as a count of bytes has only one meaning.
//! [`format_duration`] writes what [`parse_duration`] reads, so the route table shows
//! durations the way the file would.

use std::time::Duration;

const DURATION_UNITS: &str = "ms, s, m, h, d (e.g. 250ms, 30s, 10m, 24h, 1h30m)";
const SIZE_UNITS: &str = "B, KiB, MiB, GiB, KB, MB, GB or a plain byte count (e.g. 64KiB, 1MiB)";

/// Parse `250ms`, `30s`, `10m`, `24h`, `2d`, or a sum of them such as `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(format!("empty duration; use {DURATION_UNITS}"));
    }
    let mut total_ms: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit_len = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || unit_len == 0 {
            return Err(invalid_duration(text));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {text:?} is too large"))?;
        let unit_ms: u64 = match &rest[digits..digits + unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(invalid_duration(text)),
        };
        total_ms = number
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| format!("duration {text:?} is too large"))?;
        rest = &rest[digits + unit_len..];
    }
    Ok(Duration::from_millis(total_ms))
}

fn invalid_duration(text: &str) -> String {
    if !text.trim().is_empty() && text.trim().bytes().all(|b| b.is_ascii_digit()) {
        return format!(
            "invalid duration {text:?}: a duration needs a unit, e.g. \"{}s\" or \"{}ms\"",
            text.trim(),
            text.trim()
        );
    }
    format!("invalid duration {text:?}; use a whole number with a unit: {DURATION_UNITS}")
}

/// Parse `64KiB`, `1MiB`, `1MB`, `512B` or a bare byte count such as `65536`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let s = text.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(invalid_size(text));
    }
    let unit = s[digits..].trim_start();
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(invalid_size(text)),
    };
    s[..digits]
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("size {text:?} is too large"))
}

fn invalid_size(text: &str) -> String {
    format!("invalid size {text:?}; use {SIZE_UNITS}")
}

/// Write a duration the way a file would: `250ms`, `30s`, `1h30m`, `24h`, `1s500ms`.
pub fn format_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// Write a size in the largest binary unit that divides it: `64KiB`, `1MiB`, `1000B`.
pub fn format_size(bytes: usize) -> String {
    for (unit, size) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("10m"), Ok(ms(600_000)));
        assert_eq!(parse_duration("24h"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("2d"), Ok(ms(172_800_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration(" 1s500ms "), Ok(ms(1_500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_need_units() {
        assert!(parse_duration("30").unwrap_err().contains("\"30s\""));
        for bad in ["", "s", "1.5s", "30 s", "10sec", "-1s", "1h30", "ms30"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("30s") || e.contains("empty"), "{bad}: {e}");
        }
        assert!(parse_duration("99999999999999999999s").is_err());
        assert!(parse_duration("18446744073709551615h")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sizes_binary_decimal_and_bytes() {
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size("1 MiB"), Ok(1_048_576));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        assert_eq!(parse_size("10kb"), Ok(10_000));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("65536"), Ok(65_536));
    }

    #[test]
    fn bad_sizes_say_what_is_valid() {
        for bad in ["", "KiB", "1.5MiB", "1 Mbit", "-1", "1MiBs"] {
            assert!(parse_size(bad).unwrap_err().contains("KiB"), "{bad}");
        }
        assert!(parse_size("99999999999GiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn formatting_round_trips() {
        for text in ["250ms", "30s", "10m", "24h", "1h30m", "1s500ms", "0s"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
        assert_eq!(format_size(65_536), "64KiB");
        assert_eq!(format_size(1 << 20), "1MiB");
        assert_eq!(format_size(1_000), "1000B");
    }
}
