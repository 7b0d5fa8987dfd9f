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
mod tests;
