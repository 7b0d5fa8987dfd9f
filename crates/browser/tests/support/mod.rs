//! Shared test harness: one runtime, one fixture server and one pool per test binary.
#![allow(dead_code)]

pub mod http;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{LazyLock, Mutex},
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

/// The Chrome the browser tests launch: the pool's default (the headless shell), or
/// `BROWSERD_TEST_CHROME` (e.g. `/usr/bin/chromium`, to run them against the full build).
pub fn test_chrome() -> PathBuf {
    std::env::var_os("BROWSERD_TEST_CHROME")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(browserd_browser::DEFAULT_CHROME_PATH),
            PathBuf::from,
        )
}

pub fn test_config() -> PoolConfig {
    PoolConfig {
        chrome_path: test_chrome(),
        processes: 1,
        contexts_per_process: 8,
        recycle_after_tasks: 0,
        cdp_timeout: Duration::from_secs(30),
        launch_timeout: Duration::from_secs(30),
        ..PoolConfig::default()
    }
}

static SHARED: Mutex<(usize, Option<BrowserPool>)> = Mutex::new((0, None));

/// Holds the shared pool of this test binary (one Chrome) open; the last guard to drop shuts
/// it down, so no Chrome outlives the test binary even when a test fails.
pub struct PoolGuard {
    pool: BrowserPool,
}

impl PoolGuard {
    pub fn pool(&self) -> &BrowserPool {
        &self.pool
    }
}

/// Call outside the runtime at the start of a test.
pub fn shared_pool() -> PoolGuard {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared.0 += 1;
    let pool = shared
        .1
        .get_or_insert_with(|| BrowserPool::new(test_config()).expect("pool"))
        .clone();
    PoolGuard { pool }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        let last = {
            let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            shared.0 -= 1;
            if shared.0 == 0 { shared.1.take() } else { None }
        };
        if let Some(pool) = last {
            rt().block_on(pool.shutdown());
        }
    }
}

/// Leases a session from `guard`'s pool and opens `page` from the fixture server.
pub async fn open(guard: &PoolGuard, page: &str) -> BrowserSession {
    let session = guard.pool().lease().await.expect("lease");
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
