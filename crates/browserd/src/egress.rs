//! The egress settings of the worker role and `browserd run`: the egress proxy switch, the DNS
//! servers of the egress checks, and the operator's named upstream proxies.

use std::collections::HashMap;
use std::net::SocketAddr;

use browserd_browser::PoolConfig;
use browserd_browser::egress::UpstreamProxy;
use clap::Args;

/// Egress flags shared by `worker`, `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct EgressArgs {
    /// Send all traffic of every task's browser context through browserd's egress proxy (one
    /// listener per task on 127.0.0.1), which applies the task's egress policy to every
    /// connection — WebSockets, preconnects and WebRTC over TCP included — with DNS answers
    /// pinned. `false` leaves only the CDP guard (a remote Chrome that cannot reach this
    /// host's loopback). Takes `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`.
    #[arg(
        long,
        env = "BROWSERD_EGRESS_PROXY",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub egress_proxy: bool,

    /// DNS servers (`ip:port`, comma- or space-separated) that the egress checks and the proxy query
    /// directly, honouring each answer's TTL; empty: the system resolver.
    #[arg(long, env = "BROWSERD_EGRESS_DNS", default_value = "", hide_default_value = true, value_parser = parse_dns_servers)]
    pub egress_dns: DnsServers,
}

/// The operator's named upstream proxies: every role needs them (the api validates the names
/// tasks pick, the worker connects), like the model catalog.
#[derive(Debug, Clone, Args)]
pub struct ProxiesArgs {
    /// Upstream proxies a task may pick by name (its `proxy` field): `NAME=URL` entries
    /// separated by commas or spaces, URL `http://[user:pass@]host:port` (CONNECT) or
    /// `socks5://[user:pass@]host:port` (percent-encode `,` `@` `:` in credentials).
    #[arg(
        long,
        env = "BROWSERD_PROXIES",
        default_value = "",
        global = true,
        hide_env_values = true,
        hide_default_value = true
    )]
    pub proxies: String,
}

impl ProxiesArgs {
    /// The named upstream proxies; errors name the entry, never its credentials.
    pub fn upstream_proxies(&self) -> anyhow::Result<HashMap<String, UpstreamProxy>> {
        parse_proxies(&self.proxies).map_err(|e| anyhow::anyhow!("--proxies: {e}"))
    }

    /// The names, sorted (what the api accepts in a task's `proxy`).
    pub fn names(&self) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self.upstream_proxies()?.into_keys().collect();
        names.sort();
        Ok(names)
    }
}

/// `--egress-dns`: `ip:port` addresses, comma- or space-separated; empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsServers(pub Vec<SocketAddr>);

fn parse_dns_servers(text: &str) -> Result<DnsServers, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>()
                .map_err(|_| format!("{s:?} is not ip:port (e.g. 10.0.0.2:53)"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(DnsServers)
}

impl EgressArgs {
    /// Applies the flags and the named proxies to a pool configuration.
    pub fn apply(&self, proxies: &ProxiesArgs, config: PoolConfig) -> anyhow::Result<PoolConfig> {
        Ok(PoolConfig {
            egress_proxy: self.egress_proxy,
            egress_dns: self.egress_dns.0.clone(),
            upstream_proxies: proxies.upstream_proxies()?,
            ..config
        })
    }
}

/// `NAME=URL[,| ]NAME=URL…`.
pub fn parse_proxies(text: &str) -> Result<HashMap<String, UpstreamProxy>, String> {
    let mut out = HashMap::new();
    for (i, entry) in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|e| !e.is_empty())
        .enumerate()
    {
        let Some((name, url)) = entry.split_once('=') else {
            return Err(format!("entry {i} is not NAME=URL"));
        };
        let name = name.trim();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "entry {i}: a proxy name is 1-64 characters of letters, digits, '-', '_', '.'"
            ));
        }
        let proxy = UpstreamProxy::parse(url).map_err(|e| format!("proxy {name:?}: {e}"))?;
        if out.insert(name.to_string(), proxy).is_some() {
            return Err(format!("proxy {name:?} is defined twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_servers_parse_and_empty_means_none() {
        assert_eq!(parse_dns_servers("").unwrap(), DnsServers::default());
        assert_eq!(
            parse_dns_servers("127.0.0.1:5353, [::1]:53").unwrap().0,
            vec![
                "127.0.0.1:5353".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
        assert!(
            parse_dns_servers("8.8.8.8")
                .unwrap_err()
                .contains("ip:port")
        );
    }

    #[test]
    fn proxies_parse_by_name_and_errors_hide_credentials() {
        let p = parse_proxies("corp=http://u:secret@proxy.corp:3128, res=socks5://h:1080").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p["res"].describe(), "socks5://h:1080");
        assert!(parse_proxies("").unwrap().is_empty());
        for bad in [
            "corp",
            "=http://h:1",
            "a b=http://h:1",
            "corp=ftp://u:secret@h:1",
            "corp=http://u:secret@h",
            "x=http://h:1 x=http://h:2",
        ] {
            let e = parse_proxies(bad).unwrap_err();
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
    }
}
