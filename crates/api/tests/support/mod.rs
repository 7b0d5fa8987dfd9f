//! What the api's test binaries share: the real router served on 127.0.0.1:0 (with connection
//! info, as `browserd serve` serves it) over a fresh Postgres database, a key, an HTTP client,
//! and this binary's log lines captured for tests that check what is (not) logged.

#![allow(dead_code)] // Each test binary uses its part.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use browserd_api::ApiConfig;
use browserd_store::{EventHub, Quotas, SecretsKeyring, Store};
use browserd_types::ApiKeyId;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// The test secrets key (32 bytes, base64).
pub const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Every log line of this test binary (all tests), captured at TRACE level.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends this binary's logs to [`captured_logs`] (once; later calls do nothing).
pub fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(|| LogWriter)
        .try_init();
}

/// Everything logged so far by any test of this binary.
pub fn captured_logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned()
}

/// A running api with one key.
pub struct TestServer {
    pub addr: SocketAddr,
    pub store: Store,
    pub key: String,
    pub key_id: ApiKeyId,
    pub http: reqwest::Client,
    pub shutdown: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestServer {
    /// Serves the router with `config`; `keyring` seals task secrets (without it, tasks with
    /// secrets are refused).
    pub async fn serve(pool: PgPool, config: ApiConfig, keyring: bool) -> Self {
        Self::serve_with_quotas(pool, config, keyring, Quotas::default()).await
    }

    /// [`TestServer::serve`] with `quotas` as every key's default quotas.
    pub async fn serve_with_quotas(
        pool: PgPool,
        config: ApiConfig,
        keyring: bool,
        quotas: Quotas,
    ) -> Self {
        capture_logs();
        let mut store = Store::from_pool(pool).with_default_quotas(quotas);
        if keyring {
            store =
                store.with_secrets_keyring(SecretsKeyring::from_base64(SECRETS_KEY, &[]).unwrap());
        }
        let shutdown = CancellationToken::new();
        let (hub, _) = EventHub::start(&store, shutdown.clone()).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // As `browserd serve`: without a configured public URL, the listen address.
        let mut config = config;
        config
            .public_url
            .get_or_insert_with(|| browserd_api::PublicUrl::from_listen_address(addr));
        let app = browserd_api::router(
            browserd_tasks::TaskCore::new(store.clone(), hub),
            config,
            shutdown.clone(),
        );
        let token = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(token.cancelled_owned())
            .await
            .unwrap();
        });
        let created = store.create_api_key("test").await.unwrap();
        browserd_llm::install_tls_provider();
        TestServer {
            addr,
            store,
            key: secrecy::ExposeSecret::expose_secret(&created.key).to_owned(),
            key_id: created.record.id,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            shutdown,
        }
    }

    /// Another key of the same server.
    pub async fn new_key(&self) -> String {
        let created = self.store.create_api_key("test").await.unwrap();
        secrecy::ExposeSecret::expose_secret(&created.key).to_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A GET with the server's key.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(&self.key)
    }

    /// A POST with the server's key.
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(&self.key)
    }
}
