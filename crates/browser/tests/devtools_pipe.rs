//! A launched Chrome is driven over `--remote-debugging-pipe`: it listens on no TCP port, the
//! pipe's ends are held by Chrome and the worker alone, the DevTools protocol works end to end
//! over it (a guarded task navigates, captures and clicks), and messages of 10 MB cross it both
//! ways.

mod support;

use std::collections::HashSet;

use browserd_browser::{
    Action, ActionContext, BrowserPool, ContextOptions, PoolConfig, actions::ClickParams,
    egress::EgressSettings, pool::descendant_pids,
};
use serde_json::{Value, json};
use support::{rt, server, test_config};

/// Chrome's main processes and every helper they spawned.
async fn chrome_tree(pool: &BrowserPool) -> Vec<u32> {
    let mut pids = pool.chrome_pids().await;
    for pid in pids.clone() {
        pids.extend(descendant_pids(pid));
    }
    pids
}

/// The inodes of the sockets and pipes `pid` holds open (`socket:[N]` / `pipe:[N]` links).
fn fd_inodes(pid: u32, kind: &str) -> HashSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            target
                .strip_prefix(&format!("{kind}:["))?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The inodes of the TCP sockets in LISTEN state in `pid`'s network namespace.
fn listening_inodes(pid: u32) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if fields.len() > 9
                && fields[3] == "0A"
                && let Ok(inode) = fields[9].parse()
            {
                inodes.insert(inode);
            }
        }
    }
    inodes
}

/// The listening TCP sockets among those `pids` hold.
fn listening_sockets_of(pids: &[u32]) -> Vec<(u32, u64)> {
    let mut found = Vec::new();
    for &pid in pids {
        let listening = listening_inodes(pid);
        for inode in fd_inodes(pid, "socket") {
            if listening.contains(&inode) {
                found.push((pid, inode));
            }
        }
    }
    found
}

fn guarded() -> ContextOptions {
    ContextOptions {
        egress: Some(EgressSettings {
            allow_loopback: true,
            ..EgressSettings::default()
        }),
        ..ContextOptions::default()
    }
}

async fn eval(session: &browserd_browser::BrowserSession, expr: &str) -> Value {
    let target = session.focused_target().await.expect("focused");
    let raw = session
        .cdp(
            Some(&target),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        )
        .await
        .expect("evaluate");
    let v: Value = serde_json::from_str(raw.as_str()).expect("json");
    v["result"]["result"]["value"].clone()
}

#[test]
fn chrome_listens_on_no_port_and_a_guarded_task_runs_over_its_pipe() {
    rt().block_on(async {
        // The check finds a listener where there is one: this test process's own.
        let control = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(
            !listening_sockets_of(&[std::process::id()]).is_empty(),
            "the listener check sees no listener of this process"
        );
        drop(control);

        let pool = BrowserPool::new(PoolConfig {
            contexts_per_process: 2,
            ..test_config()
        })
        .unwrap();
        let session = pool.lease_with(guarded()).await.unwrap();
        session
            .navigate(&format!("http://{}/shadow.html", server().await))
            .await
            .unwrap();
        let state = session.capture(&Default::default()).await.unwrap();
        eval(
            &session,
            "document.getElementById('open-host').shadowRoot.getElementById('open-button')\
             .addEventListener('click', () => { window.clicked = (window.clicked || 0) + 1; })",
        )
        .await;
        let button = state
            .selector_map
            .values()
            .find(|e| e.attr("id") == Some("open-button"))
            .map(|e| e.index)
            .unwrap_or_else(|| panic!("button not indexed:\n{}", state.llm_text));
        let click = Action::Click(ClickParams {
            index: Some(button),
            coordinate_x: None,
            coordinate_y: None,
        });
        let result = session.execute(&click, &ActionContext::default()).await;
        assert!(result.error.is_none(), "{result:?}");
        assert_eq!(eval(&session, "window.clicked").await, json!(1));

        // Nothing of Chrome's listens, while a task is running in it.
        let tree = chrome_tree(&pool).await;
        assert!(tree.len() > 1, "chrome has helper processes: {tree:?}");
        let listening = listening_sockets_of(&tree);
        assert!(
            listening.is_empty(),
            "Chrome's processes hold listening TCP sockets: {listening:?}"
        );
        let main = pool.chrome_pids().await[0];
        let cmdline = std::fs::read(format!("/proc/{main}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(cmdline.contains("--remote-debugging-pipe"), "{cmdline}");
        assert!(!cmdline.contains("--remote-debugging-port"), "{cmdline}");

        // The pipe's ends: Chrome's fds 3 and 4, held by Chrome and this process only (no
        // helper, no other child inherited one).
        let pipe_of = |fd: u32| -> u64 {
            let link = std::fs::read_link(format!("/proc/{main}/fd/{fd}")).unwrap();
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("pipe:[")
                .and_then(|l| l.strip_suffix(']'))
                .unwrap_or_else(|| panic!("chrome's fd {fd} is {link}, not a pipe"))
                .parse()
                .unwrap()
        };
        let pipes: HashSet<u64> = [pipe_of(3), pipe_of(4)].into();
        assert_eq!(pipes.len(), 2);
        let mut holders: Vec<u32> = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if !fd_inodes(pid, "pipe").is_disjoint(&pipes) {
                holders.push(pid);
            }
        }
        holders.sort_unstable();
        let mut expected = vec![main, std::process::id()];
        expected.sort_unstable();
        assert_eq!(holders, expected, "who holds Chrome's DevTools pipes");

        session.release().await;
        pool.shutdown().await;
        // Chrome is gone and reaped: no zombie is left under this process.
        let zombie = std::fs::read_to_string(format!("/proc/{main}/status"))
            .ok()
            .filter(|s| {
                s.lines()
                    .any(|l| l.starts_with("State:") && l.contains('Z'))
            });
        assert!(zombie.is_none(), "chrome {main} is a zombie");
    });
}

#[test]
fn ten_megabyte_messages_cross_the_pipe_both_ways() {
    rt().block_on(async {
        let pool = BrowserPool::new(test_config()).unwrap();
        let session = pool.lease().await.unwrap();
        session
            .navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        const MB10: usize = 10 * 1024 * 1024 + 17;
        // Chrome → worker: a 10 MB answer.
        let started = std::time::Instant::now();
        let answer = eval(&session, &format!("'x'.repeat({MB10})")).await;
        eprintln!("10 MB answer over the pipe: {:?}", started.elapsed());
        let text = answer.as_str().expect("a string");
        assert_eq!(text.len(), MB10);
        assert!(text.bytes().all(|b| b == b'x'));
        // Worker → Chrome: a 10 MB command.
        let literal = "y".repeat(MB10);
        let started = std::time::Instant::now();
        let length = eval(&session, &format!("'{literal}'.length")).await;
        eprintln!("10 MB command over the pipe: {:?}", started.elapsed());
        assert_eq!(length, json!(MB10));
        // The connection goes on working after them.
        let title = eval(&session, "document.title").await;
        assert!(title.is_string(), "{title}");
        session.release().await;
        pool.shutdown().await;
    });
}

/// Whether `pid` is a zombie (exited, not reaped).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

#[test]
fn chromes_death_ends_its_pipe_connection_at_once_and_it_is_reaped() {
    rt().block_on(async {
        // Calls time out after 30 s: a failure well before that is the pipe's end seen.
        let pool = BrowserPool::new(test_config()).unwrap();
        let session = pool.lease().await.unwrap();
        session
            .navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        let target = session.focused_target().await.unwrap();
        let main = pool.chrome_pids().await[0];
        let killed = std::process::Command::new("kill")
            .args(["-9", &main.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let started = std::time::Instant::now();
        let mut failed = None;
        while started.elapsed() < std::time::Duration::from_secs(10) {
            if let Err(err) = session
                .cdp(
                    Some(&target),
                    "Runtime.evaluate",
                    json!({"expression": "1"}),
                )
                .await
            {
                failed = Some(err);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let err = failed.expect("calls fail once Chrome is dead");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "seen after {:?}: {err}",
            started.elapsed()
        );
        assert!(
            matches!(err, browserd_browser::BrowserError::ConnectionClosed),
            "{err}"
        );
        drop(session);
        // The next lease gets a new Chrome, over a new pipe.
        let next = pool.lease().await.unwrap();
        next.navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        assert_ne!(pool.chrome_pids().await, vec![main]);
        next.release().await;
        pool.shutdown().await;
        assert!(!is_zombie(main), "the killed chrome {main} was not reaped");
    });
}
