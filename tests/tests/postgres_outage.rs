//! Postgres going away mid-task (a restart, a failover, a network cut) loses and duplicates
//! nothing: the task goes on and finishes, its steps and events are contiguous, and a
//! WebSocket client that is dropped resumes from the last `seq` it saw. The outage is made by a
//! TCP relay between browserd and the real Postgres server (reached over TCP, or its Unix
//! socket) that drops every connection and refuses new ones for a while — the shared server
//! itself is never touched.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use browserd_tests::{
    Client, MockModel, Process, Site, TestDb, assert_steps_contiguous, climb_task, create_key,
    stairs_brain, stored_steps,
};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

const LONG: Duration = Duration::from_secs(120);

/// Where the relay connects: Postgres's TCP address, or its Unix socket (the private cluster
/// of `scripts/test` on a machine with no server on 5432 gives a `?host=/dir` URL).
#[derive(Clone, Debug)]
enum Upstream {
    Tcp(String),
    Unix(PathBuf),
}

/// Relays TCP connections to Postgres until cut.
struct PgRelay {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
}

impl PgRelay {
    async fn start(upstream: Upstream) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let relay_down = down.clone();
        let relay_cuts = cuts.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if relay_down.load(Ordering::SeqCst) {
                    drop(client); // refused while Postgres is "down"
                    continue;
                }
                let upstream = upstream.clone();
                let cut = relay_cuts.subscribe();
                tokio::spawn(async move {
                    match upstream {
                        Upstream::Tcp(address) => {
                            if let Ok(server) = TcpStream::connect(&address).await {
                                relay(client, server, cut).await;
                            }
                        }
                        Upstream::Unix(path) => {
                            if let Ok(server) = UnixStream::connect(&path).await {
                                relay(client, server, cut).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, down, cuts }
    }

    /// Drops every relayed connection and refuses new ones.
    fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// Copies both ways until either side closes or the relay is cut.
async fn relay<S>(mut client: TcpStream, mut server: S, mut cut: watch::Receiver<u64>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.changed() => {} // both sockets dropped: connection reset
    }
}

/// `url`'s server (`postgres://user@host:port/db`, or `postgres:///db?host=/dir&user=u`), and
/// the URL with `relay` there instead.
fn split_server(url: &str, relay: Option<SocketAddr>) -> (Upstream, String) {
    let parsed = url::Url::parse(url).unwrap();
    let query: HashMap<String, String> = parsed.query_pairs().into_owned().collect();
    let port = query
        .get("port")
        .cloned()
        .or_else(|| parsed.port().map(|port| port.to_string()))
        .unwrap_or_else(|| "5432".to_owned());
    let upstream = match query.get("host") {
        Some(dir) if dir.starts_with('/') => {
            Upstream::Unix(PathBuf::from(dir).join(format!(".s.PGSQL.{port}")))
        }
        _ => Upstream::Tcp(format!("{}:{port}", parsed.host_str().unwrap())),
    };
    let user = query
        .get("user")
        .map_or_else(|| parsed.username().to_owned(), Clone::clone);
    let password = parsed
        .password()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let relayed = relay.map_or_else(String::new, |addr| {
        format!("postgres://{user}{password}@{addr}{}", parsed.path())
    });
    (upstream, relayed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_going_away_mid_task_loses_and_repeats_nothing() {
    let db = TestDb::create().await;
    let (upstream, _) = split_server(&db.url, None);
    let relay = PgRelay::start(upstream).await;
    let (_, relayed_url) = split_server(&db.url, Some(relay.addr));
    let site = Site::start().await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(300)).await;
    let server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback"],
        &[("DATABASE_URL", relayed_url.as_str())],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let id = client.create_task(climb_task(&site, 8)).await;

    let mut events: Vec<Value> = Vec::new();
    let mut stream = client.events(&id, 0).await;
    let mut outage_done = false;
    loop {
        let next = stream.next(LONG).await;
        match next {
            Some(event) => {
                let terminal = event["kind"] == "status"
                    && ["finished", "failed", "stopped"]
                        .contains(&event["payload"]["status"].as_str().unwrap_or(""));
                let second_step = event["kind"] == "step" && event["payload"]["number"] == 2;
                events.push(event);
                if terminal {
                    break;
                }
                if second_step && !outage_done {
                    outage_done = true;
                    relay.cut();
                    // Down long enough for every connection of browserd (api, worker, hub) to
                    // fail and reconnect attempts to be refused; far shorter than the lease.
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    relay.restore();
                }
            }
            None => {
                // The api closed the stream (it lost its database): resume from the last seq.
                let last = events.last().map_or(0, |e| e["seq"].as_i64().unwrap());
                stream = client.events(&id, last).await;
            }
        }
    }
    assert!(outage_done, "the outage happened mid-task");
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"],
            json!(i as i64 + 1),
            "events are contiguous, none repeated: {events:#?}"
        );
    }
    let task = client.task(&id).await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert!(
        task["output"]
            .as_str()
            .unwrap_or_default()
            .contains("CODE8X"),
        "{task}"
    );
    let steps = stored_steps(&client, &id).await;
    assert_steps_contiguous(&steps);
    let step_events = events.iter().filter(|e| e["kind"] == "step").count();
    assert_eq!(step_events, steps.len(), "one step event per step");
}
