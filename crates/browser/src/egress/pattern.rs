//! Domain patterns for `allowed_domains` / `prohibited_domains`, with browser-use's security
//! watchdog semantics (`SecurityWatchdog._is_url_match`) and strict validation up front.
//!
//! | pattern | matches |
//! |---|---|
//! | `example.com` | host `example.com`; a root domain (exactly one dot) also `www.example.com` |
//! | `*.example.com` | `example.com` and every subdomain |
//! | `*example.com` | every host ending in `example.com` (browser-use's leading glob) |
//! | `*` | every host |
//! | `https://example.com` | URLs with that scheme, host and port whose path starts at that path |
//! | `http*://example.com` | host glob with a scheme glob, matched against `scheme://host` |
//! | `https://example.com/*`, `http*://*.example.com/*` | glob over the whole URL |
//!
//! Host patterns (no scheme) apply to web schemes only (http, https, ws, wss). Matching is
//! case-insensitive and ignores one trailing dot on the host (`evil.com.` is `evil.com`).
//! Rejected with a [`PatternError`]: empty patterns, whitespace, ports or paths without a scheme,
//! wildcards anywhere but the start of a host (`example.*`, `a*b.com`, `*.*.x`).

use std::fmt;

use url::{Host, Url};

/// A pattern that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain pattern {pattern:?}: {problem}")]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: String,
}

/// One validated pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainPattern {
    source: String,
    kind: PatternKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternKind {
    /// `*`: every host.
    AnyHost,
    /// `example.com` (normalised host); `www_variant` for root domains.
    ExactHost { host: String, www_variant: bool },
    /// `*.example.com`: the domain and all its subdomains.
    Subdomains { domain: String },
    /// `*suffix`: host ends with suffix.
    HostSuffix { suffix: String },
    /// `https://example.com/path`: same scheme, host, port; path prefix on segment boundary.
    UrlPrefix { prefix: Url },
    /// `scheme-glob://host-glob` matched against `scheme://host`.
    SchemeHostGlob { glob: String },
    /// `…/*`: glob over the whole serialised URL.
    UrlGlob { glob: String },
}

/// What a URL looks like to the matcher (normalised by the caller).
#[derive(Debug, Clone, Copy)]
pub struct MatchTarget<'a> {
    /// Lowercase scheme without `:`.
    pub scheme: &'a str,
    /// Lowercase host (IPv6 in brackets), trailing dot removed.
    pub host: &'a str,
    /// The parsed URL.
    pub url: &'a Url,
}

/// Schemes whose URLs have a host that domain patterns talk about.
pub(crate) fn is_web_scheme(scheme: &str) -> bool {
    matches!(scheme, "http" | "https" | "ws" | "wss")
}

impl DomainPattern {
    /// Parses and validates one pattern.
    pub fn parse(raw: &str) -> Result<Self, PatternError> {
        let err = |problem: &str| PatternError {
            pattern: raw.to_string(),
            problem: problem.to_string(),
        };
        let text = raw.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err(err("the pattern is empty"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err("the pattern contains whitespace or control characters"));
        }
        if text.contains('\\') {
            return Err(err("backslashes are not allowed in patterns"));
        }
        if text.contains('?') || text.contains('[') && text.contains('*') {
            return Err(err("only `*` wildcards are supported"));
        }
        let kind = if let Some((scheme, rest)) = text.split_once("://") {
            Self::parse_with_scheme(&text, scheme, rest).map_err(|p| err(&p))?
        } else {
            Self::parse_host_pattern(&text).map_err(|p| err(&p))?
        };
        Ok(Self {
            source: raw.trim().to_string(),
            kind,
        })
    }

    fn parse_with_scheme(text: &str, scheme: &str, rest: &str) -> Result<PatternKind, String> {
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
        if text.ends_with("/*") {
            return Ok(PatternKind::UrlGlob {
                glob: text.to_string(),
            });
        }
        if text.contains('*') {
            if rest.contains('/') {
                return Err(
                    "a wildcard pattern with a path must end in `/*` (it is matched against the whole URL)"
                        .into(),
                );
            }
            check_host_glob(rest)?;
            return Ok(PatternKind::SchemeHostGlob {
                glob: text.to_string(),
            });
        }
        let prefix = Url::parse(text).map_err(|e| format!("not a valid URL: {e}"))?;
        if !is_web_scheme(prefix.scheme()) || prefix.host().is_none() {
            return Err(
                "an exact URL pattern must be an http(s) or ws(s) URL with a host; use `scheme://*` globs for other schemes"
                    .into(),
            );
        }
        if prefix.query().is_some() || prefix.fragment().is_some() {
            return Err("an exact URL pattern cannot have a query or fragment".into());
        }
        Ok(PatternKind::UrlPrefix { prefix })
    }

    fn parse_host_pattern(text: &str) -> Result<PatternKind, String> {
        if text.contains('/') {
            return Err(
                "a pattern without a scheme names a host; write `https://host/path` or `https://host/*` for URL patterns"
                    .into(),
            );
        }
        if text == "*" {
            return Ok(PatternKind::AnyHost);
        }
        if let Some(domain) = text.strip_prefix("*.") {
            if domain.contains('*') {
                return Err("only one leading `*.` wildcard is supported".into());
            }
            let domain = normalize_host(domain)?;
            return Ok(PatternKind::Subdomains { domain });
        }
        if let Some(suffix) = text.strip_prefix('*') {
            if suffix.contains('*') {
                return Err("only one leading wildcard is supported".into());
            }
            if suffix.contains(':') {
                return Err(
                    "ports are not supported in host patterns; use `scheme://host:port/*`".into(),
                );
            }
            let suffix = suffix.trim_end_matches('.');
            if suffix.is_empty() || !suffix.contains('.') {
                return Err("a leading wildcard must be followed by a domain with a dot".into());
            }
            if !suffix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            {
                return Err("a wildcard suffix must be an ASCII domain name".into());
            }
            return Ok(PatternKind::HostSuffix {
                suffix: suffix.to_string(),
            });
        }
        if text.contains('*') {
            return Err(
                "wildcards are only supported at the start (`*.example.com`); wildcard TLDs like `example.*` and embedded wildcards are rejected"
                    .into(),
            );
        }
        let looks_like_v6 = text.starts_with('[');
        if !looks_like_v6 && text.contains(':') {
            return Err(
                "ports are not supported in host patterns; use an URL pattern like `http://host:8080`"
                    .into(),
            );
        }
        let host = normalize_host(text)?;
        let is_ip = host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok();
        let www_variant = !is_ip && host.matches('.').count() == 1;
        Ok(PatternKind::ExactHost { host, www_variant })
    }

    /// The pattern as configured (trimmed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the URL matches this pattern.
    pub fn matches(&self, target: &MatchTarget<'_>) -> bool {
        let web = is_web_scheme(target.scheme);
        match &self.kind {
            PatternKind::AnyHost => web,
            PatternKind::ExactHost { host, www_variant } => {
                web && (target.host == host
                    || (*www_variant && target.host.strip_prefix("www.") == Some(host.as_str())))
            }
            PatternKind::Subdomains { domain } => {
                web && (target.host == domain
                    || target
                        .host
                        .strip_suffix(domain.as_str())
                        .is_some_and(|head| head.ends_with('.')))
            }
            PatternKind::HostSuffix { suffix } => web && target.host.ends_with(suffix.as_str()),
            PatternKind::UrlPrefix { prefix } => {
                let url = target.url;
                url.scheme() == prefix.scheme()
                    && url
                        .host_str()
                        .map(|h| h.trim_end_matches('.'))
                        .is_some_and(|h| {
                            Some(h) == prefix.host_str().map(|p| p.trim_end_matches('.'))
                        })
                    && url.port_or_known_default() == prefix.port_or_known_default()
                    && path_has_prefix(url.path(), prefix.path())
            }
            PatternKind::SchemeHostGlob { glob } => {
                let subject = format!("{}://{}", target.scheme, target.host);
                glob_match(glob, &subject)
            }
            PatternKind::UrlGlob { glob } => {
                glob_match(glob, &target.url.as_str().to_ascii_lowercase())
            }
        }
    }

    /// For exact host patterns: the normalised host (used to index large lists).
    pub(crate) fn exact_host(&self) -> Option<(&str, bool)> {
        match &self.kind {
            PatternKind::ExactHost { host, www_variant } => Some((host, *www_variant)),
            _ => None,
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Normalises a host the way the browser does (IDNA to punycode, IPv4 number forms, IPv6
/// compression) and drops a trailing dot.
fn normalize_host(text: &str) -> Result<String, String> {
    let host = Host::parse(text).map_err(|e| format!("not a valid host: {e}"))?;
    let mut s = host.to_string();
    if s.ends_with('.') {
        s.pop();
    }
    if s.is_empty() {
        return Err("not a valid host".into());
    }
    Ok(s)
}

fn check_host_glob(rest: &str) -> Result<(), String> {
    if rest.ends_with(".*") {
        return Err("wildcard TLDs like `example.*` are not supported".into());
    }
    if rest.char_indices().any(|(i, c)| c == '*' && i != 0) {
        return Err("wildcards in the host are only supported at its start".into());
    }
    Ok(())
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

/// fnmatch-style glob with `*` (any run of characters) and literal everything else, over ASCII
/// lowercase input. Linear-time greedy matching with single backtrack point.
pub(crate) fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t) = (glob.as_bytes(), text.as_bytes());
    let (mut gi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ti));
            gi += 1;
        } else if gi < g.len() && g[gi] == t[ti] {
            gi += 1;
            ti += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    while gi < g.len() && g[gi] == b'*' {
        gi += 1;
    }
    gi == g.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, url: &str) -> bool {
        let p = DomainPattern::parse(pattern).expect("pattern is valid");
        let u = Url::parse(url).expect("url parses");
        let host = u.host_str().unwrap_or("").trim_end_matches('.').to_string();
        p.matches(&MatchTarget {
            scheme: u.scheme(),
            host: &host,
            url: &u,
        })
    }

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
    }

    #[test]
    fn idna_and_ip_hosts_are_normalised() {
        assert!(matches("bücher.example", "https://xn--bcher-kva.example/"));
        assert!(matches("xn--bcher-kva.example", "https://bücher.example/"));
        assert!(matches("127.0.0.1", "http://2130706433/"));
        assert!(matches("0x7f.1", "http://127.0.0.1/"));
        assert!(matches("[::1]", "http://[0:0::1]/"));
        // IP hosts never get a www variant.
        let ip = DomainPattern::parse("10.1").unwrap();
        assert_eq!(ip.exact_host(), Some(("10.0.0.1", false)));
        let v6 = DomainPattern::parse("[0::1]").unwrap();
        assert_eq!(v6.exact_host(), Some(("[::1]", false)));
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
        ] {
            let e = DomainPattern::parse(bad).expect_err(bad);
            assert!(!e.problem.is_empty());
            assert!(e.to_string().contains("invalid domain pattern"));
        }
    }

    #[test]
    fn glob_matcher() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!glob_match("a*c", "abd"));
        assert!(glob_match("http*://x.com/*", "https://x.com/a"));
        assert!(!glob_match("abc", "abcd"));
        // Pathological input stays fast.
        let text = "a".repeat(10_000);
        assert!(!glob_match("*a*a*a*a*a*a*b", &text));
    }
}
