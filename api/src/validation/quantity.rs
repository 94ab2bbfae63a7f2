//! Resource quantities (`500m`, `1.5Gi`, `2e3`), as apimachinery's `resource.Quantity` reads
//! them: a body with a quantity that is none does not even decode (the apiserver answers 400
//! with the parser's words), and a quantity's canonical form is how error messages show it
//! (`1500m`, `1k` for 1000, `1536Mi`).

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// The parser's error for a string of the wrong shape.
pub(crate) const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The parser's error for digits it cannot hold.
const NUMERIC: &str = "unable to parse numeric part of quantity";
/// The parser's error for a suffix that is none of the known ones.
const SUFFIX: &str = "unable to parse quantity's suffix";

/// How a quantity was written, which its canonical form keeps.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Format {
    /// `m`, `k`, `M`, …
    DecimalSi,
    /// `Ki`, `Mi`, `Gi`, …
    BinarySi,
    /// `e3`, `E-6`.
    DecimalExponent,
}

/// A parsed quantity: `mantissa × 10^scale`, no finer than a nano (as the apiserver rounds).
#[derive(Copy, Clone, Debug)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    format: Format,
}

/// The decimal suffixes and their powers of ten.
const DECIMAL: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// The binary suffixes, by their power of 1024.
const BINARY: &[&str] = &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// Splits a quantity into its sign, integer digits, fraction digits and suffix, as
/// apimachinery's parser does (leading zeros dropped; `1.` and `.5` allowed).
fn split(s: &str) -> Result<(bool, &str, &str, &str), &'static str> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok((positive, "0", "", ""));
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    if pos >= end {
        return Ok((positive, num, "", ""));
    }
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let from = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[from..pos];
        if pos >= end {
            return Ok((positive, num, denom, ""));
        }
    }
    let suffix = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        Ok((positive, num, denom, &s[suffix..]))
    } else {
        Err(FORMAT_WRONG)
    }
}

/// A suffix's base-10 exponent and format; binary suffixes give their power of 1024 as a
/// negative marker through `Format::BinarySi`.
fn interpret(suffix: &str) -> Option<(Format, i32)> {
    if let Some((_, e)) = DECIMAL.iter().find(|(s, _)| *s == suffix) {
        return Some((Format::DecimalSi, *e));
    }
    if let Some(k) = BINARY.iter().skip(1).position(|s| *s == suffix) {
        return Some((Format::BinarySi, (k as i32 + 1) * 10));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    let exponent = rest.parse::<i32>().ok()?;
    Some((Format::DecimalExponent, exponent))
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// Parses `s` as the apiserver decodes a quantity: the parser's message when it is none.
pub fn parse(s: &str) -> Result<Quantity, &'static str> {
    if s.is_empty() {
        return Err(FORMAT_WRONG);
    }
    let (positive, num, denom, suffix) = split(s)?;
    let (format, exponent) = interpret(suffix).ok_or(SUFFIX)?;
    let digits = format!("{num}{denom}");
    let mut mantissa: i128 = digits.parse().map_err(|_| NUMERIC)?;
    let fraction = i32::try_from(denom.len()).map_err(|_| NUMERIC)?;
    let mut scale = -fraction;
    match format {
        Format::BinarySi => mantissa = mantissa.checked_mul(1i128 << exponent).ok_or(NUMERIC)?,
        _ => scale = scale.checked_add(exponent).ok_or(NUMERIC)?,
    }
    // Finer than a nano rounds up, away from zero: asking for some is getting some.
    if scale < -9 {
        let divisor = pow10((-9 - scale) as u32).ok_or(NUMERIC)?;
        mantissa = mantissa / divisor + i128::from(mantissa % divisor != 0);
        scale = -9;
    }
    if !positive {
        mantissa = -mantissa;
    }
    Ok(Quantity {
        mantissa,
        scale,
        format,
    })
}

/// A JSON value as a quantity: a string (spaces around it trimmed, as the decoder trims them)
/// or a number; `None` for a null, and for other types, which the value-type checks refuse.
pub(crate) fn of(v: &Value) -> Option<Result<Quantity, &'static str>> {
    match v {
        Value::String(s) => Some(parse(s.trim())),
        Value::Number(n) => Some(parse(&n.to_string())),
        _ => None,
    }
}

/// Decodes every quantity of the maps of quantities at `paths` in `object` (dotted; `[]`
/// steps into each element of a list: `spec.containers[].resources.limits`): the parser's
/// message for the first that is none.
pub(crate) fn decode_at(object: &Map<String, Value>, paths: &[&str]) -> Result<(), String> {
    fn walk<'a>(v: &'a Value, steps: &[&str], out: &mut Vec<&'a Map<String, Value>>) {
        let Some((step, rest)) = steps.split_first() else {
            if let Value::Object(m) = v {
                out.push(m);
            }
            return;
        };
        let (field, each) = match step.strip_suffix("[]") {
            Some(f) => (f, true),
            None => (*step, false),
        };
        match (v.get(field), each) {
            (Some(Value::Array(items)), true) => items.iter().for_each(|i| walk(i, rest, out)),
            (Some(next), false) => walk(next, rest, out),
            _ => {}
        }
    }
    let root = Value::Object(object.clone());
    for path in paths {
        let steps: Vec<&str> = path.split('.').collect();
        let mut maps = Vec::new();
        walk(&root, &steps, &mut maps);
        for amount in maps.iter().flat_map(|m| m.values()) {
            if let Some(Err(why)) = of(amount) {
                return Err(why.to_owned());
            }
        }
    }
    Ok(())
}

impl Quantity {
    /// Whether the quantity is below zero.
    pub(crate) fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// The value as `(mantissa, scale)` at `scale` (not above the quantity's own).
    fn at_scale(&self, scale: i32) -> Option<i128> {
        self.mantissa.checked_mul(pow10((self.scale - scale) as u32)?)
    }

    /// The whole value, if it is one.
    fn integer(&self) -> Option<i128> {
        if self.scale >= 0 {
            self.at_scale(0)
        } else {
            let d = pow10((-self.scale) as u32)?;
            (self.mantissa % d == 0).then_some(self.mantissa / d)
        }
    }

    /// The canonical form, as `Quantity.String()` writes it.
    pub(crate) fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let binary = match self.format {
            Format::BinarySi => self.integer().filter(|v| v.abs() >= 1024),
            _ => None,
        };
        if let Some(mut v) = binary {
            let mut k = 0;
            while k < BINARY.len() - 1 && v % 1024 == 0 {
                v /= 1024;
                k += 1;
            }
            return format!("{v}{}", BINARY[k]);
        }
        // Trailing zeros move into the exponent, which is then a multiple of 3 (where the
        // mantissa has room for the zeros that takes).
        let (mut m, mut e) = (self.mantissa, i64::from(self.scale));
        while m % 10 == 0 {
            m /= 10;
            e += 1;
        }
        let step = match e.rem_euclid(3) {
            1 => Some((10, 1)),
            2 => Some((100, 2)),
            _ => None,
        };
        if let Some((by, less)) = step
            && let Some(more) = m.checked_mul(by)
        {
            (m, e) = (more, e - less);
        }
        let suffix = match self.format {
            Format::DecimalExponent if e == 0 => String::new(),
            Format::DecimalExponent => format!("e{e}"),
            _ => DECIMAL
                .iter()
                .find(|(_, x)| i64::from(*x) == e)
                .map_or_else(|| format!("e{e}"), |(s, _)| (*s).to_owned()),
        };
        format!("{m}{suffix}")
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        let scale = self.scale.min(other.scale);
        match (self.at_scale(scale), other.at_scale(scale)) {
            (Some(a), Some(b)) => Some(a.cmp(&b)),
            // Beyond 38 digits: near enough.
            _ => {
                let approx = |q: &Quantity| q.mantissa as f64 * 10f64.powi(q.scale);
                approx(self).partial_cmp(&approx(other))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsers_errors() {
        for (s, why) in [
            ("lots", FORMAT_WRONG),
            ("", FORMAT_WRONG),
            ("1Gb", FORMAT_WRONG),
            ("1 ", FORMAT_WRONG),
            ("32MMi", SUFFIX),
            ("1e", SUFFIX),
            ("1Kb", FORMAT_WRONG),
        ] {
            assert_eq!(parse(s).unwrap_err(), why, "{s:?}");
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        for s in [
            "1.5e-2147483648",
            "1e2147483647",
            "9e-2147483648",
            "1Ei",
            &"9".repeat(60),
            "-0.000000000001",
        ] {
            if let Ok(q) = parse(s) {
                let _ = q.canonical();
                let _ = q.partial_cmp(&parse("1").unwrap());
            }
        }
    }

    #[test]
    fn canonical_forms() {
        for (s, canonical) in [
            ("0", "0"),
            ("000", "0"),
            ("2", "2"),
            ("1000", "1k"),
            ("1500m", "1500m"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            (".5", "500m"),
            ("100m", "100m"),
            ("1Gi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("512Mi", "512Mi"),
            ("100Ki", "100Ki"),
            ("512", "512"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("-1", "-1"),
            ("-100m", "-100m"),
            ("+2k", "2k"),
            ("1.5k", "1500"),
            ("0.1n", "1n"),
            ("12345678901234567890", "12345678901234567890"),
            ("10e2147483647", "100e2147483646"),
        ] {
            assert_eq!(parse(s).unwrap().canonical(), canonical, "{s}");
        }
    }

    #[test]
    fn quantities_are_found_where_declared() {
        let pod = serde_json::json!({"spec": {"containers": [
            {"resources": {"limits": {"cpu": "1", "memory": 512}}},
            {"resources": {"requests": {"cpu": " 2 ", "memory": "1MMi"}}}]}});
        let pod = pod.as_object().unwrap();
        assert_eq!(decode_at(pod, &["spec.containers[].resources.limits"]), Ok(()));
        assert_eq!(
            decode_at(pod, &["spec.containers[].resources.requests"]).unwrap_err(),
            SUFFIX
        );
        assert_eq!(decode_at(pod, &["spec.overhead"]), Ok(()));
    }

    #[test]
    fn comparisons_across_suffixes() {
        let q = |s| parse(s).unwrap();
        assert!(q("1500m") > q("1"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("0.5"), q("500m"));
        assert!(q("-1").is_negative());
        assert!(!q("0").is_negative());
    }
}
