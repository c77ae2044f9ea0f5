//! Human units for scenario files: rates (`"10Mbit"`), durations (`"25ms"`)
//! and byte sizes (`"64KB"`), with serde wrappers that report clear errors.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// A unit string could not be parsed; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

fn split_number(s: &str) -> Result<(f64, &str), UnitError> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_' || c == 'e' || c == '+'))
        .unwrap_or(s.len());
    // An 'e' may start a unit ("1e6" is a number, but not "1ebit"): back off
    // to the longest prefix that parses.
    let mut cut = end;
    loop {
        let num: String = s[..cut].chars().filter(|&c| c != '_').collect();
        if let Ok(v) = num.parse::<f64>() {
            if !v.is_finite() || v < 0.0 {
                return Err(UnitError(format!(
                    "`{s}`: expected a finite non-negative number"
                )));
            }
            return Ok((v, s[cut..].trim()));
        }
        if cut == 0 {
            return Err(UnitError(format!(
                "`{s}`: expected a number followed by a unit"
            )));
        }
        cut -= 1;
    }
}

/// Parses a bit rate in bits per second: `"10Mbit"`, `"1.5 Gbps"`, `"64kbit"`,
/// `"200M"`, `"1000bps"` or a bare number of bits per second. Prefixes are
/// decimal (SI).
pub fn parse_rate_bps(s: &str) -> Result<u64, UnitError> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "bit" | "bps" | "b/s" | "bit/s" => 1.0,
        "k" | "kbit" | "kbps" | "kb/s" | "kbit/s" => 1e3,
        "m" | "mbit" | "mbps" | "mb/s" | "mbit/s" => 1e6,
        "g" | "gbit" | "gbps" | "gb/s" | "gbit/s" => 1e9,
        _ => {
            return Err(UnitError(format!(
                "`{s}`: unknown rate unit `{unit}` (use bps, Kbit, Mbit or Gbit)"
            )))
        }
    };
    let bps = (v * mult).round();
    if bps < 1.0 || bps > u64::MAX as f64 {
        return Err(UnitError(format!("`{s}`: rate must be at least 1 bit/s")));
    }
    Ok(bps as u64)
}

/// Parses a duration: `"25ms"`, `"1.5s"`, `"100us"`, `"250ns"`, `"2min"`.
/// A unit is required except for `"0"`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (v, unit) = split_number(s)?;
    let nanos_per = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "min" => 60e9,
        "" if v == 0.0 => 0.0,
        "" => {
            return Err(UnitError(format!(
                "`{s}`: missing duration unit (use ns, us, ms, s or min)"
            )))
        }
        _ => {
            return Err(UnitError(format!(
                "`{s}`: unknown duration unit `{unit}` (use ns, us, ms, s or min)"
            )))
        }
    };
    let nanos = (v * nanos_per).round();
    if nanos > u64::MAX as f64 {
        return Err(UnitError(format!("`{s}`: duration too large")));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Parses a byte count: `"1500"`, `"64KB"` (10^3), `"64KiB"` (2^10), `"1MB"`.
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let (v, unit) = split_number(s)?;
    let mult = match unit {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "KiB" => 1024.0,
        "MB" => 1e6,
        "MiB" => 1024.0 * 1024.0,
        "GB" => 1e9,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(UnitError(format!(
                "`{s}`: unknown size unit `{unit}` (use B, KB, KiB, MB, MiB)"
            )))
        }
    };
    Ok((v * mult).round() as u64)
}

macro_rules! human_unit {
    ($(#[$m:meta])* $name:ident($inner:ty), $parse:path, $expect:literal, $from_u64:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$name, E> {
                        $parse(s).map($name).map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$name, E> {
                        let v = u64::try_from(v).map_err(|_| E::custom("must not be negative"))?;
                        self.visit_u64(v)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$name, E> {
                        #[allow(clippy::redundant_closure_call)]
                        ($from_u64)(v).map($name).map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

human_unit!(
    /// A bit rate in bits per second; from `"10Mbit"` or an integer (bit/s).
    Rate(u64),
    parse_rate_bps,
    "a rate such as \"10Mbit\" or an integer in bit/s",
    |v: u64| if v == 0 { Err(UnitError("rate must be at least 1 bit/s".into())) } else { Ok(v) }
);
human_unit!(
    /// A duration; from `"25ms"` (a bare number is rejected except 0).
    HumanDuration(Duration),
    parse_duration,
    "a duration such as \"25ms\"",
    |v: u64| if v == 0 {
        Ok(Duration::ZERO)
    } else {
        Err(UnitError(format!("`{v}`: missing duration unit (write e.g. \"{v}ms\")")))
    }
);
human_unit!(
    /// A byte count; from `"64KB"` or an integer number of bytes.
    Bytes(u64),
    parse_bytes,
    "a size such as \"64KB\" or an integer number of bytes",
    |v: u64| Ok::<u64, UnitError>(v)
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate_bps("10Mbit"), Ok(10_000_000));
        assert_eq!(parse_rate_bps("1.5 Gbps"), Ok(1_500_000_000));
        assert_eq!(parse_rate_bps("64kbit"), Ok(64_000));
        assert_eq!(parse_rate_bps("1000"), Ok(1000));
        assert!(parse_rate_bps("10Mbyte")
            .unwrap_err()
            .to_string()
            .contains("unknown rate unit"));
        assert!(parse_rate_bps("fast").is_err());
        assert!(parse_rate_bps("0bit").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("25ms"), Ok(Duration::from_millis(25)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("25")
            .unwrap_err()
            .to_string()
            .contains("missing duration unit"));
        assert!(parse_duration("25 parsecs").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_bytes("64KB"), Ok(64_000));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert!(parse_bytes("3 furlongs").is_err());
    }
}
