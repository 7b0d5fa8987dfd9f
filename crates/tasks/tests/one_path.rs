//! The task core is the one path to the store: no front end reaches it directly. Reads each
//! front-end crate's manifest and sources and fails on a `browserd-store` dependency or a
//! `browserd_store` use — in `browserd-api` (`/v1`, `/api/v2`, `/mcp` over HTTP),
//! `browserd-mcp` (the tools, stdio and remote backends) and the binary's command paths. The
//! binary wires the store into the core in one place, `crates/browserd/src/wiring.rs`; the
//! worker role (`crates/browserd/src/worker.rs`) takes its store handle from there, as the
//! worker is not a front end.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The names in a manifest's `[dependencies]` table (not `[dev-dependencies]`).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                names.push(name.split('.').next().unwrap().to_owned());
            }
        }
    }
    names
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The files under `dir` (except `allowed`) whose text contains any of `needles`.
fn offenders(dir: &Path, needles: &[&str], allowed: &[&str]) -> Vec<String> {
    sources(dir)
        .into_iter()
        .filter(|file| !allowed.iter().any(|a| file.ends_with(a)))
        .filter_map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let hits: Vec<&str> = needles
                .iter()
                .copied()
                .filter(|n| text.contains(n))
                .collect();
            (!hits.is_empty()).then(|| format!("{} uses {hits:?}", file.display()))
        })
        .collect()
}

#[test]
fn front_ends_do_not_depend_on_the_store() {
    let root = workspace();
    for krate in ["api", "mcp"] {
        let deps = dependencies(&root.join("crates").join(krate).join("Cargo.toml"));
        assert!(!deps.is_empty(), "no [dependencies] read for {krate}");
        assert!(
            !deps.iter().any(|d| d == "browserd-store"),
            "crates/{krate} depends on browserd-store; it must go through browserd-tasks"
        );
        assert!(
            !deps.iter().any(|d| d == "sqlx"),
            "crates/{krate} depends on sqlx; SQL stays in browserd-store"
        );
    }
}

#[test]
fn front_end_sources_do_not_name_the_store() {
    let root = workspace();
    let mut found = Vec::new();
    for krate in ["api", "mcp"] {
        found.extend(offenders(
            &root.join("crates").join(krate).join("src"),
            &["browserd_store", "sqlx::query", "use sqlx"],
            &[],
        ));
    }
    // The binary: only its wiring opens the store.
    found.extend(offenders(
        &root.join("crates/browserd/src"),
        &["browserd_store", "sqlx::query", "use sqlx"],
        &["wiring.rs"],
    ));
    // ... and only the worker role takes a store handle from it.
    found.extend(offenders(
        &root.join("crates/browserd/src"),
        &[
            "wiring::Store",
            "wiring::{",
            "wiring::open_store",
            "Store::",
        ],
        &["wiring.rs", "worker.rs"],
    ));
    assert!(
        found.is_empty(),
        "front ends reach the store directly:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_core_has_no_http_and_points_down() {
    let root = workspace();
    let deps = dependencies(&root.join("crates/tasks/Cargo.toml"));
    for banned in [
        "axum",
        "http",
        "hyper",
        "tower",
        "tower-http",
        "utoipa",
        "rmcp",
        "browserd-api",
        "browserd-mcp",
        "browserd-worker",
        "anyhow",
    ] {
        assert!(
            !deps.iter().any(|d| d == banned),
            "browserd-tasks depends on {banned}"
        );
    }
    let found = offenders(
        &root.join("crates/tasks/src"),
        &["axum", "sqlx::query", "use sqlx", "anyhow"],
        &[],
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}
