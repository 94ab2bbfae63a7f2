//! The ranges Services get their addresses from: `--service-cluster-ip-range` and
//! `--service-node-port-range`, parsed and checked as the apiserver checks them. What is
//! allocated from them, and how, is `services.rs`'s.

use std::net::IpAddr;
use std::time::Duration;

/// A range of addresses: a CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpRange {
    base: u128,
    /// How many addresses, at most 2^64 (a wider IPv6 range is used as its first 2^64).
    size: u128,
    v6: bool,
    pub(crate) text: String,
}

impl IpRange {
    /// Parses `10.0.0.0/24` or `fd00::/108`.
    pub fn parse(cidr: &str) -> Result<IpRange, String> {
        let (ip, bits) = cidr
            .split_once('/')
            .ok_or_else(|| format!("{cidr:?} is not a CIDR (address/prefix)"))?;
        let ip: IpAddr = ip.parse().map_err(|e| format!("{cidr:?}: {e}"))?;
        let bits: u32 = bits
            .parse()
            .map_err(|_| format!("{cidr:?}: the prefix is not a number"))?;
        let (value, width, v6) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32, false),
            IpAddr::V6(a) => (u128::from(a), 128, true),
        };
        if bits > width {
            return Err(format!("{cidr:?}: a prefix longer than the address"));
        }
        let host_bits = (width - bits).min(64);
        // At least 8 addresses: the network's own, the broadcast, the `kubernetes` Service's
        // and some to hand out.
        if host_bits < 3 {
            return Err(format!(
                "{cidr:?}: too small for Services (at most /{} )",
                width - 3
            ));
        }
        let mask = if width - bits >= 128 {
            0
        } else {
            !((1u128 << (width - bits)) - 1)
        };
        Ok(IpRange {
            base: value & mask,
            size: 1u128 << host_bits,
            v6,
            text: cidr.to_owned(),
        })
    }

    pub(crate) fn nth(&self, offset: u128) -> IpAddr {
        let v = self.base + offset;
        if self.v6 {
            IpAddr::V6(v.into())
        } else {
            IpAddr::V4((v as u32).into())
        }
    }

    /// The offset of `ip` in the range, if it is one the range hands out (not the network's
    /// own address, nor an IPv4 broadcast).
    pub(crate) fn offset(&self, ip: &str) -> Option<u128> {
        let ip: IpAddr = ip.parse().ok()?;
        let v = match (ip, self.v6) {
            (IpAddr::V4(a), false) => u128::from(u32::from(a)),
            (IpAddr::V6(a), true) => u128::from(a),
            _ => return None,
        };
        let offset = v.checked_sub(self.base)?;
        (offset >= 1 && offset < self.last()).then_some(offset)
    }

    /// One past the last offset handed out (an IPv4 range's broadcast address is not).
    pub(crate) fn last(&self) -> u128 {
        if self.v6 { self.size } else { self.size - 1 }
    }

    /// The address of the `kubernetes` Service: the first after the network's.
    pub fn first(&self) -> IpAddr {
        self.nth(1)
    }

    pub(crate) fn family(&self) -> &'static str {
        if self.v6 { "IPv6" } else { "IPv4" }
    }
}

/// The ranges Services are given addresses from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRanges {
    /// `--service-cluster-ip-range`.
    pub ips: IpRange,
    /// `--service-node-port-range`, inclusive.
    pub node_ports: (u16, u16),
    /// How often the repair loop looks for claims no Service holds (30 s).
    pub repair_every: Duration,
}

impl Default for ServiceRanges {
    /// kube-apiserver's defaults: `10.0.0.0/24` and `30000-32767`.
    fn default() -> Self {
        ServiceRanges {
            ips: IpRange::parse("10.0.0.0/24").expect("a valid CIDR"),
            node_ports: (30000, 32767),
            repair_every: Duration::from_secs(30),
        }
    }
}

/// Parses `--service-node-port-range` (`30000-32767`, or `30000+767`).
pub fn parse_port_range(text: &str) -> Result<(u16, u16), String> {
    let bad = || format!("{text:?} is not a port range (first-last, or base+size)");
    let (a, b, plus) = match text.split_once('-') {
        Some((a, b)) => (a, b, false),
        None => {
            let (a, b) = text.split_once('+').ok_or_else(bad)?;
            (a, b, true)
        }
    };
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    let last = if plus {
        a.checked_add(b).ok_or_else(bad)?
    } else {
        b
    };
    if a == 0 || last < a {
        return Err(bad());
    }
    Ok((a, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_the_apiservers_flags() {
        let r = IpRange::parse("10.96.0.0/12").unwrap();
        assert_eq!(r.first().to_string(), "10.96.0.1");
        assert_eq!(r.offset("10.96.0.10"), Some(10));
        assert_eq!(r.offset("10.96.0.0"), None, "the network's own address");
        assert_eq!(r.offset("10.111.255.255"), None, "the broadcast address");
        assert_eq!(r.offset("10.112.0.1"), None);
        assert_eq!(r.offset("fd00::1"), None);
        assert!(IpRange::parse("10.0.0.0/30").is_err());
        assert!(IpRange::parse("10.0.0.0").is_err());
        assert!(IpRange::parse("10.0.0.0/33").is_err());
        let v6 = IpRange::parse("fd00::/108").unwrap();
        assert_eq!(v6.first().to_string(), "fd00::1");
        assert_eq!(parse_port_range("30000-32767"), Ok((30000, 32767)));
        assert_eq!(parse_port_range("30000+767"), Ok((30000, 30767)));
        assert!(parse_port_range("32767-30000").is_err());
        assert!(parse_port_range("0-10").is_err());
        assert!(parse_port_range("a-b").is_err());
    }
}
