//! Domain patterns (`example.com`, `*.example.com`, `https://*.example.com`, `http*://host`).

/// Whether `url` matches `pattern`. Without a scheme, http and https both match; `*.d` matches
/// `d` and its subdomains; a bare `*` matches every http(s) URL.
pub fn url_matches_pattern(url: &str, pattern: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let pattern = pattern.trim().to_ascii_lowercase();
    let (scheme_pattern, host_pattern) = match pattern.split_once("://") {
        Some((s, h)) => (Some(s.to_owned()), h.to_owned()),
        None => (None, pattern.clone()),
    };
    let scheme = parsed.scheme();
    let scheme_ok = match scheme_pattern.as_deref() {
        None => scheme == "http" || scheme == "https",
        Some("http*") => scheme == "http" || scheme == "https",
        Some(s) => s == scheme,
    };
    if !scheme_ok {
        return false;
    }
    let host_pattern = host_pattern
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    // A port in the pattern must match; without one, any port.
    let (host_pattern, port_pattern) = match host_pattern.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => (h, Some(p)),
        _ => (host_pattern, None),
    };
    if let Some(port) = port_pattern
        && parsed
            .port_or_known_default()
            .map(|p| p.to_string())
            .as_deref()
            != Some(port)
    {
        return false;
    }
    if host_pattern == "*" {
        return true;
    }
    if let Some(base) = host_pattern.strip_prefix("*.") {
        return host == base || host.ends_with(&format!(".{base}"));
    }
    host == host_pattern
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
        assert!(!url_matches_pattern(
            "http://127.0.0.1:9090/x",
            "127.0.0.1:8080"
        ));
        assert!(!url_matches_pattern("about:blank", "*"));
        assert!(!url_matches_pattern("not a url", "example.com"));
    }
}
