//! `browserd mcp --server`'s backend ([`browserd_mcp::RemoteBackend`]) against the real api:
//! its `watch` follows the task over the event WebSocket, and after a dropped connection
//! resumes from the last `seq` it saw (nothing repeated, nothing lost).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use browserd_api::ApiConfig;
use browserd_mcp::{Backend, CallContext, RemoteBackend, TaskUpdate};
use browserd_store::{NewTask, Store, TransitionDetails};
use browserd_types::{EventBody, ModelOutputEvent, TaskId, TaskOptions, Transition};
use secrecy::SecretString;
use serde_json::json;
use sqlx::PgPool;
use support::TestServer;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP relay in front of the server that records each connection's first bytes (its HTTP
/// request line) and can cut every open connection.
#[derive(Clone, Default)]
struct Relay {
    requests: Arc<Mutex<Vec<String>>>,
    open: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> (Self, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let relay = Relay::default();
        let this = relay.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let requests = this.requests.clone();
                let connection = tokio::spawn(async move {
                    let mut server = TcpStream::connect(target).await.unwrap();
                    let mut first = vec![0; 4096];
                    let n = client.read(&mut first).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&first[..n]);
                    requests
                        .lock()
                        .unwrap()
                        .push(head.lines().next().unwrap_or_default().to_owned());
                    tokio::io::AsyncWriteExt::write_all(&mut server, &first[..n])
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                this.open.lock().unwrap().push(connection);
            }
        });
        (relay, addr)
    }

    /// Drops every open connection (both sockets close).
    fn cut(&self) {
        for connection in self.open.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// The request lines of the event WebSocket's connections so far.
    fn event_requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.contains("/events"))
            .cloned()
            .collect()
    }
}

async fn model_output(store: &Store, id: TaskId, number: u32, goal: &str) -> i64 {
    let body = EventBody::ModelOutput(ModelOutputEvent {
        number,
        output: json!({"next_goal": goal, "memory": "", "action": []}),
        usage: json!({}),
    });
    store
        .append_worker_event(id, "w1", &body)
        .await
        .unwrap()
        .seq
}

async fn next(updates: &mut tokio::sync::mpsc::Receiver<TaskUpdate>) -> Option<TaskUpdate> {
    tokio::time::timeout(Duration::from_secs(30), updates.recv())
        .await
        .expect("an update within 30 s")
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn remote_watch_follows_the_event_websocket_and_resumes_after_a_drop(pool: PgPool) {
    let server = TestServer::serve(pool, ApiConfig::default(), false).await;
    let (relay, relay_addr) = Relay::start(server.addr).await;
    let backend = RemoteBackend::new(
        &format!("http://{relay_addr}"),
        SecretString::from(server.key.clone()),
    )
    .unwrap();
    let cx = CallContext::default();
    let store = &server.store;
    let new = NewTask {
        task: "climb".to_owned(),
        options: TaskOptions::default(),
        secrets: Default::default(),
        trace_context: None,
        replay: None,
    };
    let id = store.create_task(server.key_id, new).await.unwrap().id;
    store
        .claim_task("w1", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    // A goal before the watch starts is replayed; one written while it watches is streamed.
    model_output(store, id, 1, "open the page").await;
    let mut updates = backend.watch(&cx, id).await.unwrap();
    assert_eq!(
        next(&mut updates).await,
        Some(TaskUpdate::NextGoal {
            step: 1,
            goal: "open the page".to_owned()
        })
    );
    let second = model_output(store, id, 2, "climb one stair").await;
    assert_eq!(
        next(&mut updates).await,
        Some(TaskUpdate::NextGoal {
            step: 2,
            goal: "climb one stair".to_owned()
        })
    );
    // The connection drops; what is written meanwhile arrives once the watch reconnects.
    relay.cut();
    model_output(store, id, 3, "read the code").await;
    store
        .transition_claimed_task("w1", id, Transition::Finish, TransitionDetails::default())
        .await
        .unwrap();
    assert_eq!(
        next(&mut updates).await,
        Some(TaskUpdate::NextGoal {
            step: 3,
            goal: "read the code".to_owned()
        })
    );
    assert_eq!(next(&mut updates).await, Some(TaskUpdate::Ended));
    assert_eq!(next(&mut updates).await, None, "nothing after the end");
    // One stream from the start, one resumed after the last event seen: nothing was read
    // twice.
    let requests = relay.event_requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests[0].contains("after_seq=0 "), "{requests:?}");
    assert!(
        requests[1].contains(&format!("after_seq={second} ")),
        "{requests:?}"
    );
    // The key travels in a header, never in the URL.
    assert!(requests.iter().all(|r| !r.contains(&server.key)));

    // A task that does not exist (or is another key's) is the REST API's 404.
    let missing = backend.watch(&cx, TaskId::new()).await.unwrap_err();
    assert_eq!(missing.code, "task_not_found");
}
