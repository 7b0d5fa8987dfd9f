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
        .with_override(HostOverride::new("intranet.example", "10.1.2.3".parse().unwrap()).unwrap())
        .with_override(HostOverride::new("public.example", "8.8.8.8".parse().unwrap()).unwrap());
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
