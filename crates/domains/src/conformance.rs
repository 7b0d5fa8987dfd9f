//! The conformance table of domain patterns. This crate's tests run it through
//! [`DomainPattern`](crate::DomainPattern) and [`DomainRules`](crate::DomainRules); each user
//! runs the same rows through its own entry point (api task validation, the egress policy's
//! `check_url`, the agent's secret scoping), so all of them agree on which patterns are valid and
//! which URLs they match.
//!
//! Matching URLs use web schemes only: the egress policy refuses every other scheme whatever the
//! lists say, so a non-web URL can only appear as a non-match. Hosts are public names and
//! addresses, so no egress rule other than the domain lists decides.

/// One pattern and what it must do.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The pattern as a client writes it.
    pub pattern: &'static str,
    /// `None`: the pattern is valid. `Some(text)`: it is rejected and the error says `text`.
    pub rejected: Option<&'static str>,
    /// URLs the pattern matches (empty for rejected patterns).
    pub matches: &'static [&'static str],
    /// URLs it does not match.
    pub does_not_match: &'static [&'static str],
}

const fn ok(
    pattern: &'static str,
    matches: &'static [&'static str],
    does_not_match: &'static [&'static str],
) -> Case {
    Case {
        pattern,
        rejected: None,
        matches,
        does_not_match,
    }
}

const fn bad(pattern: &'static str, why: &'static str) -> Case {
    Case {
        pattern,
        rejected: Some(why),
        matches: &[],
        does_not_match: &[],
    }
}

/// Every row.
pub const CASES: &[Case] = &[
    // Exact hosts: any web scheme and port; a root domain also opens `www.`.
    ok(
        "example.com",
        &[
            "https://example.com/",
            "http://example.com:8080/a?b",
            "https://www.example.com/",
            "https://EXAMPLE.com./x",
            "wss://example.com/socket",
        ],
        &[
            "https://sub.example.com/",
            "https://example.com.evil.net/",
            "https://notexample.com/",
            "ftp://example.com/",
        ],
    ),
    ok(
        "EXAMPLE.Com.",
        &["https://example.com/", "https://www.example.com/"],
        &["https://evil.com/"],
    ),
    ok(
        "  example.org  ",
        &["https://example.org/"],
        &["https://example.com/"],
    ),
    ok(
        "app.example.com",
        &["https://app.example.com/"],
        &["https://www.app.example.com/", "https://example.com/"],
    ),
    ok(
        "www.example.com",
        &["https://www.example.com/"],
        &["https://example.com/"],
    ),
    ok(
        "bücher.example",
        &["https://xn--bcher-kva.example/", "https://bücher.example/"],
        &["https://bucher.example/"],
    ),
    // Subdomain wildcard: the domain itself and every subdomain.
    ok(
        "*.example.com",
        &[
            "https://example.com/",
            "https://a.example.com/",
            "http://a.b.example.com:8080/",
        ],
        &[
            "https://badexample.com/",
            "https://example.com.evil.net/",
            "ftp://a.example.com/",
        ],
    ),
    ok(
        "*.com",
        &["https://example.com/"],
        &["https://example.org/"],
    ),
    // Leading glob and bare `*`.
    ok(
        "*google.com",
        &[
            "https://google.com/",
            "https://agoogle.com/",
            "https://www.google.com/",
        ],
        &["https://google.com.evil.net/"],
    ),
    ok(
        "*",
        &["https://anything.example/", "http://93.184.215.14/"],
        &["ftp://example.com/"],
    ),
    // IP addresses, normalised like the browser does.
    ok(
        "93.184.215.14",
        &[
            "http://93.184.215.14/",
            "https://93.184.215.14:8443/x",
            "http://1572394766/",
        ],
        &["http://93.184.215.15/"],
    ),
    ok(
        "[2606:4700:4700::1111]",
        &["http://[2606:4700:4700:0:0:0:0:1111]/"],
        &["http://[2606:4700:4700::1112]/"],
    ),
    // Exact URLs: scheme, host, port (written or default), path prefix on a segment boundary.
    ok(
        "https://example.com",
        &["https://example.com/", "https://example.com/a/b?q"],
        &[
            "http://example.com/",
            "https://example.com:8443/",
            "https://example.com.evil.net/",
            "https://www.example.com/",
        ],
    ),
    ok(
        "https://example.com/docs",
        &[
            "https://example.com/docs",
            "https://example.com/docs/a?q=1",
            "https://EXAMPLE.com/DOCS/x",
            "https://example.com:443/docs",
        ],
        &[
            "https://example.com/docsevil",
            "https://example.com/",
            "http://example.com/docs",
            "https://example.com:8443/docs",
        ],
    ),
    ok(
        "http://example.com:8080",
        &["http://example.com:8080/x"],
        &["http://example.com/", "http://example.com:8081/"],
    ),
    // Scheme globs: `scheme://host` globs, any port unless written.
    ok(
        "http*://example.com",
        &["http://example.com/", "https://example.com:8443/x"],
        &["https://www.example.com/", "wss://example.com/"],
    ),
    ok(
        "http*://*.example.com",
        &["https://a.example.com/"],
        &["https://example.com/", "https://evil.com/"],
    ),
    // URL globs: the `*` of the path never reaches back into the host.
    ok(
        "https://example.com/*",
        &["https://example.com/", "https://example.com/a?b=c"],
        &[
            "https://example.com.evil.net/a",
            "http://example.com/a",
            "https://example.com:8443/a",
        ],
    ),
    ok(
        "http*://*.example.com/*",
        &["http://x.example.com/p"],
        &[
            "https://evil.com/.example.com/",
            "https://evil.com/?x=.example.com/",
        ],
    ),
    ok("chrome-extension://*", &[], &["https://example.com/"]),
    // Rejected, with the reason.
    bad("", "empty"),
    bad("   ", "empty"),
    bad("example.*", "wildcard TLDs"),
    bad("*.example.*", "wildcard TLDs"),
    bad("*.*.example.com", "wildcard"),
    bad("a*b.com", "embedded wildcards"),
    bad("https://ex*ample.com", "embedded wildcards"),
    bad("https://*.example.*", "wildcard TLDs"),
    bad("*com", "followed by a domain with a dot"),
    bad("example.com:8080", "ports are not supported"),
    bad("[::1]:8080", "ports are not supported"),
    bad("2001:db8::1", "brackets"),
    bad("example.com/path", "without a scheme"),
    bad("exa mple.com", "whitespace"),
    bad("a\\b.com", "backslash"),
    bad("exa?mple.com", "only `*` wildcards"),
    bad(".example.com", "empty label"),
    bad("*.10.0.0.1", "not an IP address"),
    bad("http://", "nothing follows"),
    bad("://example.com", "scheme"),
    bad("http*://example.com/docs", "must end in `/*`"),
    bad("http*://example.com:*", "port must be a number"),
    bad("file:///etc/passwd", "no host"),
    bad("ftp://example.com", "http(s) or ws(s)"),
    bad("https://example.com/?q=1", "query"),
    bad("https://user@example.com", "credentials"),
    bad(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
        "at most 253",
    ),
];

#[cfg(test)]
mod tests {
    use url::Url;

    use super::CASES;
    use crate::{DomainList, DomainPattern, DomainRules, Forbidden, UrlTarget, url_matches};

    #[test]
    fn every_row_holds_for_patterns_and_rules() {
        for case in CASES {
            let parsed = DomainPattern::parse(case.pattern);
            match (case.rejected, parsed) {
                (None, Ok(pattern)) => {
                    let allow = DomainRules::new(
                        DomainList::parse(&[case.pattern]).unwrap(),
                        DomainList::default(),
                    );
                    let deny = DomainRules::new(
                        DomainList::default(),
                        DomainList::parse(&[case.pattern]).unwrap(),
                    );
                    for (url, want) in case
                        .matches
                        .iter()
                        .map(|u| (u, true))
                        .chain(case.does_not_match.iter().map(|u| (u, false)))
                    {
                        let what = format!("{:?} on {url}", case.pattern);
                        assert_eq!(pattern.matches_str(url), want, "{what}");
                        assert_eq!(url_matches(url, case.pattern), want, "{what}");
                        let parsed = Url::parse(url).expect(url);
                        let target = UrlTarget::new(&parsed).expect(url);
                        assert_eq!(allow.check(&target).is_ok(), want, "allowed {what}");
                        assert_eq!(
                            deny.check(&target)
                                .is_err_and(|f| matches!(f, Forbidden::ProhibitedDomain { .. })),
                            want,
                            "prohibited {what}"
                        );
                    }
                }
                (Some(why), Err(e)) => {
                    assert!(e.problem.contains(why), "{:?}: {e}", case.pattern);
                    assert!(e.to_string().starts_with("invalid domain pattern"), "{e}");
                    assert!(DomainList::parse(&[case.pattern]).is_err());
                }
                (want, got) => panic!("{:?}: expected {want:?}, got {got:?}", case.pattern),
            }
        }
    }

    /// The origin-level check (what a proxy sees of a connection) never refuses an origin one
    /// of whose URLs the pattern matches, and never prohibits an origin the pattern leaves
    /// partly open: every matching URL's origin is allowed by `[pattern]`, and an origin that
    /// `prohibited_domains: [pattern]` refuses as a whole has no URL the pattern does not match.
    #[test]
    fn origin_checks_agree_with_url_checks() {
        use crate::OriginMatch;
        for case in CASES.iter().filter(|c| c.rejected.is_none()) {
            let pattern = DomainPattern::parse(case.pattern).unwrap();
            let allow = DomainRules::new(
                DomainList::parse(&[case.pattern]).unwrap(),
                DomainList::default(),
            );
            for url in case.matches {
                let parsed = Url::parse(url).unwrap();
                let target = UrlTarget::new(&parsed).unwrap();
                assert_ne!(
                    pattern.matches_origin(&target),
                    OriginMatch::None,
                    "{:?} on the origin of {url}",
                    case.pattern
                );
                assert!(allow.check_origin(&[target]).is_ok(), "{url}");
            }
            for url in case.does_not_match {
                let Ok(parsed) = Url::parse(url) else {
                    continue;
                };
                let Some(target) = UrlTarget::new(&parsed) else {
                    continue;
                };
                assert_ne!(
                    pattern.matches_origin(&target),
                    OriginMatch::All,
                    "{:?} covers all of the origin of {url}, which it does not match",
                    case.pattern
                );
            }
        }
        let path = DomainPattern::parse("https://example.com/docs").unwrap();
        let origin = Url::parse("https://example.com/").unwrap();
        let target = UrlTarget::new(&origin).unwrap();
        assert_eq!(path.matches_origin(&target), OriginMatch::Some);
        let deny = DomainRules::new(
            DomainList::default(),
            DomainList::parse(&["https://example.com/docs"]).unwrap(),
        );
        assert!(deny.check_origin(std::slice::from_ref(&target)).is_ok());
        let deny = DomainRules::new(
            DomainList::default(),
            DomainList::parse(&["example.com"]).unwrap(),
        );
        assert!(deny.check_origin(&[target]).is_err());
    }

    #[test]
    fn the_table_covers_every_kind() {
        let valid = CASES.iter().filter(|c| c.rejected.is_none()).count();
        assert!(valid >= 15 && CASES.len() - valid >= 20);
    }
}
