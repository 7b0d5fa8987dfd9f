//! The real binary with its default request limits (every other whole-system test turns them
//! off): a burst of one key's requests, and of requests with no key, gets 429s with a
//! `Retry-After`, and the flags change the limits. The counts do not depend on machine speed:
//! the bursts are far larger than the default bucket could refill while they are sent, and the
//! raised limits far larger than the bursts.

use browserd_tests::{MockModel, Process, TestDb, create_key, done_reply};
use std::{sync::Arc, time::Duration};

/// Sends `count` GET requests to `url` at once (with `key` when given); the statuses and the
/// `Retry-After` values of the 429s.
async fn burst(url: &str, key: Option<&str>, count: usize) -> (Vec<u16>, Vec<String>) {
    browserd_llm::install_tls_provider();
    let client = reqwest::Client::new();
    let requests = (0..count).map(|_| {
        let mut request = client.get(url);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    });
    let mut statuses = Vec::new();
    let mut retry_after = Vec::new();
    for response in futures::future::join_all(requests).await {
        let response = response.expect("the api answers");
        statuses.push(response.status().as_u16());
        if response.status().as_u16() == 429 {
            retry_after.push(
                response
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap_or_default().to_owned())
                    .unwrap_or_default(),
            );
        }
    }
    (statuses, retry_after)
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// Unsets the limits the test harness turns off, so the binary's defaults apply.
const DEFAULT_LIMITS: &[(&str, &str)] = &[
    ("BROWSERD_RATE_LIMIT_PER_SECOND", ""),
    ("BROWSERD_UNAUTH_RATE_LIMIT_PER_SECOND", ""),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_limits_answer_a_burst_with_429_and_retry_after_and_the_flags_change_them() {
    let model = MockModel::start(Arc::new(|_: &str| done_reply("ok", true)), Duration::ZERO).await;
    let db = TestDb::create().await;
    let key = create_key(&db).await;

    // Defaults: 20 requests a second per key (burst 40); 5 a second per address without a key
    // (burst 30). 300 requests would have to take 13 s to pass the first.
    let api = Process::start_with_env(&db, model.addr, "api", &[], DEFAULT_LIMITS).await;
    let url = format!("http://{}/v1/tasks", api.address());
    // One request first: a key not yet in the api's key cache costs a database lookup, which
    // the client address pays for (burst 30); once the key is known only its own bucket counts.
    // Without it, how many of the burst arrive before the first lookup ends depends on the
    // machine's speed.
    let (first, _) = burst(&url, Some(&key), 1).await;
    assert_eq!(first, [200]);
    let (statuses, retry_after) = burst(&url, Some(&key), 300).await;
    assert!(
        count(&statuses, 200) >= 39,
        "the burst allowance (40, one spent above) passes: {statuses:?}"
    );
    assert!(
        count(&statuses, 429) >= 100,
        "a key's burst is limited: {statuses:?}"
    );
    assert_eq!(
        count(&statuses, 200) + count(&statuses, 429),
        300,
        "{statuses:?}"
    );
    for value in &retry_after {
        let seconds: u64 = value
            .parse()
            .unwrap_or_else(|_| panic!("Retry-After is a number of seconds: {value:?}"));
        assert!(seconds >= 1, "{value}");
    }
    let (statuses, retry_after) = burst(&url, None, 200).await;
    assert!(
        count(&statuses, 429) >= 100,
        "requests with no key are limited: {statuses:?}"
    );
    assert!(
        retry_after.iter().all(|v| v.parse::<u64>().is_ok()),
        "{retry_after:?}"
    );
    drop(api);

    // The flags raise both: the same bursts pass whole.
    let api = Process::start_with_env(
        &db,
        model.addr,
        "api",
        &[
            "--rate-limit-per-second",
            "1000",
            "--rate-limit-burst",
            "1000",
            "--unauth-rate-limit-per-second",
            "1000",
            "--unauth-rate-limit-burst",
            "1000",
        ],
        DEFAULT_LIMITS,
    )
    .await;
    let url = format!("http://{}/v1/tasks", api.address());
    let (statuses, _) = burst(&url, Some(&key), 300).await;
    assert_eq!(count(&statuses, 200), 300, "{statuses:?}");
    let (statuses, _) = burst(&url, None, 200).await;
    assert_eq!(count(&statuses, 429), 0, "{statuses:?}");
    assert_eq!(count(&statuses, 401), 200, "{statuses:?}");
}
