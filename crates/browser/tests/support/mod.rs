//! Shared test harness: one runtime, one fixture server and one pool per test binary.
#![allow(dead_code)]

pub mod http;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{LazyLock, OnceLock},
    time::Duration,
};

use browserd_browser::{BrowserPool, BrowserSession, CaptureOptions, PageState, PoolConfig};

/// One multi-thread runtime per test binary: the pool's Chrome handler lives on it.
pub fn rt() -> &'static tokio::runtime::Runtime {
    static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime")
    });
    &RT
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The fixture server (127.0.0.1:<port>; `localhost:<port>` is a second site).
pub async fn server() -> SocketAddr {
    static ADDR: tokio::sync::OnceCell<SocketAddr> = tokio::sync::OnceCell::const_new();
    *ADDR.get_or_init(|| http::serve_dir(fixtures_dir())).await
}

pub fn test_config() -> PoolConfig {
    PoolConfig {
        processes: 1,
        contexts_per_process: 8,
        recycle_after_tasks: 0,
        cdp_timeout: Duration::from_secs(30),
        launch_timeout: Duration::from_secs(30),
        ..PoolConfig::default()
    }
}

/// The shared pool of this test binary (one Chrome).
pub fn pool() -> &'static BrowserPool {
    static POOL: OnceLock<BrowserPool> = OnceLock::new();
    POOL.get_or_init(|| BrowserPool::new(test_config()).expect("pool"))
}

/// Leases a session, opens `page` from the fixture server and captures it.
pub async fn open(page: &str) -> BrowserSession {
    let session = pool().lease().await.expect("lease");
    let url = format!("http://{}/{page}", server().await);
    session.navigate(&url).await.expect("navigate");
    session
}

pub async fn capture(session: &BrowserSession) -> PageState {
    session
        .capture(&CaptureOptions::default())
        .await
        .expect("capture")
}

/// Replaces every `[N]` index by its order of first appearance, so goldens do not depend on
/// Chrome's backendNodeIds (which change between runs).
pub fn normalize_indices(text: &str) -> String {
    let mut map: HashMap<String, usize> = HashMap::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('[') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !digits.is_empty() && after[digits.len()..].starts_with(']') {
            let next = map.len() + 1;
            let n = *map.entry(digits.clone()).or_insert(next);
            out.push_str(&format!("[{n}]"));
            rest = &after[digits.len() + 1..];
        } else {
            out.push('[');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Compares `actual` with tests/golden/<name>.txt; `UPDATE_GOLDEN=1` rewrites the file.
pub fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.txt"));
    let normalized = normalize_indices(actual);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &normalized).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!("missing golden {path:?}; run with UPDATE_GOLDEN=1 to create it")
    });
    assert_eq!(
        normalized, expected,
        "serialized text of {name} differs from {path:?} (UPDATE_GOLDEN=1 rewrites)"
    );
}

/// The line of `text` mentioning `needle`.
pub fn line_with<'a>(text: &'a str, needle: &str) -> Option<&'a str> {
    text.lines().find(|l| l.contains(needle))
}
