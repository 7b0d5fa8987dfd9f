//! One pattern: parsing with validation, and matching against a URL.

use std::fmt;

use url::{Host, Position, Url};

use crate::glob::glob_match;
use crate::is_web_scheme;

/// Longest pattern accepted, in characters.
pub const MAX_PATTERN_CHARS: usize = 2_048;
/// Longest host accepted in a pattern (the DNS limit), in characters.
pub const MAX_HOST_CHARS: usize = 253;

/// How much of a rejected pattern an error message repeats.
const SHOWN_PATTERN_CHARS: usize = 100;

/// A pattern that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain pattern {}: {problem}", shown(pattern))]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: String,
}

fn shown(pattern: &str) -> String {
    if pattern.chars().count() <= SHOWN_PATTERN_CHARS {
        return format!("{pattern:?}");
    }
    let head: String = pattern.chars().take(SHOWN_PATTERN_CHARS).collect();
    format!("{head:?}…")
}

/// One validated pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainPattern {
    source: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `*`: every host.
    AnyHost,
    /// `example.com` (normalised host); `www_variant` for root domains.
    ExactHost { host: String, www_variant: bool },
    /// `*.example.com`: the domain and all its subdomains.
    Subdomains { domain: String },
    /// `*suffix`: the host ends with the suffix.
    HostSuffix { suffix: String },
    /// `https://example.com/path`: same scheme, host and port; path prefix on a segment boundary.
    UrlPrefix {
        scheme: String,
        host: String,
        port: Option<u16>,
        /// Lowercase.
        path: String,
    },
    /// A pattern with a scheme and a `*` somewhere: scheme glob, host glob, port, path glob.
    Glob {
        scheme: String,
        host: HostGlob,
        /// `None`: any port without a path glob, the scheme's default port with one.
        port: Option<u16>,
        /// Glob over the lowercase path + query (+ fragment); starts with `/`, ends with `/*`.
        path: Option<String>,
    },
}

/// The host part of a glob pattern (fnmatch semantics, only a leading `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostGlob {
    /// `*`.
    Any,
    /// `example.com` (normalised).
    Exact(String),
    /// `*.example.com`: a proper subdomain (fnmatch: the `*` must match something before the dot).
    Subdomains(String),
    /// `*example.com`.
    Suffix(String),
}

impl HostGlob {
    fn matches(&self, host: &str) -> bool {
        match self {
            HostGlob::Any => true,
            HostGlob::Exact(h) => host == h,
            HostGlob::Subdomains(domain) => is_proper_subdomain(host, domain),
            HostGlob::Suffix(suffix) => host.ends_with(suffix.as_str()),
        }
    }
}

fn is_proper_subdomain(host: &str, domain: &str) -> bool {
    host.strip_suffix(domain)
        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

/// How a pattern covers one origin (see [`DomainPattern::matches_origin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginMatch {
    /// No URL of the origin matches.
    None,
    /// Some URLs of the origin match (the pattern has a path).
    Some,
    /// Every URL of the origin matches.
    All,
}

/// A URL as the matcher sees it: the parsed URL and its normalised host (lowercase, trailing
/// dots removed, IPv6 in brackets).
#[derive(Debug, Clone)]
pub struct UrlTarget<'a> {
    url: &'a Url,
    host: String,
}

impl<'a> UrlTarget<'a> {
    /// `None` when the URL has no (or an empty) host: no pattern matches such a URL.
    pub fn new(url: &'a Url) -> Option<Self> {
        let host = match url.host()? {
            Host::Domain(d) => {
                let d = d.trim_end_matches('.');
                if d.is_empty() {
                    return None;
                }
                d.to_ascii_lowercase()
            }
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => format!("[{ip}]"),
        };
        Some(Self { url, host })
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        self.url
    }

    /// The scheme (lowercase, without `:`).
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// The normalised host.
    pub fn host(&self) -> &str {
        &self.host
    }
}

impl DomainPattern {
    /// Parses and validates one pattern (surrounding whitespace is ignored).
    pub fn parse(raw: &str) -> Result<Self, PatternError> {
        let err = |problem: String| PatternError {
            pattern: raw.to_string(),
            problem,
        };
        let source = raw.trim();
        if source.is_empty() {
            return Err(err("the pattern is empty".into()));
        }
        if source.chars().count() > MAX_PATTERN_CHARS {
            return Err(err(format!(
                "a pattern is at most {MAX_PATTERN_CHARS} characters"
            )));
        }
        if source.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(
                "the pattern contains whitespace or control characters".into()
            ));
        }
        if source.contains('\\') {
            return Err(err("backslashes are not allowed in patterns".into()));
        }
        let text = source.to_ascii_lowercase();
        let kind = match text.split_once("://") {
            Some((scheme, rest)) => parse_with_scheme(&text, scheme, rest),
            None => parse_host_pattern(&text),
        }
        .map_err(err)?;
        Ok(Self {
            source: source.to_string(),
            kind,
        })
    }

    /// The pattern as configured (trimmed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the URL matches this pattern.
    pub fn matches(&self, target: &UrlTarget<'_>) -> bool {
        let (scheme, host, url) = (target.scheme(), target.host(), target.url());
        let web = is_web_scheme(scheme);
        match &self.kind {
            Kind::AnyHost => web,
            Kind::ExactHost {
                host: h,
                www_variant,
            } => web && (host == h || (*www_variant && host.strip_prefix("www.") == Some(h))),
            Kind::Subdomains { domain } => {
                web && (host == domain || is_proper_subdomain(host, domain))
            }
            Kind::HostSuffix { suffix } => web && host.ends_with(suffix.as_str()),
            Kind::UrlPrefix {
                scheme: s,
                host: h,
                port,
                path,
            } => {
                scheme == s
                    && host == h
                    && url.port_or_known_default() == *port
                    && path_has_prefix(&url.path().to_ascii_lowercase(), path)
            }
            Kind::Glob {
                scheme: s,
                host: h,
                port,
                path,
            } => {
                glob_match(s, scheme)
                    && h.matches(host)
                    && match (port, path) {
                        (Some(p), _) => url.port_or_known_default() == Some(*p),
                        (None, None) => true,
                        (None, Some(_)) => url.port().is_none(),
                    }
                    && path.as_ref().is_none_or(|g| {
                        glob_match(g, &url[Position::BeforePath..].to_ascii_lowercase())
                    })
            }
        }
    }

    /// How this pattern relates to the URLs of the target's origin (scheme, host, port),
    /// whatever their path: what a network-level check that sees only a connection's host and
    /// port (an HTTP `CONNECT`) can know. A URL of the origin matches only if this is not
    /// [`OriginMatch::None`]; every URL of it matches if this is [`OriginMatch::All`].
    pub fn matches_origin(&self, target: &UrlTarget<'_>) -> OriginMatch {
        let (scheme, host, url) = (target.scheme(), target.host(), target.url());
        let whole = |hit: bool| {
            if hit {
                OriginMatch::All
            } else {
                OriginMatch::None
            }
        };
        match &self.kind {
            Kind::AnyHost
            | Kind::ExactHost { .. }
            | Kind::Subdomains { .. }
            | Kind::HostSuffix { .. } => whole(self.matches(target)),
            Kind::UrlPrefix {
                scheme: s,
                host: h,
                port,
                path,
            } => {
                if scheme != s || host != h || url.port_or_known_default() != *port {
                    OriginMatch::None
                } else if path == "/" || path.is_empty() {
                    OriginMatch::All
                } else {
                    OriginMatch::Some
                }
            }
            Kind::Glob {
                scheme: s,
                host: h,
                port,
                path,
            } => {
                let origin = glob_match(s, scheme)
                    && h.matches(host)
                    && match (port, path) {
                        (Some(p), _) => url.port_or_known_default() == Some(*p),
                        (None, None) => true,
                        (None, Some(_)) => url.port().is_none(),
                    };
                match path.as_deref() {
                    _ if !origin => OriginMatch::None,
                    None | Some("/*") => OriginMatch::All,
                    Some(_) => OriginMatch::Some,
                }
            }
        }
    }

    /// Whether the URL matches this pattern (a URL without a host matches nothing).
    pub fn matches_url(&self, url: &Url) -> bool {
        UrlTarget::new(url).is_some_and(|t| self.matches(&t))
    }

    /// Whether the URL text matches this pattern (an unparsable URL matches nothing).
    pub fn matches_str(&self, url: &str) -> bool {
        Url::parse(url).is_ok_and(|u| self.matches_url(&u))
    }

    /// For exact host patterns: the normalised host and whether `www.` + host matches too.
    pub(crate) fn exact_host(&self) -> Option<(&str, bool)> {
        match &self.kind {
            Kind::ExactHost { host, www_variant } => Some((host, *www_variant)),
            _ => None,
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for DomainPattern {
    type Err = PatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

const WILDCARD_PLACEMENT: &str = "wildcards are only supported at the start of a host (`*.example.com`, `*example.com`); wildcard TLDs like `example.*` and embedded wildcards are rejected";

/// `scheme://rest` (lowercase).
fn parse_with_scheme(text: &str, scheme: &str, rest: &str) -> Result<Kind, String> {
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | '*'))
    {
        return Err("the scheme part is not a valid scheme (glob)".into());
    }
    if rest.is_empty() {
        return Err("nothing follows `://`".into());
    }
    if rest.contains('?') || rest.contains('#') {
        return Err("a pattern cannot have a query or fragment (and `?` is not a wildcard)".into());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    // In a glob, brackets only enclose an IPv6 host; anywhere else they would be an fnmatch class.
    let brackets = |s: &str| s.contains('[') || s.contains(']');
    if text.contains('*')
        && (brackets(scheme)
            || path.is_some_and(brackets)
            || (brackets(authority) && !authority.starts_with('[')))
    {
        return Err("only `*` wildcards are supported".into());
    }
    if authority.contains('@') {
        return Err("credentials (`user@`) are not allowed in patterns".into());
    }
    if authority.is_empty() {
        return Err("the pattern has no host".into());
    }
    if !text.contains('*') {
        return parse_url_prefix(text);
    }
    if let Some(path) = path {
        if !path.ends_with("/*") {
            return Err(
                "a wildcard pattern with a path must end in `/*` (the path is then a glob over path and query)"
                    .into(),
            );
        }
        if !path.is_ascii() {
            return Err(
                "a glob path must be ASCII; percent-encode other characters (`%c3%a4`)".into(),
            );
        }
    }
    let (host, port) = split_port(authority)?;
    let host = if host == "*" {
        HostGlob::Any
    } else if let Some(domain) = host.strip_prefix("*.") {
        if domain.contains('*') {
            return Err(WILDCARD_PLACEMENT.into());
        }
        HostGlob::Subdomains(normalize_domain(domain)?)
    } else if let Some(suffix) = host.strip_prefix('*') {
        HostGlob::Suffix(host_suffix(suffix)?)
    } else if host.contains('*') {
        return Err(WILDCARD_PLACEMENT.into());
    } else {
        HostGlob::Exact(normalize_host(host)?)
    };
    Ok(Kind::Glob {
        scheme: scheme.to_string(),
        host,
        port,
        path: path.map(str::to_string),
    })
}

/// `https://example.com[:port][/path]` without wildcards.
fn parse_url_prefix(text: &str) -> Result<Kind, String> {
    let url = Url::parse(text).map_err(|e| format!("not a valid URL: {e}"))?;
    if !is_web_scheme(url.scheme()) {
        return Err(
            "an exact URL pattern must be an http(s) or ws(s) URL; use `scheme://*` globs for other schemes"
                .into(),
        );
    }
    let target = UrlTarget::new(&url).ok_or_else(|| "the pattern has no host".to_string())?;
    if target.host().chars().count() > MAX_HOST_CHARS {
        return Err(format!("a host is at most {MAX_HOST_CHARS} characters"));
    }
    Ok(Kind::UrlPrefix {
        scheme: url.scheme().to_string(),
        host: target.host().to_string(),
        port: url.port_or_known_default(),
        path: url.path().to_ascii_lowercase(),
    })
}

/// A pattern without a scheme (lowercase).
fn parse_host_pattern(text: &str) -> Result<Kind, String> {
    if text.contains('/') {
        return Err(
            "a pattern without a scheme names a host; write `https://host/path` or `https://host/*` for URL patterns"
                .into(),
        );
    }
    if text.contains('?') || text.contains('[') && text.contains('*') {
        return Err("only `*` wildcards are supported".into());
    }
    if text == "*" {
        return Ok(Kind::AnyHost);
    }
    if let Some(domain) = text.strip_prefix("*.") {
        if domain.contains('*') {
            return Err(WILDCARD_PLACEMENT.into());
        }
        no_port(domain)?;
        return Ok(Kind::Subdomains {
            domain: normalize_domain(domain)?,
        });
    }
    if let Some(suffix) = text.strip_prefix('*') {
        if suffix.contains('*') {
            return Err(WILDCARD_PLACEMENT.into());
        }
        no_port(suffix)?;
        return Ok(Kind::HostSuffix {
            suffix: host_suffix(suffix)?,
        });
    }
    if text.contains('*') {
        return Err(WILDCARD_PLACEMENT.into());
    }
    no_port(text)?;
    let host = normalize_host(text)?;
    let is_ip = host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok();
    let www_variant = !is_ip && host.matches('.').count() == 1;
    Ok(Kind::ExactHost { host, www_variant })
}

/// Host patterns carry no port: `example.com:8080`, `[::1]:8080` and unbracketed IPv6 are errors.
fn no_port(host: &str) -> Result<(), String> {
    let after_v6 = match host.strip_prefix('[') {
        Some(inner) => inner.split_once(']').map_or("", |(_, after)| after),
        None => host,
    };
    if !after_v6.contains(':') {
        return Ok(());
    }
    if !host.starts_with('[') && host.matches(':').count() > 1 {
        return Err("IPv6 addresses must be written in brackets, like `[2001:db8::1]`".into());
    }
    Err(
        "ports are not supported in host patterns; use a URL pattern like `http://host:8080`"
            .into(),
    )
}

/// `host[:port]` of a glob pattern.
fn split_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let host_end = if authority.starts_with('[') {
        authority.find(']').map_or(authority.len(), |i| i + 1)
    } else {
        authority.find(':').unwrap_or(authority.len())
    };
    let (host, after) = authority.split_at(host_end);
    if after.is_empty() {
        return Ok((host, None));
    }
    let Some(port) = after.strip_prefix(':') else {
        return Err("not a valid host".into());
    };
    if port.contains(':') && !authority.starts_with('[') {
        return Err("IPv6 addresses must be written in brackets, like `[2001:db8::1]`".into());
    }
    if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) {
        return Err("the port must be a number (no wildcards)".into());
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| "the port must be at most 65535".to_string())?;
    Ok((host, Some(port)))
}

/// The part after a leading `*` (not `*.`): an ASCII domain name containing a dot.
fn host_suffix(suffix: &str) -> Result<String, String> {
    let suffix = suffix.trim_end_matches('.');
    if suffix.is_empty() || !suffix.contains('.') {
        return Err("a leading wildcard must be followed by a domain with a dot".into());
    }
    if !suffix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(
            "a wildcard suffix must be an ASCII domain name (write IDNs as `xn--…`)".into(),
        );
    }
    if suffix.len() > MAX_HOST_CHARS {
        return Err(format!("a host is at most {MAX_HOST_CHARS} characters"));
    }
    Ok(suffix.to_string())
}

/// A domain name after `*.` (not an IP address).
fn normalize_domain(text: &str) -> Result<String, String> {
    let host = normalize_host(text)?;
    if host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err("`*.` must be followed by a domain name, not an IP address".into());
    }
    Ok(host)
}

/// Normalises a host the way the browser does (IDNA to punycode, IPv4 number forms, IPv6
/// compression) and drops trailing dots.
fn normalize_host(text: &str) -> Result<String, String> {
    if text.starts_with('.') || text.trim_end_matches('.').contains("..") {
        return Err("not a valid host: empty label".into());
    }
    let host = Host::parse(text).map_err(|e| format!("not a valid host: {e}"))?;
    let host = match host {
        Host::Domain(d) => d.trim_end_matches('.').to_string(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => format!("[{ip}]"),
    };
    if host.is_empty() {
        return Err("not a valid host".into());
    }
    if host.chars().count() > MAX_HOST_CHARS {
        return Err(format!("a host is at most {MAX_HOST_CHARS} characters"));
    }
    Ok(host)
}

fn path_has_prefix(path: &str, prefix: &str) -> bool {
    if prefix.is_empty() || prefix == "/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, url: &str) -> bool {
        DomainPattern::parse(pattern)
            .expect("pattern is valid")
            .matches_str(url)
    }

    // The tests below came with the egress policy's pattern module.

    #[test]
    fn exact_host_and_root_domain_www() {
        assert!(matches("example.com", "https://example.com/x"));
        assert!(matches("example.com", "http://example.com"));
        assert!(matches("example.com", "https://www.example.com/"));
        assert!(matches("EXAMPLE.com", "https://Example.COM/"));
        assert!(matches("example.com", "https://example.com./"));
        assert!(matches("example.com.", "https://example.com/"));
        assert!(!matches("example.com", "https://sub.example.com/"));
        assert!(!matches("example.com", "https://example.com.evil.net/"));
        assert!(!matches("example.com", "https://notexample.com/"));
        // Not a root domain: no www variant.
        assert!(matches("app.example.com", "https://app.example.com/"));
        assert!(!matches("app.example.com", "https://www.app.example.com/"));
        // www pattern does not open the bare domain.
        assert!(!matches("www.example.com", "https://example.com/"));
        // Host patterns only speak about web schemes.
        assert!(!matches("example.com", "ftp://example.com/"));
        assert!(matches("example.com", "wss://example.com/socket"));
    }

    #[test]
    fn subdomain_wildcard() {
        assert!(matches("*.example.com", "https://example.com/"));
        assert!(matches("*.example.com", "https://a.example.com/"));
        assert!(matches("*.example.com", "http://a.b.example.com/"));
        assert!(!matches("*.example.com", "https://badexample.com/"));
        assert!(!matches("*.example.com", "https://example.com.evil.net/"));
        assert!(!matches("*.example.com", "file:///example.com"));
    }

    #[test]
    fn leading_glob_and_any() {
        assert!(matches("*google.com", "https://google.com/"));
        assert!(matches("*google.com", "https://agoogle.com/"));
        assert!(matches("*google.com", "https://www.google.com/"));
        assert!(!matches("*google.com", "https://google.com.evil.net/"));
        assert!(matches("*", "https://anything.example/"));
        assert!(!matches("*", "chrome://settings"));
    }

    #[test]
    fn exact_url_prefix_respects_boundaries() {
        assert!(matches("https://example.com", "https://example.com/"));
        assert!(matches("https://example.com", "https://example.com/a/b?q"));
        assert!(!matches("https://example.com", "http://example.com/"));
        assert!(!matches(
            "https://example.com",
            "https://example.com.evil.net/"
        ));
        assert!(!matches("https://example.com", "https://example.com:8443/"));
        assert!(matches("https://example.com:443", "https://example.com/"));
        assert!(matches("http://localhost:8080", "http://localhost:8080/x"));
        assert!(!matches("http://localhost:8080", "http://localhost:8081/x"));
        assert!(matches(
            "https://example.com/docs",
            "https://example.com/docs"
        ));
        assert!(matches(
            "https://example.com/docs",
            "https://example.com/docs/a"
        ));
        assert!(!matches(
            "https://example.com/docs",
            "https://example.com/docsevil"
        ));
        assert!(matches(
            "https://example.com/docs/",
            "https://example.com/docs/a"
        ));
    }

    #[test]
    fn scheme_globs_and_url_globs() {
        assert!(matches("http*://example.com", "http://example.com/"));
        assert!(matches("http*://example.com", "https://example.com/x"));
        assert!(!matches("http*://example.com", "https://www.example.com/"));
        assert!(matches("http*://*.example.com", "https://a.example.com/"));
        assert!(matches("https://example.com/*", "https://example.com/a"));
        assert!(!matches(
            "https://example.com/*",
            "https://example.com.evil.net/a"
        ));
        assert!(matches(
            "chrome-extension://*",
            "chrome-extension://abcdef/popup.html"
        ));
        assert!(matches("http*://*.example.com/*", "http://x.example.com/p"));
        // The path glob cannot reach back into the host (fnmatch over the whole URL could).
        assert!(!matches(
            "http*://*.example.com/*",
            "https://evil.com/.example.com/"
        ));
    }

    #[test]
    fn idna_and_ip_hosts_are_normalised() {
        assert!(matches("bücher.example", "https://xn--bcher-kva.example/"));
        assert!(matches("xn--bcher-kva.example", "https://bücher.example/"));
        assert!(matches(
            "*.bücher.example",
            "https://a.xn--bcher-kva.example/"
        ));
        assert!(matches(
            "https://bücher.example/*",
            "https://xn--bcher-kva.example/a"
        ));
    }

    #[test]
    fn invalid_patterns_are_rejected_with_a_reason() {
        for bad in [
            "",
            "   ",
            "example.*",
            "*.example.*",
            "*.*.example.com",
            "ex*ample.com",
            "example.com/path",
            "example.com:8080",
            "exa mple.com",
            "http://",
            "://example.com",
            "https://*.example.*",
            "https://ex*ample.com/path",
            "file:///etc/passwd",
            "https://example.com/?q=1",
            "exa?mple.com",
            "*com",
            "a\\b.com",
            "*.example.com:8080",
            "*example.com:8080",
            "http*://[::1]*",
            "https://example.com/[ab]/*",
            "https://example.com/ä/*",
        ] {
            let e = DomainPattern::parse(bad).expect_err(bad);
            assert!(!e.problem.is_empty());
            assert!(e.to_string().contains("invalid domain pattern"));
        }
    }

    #[test]
    fn ip_hosts_are_normalised_and_get_no_www_variant() {
        let ip = DomainPattern::parse("10.1").unwrap();
        assert_eq!(ip.exact_host(), Some(("10.0.0.1", false)));
        let v6 = DomainPattern::parse("[0::1]").unwrap();
        assert_eq!(v6.exact_host(), Some(("[::1]", false)));
        assert!(matches("127.0.0.1", "http://2130706433/"));
        assert!(matches("0x7f.1", "http://127.0.0.1/"));
        assert!(matches("[::1]", "http://[0:0::1]/"));
    }

    #[test]
    fn url_patterns_compare_paths_case_insensitively() {
        assert!(matches(
            "https://example.com/Docs",
            "https://example.com/docs/a"
        ));
        assert!(matches(
            "https://example.com/docs",
            "https://EXAMPLE.com/DOCS"
        ));
        assert!(matches(
            "https://example.com/%C3%A4",
            "https://example.com/ä/x"
        ));
        assert!(matches(
            "https://example.com/ä",
            "https://example.com/%c3%a4"
        ));
    }

    #[test]
    fn glob_ports_and_paths() {
        // Without a path any port; with a path the default one unless written.
        assert!(matches("http*://example.com", "https://example.com:8443/"));
        assert!(!matches(
            "https://example.com/*",
            "https://example.com:8443/"
        ));
        assert!(matches(
            "https://example.com:8443/*",
            "https://example.com:8443/a"
        ));
        assert!(matches(
            "http*://example.com:8080",
            "http://example.com:8080/"
        ));
        assert!(matches("http*://[::1]:8080/*", "http://[0::1]:8080/x"));
        assert!(!matches("http*://example.com:8080", "http://example.com/"));
        // Credentials in the URL do not hide the host.
        assert!(matches(
            "https://example.com/*",
            "https://u:p@example.com/a"
        ));
        assert!(!matches(
            "https://example.com/*",
            "https://example.com@evil.com/a"
        ));
        assert!(matches(
            "https://example.com/a/*",
            "https://example.com/a/b?c=d"
        ));
        assert!(!matches(
            "https://example.com/a/*",
            "https://example.com/b/a/"
        ));
    }

    #[test]
    fn error_messages_are_bounded() {
        let long = format!("{}.*", "a".repeat(3000));
        let e = DomainPattern::parse(&long).unwrap_err();
        assert!(e.to_string().len() < 400, "{e}");
        assert_eq!(e.pattern, long);
    }
}
