//! browserd's private Postgres cluster, for real: `initdb`, `pg_ctl start`/`stop` on a
//! temporary data directory (`crates/browserd/src/private_postgres.rs`). The probe of
//! 127.0.0.1:5432 is pointed at a closed port, so that a command without `DATABASE_URL` picks
//! the private cluster although the test server answers there (and is left alone).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_browserd");

/// A data directory the `postgres` OS user can reach when the tests run as root, whose
/// cluster is stopped at the end of the test, whatever happened.
struct DataDir {
    dir: tempfile::TempDir,
}

impl DataDir {
    fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("bd-pg").tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn pgdata(&self) -> PathBuf {
        self.path().join("postgres")
    }

    /// `browserd --data-dir <dir> …` with no DATABASE_URL and nothing "answering" on 5432.
    fn browserd(&self) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("--data-dir")
            .arg(self.path())
            .env_remove("DATABASE_URL")
            .env_remove("BROWSERD_DATA_DIR")
            .env_remove("BROWSERD_CONFIG")
            .env("BROWSERD_TEST_POSTGRES_PROBE", "127.0.0.1:1");
        command
    }

    /// `browserd postgres <sub>`: its exit code and stdout.
    fn postgres(&self, sub: &str) -> (i32, String) {
        let output = self.browserd().args(["postgres", sub]).output().unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let code = output.status.code().unwrap();
        assert!(
            matches!(code, 0 | 3 | 4),
            "postgres {sub}: {code}\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (code, stdout)
    }

    fn status(&self) -> i32 {
        self.postgres("status").0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = self
            .browserd()
            .args(["postgres", "stop"])
            .stdout(Stdio::null())
            .status();
    }
}

#[tokio::test]
async fn the_postgres_commands_make_start_and_stop_a_cluster_on_a_socket_only() {
    let dir = DataDir::new();
    assert_eq!(dir.status(), 4, "not created yet");
    let (code, out) = dir.postgres("init");
    assert_eq!(
        (code, out.contains("created the cluster")),
        (0, true),
        "{out}"
    );
    assert_eq!(dir.status(), 3, "created, stopped");
    assert!(dir.postgres("init").1.contains("exists"));

    let (code, out) = dir.postgres("start");
    assert_eq!(
        (code, out.contains("started the cluster")),
        (0, true),
        "{out}"
    );
    assert_eq!(dir.status(), 0);
    assert!(dir.postgres("start").1.contains("runs"), "a second start");

    let url = dir.postgres("url").1.trim().to_owned();
    assert_eq!(
        url,
        format!(
            "postgres:///browserd?host={}&port=5432&user=postgres",
            dir.pgdata().display()
        )
    );
    assert!(dir.pgdata().join(".s.PGSQL.5432").exists(), "the socket");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let (database, listen): (String, String) =
        sqlx::query_as("select current_database(), current_setting('listen_addresses')")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(database, "browserd", "init created the database");
    assert_eq!(listen, "", "no TCP");
    conn.close().await.unwrap();

    let (code, out) = dir.postgres("stop");
    assert_eq!(
        (code, out.contains("stopped the cluster")),
        (0, true),
        "{out}"
    );
    assert_eq!(dir.status(), 3);
    assert!(sqlx::PgConnection::connect(&url).await.is_err());
}

#[test]
fn a_command_without_database_url_uses_the_private_cluster_and_stops_what_it_started() {
    let dir = DataDir::new();
    let output = dir
        .browserd()
        .args(["keys", "create", "--name", "me"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let key = String::from_utf8(output.stdout).unwrap();
    assert!(key.starts_with("bd_"), "{key}");
    assert!(
        stderr.contains("started the private Postgres cluster"),
        "{stderr}"
    );
    assert_eq!(
        dir.status(),
        3,
        "the command stopped the cluster it started"
    );

    // Started by hand, it stays up after the commands that use it.
    dir.postgres("start");
    let output = dir.browserd().arg("migrate").output().unwrap();
    assert!(output.status.success());
    let output = dir.browserd().args(["keys", "list"]).output().unwrap();
    assert!(output.status.success());
    let list = String::from_utf8(output.stdout).unwrap();
    assert!(list.contains(&key[..11]) && list.contains(" me"), "{list}");
    assert_eq!(dir.status(), 0, "a cluster started by hand stays up");
}

#[tokio::test]
async fn the_last_process_using_the_cluster_stops_it() {
    let dir = DataDir::new();
    let mut api = tokio::process::Command::from(dir.browserd());
    api.arg("api")
        .env("BROWSERD_LISTEN", "127.0.0.1:0")
        .env("BROWSERD_METRICS_LISTEN", "")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut api = api.spawn().unwrap();
    let mut lines = BufReader::new(api.stderr.take().unwrap()).lines();
    let mut logs = String::new();
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            logs.push_str(&line);
            logs.push('\n');
            if line.contains("listening") {
                return;
            }
        }
        panic!("the api exited:\n{logs}");
    })
    .await
    .expect("the api listens");
    // Drain the rest of the log, so that the api never blocks on a full pipe.
    let drain = tokio::spawn(async move {
        let mut rest = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    });
    assert_eq!(dir.status(), 0, "the api started the cluster");

    // A second user comes and goes: the api still uses the cluster.
    let output = dir
        .browserd()
        .args(["keys", "create", "--name", "second"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(dir.status(), 0, "the api still uses the cluster");

    let pid = api.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exit = tokio::time::timeout(Duration::from_secs(60), api.wait())
        .await
        .expect("the api exits on SIGTERM")
        .unwrap();
    let rest = drain.await.unwrap();
    assert!(exit.success(), "{rest}");
    assert!(rest.contains("its last user exits"), "{rest}");
    assert_eq!(dir.status(), 3, "the last user stopped the cluster");
}
