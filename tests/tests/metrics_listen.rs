//! Prometheus `/metrics` is open only on the metrics listener (`--metrics-listen`, by default
//! 127.0.0.1:9464), never on the public api port: there it is 404 unless `--metrics-token` is
//! set, and then it needs the token (as does the listener).

use std::time::Duration;

use browserd_tests::{Process, TestDb, browserd_bin};

async fn get(http: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_open_only_on_the_metrics_listener() {
    browserd_llm::install_tls_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // The model address is never called (no worker).
    let model = "127.0.0.1:9".parse().unwrap();
    let db = TestDb::create().await;

    // Default: the api port has no open /metrics; the metrics listener (here on a free port,
    // which the harness picks with BROWSERD_METRICS_LISTEN=127.0.0.1:0) serves them without a key.
    let api = Process::start(&db, model, "api", &[]).await;
    assert_ne!(api.metrics_address(), api.address());
    let (status, body) = get(&http, &format!("http://{}/metrics", api.address()), None).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--metrics-listen"), "{body}");
    assert!(!body.contains("# TYPE"), "{body}");
    let metrics = format!("http://{}/metrics", api.metrics_address());
    let (status, body) = get(&http, &metrics, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("browserd_queue_depth"), "{body}");
    let (status, _) = get(
        &http,
        &format!("http://{}/healthz", api.metrics_address()),
        None,
    )
    .await;
    assert_eq!(status, 200);
    drop(api);

    // With a metrics token: required on both.
    let api = Process::start(&db, model, "api", &["--metrics-token", "m3trics"]).await;
    for address in [api.address(), api.metrics_address()] {
        let url = format!("http://{address}/metrics");
        assert_eq!(get(&http, &url, None).await.0, 401, "{url}");
        assert_eq!(get(&http, &url, Some("wrong")).await.0, 401, "{url}");
        let (status, body) = get(&http, &url, Some("m3trics")).await;
        assert_eq!(status, 200, "{url}");
        assert!(body.contains("# TYPE"), "{url}: {body}");
    }
    drop(api);

    // Empty: no metrics listener at all.
    let api = Process::start(&db, model, "api", &["--metrics-listen", ""]).await;
    assert!(api.metrics_address.is_none(), "{}", api.logs());
    let (status, _) = get(&http, &format!("http://{}/metrics", api.address()), None).await;
    assert_eq!(status, 404);
    drop(api);

    // The default address, as documented.
    let help = tokio::process::Command::new(browserd_bin())
        .args(["api", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("BROWSERD_METRICS_LISTEN=") && help.contains("[default: 127.0.0.1:9464]"),
        "{help}"
    );
}
