//! Classification of IP addresses the browser must not reach by default — also the rule for
//! webhook targets, at registration (api) and at delivery (worker): one table for every path.
//!
//! Every address is sorted into at most one [`AddressRange`]. IPv6 forms that carry an IPv4
//! address (IPv4-mapped, SIIT-translated, NAT64 well-known prefix, 6to4) are classified by the
//! embedded IPv4 address, so `::ffff:169.254.169.254` is cloud metadata just like the plain form.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not a public unicast destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressRange {
    /// 127.0.0.0/8, ::1. The only range that the operator's `--allow-loopback` opens (the
    /// browser's `EgressSettings::allow_loopback`, and webhook targets).
    Loopback,
    /// Cloud instance metadata endpoints (169.254.169.254, fd00:ec2::254, 100.100.100.200,
    /// 192.0.0.192, 168.63.129.16 and the like).
    CloudMetadata,
    /// RFC 1918 private networks: 10/8, 172.16/12, 192.168/16.
    Private,
    /// RFC 6598 carrier-grade NAT space 100.64/10.
    SharedAddressSpace,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// fc00::/7 unique local addresses (and the deprecated site-local fec0::/10).
    UniqueLocal,
    /// 0.0.0.0/8 and ::. Connecting to 0.0.0.0 reaches the local host on Linux.
    Unspecified,
    /// 224/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18/15 network benchmarking.
    Benchmarking,
    /// Reserved or special-purpose space: 240/4, 192.0.0/24, 192.88.99/24, the IETF protocol
    /// assignments 2001::/23 (Teredo included), 100::/64 discard, 64:ff9b:1::/48 local NAT64,
    /// deprecated IPv4-compatible ::/96.
    Reserved,
    /// A network the task's `blocked_networks` list (operator configuration) closes; never
    /// returned by [`classify`].
    BlockedNetwork,
}

impl AddressRange {
    /// Short human description used in denial messages.
    pub fn describe(self) -> &'static str {
        match self {
            AddressRange::Loopback => "a loopback address",
            AddressRange::CloudMetadata => "a cloud metadata endpoint",
            AddressRange::Private => "a private network address",
            AddressRange::SharedAddressSpace => "a carrier-grade NAT address",
            AddressRange::LinkLocal => "a link-local address",
            AddressRange::UniqueLocal => "a unique local IPv6 address",
            AddressRange::Unspecified => "the unspecified address",
            AddressRange::Multicast => "a multicast address",
            AddressRange::Broadcast => "the broadcast address",
            AddressRange::Documentation => "a documentation address",
            AddressRange::Benchmarking => "a benchmarking address",
            AddressRange::Reserved => "a reserved address",
            AddressRange::BlockedNetwork => "in a network listed in blocked_networks",
        }
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// IPv4 metadata endpoints outside link-local space (link-local is blocked as a whole anyway,
/// 169.254.169.254 and 169.254.170.2 are named here to get the more precise reason).
const V4_METADATA: [Ipv4Addr; 5] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud (legacy)
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer / host agent (a public address!)
];

/// IPv6 metadata endpoints.
const V6_METADATA: [Ipv6Addr; 1] = [
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254), // AWS IMDS over IPv6
];

const fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// (network, prefix length, range); first match wins, so more specific entries come first.
const V4_TABLE: &[(u32, u8, AddressRange)] = &[
    (v4(0, 0, 0, 0), 8, AddressRange::Unspecified),
    (v4(10, 0, 0, 0), 8, AddressRange::Private),
    (v4(100, 64, 0, 0), 10, AddressRange::SharedAddressSpace),
    (v4(127, 0, 0, 0), 8, AddressRange::Loopback),
    (v4(169, 254, 0, 0), 16, AddressRange::LinkLocal),
    (v4(172, 16, 0, 0), 12, AddressRange::Private),
    (v4(192, 0, 0, 0), 24, AddressRange::Reserved),
    (v4(192, 0, 2, 0), 24, AddressRange::Documentation),
    (v4(192, 88, 99, 0), 24, AddressRange::Reserved),
    (v4(192, 168, 0, 0), 16, AddressRange::Private),
    (v4(198, 18, 0, 0), 15, AddressRange::Benchmarking),
    (v4(198, 51, 100, 0), 24, AddressRange::Documentation),
    (v4(203, 0, 113, 0), 24, AddressRange::Documentation),
    (v4(224, 0, 0, 0), 4, AddressRange::Multicast),
    (v4(255, 255, 255, 255), 32, AddressRange::Broadcast),
    (v4(240, 0, 0, 0), 4, AddressRange::Reserved),
];

/// Classifies an IPv4 address; `None` means public unicast.
pub fn classify_v4(ip: Ipv4Addr) -> Option<AddressRange> {
    if V4_METADATA.contains(&ip) {
        return Some(AddressRange::CloudMetadata);
    }
    let bits = u32::from(ip);
    V4_TABLE.iter().find_map(|&(net, len, range)| {
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        (bits & mask == net).then_some(range)
    })
}

const fn seg_prefix(segments: [u16; 8]) -> u128 {
    let mut out: u128 = 0;
    let mut i = 0;
    while i < 8 {
        out = (out << 16) | segments[i] as u128;
        i += 1;
    }
    out
}

const V6_TABLE: &[(u128, u8, AddressRange)] = &[
    (
        seg_prefix([0x0100, 0, 0, 0, 0, 0, 0, 0]),
        64,
        AddressRange::Reserved,
    ),
    (
        seg_prefix([0x0064, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        AddressRange::Reserved,
    ),
    (
        seg_prefix([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0]),
        32,
        AddressRange::Documentation,
    ),
    (
        seg_prefix([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        23,
        AddressRange::Reserved,
    ),
    (
        seg_prefix([0x3fff, 0, 0, 0, 0, 0, 0, 0]),
        20,
        AddressRange::Documentation,
    ),
    (
        seg_prefix([0xfc00, 0, 0, 0, 0, 0, 0, 0]),
        7,
        AddressRange::UniqueLocal,
    ),
    (
        seg_prefix([0xfe80, 0, 0, 0, 0, 0, 0, 0]),
        10,
        AddressRange::LinkLocal,
    ),
    (
        seg_prefix([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
        10,
        AddressRange::UniqueLocal,
    ),
    (
        seg_prefix([0xff00, 0, 0, 0, 0, 0, 0, 0]),
        8,
        AddressRange::Multicast,
    ),
];

/// The IPv4 address an IPv6 address carries in a form that routes to it, if any:
/// IPv4-mapped `::ffff:a.b.c.d`, SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and 6to4
/// `2002:aabb:ccdd::/48`.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Classifies an IPv6 address; `None` means public unicast.
pub fn classify_v6(ip: Ipv6Addr) -> Option<AddressRange> {
    if V6_METADATA.contains(&ip) {
        return Some(AddressRange::CloudMetadata);
    }
    if ip.is_unspecified() {
        return Some(AddressRange::Unspecified);
    }
    if ip.is_loopback() {
        return Some(AddressRange::Loopback);
    }
    if let Some(inner) = embedded_v4(ip) {
        return classify_v4(inner);
    }
    let bits = u128::from(ip);
    // Deprecated IPv4-compatible addresses ::a.b.c.d (:: and ::1 handled above).
    if bits >> 32 == 0 {
        return Some(AddressRange::Reserved);
    }
    V6_TABLE.iter().find_map(|&(net, len, range)| {
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - len)
        };
        (bits & mask == net).then_some(range)
    })
}

/// Classifies any IP address; `None` means public unicast.
pub fn classify(ip: IpAddr) -> Option<AddressRange> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// The range of the first of `addresses` (the answers of one host's lookup) that may not be
/// reached, loopback counting only when `allow_loopback` is off. Every address must pass: a
/// name that resolves to one private address is refused. Webhook targets use this at
/// registration and at every delivery.
pub fn first_refused(addresses: &[IpAddr], allow_loopback: bool) -> Option<AddressRange> {
    addresses.iter().find_map(|ip| match classify(*ip) {
        Some(AddressRange::Loopback) if allow_loopback => None,
        range => range,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Option<AddressRange> {
        classify(s.parse().expect("test address parses"))
    }

    #[test]
    fn first_refused_checks_every_address() {
        let ips =
            |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|s| s.parse().unwrap()).collect() };
        assert_eq!(first_refused(&ips(&["1.1.1.1", "8.8.8.8"]), false), None);
        assert_eq!(
            first_refused(&ips(&["1.1.1.1", "169.254.169.254"]), true),
            Some(AddressRange::CloudMetadata)
        );
        assert_eq!(
            first_refused(&ips(&["127.0.0.1"]), false),
            Some(AddressRange::Loopback)
        );
        assert_eq!(first_refused(&ips(&["127.0.0.1", "::1"]), true), None);
        assert_eq!(
            first_refused(&ips(&["::1", "10.0.0.1"]), true),
            Some(AddressRange::Private)
        );
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "169.253.255.255",
            "169.255.0.0",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(c(ip), None, "{ip} should be public");
        }
    }

    #[test]
    fn special_ipv4_ranges() {
        use AddressRange::*;
        let cases = [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.255", SharedAddressSpace),
            ("100.100.100.200", CloudMetadata),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", CloudMetadata),
            ("169.254.170.2", CloudMetadata),
            ("168.63.129.16", CloudMetadata),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.0.0.1", Reserved),
            ("192.0.0.192", CloudMetadata),
            ("192.0.2.1", Documentation),
            ("192.88.99.1", Reserved),
            ("192.168.1.1", Private),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("198.51.100.7", Documentation),
            ("203.0.113.9", Documentation),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.254", Reserved),
            ("255.255.255.255", Broadcast),
        ];
        for (ip, want) in cases {
            assert_eq!(c(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn special_ipv6_ranges() {
        use AddressRange::*;
        let cases = [
            ("::", Unspecified),
            ("::1", Loopback),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", UniqueLocal),
            ("fc00::1", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("fd00:ec2::254", CloudMetadata),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001::1", Reserved),      // Teredo
            ("2001:1ff::1", Reserved),  // still in 2001::/23
            ("100::1", Reserved),       // discard-only
            ("64:ff9b:1::a", Reserved), // local-use NAT64
            ("::7f00:1", Reserved),     // IPv4-compatible ::127.0.0.1
            ("::a9fe:a9fe", Reserved),  // IPv4-compatible ::169.254.169.254
        ];
        for (ip, want) in cases {
            assert_eq!(c(ip), Some(want), "{ip}");
        }
        // 2001:200::/23 is outside the IETF block.
        assert_eq!(c("2001:200::1"), None);
    }

    #[test]
    fn embedded_ipv4_is_classified_by_the_inner_address() {
        use AddressRange::*;
        let cases = [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:169.254.169.254", CloudMetadata),
            ("::ffff:a9fe:a9fe", CloudMetadata),
            ("::ffff:10.0.0.1", Private),
            ("::ffff:0:10.1.2.3", Private),              // SIIT
            ("64:ff9b::169.254.169.254", CloudMetadata), // NAT64
            ("64:ff9b::c0a8:101", Private),
            ("2002:a9fe:a9fe::", CloudMetadata), // 6to4
            ("2002:7f00:1::1", Loopback),
            ("2002:c0a8:0101::1", Private),
            ("::ffff:0.0.0.0", Unspecified),
        ];
        for (ip, want) in cases {
            assert_eq!(c(ip), Some(want), "{ip}");
        }
    }
}
