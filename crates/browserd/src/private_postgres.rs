//! browserd's private Postgres cluster: used when no `DATABASE_URL` is configured, so that
//! `./scripts/run` works on a machine where nothing was set up.
//!
//! The cluster lives in `<data dir>/postgres` (`--data-dir`, `BROWSERD_DATA_DIR`; by default
//! `$XDG_DATA_HOME/browserd` or `~/.local/share/browserd`, and `/var/lib/browserd` as root). It
//! is made with Debian's binaries (`/usr/lib/postgresql/<highest version>/bin`), listens on a
//! Unix socket in its own directory and on no TCP port, and trusts every local connection: the
//! directory is `0700`, so only its owner (and root) reach the socket. Postgres refuses to run
//! as root: under root the cluster belongs to, and runs as, the `postgres` OS user that Debian's
//! `postgresql` package creates (through `runuser`); root's own processes still connect.
//!
//! Who stops it: every browserd process that uses the cluster holds a shared `flock` on
//! `<data dir>/postgres.users` for its life. A cluster a process started (the
//! `postgres.service` marker) is stopped by the last of them to exit, which alone can turn its
//! lock exclusive; one started by hand (`browserd postgres start`) stays up until
//! `browserd postgres stop`. `<data dir>/postgres.lock` serializes the starts and stops.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;

/// The server used when no `DATABASE_URL` is set and something answers on 127.0.0.1:5432.
pub(crate) const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/browserd";
/// Where "is a server already there?" is asked; tests point it at a closed port.
const PROBE_ENV: &str = "BROWSERD_TEST_POSTGRES_PROBE";
const DEFAULT_PROBE: &str = "127.0.0.1:5432";
/// The cluster's superuser, and the OS user it runs as under root.
const SUPERUSER: &str = "postgres";
const DATABASE: &str = "browserd";
/// The socket's name is `.s.PGSQL.<port>`; the port number names it, no TCP port is opened.
const PORT: u16 = 5432;
/// The longest socket path the kernel takes (`sun_path`, less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `browserd postgres …`: the private cluster by hand.
#[derive(Debug, Subcommand)]
pub(crate) enum PostgresCommand {
    /// Create the cluster (initdb) and its `browserd` database, if not done yet.
    Init,
    /// Start the cluster (creating it first when needed); it stays up until `postgres stop`.
    Start,
    /// Stop the cluster (fast: open connections are closed).
    Stop,
    /// Print whether the cluster runs; exit 0 running, 3 stopped, 4 not created.
    Status,
    /// Print the cluster's DATABASE_URL (a Unix-socket URL).
    Url,
}

/// The private cluster under one data directory.
#[derive(Debug)]
pub(crate) struct Cluster {
    /// The browserd data directory: the cluster's parent and the home of its lock files.
    base: PathBuf,
    /// The cluster itself (PGDATA), which also holds the socket.
    pgdata: PathBuf,
    /// Under root, the OS user the cluster runs as.
    run_as: Option<&'static str>,
}

impl Cluster {
    /// The cluster under `data_dir`, or under the default data directory.
    pub(crate) fn new(data_dir: Option<&Path>) -> anyhow::Result<Self> {
        let root = is_root()?;
        let base = match data_dir {
            Some(dir) => absolute(dir)?,
            None => default_data_dir(root)?,
        };
        Ok(Self {
            pgdata: base.join("postgres"),
            base,
            run_as: root.then_some(SUPERUSER),
        })
    }

    /// The DATABASE_URL of the cluster: `postgres:///browserd?host=<socket dir>&user=postgres`.
    pub(crate) fn url(&self) -> String {
        let host: String =
            url::form_urlencoded::byte_serialize(self.pgdata.as_os_str().as_encoded_bytes())
                .collect();
        format!(
            "postgres:///{DATABASE}?host={}&port={PORT}&user={SUPERUSER}",
            host.replace("%2F", "/")
        )
    }

    fn initialized(&self) -> bool {
        self.pgdata.join("PG_VERSION").is_file()
    }

    /// `program` of the Postgres binaries, run as the cluster's user, from `/` (the caller's
    /// directory may be closed to that user).
    fn command(&self, program: &str) -> anyhow::Result<Command> {
        let program = postgres_bin_dir()?.join(program);
        let mut command = match self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        command.current_dir("/").stdin(Stdio::null());
        Ok(command)
    }

    /// Creates the cluster and its database unless it exists; true when it made them.
    pub(crate) fn init(&self) -> anyhow::Result<bool> {
        if self.initialized() {
            return Ok(false);
        }
        let socket = self.pgdata.join(format!(".s.PGSQL.{PORT}"));
        anyhow::ensure!(
            socket.as_os_str().len() <= MAX_SOCKET_PATH,
            "the Postgres socket path {} is longer than {MAX_SOCKET_PATH} bytes: choose a \
             shorter --data-dir",
            socket.display()
        );
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.base)
            .with_context(|| format!("creating the data directory {}", self.base.display()))?;
        if let Some(user) = self.run_as {
            // initdb, running as `user`, cannot create a directory in root's.
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&self.pgdata)
                .or_else(|err| match err.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(err),
                })
                .with_context(|| format!("creating {}", self.pgdata.display()))?;
            let (uid, gid) = os_user_ids(user)?;
            std::os::unix::fs::chown(&self.pgdata, Some(uid), Some(gid))
                .with_context(|| format!("giving {} to {user}", self.pgdata.display()))?;
        }
        let mut initdb = self.command("initdb")?;
        initdb
            .arg("--pgdata")
            .arg(&self.pgdata)
            .args(["--username", SUPERUSER, "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C.UTF-8"]);
        run(&mut initdb, "initdb").map_err(|err| match self.run_as {
            Some(user) => err.context(format!(
                "the `{user}` OS user must be able to reach {} (every parent directory \
                 searchable, e.g. mode 0755)",
                self.pgdata.display()
            )),
            None => err,
        })?;
        self.configure()?;
        self.create_database()?;
        Ok(true)
    }

    /// A socket in the cluster's directory, no TCP.
    fn configure(&self) -> anyhow::Result<()> {
        let socket_dir = self.pgdata.to_str().with_context(|| {
            format!("the data directory {} is not UTF-8", self.pgdata.display())
        })?;
        let settings = format!(
            "\n# browserd's private cluster: a Unix socket in this directory, no TCP port.\n\
             listen_addresses = ''\n\
             unix_socket_directories = '{}'\n\
             port = {PORT}\n",
            socket_dir.replace('\'', "''")
        );
        let conf = self.pgdata.join("postgresql.conf");
        OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut file| file.write_all(settings.as_bytes()))
            .with_context(|| format!("writing {}", conf.display()))
    }

    /// `CREATE DATABASE browserd` in single-user mode (no server needs to run).
    fn create_database(&self) -> anyhow::Result<()> {
        let mut postgres = self.command("postgres")?;
        postgres
            .arg("--single")
            .arg("-D")
            .arg(&self.pgdata)
            .arg("postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = postgres.spawn().context("running postgres --single")?;
        child
            .stdin
            .take()
            .context("postgres --single stdin")?
            .write_all(format!("CREATE DATABASE {DATABASE}\n").as_bytes())
            .context("writing to postgres --single")?;
        let output = child
            .wait_with_output()
            .context("running postgres --single")?;
        let text = output_text(&output);
        if !output.status.success() || text.contains("ERROR:") {
            bail!("creating the database `{DATABASE}` failed: {text}");
        }
        Ok(())
    }

    /// Whether the cluster's server runs (`pg_ctl status`).
    pub(crate) fn running(&self) -> anyhow::Result<bool> {
        if !self.initialized() {
            return Ok(false);
        }
        let output = self
            .command("pg_ctl")?
            .arg("status")
            .arg("-D")
            .arg(&self.pgdata)
            .output()
            .context("running pg_ctl status")?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(3) => Ok(false),
            _ => bail!("pg_ctl status failed: {}", output_text(&output)),
        }
    }

    /// Creates the cluster when needed and starts it unless it runs; true when it started it.
    /// `pg_ctl start -w` returns once the server accepts connections.
    pub(crate) fn start(&self) -> anyhow::Result<bool> {
        self.init()?;
        if self.running()? {
            return Ok(false);
        }
        let mut start = self.command("pg_ctl")?;
        start
            .args(["start", "-w", "-s", "-t", "120", "-D"])
            .arg(&self.pgdata)
            .arg("-l")
            .arg(self.pgdata.join("server.log"));
        run(&mut start, "pg_ctl start").with_context(|| {
            format!(
                "starting the private Postgres cluster (its log: {})",
                self.pgdata.join("server.log").display()
            )
        })?;
        Ok(true)
    }

    /// Stops the cluster if it runs; true when it stopped it.
    pub(crate) fn stop(&self) -> anyhow::Result<bool> {
        if !self.running()? {
            return Ok(false);
        }
        let mut stop = self.command("pg_ctl")?;
        stop.args(["stop", "-w", "-s", "-m", "fast", "-D"])
            .arg(&self.pgdata);
        run(&mut stop, "pg_ctl stop")?;
        Ok(true)
    }

    fn lock_file(&self, name: &str) -> anyhow::Result<File> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.base)
            .with_context(|| format!("creating the data directory {}", self.base.display()))?;
        let path = self.base.join(name);
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))
    }

    /// The lock that serializes starts and stops (held until dropped).
    fn control_lock(&self) -> anyhow::Result<File> {
        let file = self.lock_file("postgres.lock")?;
        file.lock().context("locking postgres.lock")?;
        Ok(file)
    }

    fn service_marker(&self) -> PathBuf {
        self.base.join("postgres.service")
    }
}

/// This process's use of the cluster: it keeps the cluster up while it lives, and stops it
/// when dropped if it is the last user of a cluster a browserd process started.
#[derive(Debug)]
pub(crate) struct ClusterUse {
    cluster: Cluster,
    users: File,
}

impl ClusterUse {
    /// Joins the cluster's users, creating and starting it when needed.
    pub(crate) fn begin(cluster: Cluster) -> anyhow::Result<Self> {
        let control = cluster.control_lock()?;
        let users = cluster.lock_file("postgres.users")?;
        users.lock_shared().context("locking postgres.users")?;
        if cluster.start()? {
            File::create(cluster.service_marker()).context("writing postgres.service")?;
            tracing::info!(data_dir = %cluster.pgdata.display(), "started the private Postgres cluster");
        }
        drop(control);
        Ok(Self { cluster, users })
    }

    fn end(&self) -> anyhow::Result<()> {
        let _control = self.cluster.control_lock()?;
        // Exclusive only when no other process holds its shared lock: this one is the last.
        if self.users.try_lock().is_err() || !self.cluster.service_marker().exists() {
            return Ok(());
        }
        tracing::info!("stopping the private Postgres cluster (its last user exits)");
        self.cluster.stop()?;
        std::fs::remove_file(self.cluster.service_marker()).context("removing postgres.service")
    }
}

impl Drop for ClusterUse {
    fn drop(&mut self) {
        if let Err(err) = self.end() {
            tracing::warn!(
                err = format!("{err:#}"),
                "stopping the private Postgres cluster"
            );
        }
    }
}

/// The database of a command that needs one: `DATABASE_URL` when set; else the private cluster
/// when it exists or when nothing answers on 127.0.0.1:5432; else the server there.
pub(crate) fn choose(
    database_url: Option<&str>,
    data_dir: Option<&Path>,
) -> anyhow::Result<(String, Option<ClusterUse>)> {
    if let Some(url) = database_url.filter(|url| !url.trim().is_empty()) {
        return Ok((url.to_owned(), None));
    }
    let cluster = Cluster::new(data_dir)?;
    if !cluster.initialized() && server_answers()? {
        return Ok((DEFAULT_DATABASE_URL.to_owned(), None));
    }
    let url = cluster.url();
    Ok((url, Some(ClusterUse::begin(cluster)?)))
}

/// Whether a server answers at the probe address (127.0.0.1:5432 unless the tests moved it).
fn server_answers() -> anyhow::Result<bool> {
    let raw = std::env::var(PROBE_ENV).unwrap_or_else(|_| DEFAULT_PROBE.to_owned());
    let address: SocketAddr = raw
        .parse()
        .with_context(|| format!("{PROBE_ENV}={raw:?} is not an address"))?;
    Ok(TcpStream::connect_timeout(&address, Duration::from_secs(2)).is_ok())
}

/// `browserd postgres …`.
pub(crate) fn command(
    command: &PostgresCommand,
    data_dir: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let cluster = Cluster::new(data_dir)?;
    let dir = cluster.pgdata.display();
    match command {
        PostgresCommand::Init => {
            let _control = cluster.control_lock()?;
            if cluster.init()? {
                println!("created the cluster in {dir}");
            } else {
                println!("the cluster in {dir} exists");
            }
        }
        PostgresCommand::Start => {
            let _control = cluster.control_lock()?;
            let started = cluster.start()?;
            // Started by hand: no process stops it on its way out.
            let _ = std::fs::remove_file(cluster.service_marker());
            if started {
                println!("started the cluster in {dir}");
            } else {
                println!("the cluster in {dir} runs");
            }
        }
        PostgresCommand::Stop => {
            let _control = cluster.control_lock()?;
            let stopped = cluster.stop()?;
            let _ = std::fs::remove_file(cluster.service_marker());
            if stopped {
                println!("stopped the cluster in {dir}");
            } else {
                println!("the cluster in {dir} was not running");
            }
        }
        PostgresCommand::Status => {
            let (state, code) = if !cluster.initialized() {
                ("not created", 4)
            } else if cluster.running()? {
                ("running", 0)
            } else {
                ("stopped", 3)
            };
            println!("{state}: {dir}");
            return Ok(ExitCode::from(code));
        }
        PostgresCommand::Url => println!("{}", cluster.url()),
    }
    Ok(ExitCode::SUCCESS)
}

/// The bin directory of the highest PostgreSQL version Debian's packages installed.
fn postgres_bin_dir() -> anyhow::Result<PathBuf> {
    const ROOT: &str = "/usr/lib/postgresql";
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no PostgreSQL binaries in {ROOT}/<version>/bin: install them with \
             `apt-get install postgresql`, or set DATABASE_URL to a server"
        ),
    }
}

fn is_root() -> anyhow::Result<bool> {
    // /proc/self belongs to the process's effective user.
    Ok(std::fs::metadata("/proc/self")
        .context("reading /proc/self")?
        .uid()
        == 0)
}

fn default_data_dir(root: bool) -> anyhow::Result<PathBuf> {
    if root {
        // Root's home is closed to the `postgres` user the cluster runs as.
        return Ok(PathBuf::from("/var/lib/browserd"));
    }
    let non_empty = |name| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(data) = non_empty("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("browserd"));
    }
    match non_empty("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/browserd")),
        None => bail!("no HOME nor XDG_DATA_HOME: give --data-dir (BROWSERD_DATA_DIR)"),
    }
}

fn absolute(dir: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(dir).with_context(|| format!("--data-dir {}", dir.display()))
}

/// The uid and gid of an OS user (`id`).
fn os_user_ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag| -> anyhow::Result<u32> {
        let output = Command::new("id")
            .args([flag, user])
            .output()
            .context("running id")?;
        anyhow::ensure!(
            output.status.success(),
            "no `{user}` OS user to run Postgres as under root (`apt-get install postgresql` \
             creates it)"
        );
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .context("reading id's output")
    };
    Ok((id("-u")?, id("-g")?))
}

/// Runs `command`, failing with its output when it fails.
fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let output = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            output_text(&output)
        );
    }
    Ok(())
}

fn output_text(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stderr.trim());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_socket_directory_and_sqlx_reads_it() {
        let cluster = Cluster {
            base: PathBuf::from("/tmp/a b"),
            pgdata: PathBuf::from("/tmp/a b/postgres"),
            run_as: None,
        };
        assert_eq!(
            cluster.url(),
            "postgres:///browserd?host=/tmp/a+b/postgres&port=5432&user=postgres"
        );
        let options: sqlx::postgres::PgConnectOptions = cluster.url().parse().unwrap();
        assert_eq!(
            options.get_socket(),
            Some(&PathBuf::from("/tmp/a b/postgres"))
        );
        assert_eq!(options.get_port(), 5432);
        assert_eq!(options.get_username(), "postgres");
        assert_eq!(options.get_database(), Some("browserd"));
    }

    #[test]
    fn a_database_url_is_taken_as_it_is() {
        let (url, cluster) = choose(Some("postgres://u@h/db"), None).unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert!(cluster.is_none());
    }
}
