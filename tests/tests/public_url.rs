//! URLs the api builds for clients (v2 `liveUrl`, `downloadUrl`) come from `--public-url` /
//! `BROWSERD_PUBLIC_URL`, else from the listen address — never from the request's `Host` or
//! `X-Forwarded-Host`, which a client (or a page it fetched for someone) can forge. A malformed
//! `--public-url` stops the process at startup.

use std::time::Duration;

use browserd_tests::{Process, TestDb, browserd_bin, create_key};
use serde_json::{Value, json};

/// `(downloadUrl of the task's logs, liveUrl of its session)` of a fresh v2 task, every request
/// sent with a forged `Host` and `X-Forwarded-*`.
async fn client_urls(address: &str, key: &str) -> (String, String, String) {
    browserd_llm::install_tls_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let send = |request: reqwest::RequestBuilder| async move {
        let response = request
            .header("X-Browser-Use-API-Key", key)
            .header(reqwest::header::HOST, "evil.example")
            .header("X-Forwarded-Host", "evil.example")
            .header("X-Forwarded-Proto", "https")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("evil.example"),
            "the forged host is echoed: {text}"
        );
        (status, serde_json::from_str::<Value>(&text).unwrap())
    };
    let base = format!("http://{address}/api/v2");
    let (status, created) = send(
        http.post(format!("{base}/tasks"))
            .json(&json!({"task": "read the page"})),
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let sid = created["sessionId"].as_str().unwrap();
    let (status, logs) = send(http.get(format!("{base}/tasks/{id}/logs"))).await;
    assert_eq!(status, 200, "{logs}");
    let (status, session) = send(http.get(format!("{base}/sessions/{sid}"))).await;
    assert_eq!(status, 200, "{session}");
    (
        id,
        logs["downloadUrl"].as_str().unwrap().to_owned(),
        session["liveUrl"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_urls_use_the_public_url_never_the_host_header() {
    // No worker runs (`api`): the task stays created, so its session has a liveUrl. The model
    // address is never called.
    let model = "127.0.0.1:9".parse().unwrap();

    // Configured: every URL on the public base (the trailing `/` dropped).
    let db = TestDb::create().await;
    let api = Process::start_with_env(
        &db,
        model,
        "api",
        &[],
        &[("BROWSERD_PUBLIC_URL", "https://browserd.example.com/")],
    )
    .await;
    let key = create_key(&db).await;
    let (id, download, live) = client_urls(api.address(), &key).await;
    assert_eq!(
        download,
        format!("https://browserd.example.com/api/v2/tasks/{id}/history")
    );
    assert_eq!(live, format!("https://browserd.example.com/#/tasks/{id}"));
    drop(api);

    // Unset: the listen address.
    let api = Process::start(&db, model, "api", &["--public-url", ""]).await;
    let (id, download, live) = client_urls(api.address(), &key).await;
    assert_eq!(
        download,
        format!("http://{}/api/v2/tasks/{id}/history", api.address())
    );
    assert_eq!(live, format!("http://{}/#/tasks/{id}", api.address()));
    drop(api);

    // Validated at startup: not http(s), a query, a fragment.
    for bad in [
        "ftp://browserd.example.com",
        "https://browserd.example.com/?a=1",
        "https://browserd.example.com/#top",
    ] {
        let output = tokio::process::Command::new(browserd_bin())
            .args(["api", "--public-url", bad])
            .env("DATABASE_URL", &db.url)
            .env("BROWSERD_LISTEN", "127.0.0.1:0")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{bad} was accepted: {stderr}");
        assert!(stderr.contains("--public-url"), "{bad}: {stderr}");
    }
}
