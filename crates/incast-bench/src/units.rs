//! Parsing of sizes, rates and durations on the command line ("32KiB", "1gbit", "200us").

use std::time::Duration;

fn split(s: &str) -> (&str, String) {
    let s = s.trim();
    let at = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    (&s[..at], s[at..].trim().to_ascii_lowercase())
}

fn number(n: &str, whole: &str) -> Result<f64, String> {
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{whole}` does not start with a non-negative number")),
    }
}

fn checked(v: f64, whole: &str) -> Result<u64, String> {
    if v > u64::MAX as f64 / 2.0 {
        return Err(format!("`{whole}` is too large"));
    }
    Ok(v.round() as u64)
}

/// Bytes: plain, or with B, KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (n, unit) = split(s);
    let mult = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "`{s}`: unknown size unit `{unit}` (use B, KB, KiB, MB, MiB, GB, GiB)"
            ))
        }
    };
    checked(number(n, s)? * mult, s)
}

/// Bits per second: bit, kbit, mbit, gbit (powers of 1000), as tc writes them.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (n, unit) = split(s);
    let mult = match unit.as_str() {
        "" | "bit" | "bps" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(format!("`{s}`: unknown rate unit `{unit}` (use bit, kbit, mbit, gbit)")),
    };
    match checked(number(n, s)? * mult, s)? {
        0 => Err(format!("`{s}`: a rate must be greater than zero")),
        v => Ok(v),
    }
}

/// A duration: ns, us, ms or s.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = split(s);
    let mult = match unit.as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("`{s}`: unknown duration unit `{unit}` (use ns, us, ms, s)")),
    };
    Ok(Duration::from_nanos(checked(number(n, s)? * mult, s)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("32KiB"), Ok(32768));
        assert_eq!(parse_bytes("64KB"), Ok(64000));
        assert_eq!(parse_bytes("1448"), Ok(1448));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5gbit"), Ok(2_500_000_000));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("0.5ms"), Ok(Duration::from_micros(500)));
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(parse_rate("0gbit").is_err());
        assert!(parse_rate("-1gbit").is_err());
        assert!(parse_duration("1e400s").is_err());
        assert!(parse_bytes("99999999999999999999999GiB")
            .unwrap_err()
            .contains("too large"));
    }
}
