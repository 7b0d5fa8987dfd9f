//! Signed webhooks end to end: a real `browserd serve` (Postgres, Chromium, mock model) and a
//! local receiver that verifies every signature. The receiver is down while the tasks run and
//! browserd restarts before it comes up: every event still arrives, in order per task, and the
//! deliveries list their last response code. A webhook to the cloud metadata address is refused
//! at registration, and one whose target turns into it later (DNS changes) is never called.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use browserd_tests::{
    Client, MockModel, Process, Site, TestDb, create_key, python_venv, stairs_brain,
};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const LONG: Duration = Duration::from_secs(120);
/// Retries at most 2 s apart, so the test does not wait for a long backoff.
const SERVE_ARGS: &[&str] = &["--allow-loopback", "--webhook-max-backoff-s", "2"];

/// What the receiver accepted: (event body, verified).
type Received = Arc<Mutex<Vec<Value>>>;

#[derive(Clone)]
struct Receiver {
    secret: Arc<Mutex<String>>,
    received: Received,
    /// The raw bodies, as sent.
    raw: Arc<Mutex<Vec<String>>>,
    rejected: Arc<Mutex<Vec<String>>>,
}

async fn hook(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let timestamp = header("x-browser-use-timestamp");
    let signature = header("x-browser-use-signature");
    let secret = receiver.secret.lock().unwrap().clone();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(&body);
    let expected = hex::encode(mac.finalize().into_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|ts| (now - ts).abs() <= 300);
    if expected != signature || !fresh {
        receiver
            .rejected
            .lock()
            .unwrap()
            .push(format!("{timestamp} {signature}"));
        return StatusCode::UNAUTHORIZED;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    // The body is the event as Python's json.dumps(sort_keys=True, separators=(",", ":")).
    assert!(!String::from_utf8_lossy(&body).contains(": "));
    receiver.received.lock().unwrap().push(event);
    receiver
        .raw
        .lock()
        .unwrap()
        .push(String::from_utf8(body.to_vec()).unwrap());
    StatusCode::NO_CONTENT
}

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// Polls a deliveries listing until `done` holds (at most [`LONG`]).
async fn poll(client: &Client, path: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let (status, list) = client.get(path).await;
        assert_eq!(status, 200, "{list}");
        let items = list["items"].as_array().cloned().unwrap_or_default();
        if done(&items) {
            return items;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deliveries never reached the expected state: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_survive_a_receiver_outage_and_a_restart() {
    let site = Site::start().await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let mut server = Process::start(&db, model.addr, "serve", SERVE_ARGS).await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);

    // The receiver's port, bound but not listening yet: connections are refused, and no
    // other test's connection can take the port meanwhile.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = reserved.local_addr().unwrap().port();
    let (status, created) = client
        .post(
            "/v1/webhooks",
            json!({"url": format!("http://127.0.0.1:{port}/hook"),
                   "events": ["created", "started", "finished", "failed", "stopped"]}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let webhook_id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    let (status, refused) = client
        .post(
            "/v1/webhooks",
            json!({"url": "http://169.254.169.254/latest/meta-data"}),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is a cloud metadata endpoint"),
        "{refused}"
    );
    // A target that passed at registration and points at the metadata address later (as a
    // DNS answer can change): the delivery path checks again and never calls it.
    let (status, metadata_hook) = client
        .post(
            "/v1/webhooks",
            json!({"url": format!("http://127.0.0.1:{port}/rebound")}),
        )
        .await;
    assert_eq!(status, 201, "{metadata_hook}");
    sqlx::query(
        "update webhooks set url = 'http://169.254.169.254/latest/meta-data' where id = $1::uuid",
    )
    .bind(metadata_hook["id"].as_str().unwrap())
    .execute(&db.pool().await)
    .await
    .unwrap();
    let (status, listed) = client.get("/v1/webhooks").await;
    assert_eq!(status, 200);
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    assert!(
        listed.to_string().find(&secret).is_none(),
        "the secret is shown once"
    );
    let (status, bad) = client
        .post("/v1/webhooks", json!({"url": "ftp://example.com/x"}))
        .await;
    assert_eq!(status, 422, "{bad}");
    let (status, bad) = client
        .post(
            "/v1/webhooks",
            json!({"url": "https://example.com/x", "events": ["exploded"]}),
        )
        .await;
    assert_eq!(status, 422, "{bad}");

    // Two tasks run to the end while the receiver is down: webhooks never hold a task.
    let mut tasks = Vec::new();
    for _ in 0..2 {
        tasks.push(
            client
                .create_task(
                    json!({"task": "Climb", "start_url": site.url("/stairs/1?top=2"),
                                    "metadata": {"n": "é"}}),
                )
                .await,
        );
    }
    for id in &tasks {
        let task = client.wait_status(id, &["finished"], LONG).await;
        assert_eq!(task["status"], "finished", "{task}");
    }
    let deliveries_path = format!("/v1/webhooks/{webhook_id}/deliveries");
    // Each task's first event was tried and waits for its next attempt; the later ones wait
    // for it (in order per task).
    let pending = poll(&client, &deliveries_path, |items| {
        items.len() == 6
            && items.iter().all(|d| {
                d["status"] == "pending"
                    && (d["event"] != "created"
                        || (d["attempts"].as_i64() >= Some(1) && d["last_error"].is_string()))
            })
    })
    .await;
    for d in &pending {
        let tried = d["attempts"].as_i64().unwrap() > 0;
        assert_eq!(tried, d["event"] == "created", "{pending:?}");
    }
    assert!(
        pending
            .iter()
            .filter_map(|d| d["last_error"].as_str())
            .all(|e| e.contains("refused")),
        "{pending:?}"
    );
    let metadata_id = metadata_hook["id"].as_str().unwrap();
    let refused = poll(
        &client,
        &format!("/v1/webhooks/{metadata_id}/deliveries"),
        |items| !items.is_empty() && items.iter().all(|d| d["status"] == "failed"),
    )
    .await;
    assert!(
        refused[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("cloud metadata"),
        "{refused:?}"
    );

    // browserd restarts; then the receiver comes up.
    server.signal("TERM").await;
    server.wait(Duration::from_secs(60)).await;
    let server = Process::start(&db, model.addr, "serve", SERVE_ARGS).await;
    let client = Client::new(server.address(), &key);
    let receiver = Receiver {
        secret: Arc::new(Mutex::new(secret.clone())),
        received: Arc::default(),
        raw: Arc::default(),
        rejected: Arc::default(),
    };
    let app = Router::new()
        .route("/hook", post(hook))
        .with_state(receiver.clone());
    let listener = reserved.listen(1024).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let received = receiver.received.clone();
    let arrived = wait_for(LONG, || received.lock().unwrap().len() >= 6).await;
    let events = received.lock().unwrap().clone();
    assert!(
        arrived,
        "every event arrives: {events:#?}\n{}",
        server.logs()
    );
    assert!(receiver.rejected.lock().unwrap().is_empty());
    for id in &tasks {
        let statuses: Vec<&str> = events
            .iter()
            .filter(|e| e["payload"]["task_id"] == json!(id))
            .map(|e| e["payload"]["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            ["created", "started", "finished"],
            "order of {id}"
        );
    }
    for event in &events {
        assert_eq!(event["type"], "agent.task.status_update");
        assert!(event["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(event["payload"]["metadata"], json!({"n": "é"}));
        assert_eq!(event["payload"]["session_id"], event["payload"]["task_id"]);
    }
    // Each body is byte for byte what Python's json.dumps(sort_keys=True, separators=(",", ":"))
    // writes for it, so receivers that re-serialize before verifying (browser-use-sdk 2.x's
    // `verify_webhook_event_signature`) agree with the signature.
    let python = python_venv("tests/python/v2/requirements.txt");
    let raw = receiver.raw.lock().unwrap().join("\n");
    let mut check = tokio::process::Command::new(python)
        .arg("-c")
        .arg(
            "import json, sys\n\
             for line in sys.stdin.read().splitlines():\n\
             \x20   again = json.dumps(json.loads(line), separators=(',', ':'), sort_keys=True)\n\
             \x20   assert again == line, (again, line)\n\
             print('same')",
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = check.stdin.take().unwrap();
        stdin.write_all(raw.as_bytes()).await.unwrap();
    }
    let checked = tokio::time::timeout(Duration::from_secs(60), check.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        checked.status.success() && String::from_utf8_lossy(&checked.stdout).contains("same"),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        raw.contains("\\u00e9"),
        "non-ASCII is escaped as Python does: {raw}"
    );

    // The receiver has the bodies; the dispatcher records each delivery after its answer.
    poll(&client, &deliveries_path, |items| {
        items
            .iter()
            .all(|d| d["status"] == "delivered" && d["last_status_code"] == 204)
    })
    .await;

    // Deleting a webhook stops its deliveries.
    let (status, _) = client.delete(&format!("/v1/webhooks/{webhook_id}")).await;
    assert_eq!(status, 204);
    let (status, _) = client.get(&deliveries_path).await;
    assert_eq!(status, 404);
}

/// A receiver that answers only once `release` is set, counting the requests it holds.
#[derive(Clone)]
struct SlowReceiver {
    entered: Arc<std::sync::atomic::AtomicUsize>,
    release: tokio::sync::watch::Receiver<bool>,
}

async fn slow_hook(State(slow): State<SlowReceiver>) -> StatusCode {
    slow.entered
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut release = slow.release.clone();
    let _ = release.wait_for(|released| *released).await;
    StatusCode::NO_CONTENT
}

async fn fast_hook(State(received): State<Received>, body: Bytes) -> StatusCode {
    received
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap());
    StatusCode::NO_CONTENT
}

async fn serve_on_loopback(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_delays_only_its_own_deliveries() {
    let model = MockModel::start(
        Arc::new(|_: &str| browserd_tests::done_reply("done", true)),
        Duration::ZERO,
    )
    .await;
    let db = TestDb::create().await;
    // A timeout longer than the test: the slow endpoint's first attempt stays in flight until
    // the test lets it answer.
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--webhook-request-timeout-s", "120"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);

    let (release, release_rx) = tokio::sync::watch::channel(false);
    let slow = SlowReceiver {
        entered: Arc::default(),
        release: release_rx,
    };
    let slow_url = serve_on_loopback(
        Router::new()
            .route("/hook", post(slow_hook))
            .with_state(slow.clone()),
    )
    .await;
    let fast_received: Received = Arc::default();
    let fast_url = serve_on_loopback(
        Router::new()
            .route("/hook", post(fast_hook))
            .with_state(fast_received.clone()),
    )
    .await;
    // The slow endpoint registered first: its deliveries come first in the outbox.
    let mut hooks = Vec::new();
    for base in [&slow_url, &fast_url] {
        let (status, created) = client
            .post(
                "/v1/webhooks",
                json!({"url": format!("{base}/hook"), "events": ["created"]}),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        hooks.push(created["id"].as_str().unwrap().to_owned());
    }
    for i in 0..3 {
        client
            .create_task(json!({"task": format!("task {i}")}))
            .await;
    }

    // Every delivery to the fast endpoint arrives while the slow one still holds its first.
    let fast = poll(
        &client,
        &format!("/v1/webhooks/{}/deliveries", hooks[1]),
        |items| items.len() == 3 && items.iter().all(|d| d["status"] == "delivered"),
    )
    .await;
    assert_eq!(fast.len(), 3);
    assert_eq!(fast_received.lock().unwrap().len(), 3);
    assert_eq!(
        slow.entered.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one attempt at a time per endpoint"
    );
    let (_, held) = client
        .get(&format!("/v1/webhooks/{}/deliveries", hooks[0]))
        .await;
    let held = held["items"].as_array().unwrap().clone();
    assert!(
        held.iter()
            .all(|d| d["status"] == "pending" && d["last_error"].is_null()),
        "the slow endpoint's attempt is still in flight, nothing failed: {held:?}"
    );

    // Let it answer: its deliveries go out one after another.
    release.send_replace(true);
    poll(
        &client,
        &format!("/v1/webhooks/{}/deliveries", hooks[0]),
        |items| items.len() == 3 && items.iter().all(|d| d["status"] == "delivered"),
    )
    .await;
    assert_eq!(slow.entered.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// A receiver on loopback that checks every signature with the secret it is given later.
async fn verifying_receiver() -> (Receiver, String) {
    let receiver = Receiver {
        secret: Arc::default(),
        received: Arc::default(),
        raw: Arc::default(),
        rejected: Arc::default(),
    };
    let url = serve_on_loopback(
        Router::new()
            .route("/hook", post(hook))
            .with_state(receiver.clone()),
    )
    .await;
    (receiver, format!("{url}/hook"))
}

/// The webhook's secret columns: (in clear, sealed).
async fn secret_columns(db: &TestDb, id: &str) -> (Option<String>, Option<Vec<u8>>) {
    sqlx::query_as("select secret, secret_sealed from webhooks where id = $1::uuid")
        .bind(id)
        .fetch_one(&db.pool().await)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_secrets_are_sealed_at_rest_and_still_sign() {
    let model = MockModel::start(
        Arc::new(|_: &str| browserd_tests::done_reply("done", true)),
        Duration::ZERO,
    )
    .await;
    let db = TestDb::create().await;
    let (old_receiver, old_url) = verifying_receiver().await;
    let (new_receiver, new_url) = verifying_receiver().await;

    // Without a secrets key the secret is stored in clear, as before.
    let mut server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback"],
        &[("BROWSERD_SECRETS_KEY", "")],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let (status, old) = client
        .post(
            "/v1/webhooks",
            json!({"url": old_url, "events": ["finished"]}),
        )
        .await;
    assert_eq!(status, 201, "{old}");
    let old_id = old["id"].as_str().unwrap().to_owned();
    let old_secret = old["secret"].as_str().unwrap().to_owned();
    *old_receiver.secret.lock().unwrap() = old_secret.clone();
    assert_eq!(
        secret_columns(&db, &old_id).await,
        (Some(old_secret.clone()), None)
    );
    server.signal("TERM").await;
    server.wait(Duration::from_secs(60)).await;

    // With a key: the row written in clear is sealed at start-up, a new one at creation.
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &key);
    let (status, new) = client
        .post(
            "/v1/webhooks",
            json!({"url": new_url, "events": ["finished"]}),
        )
        .await;
    assert_eq!(status, 201, "{new}");
    let new_id = new["id"].as_str().unwrap().to_owned();
    let new_secret = new["secret"].as_str().unwrap().to_owned();
    *new_receiver.secret.lock().unwrap() = new_secret.clone();
    for (id, secret) in [(&old_id, &old_secret), (&new_id, &new_secret)] {
        let (plain, sealed) = secret_columns(&db, id).await;
        assert_eq!(plain, None, "webhook {id} keeps no secret in clear");
        let sealed = sealed.expect("the secret is sealed");
        assert!(
            !sealed.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the sealed value does not contain the secret"
        );
    }
    let in_clear: i64 = sqlx::query_scalar(
        "select count(*) from webhooks w where w::text like '%whsec_%' or secret is not null",
    )
    .fetch_one(&db.pool().await)
    .await
    .unwrap();
    assert_eq!(in_clear, 0, "no row holds a signing secret in clear");

    // Deliveries to both still carry a signature their receiver verifies.
    let task = client.create_task(json!({"task": "t"})).await;
    let ended = client.wait_status(&task, &["finished"], LONG).await;
    assert_eq!(ended["status"], "finished", "{ended}");
    for receiver in [&old_receiver, &new_receiver] {
        let received = receiver.received.clone();
        let arrived = wait_for(LONG, || !received.lock().unwrap().is_empty()).await;
        assert!(arrived, "the event arrives:\n{}", server.logs());
        assert!(receiver.rejected.lock().unwrap().is_empty());
        assert_eq!(
            received.lock().unwrap()[0]["payload"]["task_id"],
            json!(task)
        );
    }
}
