//! The string formats a CRD's schema may name (`format: email`), checked as the apiserver's
//! format registry checks them. A format it does not know is not checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;

/// Whether `s` is a valid `format`.
pub(super) fn valid(format: &str, s: &str) -> bool {
    match format {
        "email" => email(s),
        "hostname" => hostname(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "uuid" => uuid(s, None),
        "uuid3" => uuid(s, Some(b'3')),
        "uuid4" => uuid(s, Some(b'4')),
        "uuid5" => uuid(s, Some(b'5')),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date" => date(s),
        "date-time" | "datetime" => date_time(s),
        "duration" => duration(s),
        "hexcolor" => {
            let hex = s.strip_prefix('#').unwrap_or("");
            matches!(hex.len(), 3 | 6) && hex.bytes().all(|b| b.is_ascii_hexdigit())
        }
        _ => true,
    }
}

fn email(s: &str) -> bool {
    let Some((local, domain)) = s.rsplit_once('@') else {
        return false;
    };
    !local.is_empty() && !local.contains(char::is_whitespace) && domain.contains('.') && hostname(domain)
}

fn hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn uuid(s: &str, version: Option<u8>) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape = groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    shape && version.is_none_or(|v| groups[2].as_bytes()[0] == v)
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

fn date(s: &str) -> bool {
    let mut parts = s.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

fn date_time(s: &str) -> bool {
    let Some(split) = s.find(['T', 't', ' ']) else {
        return false;
    };
    let (day, rest) = (&s[..split], &s[split + 1..]);
    if !date(day) || rest.len() < 8 {
        return false;
    }
    let (clock, mut zone) = rest.split_at(8);
    let hms: Vec<Option<u32>> = clock.split(':').map(|p| digits(p, 2)).collect();
    let [Some(h), Some(m), Some(sec)] = hms[..] else {
        return false;
    };
    if h > 23 || m > 59 || sec > 60 {
        return false;
    }
    if let Some(frac) = zone.strip_prefix('.') {
        let end = frac.find(|c: char| !c.is_ascii_digit()).unwrap_or(frac.len());
        if end == 0 {
            return false;
        }
        zone = &frac[end..];
    }
    match zone {
        "Z" | "z" => true,
        _ => {
            let Some(offset) = zone.strip_prefix(['+', '-']) else {
                return false;
            };
            let hm: Vec<Option<u32>> = offset.split(':').map(|p| digits(p, 2)).collect();
            matches!(hm[..], [Some(h), Some(m)] if h < 24 && m < 60)
        }
    }
}

/// A Go duration (`1h30m`, `250ms`), or a number of units with days and weeks, as the
/// apiserver's `duration` format takes.
fn duration(s: &str) -> bool {
    let s = s.trim();
    if s == "0" {
        return true;
    }
    let mut rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number == 0 {
            return false;
        }
        rest = rest[number..].trim_start();
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let known = [
            "ns", "us", "µs", "ms", "s", "m", "h", "d", "w", "sec", "secs", "second", "seconds", "min",
            "mins", "minute", "minutes", "hour", "hours", "day", "days", "week", "weeks",
        ];
        if !known.contains(&rest[..unit].trim()) {
            return false;
        }
        rest = rest[unit..].trim_start();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats_are_checked_as_the_apiserver_checks_them() {
        let cases = [
            ("email", "a@example.com", true),
            ("email", "not-an-email", false),
            ("hostname", "web-1.example.com", true),
            ("hostname", "-bad", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "10.0.0.256", false),
            ("ipv6", "fd00::1", true),
            ("cidr", "10.0.0.0/24", true),
            ("cidr", "10.0.0.0/33", false),
            ("mac", "00:1a:2b:3c:4d:5e", true),
            ("mac", "00:1a:2b", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "!!", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T03:04:05.123+01:00", true),
            ("date-time", "2024-01-02", false),
            ("duration", "1h30m", true),
            ("duration", "3 days", true),
            ("duration", "soon", false),
            ("int32", "anything", true),
        ];
        for (format, s, ok) in cases {
            assert_eq!(valid(format, s), ok, "{format} {s:?}");
        }
    }
}
