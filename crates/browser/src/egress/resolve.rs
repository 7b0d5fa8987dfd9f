//! Host name resolution for the egress check and the egress proxy: the system resolver behind a
//! timeout and a small cache, or given DNS servers queried directly (hickory-resolver, which
//! honours the answers' TTLs), plus static host overrides that mirror Chromium's
//! `--host-resolver-rules` (so the checker and the browser agree on where a name points).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a resolution result is reused.
const CACHE_TTL: Duration = Duration::from_secs(30);
/// Entries kept before the cache is cleared wholesale.
const CACHE_CAPACITY: usize = 4096;

/// A name that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The lookup did not finish within the configured timeout.
    #[error("DNS lookup of {host} timed out after {timeout_ms} ms")]
    Timeout {
        /// The host name.
        host: String,
        /// The timeout in milliseconds.
        timeout_ms: u64,
    },
    /// The resolver answered with an error or no addresses.
    #[error("DNS lookup of {host} failed: {detail}")]
    Failed {
        /// The host name.
        host: String,
        /// The resolver's message.
        detail: String,
    },
}

/// A static mapping from host names to one address (`MAP pattern address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOverride {
    /// `name.example` (exact) or `*.example` (the domain and its subdomains).
    pattern: String,
    /// Where the name points.
    address: IpAddr,
}

impl HostOverride {
    /// Creates an override; the pattern is an exact host or `*.domain`.
    pub fn new(pattern: &str, address: IpAddr) -> Result<Self, String> {
        let p = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
        let body = p.strip_prefix("*.").unwrap_or(&p);
        if body.is_empty()
            || !body
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "host override pattern {pattern:?} must be a host name or `*.domain`"
            ));
        }
        Ok(Self {
            pattern: p,
            address,
        })
    }

    fn matches(&self, host: &str) -> bool {
        match self.pattern.strip_prefix("*.") {
            Some(domain) => {
                host == domain
                    || host
                        .strip_suffix(domain)
                        .is_some_and(|head| head.ends_with('.'))
            }
            None => host == self.pattern,
        }
    }

    /// The Chromium `--host-resolver-rules` entry for this override.
    fn chromium_rule(&self) -> String {
        match self.address {
            IpAddr::V4(v4) => format!("MAP {} {v4}", self.pattern),
            IpAddr::V6(v6) => format!("MAP {} [{v6}]", self.pattern),
        }
    }
}

type CacheEntry = (Instant, Result<Vec<IpAddr>, ResolveError>);

/// Where lookups go.
enum Backend {
    /// getaddrinfo (through tokio), with this module's cache.
    System,
    /// These DNS servers, queried directly; hickory's cache honours each answer's TTL.
    Servers {
        resolver: Box<hickory_resolver::TokioResolver>,
        servers: Vec<SocketAddr>,
    },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::System => f.write_str("System"),
            Backend::Servers { servers, .. } => f.debug_tuple("Servers").field(servers).finish(),
        }
    }
}

/// Resolves host names for the egress check and the egress proxy.
#[derive(Debug)]
pub struct HostResolver {
    overrides: Vec<HostOverride>,
    timeout: Duration,
    backend: Backend,
    cache: Mutex<HashMap<String, CacheEntry>>,
}

impl HostResolver {
    /// The system resolver (getaddrinfo through tokio) with the given per-lookup timeout.
    pub fn system(timeout: Duration) -> Self {
        Self {
            overrides: Vec::new(),
            timeout,
            backend: Backend::System,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Queries these DNS servers (UDP, TCP when an answer is truncated) instead of the system
    /// resolver; no search domains, `/etc/hosts` not read. Answers are cached for their TTL
    /// (an answer with TTL 0 is not reused). `servers` must not be empty.
    pub fn with_servers(servers: &[SocketAddr], timeout: Duration) -> Result<Self, ResolveError> {
        use hickory_resolver::config::{
            LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
        };
        let failed = |detail: String| ResolveError::Failed {
            host: String::new(),
            detail,
        };
        if servers.is_empty() {
            return Err(failed("no DNS server given".into()));
        }
        let mut config = ResolverConfig::from_name_servers(Vec::new());
        for server in servers {
            let mut ns = NameServerConfig::udp_and_tcp(server.ip());
            for conn in &mut ns.connections {
                conn.port = server.port();
            }
            config.add_name_server(ns);
        }
        let mut builder = hickory_resolver::TokioResolver::builder_with_config(
            config,
            hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
        );
        let opts = builder.options_mut();
        opts.timeout = timeout;
        opts.attempts = 1;
        opts.ndots = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.use_hosts_file = ResolveHosts::Never;
        let resolver = builder
            .build()
            .map_err(|e| failed(format!("DNS resolver: {e}")))?;
        Ok(Self {
            overrides: Vec::new(),
            timeout,
            backend: Backend::Servers {
                resolver: Box::new(resolver),
                servers: servers.to_vec(),
            },
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Adds a static override; the first matching override wins.
    pub fn with_override(mut self, host_override: HostOverride) -> Self {
        self.overrides.push(host_override);
        self
    }

    /// The value for Chromium's `--host-resolver-rules` flag that makes the browser resolve
    /// exactly as the overrides say, or `None` without overrides.
    pub fn chromium_host_resolver_rules(&self) -> Option<String> {
        if self.overrides.is_empty() {
            return None;
        }
        let rules: Vec<String> = self
            .overrides
            .iter()
            .map(HostOverride::chromium_rule)
            .collect();
        Some(rules.join(", "))
    }

    /// Resolves `host` (lowercase, no trailing dot, not an IP literal) to its addresses.
    ///
    /// `localhost` and `*.localhost` resolve to loopback without DNS, like Chromium does.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(o) = self.overrides.iter().find(|o| o.matches(host)) {
            return Ok(vec![o.address]);
        }
        if host == "localhost" || host.ends_with(".localhost") {
            return Ok(vec![
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ]);
        }
        if let Backend::Servers { resolver, .. } = &self.backend {
            return self.lookup_servers(resolver, host).await;
        }
        if let Some(hit) = self.cached(host) {
            return hit;
        }
        let result = self.lookup(host).await;
        self.store(host, &result);
        result
    }

    async fn lookup_servers(
        &self,
        resolver: &hickory_resolver::TokioResolver,
        host: &str,
    ) -> Result<Vec<IpAddr>, ResolveError> {
        // A fully qualified name: no search domains.
        let fqdn = format!("{host}.");
        match tokio::time::timeout(self.timeout, resolver.lookup_ip(fqdn.as_str())).await {
            Err(_) => Err(ResolveError::Timeout {
                host: host.to_string(),
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            Ok(Err(e)) => Err(ResolveError::Failed {
                host: host.to_string(),
                detail: e.to_string(),
            }),
            Ok(Ok(lookup)) => {
                let mut ips: Vec<IpAddr> = lookup.iter().collect();
                ips.dedup();
                if ips.is_empty() {
                    Err(ResolveError::Failed {
                        host: host.to_string(),
                        detail: "no addresses".to_string(),
                    })
                } else {
                    Ok(ips)
                }
            }
        }
    }

    fn cached(&self, host: &str) -> Option<Result<Vec<IpAddr>, ResolveError>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(host)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, r)| r.clone())
    }

    fn store(&self, host: &str, result: &Result<Vec<IpAddr>, ResolveError>) {
        // Timeouts are not cached: the next request tries again.
        if matches!(result, Err(ResolveError::Timeout { .. })) {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(host.to_string(), (Instant::now(), result.clone()));
    }

    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let lookup = tokio::net::lookup_host((host, 80));
        match tokio::time::timeout(self.timeout, lookup).await {
            Err(_) => Err(ResolveError::Timeout {
                host: host.to_string(),
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            Ok(Err(e)) => Err(ResolveError::Failed {
                host: host.to_string(),
                detail: e.to_string(),
            }),
            Ok(Ok(addrs)) => {
                let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                ips.sort();
                ips.dedup();
                if ips.is_empty() {
                    Err(ResolveError::Failed {
                        host: host.to_string(),
                        detail: "no addresses".to_string(),
                    })
                } else {
                    Ok(ips)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn overrides_win_and_render_chromium_rules() {
        let r = HostResolver::system(Duration::from_secs(2))
            .with_override(HostOverride::new("*.test", "127.0.0.1".parse().unwrap()).unwrap())
            .with_override(HostOverride::new("v6.example", "::1".parse().unwrap()).unwrap());
        assert_eq!(
            r.resolve("allowed.test").await.unwrap(),
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            r.resolve("test").await.unwrap(),
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            r.resolve("v6.example").await.unwrap(),
            vec!["::1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            r.chromium_host_resolver_rules().as_deref(),
            Some("MAP *.test 127.0.0.1, MAP v6.example [::1]")
        );
        assert!(
            HostResolver::system(Duration::from_secs(1))
                .chromium_host_resolver_rules()
                .is_none()
        );
    }

    #[tokio::test]
    async fn localhost_names_are_loopback_without_dns() {
        let r = HostResolver::system(Duration::from_secs(2));
        for host in ["localhost", "app.localhost"] {
            let ips = r.resolve(host).await.unwrap();
            assert!(ips.iter().all(IpAddr::is_loopback), "{host}: {ips:?}");
        }
    }

    #[tokio::test]
    async fn unresolvable_names_fail_with_the_host_in_the_error() {
        let r = HostResolver::system(Duration::from_secs(5));
        let err = r.resolve("no-such-host.invalid").await.unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    }

    #[test]
    fn bad_override_patterns_are_rejected() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(HostOverride::new("", ip).is_err());
        assert!(HostOverride::new("a b", ip).is_err());
        assert!(HostOverride::new("*.", ip).is_err());
        assert!(HostOverride::new("a,b", ip).is_err());
    }
}
