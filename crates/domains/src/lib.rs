//! browser-use's `allowed_domains` / `prohibited_domains` domain patterns: the one parser (strict
//! validation up front) and the one URL matcher of browserd. The api validates task lists with it,
//! the browser's egress policy enforces them with it, and the agent scopes secrets and
//! page-specific actions with it, so a pattern means the same thing everywhere: the api accepts
//! exactly the patterns the egress policy accepts, and a secret scoped to a pattern is filled
//! exactly on the URLs the egress policy treats as matching it. Pure logic: no I/O, no async.
//!
//! | pattern | matches |
//! |---|---|
//! | `example.com` | host `example.com`; a root domain (exactly one dot) also `www.example.com` |
//! | `*.example.com` | `example.com` and every subdomain |
//! | `*example.com` | every host ending in `example.com` (browser-use's leading glob) |
//! | `*` | every host |
//! | `93.184.215.14`, `[2001:db8::1]` | that address (normalised: `10.1` is `10.0.0.1`); no `www.` |
//! | `https://example.com/docs` | same scheme, host and port (the one written or the scheme's default); the path is a prefix on a segment boundary (`/docs`, `/docs/a`, `/docs?q`, not `/docsx`) |
//! | `http*://example.com`, `http*://*.example.com` | scheme glob and host glob; any port unless one is written; `*.` here needs a subdomain (fnmatch, like browser-use) |
//! | `https://example.com/*`, `http*://*.example.com/*` | scheme glob, host glob, port (written or default) and a glob over path + query |
//!
//! Patterns without a scheme (host patterns) apply to the web schemes only (http, https, ws,
//! wss), on any port. Matching is ASCII-case-insensitive (paths too) and ignores trailing dots on
//! hosts (`evil.com.` is `evil.com`); hosts are normalised the way the browser does (IDNA to
//! punycode, IPv4 number forms, IPv6 compression). A `*` in a glob never crosses from the host
//! into the path: `http*://*.example.com/*` does not match `https://evil.com/.example.com/`.
//!
//! Rejected with a [`PatternError`] saying why: empty patterns, whitespace or control
//! characters, backslashes, `?`/`[` wildcards, ports or paths without a scheme
//! (`example.com:8080`, `example.com/path`), IPv6 addresses without brackets, wildcards anywhere
//! but the start of a host (`example.*`, `a*b.com`, `*.*.x`, `https://ex*ample.com`), a wildcard
//! pattern whose path does not end in `/*`, exact URL patterns with a query, fragment,
//! credentials or a non-web scheme, and hosts longer than 253 characters.
//!
//! Lists: [`DomainList`] (exact hosts indexed, so long lists stay fast) and [`DomainRules`]
//! (browser-use's precedence: a non-empty allow list alone decides, otherwise the prohibit list
//! blocks). [`conformance::CASES`] is the table every user of this crate runs through its own
//! entry point.
//!
//! [`addr`] classifies IP addresses (private, loopback, link-local, metadata, …) for the
//! browser's egress policy and for webhook targets.

pub mod addr;
pub mod conformance;
mod glob;
mod pattern;
mod rules;

pub use pattern::{
    DomainPattern, MAX_HOST_CHARS, MAX_PATTERN_CHARS, OriginMatch, PatternError, UrlTarget,
};
pub use rules::{DomainList, DomainRules, Forbidden, ListError};

/// Schemes whose URLs have a host that host patterns talk about: http, https, ws, wss.
pub fn is_web_scheme(scheme: &str) -> bool {
    matches!(scheme, "http" | "https" | "ws" | "wss")
}

/// Whether `url` matches `pattern`; an invalid pattern or URL matches nothing.
pub fn url_matches(url: &str, pattern: &str) -> bool {
    DomainPattern::parse(pattern).is_ok_and(|p| p.matches_str(url))
}
