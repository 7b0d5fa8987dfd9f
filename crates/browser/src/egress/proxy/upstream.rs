//! Upstream proxies: an `http://` proxy spoken to with `CONNECT`, or a `socks5://` one, that
//! carries a task's connections after the egress checks.

use std::net::SocketAddr;

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

use super::Io;

/// An upstream proxy that carries a task's connections after the egress checks.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    kind: UpstreamKind,
    /// `host:port` of the upstream.
    address: String,
    credentials: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpstreamKind {
    Http,
    Socks5,
}

impl std::fmt::Debug for UpstreamProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamProxy")
            .field("kind", &self.kind)
            .field("address", &self.address)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl UpstreamProxy {
    /// Parses `http://[user:pass@]host:port` or `socks5://[user:pass@]host:port` (percent-encoded
    /// user and password). Errors never repeat the credentials.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text.trim())
            .map_err(|e| format!("not a proxy URL (scheme://[user:pass@]host:port): {e}"))?;
        let kind = match url.scheme() {
            "http" => UpstreamKind::Http,
            "socks5" | "socks5h" => UpstreamKind::Socks5,
            other => {
                return Err(format!(
                    "unsupported proxy scheme {other:?}: use http:// or socks5://"
                ));
            }
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or("the proxy URL has no host")?;
        let port = url
            .port()
            .ok_or("the proxy URL needs an explicit port (host:port)")?;
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err("a proxy URL has no path, query or fragment".into());
        }
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| "the proxy credentials are not valid UTF-8".to_string())
        };
        let credentials = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            Some((
                decode(url.username())?,
                decode(url.password().unwrap_or(""))?,
            ))
        };
        Ok(Self {
            kind,
            address: format!("{host}:{port}"),
            credentials,
        })
    }

    /// `http` or `socks5` and the upstream's `host:port` (no credentials), for logs.
    pub fn describe(&self) -> String {
        let scheme = match self.kind {
            UpstreamKind::Http => "http",
            UpstreamKind::Socks5 => "socks5",
        };
        format!("{scheme}://{}", self.address)
    }

    /// Opens a connection to `target` through the upstream.
    pub(super) async fn connect(&self, target: SocketAddr) -> std::io::Result<Box<dyn Io>> {
        match self.kind {
            UpstreamKind::Socks5 => {
                let stream = match &self.credentials {
                    Some((user, pass)) => {
                        tokio_socks::tcp::Socks5Stream::connect_with_password(
                            self.address.as_str(),
                            target,
                            user,
                            pass,
                        )
                        .await
                    }
                    None => {
                        tokio_socks::tcp::Socks5Stream::connect(self.address.as_str(), target).await
                    }
                }
                .map_err(|e| std::io::Error::other(format!("socks5 upstream: {e}")))?;
                Ok(Box::new(stream))
            }
            UpstreamKind::Http => {
                let mut stream = TcpStream::connect(self.address.as_str()).await?;
                let _ = stream.set_nodelay(true);
                let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
                if let Some((user, pass)) = &self.credentials {
                    let token =
                        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
                    head.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
                }
                head.push_str("\r\n");
                stream.write_all(head.as_bytes()).await?;
                // Read the answer's head byte by byte: nothing of the tunnel may be consumed.
                let mut answer = Vec::with_capacity(128);
                let mut byte = [0u8; 1];
                while !answer.ends_with(b"\r\n\r\n") {
                    if answer.len() > 8192 {
                        return Err(std::io::Error::other("http upstream: answer head too long"));
                    }
                    if stream.read(&mut byte).await? == 0 {
                        return Err(std::io::Error::other(
                            "http upstream closed the connection during CONNECT",
                        ));
                    }
                    answer.push(byte[0]);
                }
                let status_line = answer
                    .split(|b| *b == b'\r')
                    .next()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .unwrap_or_default();
                let code = status_line.split_whitespace().nth(1).unwrap_or("");
                if code != "200" {
                    return Err(std::io::Error::other(format!(
                        "http upstream refused CONNECT: {}",
                        status_line.chars().take(100).collect::<String>()
                    )));
                }
                Ok(Box::new(stream))
            }
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}
