//! Durations as users type them: `-d 500ms` on the command line, the
//! `x-ebql-duration` header of a Flight SQL client.

use std::time::Duration;

/// A duration as `-d/--duration` takes it: a bare number is seconds (`5`,
/// `0.5`), else numbers with units, summed: `500ms`, `5s`, `2m`, `1h`,
/// `1m30s`, `1.5s` (units `ns`, `us`/`µs`, `ms`, `s`/`sec`, `m`/`min`, `h`).
///
/// Errors: a sentence quoting `text`, with examples of what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = |why: &str| {
        format!("`{text}`: {why} (e.g. 5, 5s, 500ms, 2m, 1m30s; a bare number is seconds)")
    };
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| bad("not a duration"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = num.parse().map_err(|_| bad("a number must come first"))?;
        let scale = match unit.trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "" => return Err(bad("a number needs a unit after another one")),
            other => return Err(bad(&format!("unknown unit `{other}`"))),
        };
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| bad("too long"))?;
        rest = tail;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_a_bare_number_is_seconds() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("5", ms(5000)),
            ("0.5", ms(500)),
            ("5s", ms(5000)),
            ("500ms", ms(500)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("1.5s", ms(1500)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            (" 3 s ", ms(3000)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "s", "5x", "-1", "5s3", "1..2s", "ms500", "inf"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("a bare number is seconds"), "{bad}: {e}");
        }
    }
}
