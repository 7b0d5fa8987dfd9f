//! The egress policy: which URLs a task's browser may request.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use browserd_domains::{
    DomainList, DomainRules, Forbidden, PatternError, UrlTarget, is_web_scheme,
};
use url::{Host, Url};

use super::addr::{AddressRange, classify};
use super::resolve::{HostResolver, ResolveError};

/// Default per-lookup DNS timeout.
pub const DEFAULT_DNS_TIMEOUT: Duration = Duration::from_secs(3);

/// Host names that are cloud metadata services whatever they resolve to.
const METADATA_HOST_NAMES: [&str; 6] = [
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
];

/// URL longer than this is shortened in denial messages and logs.
const MAX_URL_IN_MESSAGE: usize = 300;

/// The egress settings of a task, as configured (browser-use's `BrowserProfile` names).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSettings {
    /// If non-empty, only URLs matching one of these patterns may be requested; it alone decides
    /// (`prohibited_domains` is then ignored), like browser-use.
    pub allowed_domains: Vec<String>,
    /// URLs matching one of these patterns are blocked (used when `allowed_domains` is empty).
    pub prohibited_domains: Vec<String>,
    /// Block every URL whose host is an IP address literal (browser-use's `block_ip_addresses`).
    pub block_ip_addresses: bool,
    /// Allow loopback destinations (127.0.0.0/8, ::1, `localhost`) for local use and tests.
    /// Every other private, link-local, metadata or reserved destination stays blocked.
    pub allow_loopback: bool,
    /// Timeout of one DNS lookup made by the check, in milliseconds.
    pub dns_timeout_ms: u64,
    /// Further networks that are blocked, in CIDR notation (`10.20.0.0/16`, `127.0.0.3/32`,
    /// `fd00::/8`): checked after the built-in rules, so they also close parts of loopback
    /// that `allow_loopback` opened.
    pub blocked_networks: Vec<String>,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            allowed_domains: Vec::new(),
            prohibited_domains: Vec::new(),
            block_ip_addresses: false,
            allow_loopback: false,
            dns_timeout_ms: u64::try_from(DEFAULT_DNS_TIMEOUT.as_millis()).unwrap_or(3000),
            blocked_networks: Vec::new(),
        }
    }
}

/// Invalid egress settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressConfigError {
    /// A pattern in one of the domain lists is invalid.
    #[error("{list}: {error}")]
    InvalidPattern {
        /// `allowed_domains` or `prohibited_domains`.
        list: &'static str,
        /// What is wrong.
        error: PatternError,
    },
    /// The DNS timeout is zero or above one minute.
    #[error("dns_timeout_ms must be between 1 and 60000, got {0}")]
    InvalidDnsTimeout(u64),
    /// An entry of `blocked_networks` is not `address/prefix`.
    #[error("blocked_networks[{index}]: {problem}")]
    InvalidNetwork {
        /// Position in the list.
        index: usize,
        /// What is wrong.
        problem: String,
    },
}

/// One network of [`EgressSettings::blocked_networks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `address/prefix` (a bare address is a single host); host bits must be zero.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address with an optional /prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {max}"))?,
        };
        let net = Self { addr, prefix };
        if net.mask(addr) != addr {
            return Err(format!("{text:?}: host bits are set after /{prefix}"));
        }
        Ok(net)
    }

    fn mask(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((bits & mask).into())
            }
        }
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && self.mask(ip) == self.addr
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a URL is denied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DenyReason {
    /// The URL could not be parsed.
    InvalidUrl {
        /// Parser message.
        detail: String,
    },
    /// A scheme the browser may never load (file:, chrome:, javascript:, …).
    UnsupportedScheme {
        /// The scheme.
        scheme: String,
    },
    /// data: and blob: URLs are refused while domain rules are configured (browser-use).
    SchemeNotAllowedWithDomainRules {
        /// The scheme.
        scheme: String,
    },
    /// The URL has no host.
    MissingHost,
    /// `block_ip_addresses` is on and the host is an IP address.
    IpAddressHost {
        /// The host as the browser sees it.
        host: String,
    },
    /// The host is an IP address in a blocked range.
    BlockedAddress {
        /// The address.
        ip: IpAddr,
        /// Its range.
        range: AddressRange,
    },
    /// The host name itself is a blocked destination (`localhost`, metadata names).
    BlockedHostName {
        /// The host.
        host: String,
        /// What it stands for.
        range: AddressRange,
    },
    /// The host name resolves to a blocked address.
    ResolvesToBlockedAddress {
        /// The host.
        host: String,
        /// The offending address.
        ip: IpAddr,
        /// Its range.
        range: AddressRange,
    },
    /// The host could not be resolved; the request is refused (fail closed).
    ResolutionFailed {
        /// The resolver's error.
        detail: String,
    },
    /// `allowed_domains` is set and no pattern matches.
    NotInAllowedDomains {
        /// The host.
        host: String,
    },
    /// A `prohibited_domains` pattern matches.
    ProhibitedDomain {
        /// The host.
        host: String,
        /// The matching pattern.
        pattern: String,
    },
    /// The check itself failed (timeout, internal error); the request is refused.
    CheckFailed {
        /// What happened.
        detail: String,
    },
    /// The browser context was opened ahead of its task and no task's policy is bound to it
    /// yet ([`PolicySlot`]): nothing may leave it.
    Unbound,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::InvalidUrl { detail } => write!(f, "the URL is invalid ({detail})"),
            DenyReason::UnsupportedScheme { scheme } => {
                write!(f, "the {scheme}: scheme is not allowed")
            }
            DenyReason::SchemeNotAllowedWithDomainRules { scheme } => write!(
                f,
                "{scheme}: URLs are not allowed while allowed_domains/prohibited_domains are set"
            ),
            DenyReason::MissingHost => f.write_str("the URL has no host"),
            DenyReason::IpAddressHost { host } => write!(
                f,
                "the host {host} is an IP address and block_ip_addresses is on"
            ),
            DenyReason::BlockedAddress { ip, range } => write!(f, "{ip} is {range}"),
            DenyReason::BlockedHostName { host, range } => write!(f, "{host} is {range}"),
            DenyReason::ResolvesToBlockedAddress { host, ip, range } => {
                write!(f, "{host} resolves to {ip}, which is {range}")
            }
            DenyReason::ResolutionFailed { detail } => {
                write!(f, "{detail}; unresolvable hosts are refused")
            }
            DenyReason::NotInAllowedDomains { host } => {
                write!(f, "the host {host} is not in allowed_domains")
            }
            DenyReason::ProhibitedDomain { host, pattern } => write!(
                f,
                "the host {host} matches the prohibited_domains pattern {pattern:?}"
            ),
            DenyReason::CheckFailed { detail } => {
                write!(
                    f,
                    "the egress check failed ({detail}), so the request is refused"
                )
            }
            DenyReason::Unbound => {
                f.write_str("the browser context is not bound to a task's policy yet")
            }
        }
    }
}

/// A URL the egress policy refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("blocked by the egress policy: {url}: {reason}")]
pub struct EgressDenied {
    /// The URL (shortened to a few hundred characters).
    pub url: String,
    /// Why.
    pub reason: DenyReason,
}

impl EgressDenied {
    pub(crate) fn new(url: &str, reason: DenyReason) -> Self {
        Self {
            url: shorten_url(url),
            reason,
        }
    }
}

pub(crate) fn shorten_url(url: &str) -> String {
    if url.len() <= MAX_URL_IN_MESSAGE {
        return url.to_string();
    }
    let mut cut = MAX_URL_IN_MESSAGE;
    while !url.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &url[..cut])
}

/// The policy of one browser context's guard and proxy listener, set once: at the context's
/// opening for a task, or — for a context opened ahead of its task (the pool's spare) — when
/// the task leases it. Until then every request is refused ([`DenyReason::Unbound`]); once set
/// it never changes, so a context serves one task's policy for its whole life.
#[derive(Debug, Default)]
pub struct PolicySlot(std::sync::OnceLock<Arc<EgressPolicy>>);

impl PolicySlot {
    /// A slot holding `policy` from the start.
    pub fn bound(policy: Arc<EgressPolicy>) -> Self {
        Self(std::sync::OnceLock::from(policy))
    }

    /// An empty slot: everything is refused until [`PolicySlot::bind`].
    pub fn unbound() -> Self {
        Self::default()
    }

    /// Sets the policy; false if one was already set (it is kept).
    pub fn bind(&self, policy: Arc<EgressPolicy>) -> bool {
        self.0.set(policy).is_ok()
    }

    /// The policy, if bound.
    pub fn get(&self) -> Option<&Arc<EgressPolicy>> {
        self.0.get()
    }

    /// The policy, or the refusal of `url` when none is bound yet.
    pub fn for_url(&self, url: &str) -> Result<&Arc<EgressPolicy>, EgressDenied> {
        self.get()
            .ok_or_else(|| EgressDenied::new(url, DenyReason::Unbound))
    }
}

/// A validated egress policy. Cheap to share behind an [`Arc`].
#[derive(Debug)]
pub struct EgressPolicy {
    settings: EgressSettings,
    rules: DomainRules,
    blocked_networks: Vec<Network>,
    resolver: Arc<HostResolver>,
}

impl EgressPolicy {
    /// Validates the settings; uses the system resolver.
    pub fn new(settings: EgressSettings) -> Result<Self, EgressConfigError> {
        if settings.dns_timeout_ms == 0 || settings.dns_timeout_ms > 60_000 {
            return Err(EgressConfigError::InvalidDnsTimeout(
                settings.dns_timeout_ms,
            ));
        }
        let list = |list: &'static str, items: &[String]| {
            DomainList::parse(items).map_err(|e| EgressConfigError::InvalidPattern {
                list,
                error: e.error,
            })
        };
        let rules = DomainRules::new(
            list("allowed_domains", &settings.allowed_domains)?,
            list("prohibited_domains", &settings.prohibited_domains)?,
        );
        let blocked_networks = settings
            .blocked_networks
            .iter()
            .enumerate()
            .map(|(index, text)| {
                Network::parse(text)
                    .map_err(|problem| EgressConfigError::InvalidNetwork { index, problem })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let resolver = Arc::new(HostResolver::system(Duration::from_millis(
            settings.dns_timeout_ms,
        )));
        Ok(Self {
            settings,
            rules,
            blocked_networks,
            resolver,
        })
    }

    /// Shares a resolver (the pool's: the CDP guard and the egress proxy then resolve alike).
    pub fn with_shared_resolver(mut self, resolver: Arc<HostResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Replaces the resolver (to add host overrides that mirror `--host-resolver-rules`).
    pub fn with_resolver(mut self, resolver: HostResolver) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// The settings this policy was built from.
    pub fn settings(&self) -> &EgressSettings {
        &self.settings
    }

    /// The resolver used by [`check_url_resolved`](Self::check_url_resolved).
    pub fn resolver(&self) -> &HostResolver {
        &self.resolver
    }

    fn has_domain_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Parses and checks a URL string (see [`check_url`](Self::check_url)).
    pub fn check_str(&self, url: &str) -> Result<Url, EgressDenied> {
        let parsed = Url::parse(url).map_err(|e| {
            EgressDenied::new(
                url,
                DenyReason::InvalidUrl {
                    detail: e.to_string(),
                },
            )
        })?;
        self.check_url(&parsed)?;
        Ok(parsed)
    }

    /// The static part of the check: scheme, IP literal, special host names and domain rules.
    /// No DNS; use [`check_url_resolved`](Self::check_url_resolved) before letting a request out.
    pub fn check_url(&self, url: &Url) -> Result<(), EgressDenied> {
        let deny = |reason| Err(EgressDenied::new(url.as_str(), reason));
        let scheme = url.scheme();
        if is_internal_page(url) {
            return Ok(());
        }
        match scheme {
            "data" | "blob" if self.has_domain_rules() => {
                return deny(DenyReason::SchemeNotAllowedWithDomainRules {
                    scheme: scheme.to_string(),
                });
            }
            "data" | "blob" => return Ok(()),
            s if is_web_scheme(s) => {}
            _ => {
                return deny(DenyReason::UnsupportedScheme {
                    scheme: scheme.to_string(),
                });
            }
        }
        let Some(target) = UrlTarget::new(url) else {
            return deny(DenyReason::MissingHost);
        };
        self.check_host(url, &target)?;
        let host_text = target.host().to_string();
        match self.rules.check(&target) {
            Ok(()) => Ok(()),
            Err(Forbidden::NotInAllowedDomains) => {
                deny(DenyReason::NotInAllowedDomains { host: host_text })
            }
            Err(Forbidden::ProhibitedDomain { pattern }) => deny(DenyReason::ProhibitedDomain {
                host: host_text,
                pattern: pattern.as_str().to_string(),
            }),
        }
    }

    /// The host rules of a web URL: IP literals (`block_ip_addresses`, blocked ranges) and
    /// special names (`localhost`, metadata names).
    fn check_host(&self, url: &Url, target: &UrlTarget<'_>) -> Result<(), EgressDenied> {
        let deny = |reason| Err(EgressDenied::new(url.as_str(), reason));
        let host_text = target.host().to_string();
        let literal_ip = match url.host() {
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        if let Some(ip) = literal_ip {
            if self.settings.block_ip_addresses {
                return deny(DenyReason::IpAddressHost { host: host_text });
            }
            if let Some(range) = self.blocked_range(ip) {
                return deny(DenyReason::BlockedAddress { ip, range });
            }
        } else if let Some(range) = special_host_name(&host_text)
            && !(range == AddressRange::Loopback && self.settings.allow_loopback)
        {
            return deny(DenyReason::BlockedHostName {
                host: host_text,
                range,
            });
        }
        Ok(())
    }

    /// The static check of a connection of which only `host:port` is known (an HTTP `CONNECT`
    /// to the egress proxy: https, wss, or ws, which Chromium tunnels too). The host rules are
    /// those of [`check_url`](Self::check_url); the domain lists are applied to the origin
    /// ([`DomainRules::check_origin`]): allowed if an allow pattern matches some URL of
    /// `https://host:port`, `wss://host:port` or `ws://host:port`, prohibited if a prohibit
    /// pattern matches all URLs of one of them. Denials name the URL as `host:port`.
    pub fn check_tunnel(&self, host: &str, port: u16) -> Result<(), EgressDenied> {
        let shown = format!("{host}:{port}");
        let deny = |reason| Err(EgressDenied::new(&shown, reason));
        let mut urls = Vec::with_capacity(3);
        for scheme in ["https", "wss", "ws"] {
            let text = format!("{scheme}://{host}:{port}/");
            match Url::parse(&text) {
                Ok(url) => urls.push(url),
                Err(e) => {
                    return deny(DenyReason::InvalidUrl {
                        detail: e.to_string(),
                    });
                }
            }
        }
        let mut targets = Vec::with_capacity(urls.len());
        for url in &urls {
            let Some(target) = UrlTarget::new(url) else {
                return deny(DenyReason::MissingHost);
            };
            if let Err(denied) = self.check_host(url, &target) {
                return deny(denied.reason);
            }
            targets.push(target);
        }
        let host_text = targets[0].host().to_string();
        match self.rules.check_origin(&targets) {
            Ok(()) => Ok(()),
            Err(Forbidden::NotInAllowedDomains) => {
                deny(DenyReason::NotInAllowedDomains { host: host_text })
            }
            Err(Forbidden::ProhibitedDomain { pattern }) => deny(DenyReason::ProhibitedDomain {
                host: host_text,
                pattern: pattern.as_str().to_string(),
            }),
        }
    }

    /// Resolves the host of a URL that passed a static check, once, and returns its addresses
    /// if every one of them is allowed (an IP literal is its own address; `shown` names the
    /// URL in denials). The egress proxy connects only to addresses this returned.
    pub async fn resolve_checked(
        &self,
        host: &Host<&str>,
        shown: &str,
    ) -> Result<Vec<IpAddr>, EgressDenied> {
        let domain = match host {
            Host::Ipv4(v4) => return self.checked_literal(IpAddr::V4(*v4), shown),
            Host::Ipv6(v6) => return self.checked_literal(IpAddr::V6(*v6), shown),
            Host::Domain(d) => d.trim_end_matches('.').to_ascii_lowercase(),
        };
        let ips = self
            .resolver
            .resolve(&domain)
            .await
            .map_err(|e: ResolveError| {
                EgressDenied::new(
                    shown,
                    DenyReason::ResolutionFailed {
                        detail: e.to_string(),
                    },
                )
            })?;
        for ip in &ips {
            if let Some(range) = self.blocked_range(*ip) {
                return Err(EgressDenied::new(
                    shown,
                    DenyReason::ResolvesToBlockedAddress {
                        host: domain,
                        ip: *ip,
                        range,
                    },
                ));
            }
        }
        Ok(ips)
    }

    fn checked_literal(&self, ip: IpAddr, shown: &str) -> Result<Vec<IpAddr>, EgressDenied> {
        match self.blocked_range(ip) {
            Some(range) => Err(EgressDenied::new(
                shown,
                DenyReason::BlockedAddress { ip, range },
            )),
            None => Ok(vec![ip]),
        }
    }

    /// The full check: [`check_url`](Self::check_url), then, for host names, a DNS lookup
    /// (with timeout and cache) that refuses the URL when any address is blocked or the name
    /// does not resolve.
    pub async fn check_url_resolved(&self, url: &Url) -> Result<(), EgressDenied> {
        self.check_url(url)?;
        let Some(Host::Domain(domain)) = url.host() else {
            return Ok(());
        };
        if !is_web_scheme(url.scheme()) {
            return Ok(());
        }
        self.resolve_checked(&Host::Domain(domain), url.as_str())
            .await
            .map(|_| ())
    }

    /// The blocked range of an address under this policy (loopback may be allowed).
    pub fn blocked_range(&self, ip: IpAddr) -> Option<AddressRange> {
        classify(ip)
            .filter(|r| !(*r == AddressRange::Loopback && self.settings.allow_loopback))
            .or_else(|| {
                self.blocked_networks
                    .iter()
                    .any(|n| n.contains(ip))
                    .then_some(AddressRange::BlockedNetwork)
            })
    }
}

/// Pages that are always allowed: about:blank, about:srcdoc and the new-tab pages.
fn is_internal_page(url: &Url) -> bool {
    match url.scheme() {
        "about" => matches!(url.path(), "blank" | "srcdoc"),
        "chrome" => {
            matches!(url.host_str(), Some("new-tab-page" | "newtab"))
                && matches!(url.path(), "" | "/")
        }
        _ => false,
    }
}

/// Host names that are blocked destinations by themselves.
fn special_host_name(host: &str) -> Option<AddressRange> {
    if host == "localhost" || host.ends_with(".localhost") {
        return Some(AddressRange::Loopback);
    }
    if METADATA_HOST_NAMES.contains(&host) {
        return Some(AddressRange::CloudMetadata);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::resolve::HostOverride;

    fn policy(f: impl FnOnce(&mut EgressSettings)) -> EgressPolicy {
        let mut s = EgressSettings::default();
        f(&mut s);
        EgressPolicy::new(s).expect("valid settings")
    }

    fn reason(p: &EgressPolicy, url: &str) -> Option<DenyReason> {
        p.check_str(url).err().map(|d| d.reason)
    }

    #[test]
    fn default_policy_allows_public_web_and_internal_pages() {
        let p = policy(|_| {});
        for url in [
            "https://example.com/",
            "http://example.com:8080/a?b#c",
            "wss://example.com/socket",
            "about:blank",
            "about:srcdoc",
            "chrome://new-tab-page/",
            "chrome://new-tab-page",
            "chrome://newtab/",
            "data:text/html,hello",
            "blob:https://example.com/0f0e",
            "http://8.8.8.8/",
            "http://[2606:4700:4700::1111]/",
        ] {
            assert_eq!(reason(&p, url), None, "{url}");
        }
    }

    #[test]
    fn dangerous_schemes_are_always_blocked() {
        let p = policy(|_| {});
        for url in [
            "file:///etc/passwd",
            "file://localhost/etc/passwd",
            "javascript:alert(1)",
            "chrome://settings",
            "chrome://version/",
            "chrome-extension://abc/popup.html",
            "about:config",
            "view-source:https://example.com/",
            "ftp://example.com/",
            "brave://settings",
            "filesystem:https://example.com/temporary/x",
        ] {
            assert!(
                matches!(reason(&p, url), Some(DenyReason::UnsupportedScheme { .. })),
                "{url}: {:?}",
                reason(&p, url)
            );
        }
    }

    #[test]
    fn data_and_blob_are_refused_under_domain_rules() {
        let p = policy(|s| s.allowed_domains = vec!["example.com".into()]);
        for url in [
            "data:text/html,<script>1</script>",
            "blob:https://example.com/x",
        ] {
            assert!(matches!(
                reason(&p, url),
                Some(DenyReason::SchemeNotAllowedWithDomainRules { .. })
            ));
        }
        assert_eq!(reason(&p, "about:blank"), None);
        assert_eq!(reason(&p, "chrome://new-tab-page/"), None);
        let p = policy(|s| s.prohibited_domains = vec!["evil.com".into()]);
        assert!(reason(&p, "data:text/html,x").is_some());
    }

    #[test]
    fn allowed_domains_alone_decide() {
        let p = policy(|s| {
            s.allowed_domains = vec!["example.com".into(), "*.docs.rs".into()];
            s.prohibited_domains = vec!["example.com".into()];
        });
        assert_eq!(reason(&p, "https://example.com/"), None);
        assert_eq!(reason(&p, "https://www.example.com/"), None);
        assert_eq!(reason(&p, "https://docs.rs/"), None);
        assert_eq!(reason(&p, "https://a.docs.rs/"), None);
        assert_eq!(
            reason(&p, "https://evil.com/"),
            Some(DenyReason::NotInAllowedDomains {
                host: "evil.com".into()
            })
        );
        assert!(reason(&p, "https://example.com.evil.com/").is_some());
    }

    #[test]
    fn prohibited_domains_block_matches_only() {
        let p = policy(|s| s.prohibited_domains = vec!["evil.com".into(), "*.bad.org".into()]);
        assert_eq!(reason(&p, "https://example.com/"), None);
        assert_eq!(
            reason(&p, "https://www.evil.com/x"),
            Some(DenyReason::ProhibitedDomain {
                host: "www.evil.com".into(),
                pattern: "evil.com".into()
            })
        );
        assert!(reason(&p, "http://EVIL.com./").is_some());
        assert!(reason(&p, "http://bad.org/").is_some());
        assert!(reason(&p, "http://x.y.bad.org/").is_some());
        assert_eq!(reason(&p, "http://notbad.org/"), None);
    }

    #[test]
    fn whatwg_parsing_defeats_parser_confusion() {
        let p = policy(|s| s.allowed_domains = vec!["allowed-domain.example".into()]);
        // Backslash is a path separator for special schemes: the host is evil-domain.example.
        assert!(reason(&p, "http://evil-domain.example\\@allowed-domain.example/").is_some());
        // Userinfo does not change the host.
        assert!(reason(&p, "http://allowed-domain.example@evil.example/").is_some());
        assert_eq!(
            reason(&p, "http://evil.example@allowed-domain.example/"),
            None
        );
        // Tabs and newlines are stripped by the parser.
        assert!(reason(&p, "http://evil.exa\tmple/").is_some());
        assert_eq!(reason(&p, "http://allowed-domain.exa\nmple/"), None);
        // Percent-encoded and fullwidth hosts normalise to the real host.
        assert_eq!(reason(&p, "http://allowed%2Ddomain.example/"), None);
        assert_eq!(reason(&p, "http://ａｌｌｏｗｅｄ-domain.example/"), None);
    }

    #[test]
    fn metadata_ip_in_every_encoding_is_blocked() {
        let p = policy(|s| s.allow_loopback = true);
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://2852039166/",
            "http://0xa9fea9fe/",
            "http://0xA9FEA9FE/",
            "http://0251.0376.0251.0376/",
            "http://0xa9.0xfe.0xa9.0xfe/",
            "http://0251.254.169.254/",
            "http://169.254.43518/",
            "http://169.16689662/",
            "http://0xa9.16689662/",
            "http://169.254.169.254./",
            "http://%31%36%39.254.169.254/",
            "http://１６９.２５４.１６９.２５４/",
            "http://169。254。169。254/",
            "http://[::ffff:169.254.169.254]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[0:0:0:0:0:ffff:169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:a9fe:a9fe::1]/",
            "http://[fd00:ec2::254]/",
            "https://169.254.169.254:443/",
            "ws://169.254.169.254/",
            "http://user:pass@169.254.169.254/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://METADATA.google.internal./",
            "http://metadata/",
        ] {
            let r = reason(&p, url);
            assert!(
                matches!(
                    r,
                    Some(DenyReason::BlockedAddress {
                        range: AddressRange::CloudMetadata,
                        ..
                    }) | Some(DenyReason::BlockedHostName {
                        range: AddressRange::CloudMetadata,
                        ..
                    })
                ),
                "{url}: {r:?}"
            );
        }
    }

    #[test]
    fn private_and_special_addresses_in_every_encoding_are_blocked() {
        let p = policy(|s| s.allow_loopback = true);
        for (url, want) in [
            ("http://10.0.0.1/", AddressRange::Private),
            ("http://10.1/", AddressRange::Private),
            ("http://167772161/", AddressRange::Private),
            ("http://0xa000001/", AddressRange::Private),
            ("http://012.0.0.1/", AddressRange::Private),
            ("http://192.168.1.1/", AddressRange::Private),
            ("http://0300.0250.1.1/", AddressRange::Private),
            ("http://172.16.0.1/", AddressRange::Private),
            ("http://100.64.0.1/", AddressRange::SharedAddressSpace),
            ("http://169.254.1.1/", AddressRange::LinkLocal),
            ("http://0.0.0.0/", AddressRange::Unspecified),
            ("http://0/", AddressRange::Unspecified),
            ("http://[::]/", AddressRange::Unspecified),
            ("http://[fe80::1]/", AddressRange::LinkLocal),
            ("http://[fc00::1]/", AddressRange::UniqueLocal),
            ("http://[fd12::1]/", AddressRange::UniqueLocal),
            ("http://[::ffff:10.0.0.1]/", AddressRange::Private),
            ("http://[::ffff:192.168.0.1]/", AddressRange::Private),
            ("http://224.0.0.1/", AddressRange::Multicast),
            ("http://[ff02::1]/", AddressRange::Multicast),
            ("http://255.255.255.255/", AddressRange::Broadcast),
            ("http://4294967295/", AddressRange::Broadcast),
            ("http://192.0.2.1/", AddressRange::Documentation),
            ("http://240.0.0.1/", AddressRange::Reserved),
            ("http://[::127.0.0.1]/", AddressRange::Reserved),
        ] {
            let r = reason(&p, url);
            assert!(
                matches!(r, Some(DenyReason::BlockedAddress { range, .. }) if range == want),
                "{url}: {r:?}"
            );
        }
    }

    #[test]
    fn loopback_is_blocked_by_default_and_opened_explicitly() {
        let closed = policy(|_| {});
        let open = policy(|s| s.allow_loopback = true);
        for url in [
            "http://127.0.0.1:8080/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://127.0.0.1./",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[0:0:0:0:0:0:0:1]/",
            "http://localhost:3000/",
            "http://LOCALHOST./",
            "http://app.localhost/",
        ] {
            let r = reason(&closed, url);
            assert!(
                matches!(
                    r,
                    Some(DenyReason::BlockedAddress {
                        range: AddressRange::Loopback,
                        ..
                    }) | Some(DenyReason::BlockedHostName {
                        range: AddressRange::Loopback,
                        ..
                    })
                ),
                "{url}: {r:?}"
            );
            assert_eq!(reason(&open, url), None, "{url} with allow_loopback");
        }
        // allow_loopback opens nothing else.
        assert!(reason(&open, "http://0.0.0.0:8080/").is_some());
        assert!(reason(&open, "http://10.0.0.1/").is_some());
    }

    #[test]
    fn domain_rules_still_apply_to_loopback() {
        let p = policy(|s| {
            s.allow_loopback = true;
            s.allowed_domains = vec!["allowed.test".into()];
        });
        assert_eq!(reason(&p, "http://allowed.test:8080/"), None);
        assert!(matches!(
            reason(&p, "http://127.0.0.1:8080/"),
            Some(DenyReason::NotInAllowedDomains { .. })
        ));
        assert!(matches!(
            reason(&p, "http://localhost:8080/"),
            Some(DenyReason::NotInAllowedDomains { .. })
        ));
    }

    #[test]
    fn block_ip_addresses_blocks_every_ip_literal() {
        let p = policy(|s| s.block_ip_addresses = true);
        for url in [
            "http://8.8.8.8/",
            "http://134744072/",
            "http://0x08080808/",
            "http://010.010.010.010/",
            "http://8.526344/",
            "http://[2001:4860:4860::8888]/",
            "http://%38.8.8.8/",
            "http://８.８.８.８/",
        ] {
            assert!(
                matches!(reason(&p, url), Some(DenyReason::IpAddressHost { .. })),
                "{url}: {:?}",
                reason(&p, url)
            );
        }
        assert_eq!(reason(&p, "https://example.com/"), None);
        // Hosts that only look numeric are domains.
        assert_eq!(reason(&p, "http://1.2.3.4.example/"), None);
    }

    #[test]
    fn hostless_urls_are_refused() {
        let p = policy(|_| {});
        assert!(reason(&p, "http://").is_some());
        assert!(matches!(
            reason(&p, "not a url"),
            Some(DenyReason::InvalidUrl { .. })
        ));
    }

    #[test]
    fn invalid_settings_are_reported_clearly() {
        let e = EgressPolicy::new(EgressSettings {
            allowed_domains: vec!["ok.com".into(), "example.*".into()],
            ..EgressSettings::default()
        })
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("allowed_domains"), "{msg}");
        assert!(msg.contains("example.*"), "{msg}");
        let e = EgressPolicy::new(EgressSettings {
            prohibited_domains: vec!["a.com/path".into()],
            ..EgressSettings::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("prohibited_domains"));
        assert!(matches!(
            EgressPolicy::new(EgressSettings {
                dns_timeout_ms: 0,
                ..EgressSettings::default()
            }),
            Err(EgressConfigError::InvalidDnsTimeout(0))
        ));
    }

    /// The shared domain-pattern table through `EgressPolicy::new` and `check_url`: a pattern is
    /// accepted here iff the api accepts it, and a URL loads under `allowed_domains: [pattern]`
    /// (and is refused under `prohibited_domains: [pattern]`) iff the pattern matches it.
    #[test]
    fn domain_pattern_conformance_table() {
        for case in browserd_domains::conformance::CASES {
            let with = |allowed: bool| {
                EgressPolicy::new(EgressSettings {
                    allowed_domains: if allowed {
                        vec![case.pattern.into()]
                    } else {
                        vec![]
                    },
                    prohibited_domains: if allowed {
                        vec![]
                    } else {
                        vec![case.pattern.into()]
                    },
                    ..EgressSettings::default()
                })
            };
            let Some(why) = case.rejected else {
                let (allow, prohibit) = (with(true).unwrap(), with(false).unwrap());
                for url in case.matches {
                    assert_eq!(reason(&allow, url), None, "{:?} allows {url}", case.pattern);
                    assert!(
                        matches!(
                            reason(&prohibit, url),
                            Some(DenyReason::ProhibitedDomain { .. })
                        ),
                        "{:?} prohibits {url}",
                        case.pattern
                    );
                }
                for url in case.does_not_match {
                    assert!(
                        reason(&allow, url).is_some(),
                        "{:?} allows {url}",
                        case.pattern
                    );
                    assert!(
                        !matches!(
                            reason(&prohibit, url),
                            Some(DenyReason::ProhibitedDomain { .. })
                        ),
                        "{:?} prohibits {url}",
                        case.pattern
                    );
                }
                continue;
            };
            for allowed in [true, false] {
                let e = with(allowed).expect_err(case.pattern);
                let msg = e.to_string();
                assert!(msg.contains(why), "{:?}: {msg}", case.pattern);
                let list = if allowed {
                    "allowed_domains"
                } else {
                    "prohibited_domains"
                };
                assert!(msg.starts_with(list), "{msg}");
            }
        }
    }

    #[test]
    fn settings_deserialize_with_defaults_and_reject_unknown_fields() {
        let s: EgressSettings =
            serde_json::from_str(r#"{"allowed_domains":["a.com"],"allow_loopback":true}"#).unwrap();
        assert_eq!(s.allowed_domains, vec!["a.com".to_string()]);
        assert!(s.allow_loopback);
        assert!(!s.block_ip_addresses);
        assert_eq!(s.dns_timeout_ms, 3000);
        assert!(serde_json::from_str::<EgressSettings>(r#"{"allowed_domain":[]}"#).is_err());
    }

    #[test]
    fn large_exact_lists_keep_pattern_semantics() {
        let mut list: Vec<String> = (0..500).map(|i| format!("site{i}.com")).collect();
        list.push("*.wild.org".into());
        let p = policy(|s| s.allowed_domains = list);
        assert_eq!(reason(&p, "https://site499.com/"), None);
        assert_eq!(reason(&p, "https://www.site7.com/"), None);
        assert_eq!(reason(&p, "https://a.wild.org/"), None);
        assert!(reason(&p, "https://site500.com/").is_some());
        assert!(reason(&p, "https://a.site7.com/").is_some());
    }

    #[test]
    fn denial_messages_name_url_and_reason_and_are_bounded() {
        let p = policy(|s| s.prohibited_domains = vec!["evil.com".into()]);
        let long = format!("https://evil.com/{}", "a".repeat(5000));
        let d = p.check_str(&long).unwrap_err();
        let msg = d.to_string();
        assert!(msg.contains("https://evil.com/"), "{msg}");
        assert!(msg.contains("prohibited_domains"), "{msg}");
        assert!(msg.len() < 600, "{}", msg.len());
    }

    #[tokio::test]
    async fn resolved_check_blocks_names_pointing_inside() {
        let resolver = HostResolver::system(Duration::from_secs(2))
            .with_override(HostOverride::new("*.test", "127.0.0.1".parse().unwrap()).unwrap())
            .with_override(
                HostOverride::new("rebind.example", "169.254.169.254".parse().unwrap()).unwrap(),
            )
            .with_override(
                HostOverride::new("intranet.example", "10.1.2.3".parse().unwrap()).unwrap(),
            )
            .with_override(
                HostOverride::new("public.example", "8.8.8.8".parse().unwrap()).unwrap(),
            );
        let p = EgressPolicy::new(EgressSettings::default())
            .unwrap()
            .with_resolver(resolver);
        let check = |u: &str| {
            let url = Url::parse(u).unwrap();
            let p = &p;
            async move { p.check_url_resolved(&url).await.err().map(|d| d.reason) }
        };
        assert_eq!(check("http://public.example/").await, None);
        assert!(matches!(
            check("http://rebind.example/").await,
            Some(DenyReason::ResolvesToBlockedAddress {
                range: AddressRange::CloudMetadata,
                ..
            })
        ));
        assert!(matches!(
            check("http://intranet.example/").await,
            Some(DenyReason::ResolvesToBlockedAddress {
                range: AddressRange::Private,
                ..
            })
        ));
        assert!(matches!(
            check("http://allowed.test/").await,
            Some(DenyReason::ResolvesToBlockedAddress {
                range: AddressRange::Loopback,
                ..
            })
        ));
        assert!(matches!(
            check("http://does-not-exist.invalid/").await,
            Some(DenyReason::ResolutionFailed { .. })
        ));
        // IP literals and internal pages need no lookup.
        assert_eq!(check("about:blank").await, None);
        assert_eq!(check("http://8.8.4.4/").await, None);
    }
}
