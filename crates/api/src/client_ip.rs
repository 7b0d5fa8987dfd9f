//! The client address of a request, for the per-address rate limit of unauthenticated
//! requests: the TCP peer, or — only when the peer is a configured trusted proxy — the last
//! `X-Forwarded-For` hop that is not itself a trusted proxy.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;

/// An address range (`10.0.0.0/8`, `fd00::/8`) or a single address (`192.0.2.7`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

/// A trusted proxy entry that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an IP address or CIDR range (e.g. 10.0.0.0/8, 192.0.2.7, fd00::/8)")]
pub struct InvalidIpRange(String);

impl FromStr for IpRange {
    type Err = InvalidIpRange;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidIpRange(raw.to_owned());
        let (address, prefix) = match raw.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (raw.trim(), None),
        };
        let network: IpAddr = address.parse().map_err(|_| invalid())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(invalid)?,
            None => max,
        };
        Ok(Self { network, prefix })
    }
}

impl IpRange {
    /// Whether `ip` is in this range (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// Parses a comma- or space-separated list of trusted proxies.
pub fn parse_trusted_proxies(list: &str) -> Result<Vec<IpRange>, InvalidIpRange> {
    list.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// The client address: `peer` unless it is a trusted proxy, in which case `X-Forwarded-For`
/// is read from the right and the first address that is not a trusted proxy is the client. A
/// malformed header falls back to the peer (the proxy's own address).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpRange]) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|range| range.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let mut hops = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        let Ok(value) = value.to_str() else {
            return peer;
        };
        for hop in value.split(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => hops.push(canonical(ip)),
                Err(_) => return peer,
            }
        }
    }
    hops.into_iter()
        .rev()
        .find(|ip| !is_trusted(*ip))
        .unwrap_or(peer)
}

/// The client address of a request (see [`client_ip`]). Without connection info (a router
/// served without `into_make_service_with_connect_info`) every client shares `0.0.0.0`.
pub(crate) fn request_client_ip(
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
    trusted: &[IpRange],
) -> IpAddr {
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |info| info.0.ip());
    client_ip(peer, headers, trusted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_parse_and_match() {
        let range: IpRange = "10.0.0.0/8".parse().unwrap();
        assert!(range.contains(ip("10.1.2.3")));
        assert!(range.contains(ip("::ffff:10.1.2.3")));
        assert!(!range.contains(ip("11.0.0.1")));
        let single: IpRange = "192.0.2.7".parse().unwrap();
        assert!(single.contains(ip("192.0.2.7")));
        assert!(!single.contains(ip("192.0.2.8")));
        let v6: IpRange = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        let all: IpRange = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        for bad in ["10.0.0.0/33", "nope", "10.0.0/8", "::/129", ""] {
            assert!(bad.parse::<IpRange>().is_err(), "{bad}");
        }
        assert_eq!(
            parse_trusted_proxies("10.0.0.0/8, 127.0.0.1 ::1")
                .unwrap()
                .len(),
            3
        );
        assert!(parse_trusted_proxies("10.0.0.0/8,bad").is_err());
    }

    #[test]
    fn forwarded_for_is_honoured_only_behind_a_trusted_proxy() {
        let trusted = parse_trusted_proxies("10.0.0.0/8").unwrap();
        let xff = headers(&["203.0.113.9, 10.0.0.2"]);
        // Untrusted peer: the header is ignored (anyone can send it).
        assert_eq!(
            client_ip(ip("198.51.100.1"), &xff, &trusted),
            ip("198.51.100.1")
        );
        // Trusted peer: the rightmost untrusted hop.
        assert_eq!(client_ip(ip("10.0.0.1"), &xff, &trusted), ip("203.0.113.9"));
        // A client cannot hide behind a forged left part.
        let forged = headers(&["1.2.3.4", "203.0.113.9"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &forged, &trusted),
            ip("203.0.113.9")
        );
        // No header, or only proxies: the peer.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), &headers(&["10.0.0.3"]), &trusted),
            ip("10.0.0.1")
        );
        // Garbage: the peer.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &headers(&["not an ip"]), &trusted),
            ip("10.0.0.1")
        );
        // Nothing trusted: always the peer.
        assert_eq!(client_ip(ip("10.0.0.1"), &xff, &[]), ip("10.0.0.1"));
    }
}
