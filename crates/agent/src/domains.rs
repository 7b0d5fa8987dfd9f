//! Domain patterns of scoped secrets and page-specific actions: `browserd_domains`, the parser
//! and matcher the api and the egress policy use too, so a secret scoped to `*.example.com` is
//! filled exactly on the URLs the egress policy treats as matching `*.example.com`.

pub use browserd_domains::{DomainPattern, PatternError};

/// Whether `url` matches `pattern` (see `browserd_domains` for the semantics). An invalid
/// pattern or URL matches nothing.
pub fn url_matches_pattern(url: &str, pattern: &str) -> bool {
    browserd_domains::url_matches(url, pattern)
}

#[cfg(test)]
mod tests {
    use super::url_matches_pattern;

    #[test]
    fn patterns_match_hosts_schemes_and_ports() {
        assert!(url_matches_pattern("https://example.com/a", "example.com"));
        assert!(url_matches_pattern("http://example.com/a", "example.com"));
        assert!(!url_matches_pattern(
            "https://evil-example.com",
            "example.com"
        ));
        assert!(url_matches_pattern(
            "https://a.b.example.com",
            "*.example.com"
        ));
        assert!(url_matches_pattern("https://example.com", "*.example.com"));
        assert!(!url_matches_pattern(
            "http://example.com",
            "https://example.com"
        ));
        assert!(url_matches_pattern("http://127.0.0.1:8080/x", "127.0.0.1"));
        assert!(url_matches_pattern(
            "http://127.0.0.1:8080/x",
            "http://127.0.0.1:8080"
        ));
        // A port needs a scheme: `127.0.0.1:8080` is not a valid pattern and matches nothing.
        assert!(!url_matches_pattern(
            "http://127.0.0.1:8080/x",
            "127.0.0.1:8080"
        ));
        assert!(!url_matches_pattern("about:blank", "*"));
        assert!(!url_matches_pattern("not a url", "example.com"));
    }
}
