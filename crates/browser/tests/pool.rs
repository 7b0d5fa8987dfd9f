//! Pool lifecycle against real Chromium: isolation, recycling, crash replacement, reaping,
//! remote endpoints.

mod support;

use std::{io::BufRead, time::Duration};

use browserd_browser::{
    BrowserError, BrowserPool, ContextOptions, PoolConfig,
    egress::EgressSettings,
    pool::{descendant_pids, pid_alive},
};
use serde_json::json;
use support::{rt, server, test_config};

fn all_alive(pids: &[u32]) -> Vec<u32> {
    pids.iter().copied().filter(|p| pid_alive(*p)).collect()
}

/// Chrome main processes plus every helper they spawned.
async fn chrome_tree(pool: &BrowserPool) -> Vec<u32> {
    let mut pids = pool.chrome_pids().await;
    for pid in pids.clone() {
        pids.extend(descendant_pids(pid));
    }
    pids
}

#[test]
fn contexts_are_isolated_and_shutdown_reaps_everything() {
    rt().block_on(async {
        let pool = BrowserPool::new(PoolConfig { contexts_per_process: 2, ..test_config() }).unwrap();
        let base = format!("http://{}/rules.html", server().await);
        let a = pool.lease().await.unwrap();
        let b = pool.lease().await.unwrap();
        assert_ne!(a.context_id(), b.context_id());
        a.navigate(&base).await.unwrap();
        b.navigate(&base).await.unwrap();
        let ta = a.focused_target().await.unwrap();
        let tb = b.focused_target().await.unwrap();
        a.cdp(Some(&ta), "Runtime.evaluate", json!({"expression": "document.cookie='k=secret-a'; localStorage.setItem('k','a')"})).await.unwrap();
        let cookie = b.cdp(Some(&tb), "Runtime.evaluate", json!({"expression": "document.cookie + '|' + localStorage.getItem('k')", "returnByValue": true})).await.unwrap();
        assert!(!cookie.as_str().contains("secret-a"), "cookie leaked: {}", cookie.as_str());
        assert!(cookie.as_str().contains("|null"), "storage leaked: {}", cookie.as_str());
        // Both contexts share one Chrome (contexts_per_process = 2).
        assert_eq!(pool.chrome_pids().await.len(), 1);
        let tree = chrome_tree(&pool).await;
        assert!(tree.len() > 1, "chrome has helper processes: {tree:?}");
        let dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir()).unwrap().flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("browserd-chrome-")).map(|e| e.path()).collect();
        a.release().await;
        drop(b); // released in the background
        pool.shutdown().await;
        assert!(all_alive(&tree).is_empty(), "processes outlived the pool: {:?}", all_alive(&tree));
        assert!(pool.lease().await.is_err(), "leasing after shutdown fails");
        for dir in dirs {
            // Our pool's profile dir is gone (other binaries may own other dirs).
            if !dir.exists() { return; }
        }
        panic!("no browserd user-data-dir was removed");
    });
}

/// The processes of a pool's Chrome whose command line has `flag`.
async fn chrome_helpers_with(pool: &BrowserPool, flag: &str) -> usize {
    let mut count = 0;
    for pid in chrome_tree(pool).await {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        // Chrome rewrites its helpers' command lines into one space-separated string.
        let args = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if args.split(' ').any(|arg| arg == flag) {
            count += 1;
        }
    }
    count
}

/// Both builds run headless from the same flags: the headless shell (the default) without a
/// window, the full build (`--chrome /usr/bin/chromium`) in its new headless mode, where every
/// browser context gets a window with a top-chrome WebUI renderer of its own.
#[test]
fn the_headless_shell_and_the_full_build_both_run_tasks() {
    rt().block_on(async {
        let page = format!("http://{}/rules.html", server().await);
        for (chrome, build) in [
            (
                browserd_browser::DEFAULT_CHROME_PATH,
                browserd_browser::ChromeBuild::HeadlessShell,
            ),
            (
                browserd_browser::FULL_CHROME_PATH,
                browserd_browser::ChromeBuild::Full,
            ),
        ] {
            assert_eq!(
                browserd_browser::ChromeBuild::of_executable(chrome.as_ref()),
                build
            );
            let pool = BrowserPool::new(PoolConfig {
                chrome_path: chrome.into(),
                contexts_per_process: 2,
                spare_contexts: 0,
                ..test_config()
            })
            .unwrap();
            let a = pool.lease().await.unwrap();
            // Chrome starts with no tab of its own (`--no-startup-window`): the lease's is the
            // only page.
            assert_eq!(pages(&a).await, 1, "{chrome}");
            let b = pool.lease().await.unwrap();
            for session in [&a, &b] {
                session.navigate(&page).await.unwrap();
                let target = session.focused_target().await.unwrap();
                let agent = session
                    .cdp(
                        Some(&target),
                        "Runtime.evaluate",
                        json!({"expression": "navigator.userAgent", "returnByValue": true}),
                    )
                    .await
                    .unwrap();
                assert!(
                    agent.as_str().contains("HeadlessChrome/"),
                    "{chrome}: {}",
                    agent.as_str()
                );
            }
            let webui = chrome_helpers_with(&pool, "--top-chrome-webui").await;
            match build {
                browserd_browser::ChromeBuild::HeadlessShell => {
                    assert_eq!(webui, 0, "the shell has no windows");
                    assert_eq!(
                        chrome_helpers_with(&pool, "--headless=new").await,
                        0,
                        "{chrome}"
                    );
                }
                browserd_browser::ChromeBuild::Full => {
                    assert!(webui >= 1, "the windows have WebUI renderers: {webui}");
                }
            }
            a.release().await;
            b.release().await;
            // Left with no tab at all, neither build exits: the next task gets the same Chrome.
            let chrome_pids = pool.chrome_pids().await;
            let c = pool.lease().await.unwrap();
            c.navigate(&page).await.unwrap();
            assert_eq!(pool.chrome_pids().await, chrome_pids, "{chrome}");
            assert_eq!(pages(&c).await, 1, "{chrome}");
            c.release().await;
            pool.shutdown().await;
        }
    });
}

/// The pages Chrome has open, in every context (a browser-level `Target.getTargets`).
async fn pages(session: &browserd_browser::BrowserSession) -> usize {
    let targets = session
        .cdp(None, "Target.getTargets", json!({}))
        .await
        .unwrap();
    let targets: serde_json::Value = targets.decode().unwrap();
    targets["targetInfos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "page")
        .count()
}

#[test]
fn recycles_after_n_tasks_and_replaces_dead_chrome() {
    rt().block_on(async {
        let pool = BrowserPool::new(PoolConfig {
            contexts_per_process: 1,
            recycle_after_tasks: 2,
            ..test_config()
        })
        .unwrap();
        let first = pool.lease().await.unwrap();
        let pid1 = pool.chrome_pids().await[0];
        first.release().await;
        pool.lease().await.unwrap().release().await;
        // Two tasks served: the process was recycled.
        let tree1: Vec<u32> = std::iter::once(pid1).collect();
        let third = pool.lease().await.unwrap();
        let pid2 = pool.chrome_pids().await[0];
        assert_ne!(pid1, pid2, "a new chrome after two tasks");
        // Closing may take Browser.close's and the exit wait's caps on a loaded machine.
        for _ in 0..600 {
            if all_alive(&tree1).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            all_alive(&tree1).is_empty(),
            "recycled chrome still running"
        );
        third.release().await;

        // Kill chrome behind the pool's back: the next lease gets a fresh one.
        let victim = pool.lease().await.unwrap();
        let pid3 = pool.chrome_pids().await[0];
        std::process::Command::new("kill")
            .args(["-9", &pid3.to_string()])
            .status()
            .unwrap();
        for _ in 0..100 {
            if !pid_alive(pid3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let err = victim.capture(&Default::default()).await;
        assert!(err.is_err(), "capturing on a dead chrome fails");
        victim.release().await;
        let fresh = pool.lease().await.unwrap();
        let pid4 = pool.chrome_pids().await[0];
        assert_ne!(pid3, pid4);
        fresh
            .navigate(&format!("http://{}/modal.html", server().await))
            .await
            .unwrap();
        assert!(
            fresh
                .capture(&Default::default())
                .await
                .unwrap()
                .llm_text
                .contains("Close dialog")
        );
        fresh.release().await;
        let tree = chrome_tree(&pool).await;
        pool.shutdown().await;
        assert!(all_alive(&tree).is_empty());
    });
}

#[test]
fn remote_endpoint_mode() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let chrome = std::path::Path::new(browserd_browser::DEFAULT_CHROME_PATH);
        // The program itself, not Debian's wrapper script (killing the script would leave
        // Chrome running).
        let mut child =
            std::process::Command::new(browserd_browser::launch::wrapped_executable(chrome))
                .args(browserd_browser::ChromeBuild::of_executable(chrome).build_flags())
                .args(browserd_browser::CHROME_FLAGS)
                .arg("--no-sandbox")
                .arg("--remote-debugging-port=0")
                .arg(format!("--user-data-dir={}", dir.path().display()))
                .arg("about:blank")
                .env("LANG", "C")
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
        let stderr = child.stderr.take().unwrap();
        let ws = tokio::task::spawn_blocking(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    return Some(url.trim().to_owned());
                }
            }
            None
        })
        .await
        .unwrap()
        .expect("devtools url");
        let pool = BrowserPool::new(PoolConfig {
            remote_endpoints: vec![ws],
            ..test_config()
        })
        .unwrap();
        let session = pool.lease().await.unwrap();
        session
            .navigate(&format!("http://{}/shadow.html", server().await))
            .await
            .unwrap();
        let state = session.capture(&Default::default()).await.unwrap();
        assert!(
            state.llm_text.contains("Open shadow button"),
            "{}",
            state.llm_text
        );
        session.release().await;
        pool.shutdown().await;
        // The pool does not own a remote browser: it is still running.
        assert!(child.try_wait().unwrap().is_none());
        child.kill().unwrap();
        child.wait().unwrap();
    });
}

#[test]
fn a_target_gets_one_session_however_many_ask_at_once() {
    rt().block_on(async {
        let pool = BrowserPool::new(test_config()).unwrap();
        let session = pool.lease().await.unwrap();
        // A tab nobody in the session has attached to yet (as when a page opens one).
        let created = session
            .cdp(
                None,
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": session.context_id()}),
            )
            .await
            .unwrap()
            .decode::<serde_json::Value>()
            .unwrap();
        let target = created["targetId"].as_str().unwrap().to_owned();
        let asks = (0..4).map(|_| session.session_for_target(&target));
        let sessions: Vec<String> = futures::future::join_all(asks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(
            sessions.iter().all(|s| s == &sessions[0]),
            "one CDP session per target, got {sessions:?}"
        );
        // The tab is usable through that session.
        session.switch_tab(&target).await.unwrap();
        session
            .navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        let state = session.capture(&Default::default()).await.unwrap();
        assert!(!state.selector_map.is_empty(), "{}", state.llm_text);
        session.release().await;
        pool.shutdown().await;
    });
}

/// Not a test on its own: the process `chrome_does_not_outlive_a_killed_worker` starts and kills.
#[test]
#[ignore = "helper process of chrome_does_not_outlive_a_killed_worker"]
fn helper_worker_holding_a_chrome() {
    if std::env::var_os("BROWSERD_TEST_HELPER_WORKER").is_none() {
        return;
    }
    rt().block_on(async {
        let pool = BrowserPool::new(test_config()).unwrap();
        let _session = pool.lease().await.unwrap();
        let pids: Vec<String> = chrome_tree(&pool)
            .await
            .iter()
            .map(u32::to_string)
            .collect();
        println!("CHROME_PIDS {}", pids.join(" "));
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}

#[test]
fn chrome_does_not_outlive_a_killed_worker() {
    let mut worker = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "helper_worker_holding_a_chrome",
            "--nocapture",
        ])
        .env("BROWSERD_TEST_HELPER_WORKER", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = worker.stdout.take().unwrap();
    let pids: Vec<u32> = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("CHROME_PIDS ")
                .map(|p| p.split(' ').filter_map(|x| x.parse().ok()).collect())
        })
        .expect("the helper reports its Chrome");
    assert!(!all_alive(&pids).is_empty(), "Chrome runs: {pids:?}");
    // SIGKILL: no destructor, no shutdown.
    worker.kill().unwrap();
    worker.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !all_alive(&pids).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        all_alive(&pids).is_empty(),
        "Chrome outlived its killed worker: {:?}",
        all_alive(&pids)
    );
}

/// Captures `session` until its state reports a browser error (the crash event arrives on its
/// own), at most 60 captures.
async fn capture_until_browser_error(
    session: &browserd_browser::BrowserSession,
) -> browserd_browser::PageState {
    for _ in 0..60 {
        if let Ok(state) = session.capture(&Default::default()).await
            && !state.browser_errors.is_empty()
        {
            return state;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no browser error reported");
}

#[test]
fn a_crashed_tab_is_replaced_and_only_its_session_notices() {
    rt().block_on(async {
        let pool = BrowserPool::new(PoolConfig {
            contexts_per_process: 2,
            ..test_config()
        })
        .unwrap();
        let url = format!("http://{}/rules.html", server().await);
        let a = pool.lease().await.unwrap();
        let b = pool.lease().await.unwrap();
        a.navigate(&url).await.unwrap();
        b.navigate(&url).await.unwrap();
        let before = b.capture(&Default::default()).await.unwrap();
        let chrome = pool.chrome_pids().await;
        let crashed_tab = a.focused_target().await.unwrap();
        // A call in flight on the tab, and Page.crash itself: Chrome answers neither (it holds
        // a crashed target's commands for a renderer that never comes); both end when the
        // crash is reported, not at their timeouts, and so does a later call on the tab.
        let in_flight = a.cdp(
            Some(&crashed_tab),
            "Runtime.evaluate",
            json!({"expression": "new Promise(() => {})", "awaitPromise": true}),
        );
        let crash = a.cdp(Some(&crashed_tab), "Page.crash", json!({}));
        let (in_flight, crash) = tokio::join!(in_flight, crash);
        for ended in [in_flight, crash] {
            assert!(
                matches!(ended, Err(BrowserError::TargetCrashed { .. })),
                "{ended:?}"
            );
        }
        let later = a
            .cdp(
                Some(&crashed_tab),
                "Runtime.evaluate",
                json!({"expression": "1"}),
            )
            .await;
        assert!(
            matches!(later, Err(BrowserError::TargetCrashed { .. })),
            "{later:?}"
        );
        let state = capture_until_browser_error(&a).await;
        assert_eq!(state.browser_errors.len(), 1, "{:?}", state.browser_errors);
        let notice = &state.browser_errors[0];
        assert!(
            notice.contains("crashed") && notice.contains("reopened"),
            "{notice}"
        );
        // Reopened at the same address, in a new tab, focused.
        assert_eq!(state.url, url);
        assert_eq!(state.tabs.len(), 1, "{:?}", state.tabs);
        assert_ne!(a.focused_target().await.unwrap(), crashed_tab);
        // The same page (a new document: its element indices differ).
        let without_indices = |text: &str| {
            text.lines()
                .map(|l| {
                    l.trim_start_matches(['\t', '*'])
                        .split_once(']')
                        .map_or(l, |(_, rest)| rest)
                        .to_owned()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            without_indices(&state.llm_text),
            without_indices(&before.llm_text),
            "the page is back"
        );
        // The next capture has nothing more to say.
        assert!(
            a.capture(&Default::default())
                .await
                .unwrap()
                .browser_errors
                .is_empty()
        );
        // The other session, in the same Chrome, noticed nothing.
        let other = b.capture(&Default::default()).await.unwrap();
        assert!(
            other.browser_errors.is_empty(),
            "{:?}",
            other.browser_errors
        );
        assert_eq!(other.llm_text, before.llm_text);
        assert!(!a.browser_lost() && !b.browser_lost());
        assert_eq!(pool.chrome_pids().await, chrome, "Chrome lived on");
        a.release().await;
        b.release().await;
        pool.shutdown().await;
    });
}

#[test]
fn a_hung_chrome_is_killed_and_the_next_lease_gets_a_new_one() {
    rt().block_on(async {
        let pool = BrowserPool::new(PoolConfig {
            health_interval: Duration::from_millis(200),
            hang_timeout: Duration::from_secs(2),
            ..test_config()
        })
        .unwrap();
        let session = pool.lease().await.unwrap();
        session
            .navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        let hung = pool.chrome_pids().await;
        assert_eq!(hung.len(), 1);
        // SIGSTOP: the process lives but answers nothing, as a hung browser.
        let stopped = std::process::Command::new("sh")
            .args(["-c", &format!("kill -STOP {}", hung[0])])
            .status()
            .unwrap();
        assert!(stopped.success());
        let mut waited = 0;
        while !session.browser_lost() {
            assert!(waited < 300, "the hung Chrome was not killed");
            waited += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(session.capture(&Default::default()).await.is_err());
        session.release().await;
        let fresh = pool.lease().await.unwrap();
        fresh
            .navigate(&format!("http://{}/rules.html", server().await))
            .await
            .unwrap();
        let now = pool.chrome_pids().await;
        assert!(!now.contains(&hung[0]), "a new Chrome: {now:?} vs {hung:?}");
        fresh.release().await;
        pool.shutdown().await;
        assert!(!pid_alive(hung[0]), "the hung Chrome is gone");
    });
}

/// A Chrome executable that starts only when the test lets it: each launch waits for a line on
/// a FIFO, then execs Debian's Chromium.
struct GatedChrome {
    dir: tempfile::TempDir,
}

impl GatedChrome {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gate");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let script = dir.path().join("chromium");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n# EOF (another launch took the line): wait for the next writer.\n\
                 while ! read _ < '{}'; do :; done\nexec {} \"$@\"\n",
                fifo.display(),
                browserd_browser::pool::DEFAULT_CHROME_PATH
            ),
        )
        .unwrap();
        // Chrome runs as another user (the tests run as root): it must reach both.
        for (path, mode) in [
            (dir.path().to_path_buf(), 0o755),
            (script, 0o755),
            (fifo, 0o666),
        ] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        Self { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("chromium")
    }

    /// Lets one waiting launch go on (blocks until one is waiting).
    async fn open(&self) {
        let fifo = self.dir.path().join("gate");
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut gate = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            gate.write_all(b"go\n").unwrap();
        })
        .await
        .unwrap();
    }
}

#[test]
fn a_chrome_launch_does_not_hold_up_leases_on_other_chromes() {
    rt().block_on(async {
        let gated = GatedChrome::new();
        let pool = BrowserPool::new(PoolConfig {
            chrome_path: gated.path(),
            processes: 2,
            contexts_per_process: 1,
            ..test_config()
        })
        .unwrap();
        let first = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.lease().await })
        };
        gated.open().await;
        let first = first.await.unwrap().unwrap();
        let chrome1 = pool.chrome_pids().await[0];
        // The first Chrome is full: the second lease waits for slot 2's launch (already started
        // ahead of need), which the gate holds.
        let second = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.lease().await })
        };
        first.release().await;
        // While that launch is held, a lease that fits in the first Chrome gets it at once
        // (before, the launch held the pool's lock and this lease waited for it).
        let third = tokio::time::timeout(Duration::from_secs(60), pool.lease())
            .await
            .expect("a lease on a Chrome with room waited for another Chrome's launch")
            .unwrap();
        assert!(
            !second.is_finished(),
            "the second lease still waits for its Chrome"
        );
        assert_eq!(pool.chrome_pids().await[0], chrome1);
        gated.open().await;
        let second = second.await.unwrap().unwrap();
        let pids = pool.chrome_pids().await;
        assert_eq!(pids.len(), 2, "two Chromes: {pids:?}");
        assert_ne!(pids[0], pids[1]);
        let tree = chrome_tree(&pool).await;
        third.release().await;
        second.release().await;
        pool.shutdown().await;
        assert!(all_alive(&tree).is_empty(), "processes outlived the pool");
    });
}

/// Waits (capped) until the pool shows `count` Chrome processes; a spare's launch is on its way.
async fn wait_for_chromes(pool: &BrowserPool, count: usize) -> Vec<u32> {
    for _ in 0..600 {
        let pids = pool.chrome_pids().await;
        if pids.len() >= count {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the pool never had {count} Chromes: {:?}",
        pool.chrome_pids().await
    );
}

#[test]
fn a_warm_spare_takes_over_from_a_used_up_chrome_and_warm_up_starts_the_first() {
    rt().block_on(async {
        let pool = BrowserPool::new(PoolConfig {
            contexts_per_process: 1,
            recycle_after_tasks: 2,
            ..test_config()
        })
        .unwrap();
        // Started before any lease: the first lease finds it running.
        pool.warm_up().await;
        let warm = wait_for_chromes(&pool, 1).await[0];
        let first = pool.lease().await.unwrap();
        assert_eq!(
            pool.chrome_pids().await[0],
            warm,
            "the warm Chrome took the lease"
        );
        // One lease left before it is recycled: its successor starts now.
        let pids = wait_for_chromes(&pool, 2).await;
        assert_eq!(pids[0], warm);
        let spare = pids[1];
        first.release().await;
        pool.lease().await.unwrap().release().await;
        // Used up and closed; the next lease goes to the spare, launched ahead.
        let third = pool.lease().await.unwrap();
        assert_eq!(pool.chrome_pids().await[0], spare);
        third
            .navigate(&format!("http://{}/modal.html", server().await))
            .await
            .unwrap();
        let tree = chrome_tree(&pool).await;
        third.release().await;
        pool.shutdown().await;
        assert!(all_alive(&tree).is_empty(), "processes outlived the pool");
        assert!(!pid_alive(warm), "the used-up Chrome is gone");
    });
}

/// `spare_contexts: 3`: a Chrome keeps three contexts opened ahead, three leases in a row
/// take them (each its own context, working), the next opens one at the lease, and the
/// spares are refilled up to three — never more — once the leases end.
#[test]
fn a_chrome_keeps_as_many_spare_contexts_as_configured() {
    rt().block_on(async {
        const WITHIN: Duration = Duration::from_secs(60);
        let pool = BrowserPool::new(PoolConfig {
            spare_contexts: 3,
            ..test_config()
        })
        .unwrap();
        pool.warm_up().await;
        assert!(pool.wait_for_spares(3, WITHIN).await, "three spares opened");
        let mut sessions = Vec::new();
        for _ in 0..3 {
            let session = pool.lease_with(guarded()).await.unwrap();
            assert!(session.opened_ahead(), "a spare is taken");
            sessions.push(session);
        }
        let fourth = pool.lease_with(guarded()).await.unwrap();
        assert!(!fourth.opened_ahead(), "no spare is left for the fourth");
        sessions.push(fourth);
        let contexts: std::collections::HashSet<String> =
            sessions.iter().map(|s| s.context_id().to_owned()).collect();
        assert_eq!(contexts.len(), 4, "every lease has a context of its own");
        let page = format!("http://{}/modal.html", server().await);
        for session in &sessions {
            session.navigate(&page).await.expect("the page loads");
        }
        for session in sessions {
            session.release().await;
        }
        assert!(pool.wait_for_spares(3, WITHIN).await, "refilled");
        // A spare opened beyond the set is released, not kept.
        assert_eq!(pool.spares_kept().await, 3);
        pool.shutdown().await;
    });
}

/// `spare_contexts: 4` on a Chrome of two contexts: it keeps one spare per free context —
/// two while idle, so both leases of a burst take one —, and after the burst it refills to
/// two again, not four.
#[test]
fn a_chrome_keeps_no_more_spares_than_it_has_free_contexts() {
    rt().block_on(async {
        const WITHIN: Duration = Duration::from_secs(60);
        let pool = BrowserPool::new(PoolConfig {
            spare_contexts: 4,
            contexts_per_process: 2,
            ..test_config()
        })
        .unwrap();
        pool.warm_up().await;
        assert!(pool.wait_for_spares(2, WITHIN).await, "two spares opened");
        assert_eq!(
            pool.spares_kept().await,
            2,
            "no more than its free contexts"
        );
        let (a, b) = tokio::join!(pool.lease_with(guarded()), pool.lease_with(guarded()));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(
            a.opened_ahead() && b.opened_ahead(),
            "both tasks of the burst take a spare"
        );
        let page = format!("http://{}/modal.html", server().await);
        a.navigate(&page).await.expect("the page loads");
        b.navigate(&page).await.expect("the page loads");
        a.release().await;
        b.release().await;
        assert!(pool.wait_for_spares(2, WITHIN).await, "refilled");
        // A third one would be released rather than kept; none is being opened either.
        assert_eq!(pool.spares_kept().await, 2);
        pool.shutdown().await;
    });
}

/// A context with an egress policy (loopback allowed): the kind a spare fits.
fn guarded() -> ContextOptions {
    ContextOptions {
        egress: Some(EgressSettings {
            allow_loopback: true,
            ..EgressSettings::default()
        }),
        ..ContextOptions::default()
    }
}
