//! `browserd tasks run --follow` and `browserd tasks watch` against a real `browserd serve`
//! (real Postgres, real Chromium on local pages, mock model): the step lines arrive live, a
//! connection cut in the middle of the task is resumed from the last seq without duplicates or
//! gaps, watching a finished task replays it, and a wrong key is a clear error.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, Site, TestDb, browserd_bin, create_key};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

static ONE_SCENARIO_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const LONG: Duration = Duration::from_secs(120);

/// A TCP forwarder in front of the api whose open connections the test can cut at once (new
/// connections keep working), as a flaky network or a restarted load balancer would.
struct CuttableLink {
    addr: SocketAddr,
    cut: watch::Sender<u64>,
}

impl CuttableLink {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(0u64);
        let cuts = cut.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cut_seen = cuts.subscribe();
                cut_seen.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_seen.changed() => {}
                    }
                    // Dropping both streams resets the connection mid-stream.
                });
            }
        });
        Self { addr, cut }
    }

    fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

fn started_step(line: &str) -> Option<u32> {
    let rest = line.split("] step ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_prints_each_step_once_across_a_dropped_connection_and_watch_replays() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    // Slow enough that the cut lands while the task runs.
    let model = MockModel::start(browserd_tests::stairs_brain(), Duration::from_millis(1000)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let link = CuttableLink::start(server.address().parse().unwrap()).await;

    let mut follow = tokio::process::Command::new(browserd_bin())
        .args([
            "tasks",
            "run",
            "Climb the stairs and report the code at the top",
        ])
        .args(["--start-url", &site.url("/stairs/1?top=5")])
        .args(["--follow", "--server", &format!("http://{}", link.addr)])
        .env("BROWSERD_API_KEY", &key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = follow.stdout.take().unwrap();
    let mut lines = BufReader::new(follow.stderr.take().unwrap()).lines();
    let mut stderr = Vec::new();
    let mut cut = false;
    tokio::time::timeout(LONG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // Cut the stream right after step 2 starts: the events after it must still arrive.
            if !cut && started_step(&line) == Some(2) {
                link.cut_all();
                cut = true;
            }
            stderr.push(line);
        }
    })
    .await
    .expect("the follower ends with the task");
    let status = tokio::time::timeout(LONG, follow.wait())
        .await
        .unwrap()
        .unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    let text = stderr.join("\n");
    assert!(status.success(), "exit {status}:\n{text}\n{out}");
    assert!(cut, "step 2 was printed:\n{text}");
    assert!(
        text.contains("reconnecting from seq"),
        "the cut was noticed and resumed:\n{text}"
    );

    // stdout: the task id, then the final result.
    let mut out_lines = out.lines();
    let id = out_lines.next().expect("task id on stdout").to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{out}");
    assert!(
        out_lines
            .next()
            .is_some_and(|l| l.starts_with("The code at the top is")),
        "{out}"
    );

    // Every step line once, in order, and as many action lines as the server recorded.
    let started: Vec<u32> = stderr.iter().filter_map(|l| started_step(l)).collect();
    let expected: Vec<u32> = (0..started.len() as u32).collect();
    assert_eq!(started, expected, "each step started once:\n{text}");
    assert!(started.len() >= 5, "the climb took its steps:\n{text}");
    let client = Client::new(server.address(), &key);
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    let mut server_kinds: HashMap<String, usize> = HashMap::new();
    for event in &events {
        *server_kinds
            .entry(event["kind"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let count = |needle: &str| stderr.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(count(" → "), server_kinds["action_result"], "{text}");
    assert_eq!(
        count("  next goal: "),
        server_kinds["model_output"],
        "{text}"
    );
    assert_eq!(count(" took "), server_kinds["step"], "{text}");
    assert_eq!(count("task succeeded"), 1, "{text}");

    // Watching the finished task replays it the same way and ends at once.
    let watched = tokio::process::Command::new(browserd_bin())
        .args([
            "tasks",
            "watch",
            &id,
            "--server",
            &format!("http://{}", server.address()),
        ])
        .args(["--key-env", "MY_BROWSERD_KEY"])
        .env("MY_BROWSERD_KEY", &key)
        .output()
        .await
        .unwrap();
    let replay = String::from_utf8_lossy(&watched.stderr);
    assert!(watched.status.success(), "{replay}");
    let replayed: Vec<u32> = replay.lines().filter_map(started_step).collect();
    assert_eq!(replayed, expected, "{replay}");
    assert!(!replay.contains("reconnecting"), "{replay}");
    assert!(replay.contains("▶ task: Climb the stairs"), "{replay}");

    // A wrong key: a clear error, not a retry loop.
    let refused = tokio::process::Command::new(browserd_bin())
        .args([
            "tasks",
            "watch",
            &id,
            "--server",
            &format!("http://{}", server.address()),
        ])
        .env("BROWSERD_API_KEY", "bd_not_a_key")
        .output()
        .await
        .unwrap();
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{message}");
    assert!(message.contains("401"), "{message}");

    // No key at all: the variable to set is named.
    let missing = tokio::process::Command::new(browserd_bin())
        .args(["tasks", "watch", &id])
        .env_remove("BROWSERD_API_KEY")
        .output()
        .await
        .unwrap();
    let message = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(message.contains("BROWSERD_API_KEY"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_at_a_terminal_answers_the_tasks_question() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let waiting = browserd_tests::WaitingTask::start().await;
    let (server, key, client, id) = (&waiting.server, &waiting.key, &waiting.client, &waiting.id);

    // Watching at a terminal shows the open question and sends what is typed.
    let server_url = format!("http://{}", server.address());
    let mut terminal = browserd_tests::Terminal::spawn(
        &browserd_bin(),
        &["tasks", "watch", id, "--server", &server_url],
        &[("BROWSERD_API_KEY", key)],
    );
    let shown = terminal
        .wait_for("answer (a number, or text): ", LONG)
        .await;
    assert!(shown.contains("Which code should I report?"), "{shown}");
    terminal.type_line("A").await;
    let (status, shown) = terminal.exit(LONG).await;
    assert!(status.success(), "exit {status}:\n{shown}");
    assert!(shown.contains("the user chose A"), "{shown}");
    let done = client.wait_status(id, &["finished", "failed"], LONG).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["output"], "the user chose A");
}
