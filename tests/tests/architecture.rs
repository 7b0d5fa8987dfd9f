//! The invariants of ARCHITECTURE.md that can be checked mechanically, checked: which crate
//! may depend on which, where SQL and `anyhow` may appear, that no front end reaches the
//! store, and how big a file or a function may grow. Each failure names the file and the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a source file may have outside its inline test module.
const MAX_FILE_LINES: usize = 800;
/// The most lines a function may have (from its `fn` line to its closing brace).
const MAX_FN_LINES: usize = 120;

/// Files that may be longer: faithful ports of one browser-use module, kept whole so they can be
/// read side by side with the original.
const LONG_FILES: &[(&str, &str)] = &[(
    "crates/browser/src/serializer.rs",
    "a port of browser-use's DOM serializer (dom/serializer/serializer.py), kept whole to read beside it",
)];

/// Functions that may be longer, with the reason.
const LONG_FNS: &[(&str, &str, &str)] = &[
    (
        "crates/browser/src/serializer.rs",
        "build_attributes",
        "a port of browser-use's DOM serializer (dom/serializer/serializer.py), kept whole to read beside it",
    ),
    (
        "crates/browser/src/serializer.rs",
        "serialize",
        "a port of browser-use's DOM serializer (dom/serializer/serializer.py), kept whole to read beside it",
    ),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// Every crate under `crates/`: its directory name and its `browserd-*` normal dependencies.
fn crate_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(workspace_root().join("crates")).expect("crates/") {
        let dir = entry.expect("crates/ entry").path();
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let manifest: toml::Table = toml::from_str(&text).expect("a valid Cargo.toml");
        let deps = manifest
            .get("dependencies")
            .and_then(toml::Value::as_table)
            .map(|deps| {
                deps.keys()
                    .filter_map(|name| name.strip_prefix("browserd-"))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        crates.insert(name, deps);
    }
    crates
}

/// The layers, bottom up: a crate may depend only on crates listed for it. The graph points
/// down: nothing below the task core knows about front ends, no front end knows the store.
fn allowed_dependencies(krate: &str) -> Option<&'static [&'static str]> {
    Some(match krate {
        "types" | "domains" | "views" | "llm" => &[],
        "browser" => &["domains", "views", "types"],
        "store" => &["types"],
        "agent" => &["domains", "llm", "types", "views"],
        "worker" => &[
            "agent", "browser", "llm", "store", "types", "views", "domains",
        ],
        "tasks" => &["types", "store", "domains", "llm", "agent"],
        "mcp" => &["tasks", "types"],
        "api" => &["tasks", "types", "domains", "mcp"],
        // The binary is the composition root: it builds the store, the core and the workers.
        "browserd" => &[
            "agent", "api", "mcp", "browser", "worker", "llm", "store", "tasks", "types",
            "domains", "views",
        ],
        _ => return None,
    })
}

#[test]
fn crates_depend_only_downward() {
    let mut broken = Vec::new();
    for (krate, deps) in crate_dependencies() {
        let Some(allowed) = allowed_dependencies(&krate) else {
            broken.push(format!(
                "crates/{krate} is not in allowed_dependencies: place it in a layer"
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| !allowed.contains(&d.as_str())) {
            broken.push(format!("crates/{krate} depends on browserd-{dep}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The production source files of every crate: `crates/*/src/**/*.rs`, with their crate.
fn source_files() -> Vec<(String, PathBuf)> {
    crate_dependencies()
        .into_keys()
        .flat_map(|krate| {
            rust_files(&workspace_root().join("crates").join(&krate).join("src"))
                .into_iter()
                .map(move |path| (krate.clone(), path))
        })
        .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(workspace_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The lines of a file before its inline test module (`#[cfg(test)]` + `mod name {`).
fn code_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| {
            pair[0].trim() == "#[cfg(test)]"
                && pair[1].trim_start().starts_with("mod ")
                && pair[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

#[test]
fn sql_only_in_the_store() {
    let mut broken = Vec::new();
    for (krate, path) in source_files() {
        if krate == "store" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source file");
        for (number, line) in code_lines(&text).iter().enumerate() {
            if ["sqlx::query", "query!(", "query_as!(", "query_scalar!("]
                .iter()
                .any(|needle| line.contains(needle))
            {
                broken.push(format!(
                    "{}:{}: SQL outside crates/store",
                    relative(&path),
                    number + 1
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn anyhow_only_in_the_binary() {
    let mut broken = Vec::new();
    for (krate, path) in source_files() {
        if krate == "browserd" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source file");
        if code_lines(&text).iter().any(|line| line.contains("anyhow")) {
            broken.push(format!(
                "{}: library crates use thiserror, not anyhow",
                relative(&path)
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_crate_says_what_it_owns() {
    let mut broken = Vec::new();
    for krate in crate_dependencies().into_keys() {
        let src = workspace_root().join("crates").join(&krate).join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists());
        let Some(root) = root else { continue };
        let text = std::fs::read_to_string(&root).expect("crate root");
        if !text.trim_start().starts_with("//!") {
            broken.push(format!(
                "{} does not start with a `//!` paragraph",
                relative(&root)
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn files_stay_small() {
    let mut broken = Vec::new();
    for (_, path) in source_files() {
        let name = relative(&path);
        if LONG_FILES.iter().any(|(file, _)| *file == name) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source file");
        let lines = code_lines(&text).len();
        if lines > MAX_FILE_LINES {
            broken.push(format!(
                "{name}: {lines} lines (at most {MAX_FILE_LINES} outside its test module): split it by concern"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The functions of a rustfmt-formatted file longer than `max` lines: a `fn` line's body ends
/// at the first line that is its indentation followed by `}`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let code = code_lines(text);
    let mut long = Vec::new();
    for (start, line) in code.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let mut words = trimmed.split_whitespace().peekable();
        let mut is_fn = false;
        for word in words.by_ref() {
            if word == "fn" {
                is_fn = true;
                break;
            }
            if !(word.starts_with("pub") || matches!(word, "async" | "const" | "unsafe")) {
                break;
            }
        }
        if !is_fn {
            continue;
        }
        let name: String = words
            .next()
            .unwrap_or_default()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The signature ends at a line ending in `{` (a body) or `;` (a declaration).
        let Some(open) = (start..code.len()).find(|&i| {
            let l = code[i].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        if !code[open].trim_end().ends_with('{') {
            continue;
        }
        let closing = format!("{indent}}}");
        let Some(end) = (open + 1..code.len()).find(|&i| code[i].trim_end() == closing) else {
            continue;
        };
        let length = end - start + 1;
        if length > max {
            long.push((start + 1, name, length));
        }
    }
    long
}

#[test]
fn functions_stay_short() {
    let mut broken = Vec::new();
    for (_, path) in source_files() {
        let name = relative(&path);
        let text = std::fs::read_to_string(&path).expect("source file");
        for (line, function, length) in long_functions(&text, MAX_FN_LINES) {
            if LONG_FNS
                .iter()
                .any(|(file, f, _)| *file == name && *f == function)
            {
                continue;
            }
            broken.push(format!(
                "{name}:{line}: fn {function} has {length} lines (at most {MAX_FN_LINES}): split it into named steps"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn long_function_detection_follows_rustfmt_layout() {
    let body: String = (0..5).map(|i| format!("    let x{i} = {i};\n")).collect();
    let text = format!(
        "pub async fn long(\n    a: u8,\n) -> u8 {{\n{body}    a\n}}\n\nfn short() {{}}\n\ntrait T {{\n    fn declared(&self);\n}}\n"
    );
    assert_eq!(long_functions(&text, 5), vec![(1, "long".to_owned(), 10)]);
    assert!(long_functions(&text, 10).is_empty());
}

#[test]
fn the_exceptions_are_still_needed() {
    let mut stale = Vec::new();
    for (file, _) in LONG_FILES {
        let text = std::fs::read_to_string(workspace_root().join(file)).unwrap_or_default();
        if code_lines(&text).len() <= MAX_FILE_LINES {
            stale.push(format!("{file} is short now: take it out of LONG_FILES"));
        }
    }
    for (file, function, _) in LONG_FNS {
        let text = std::fs::read_to_string(workspace_root().join(file)).unwrap_or_default();
        if !long_functions(&text, MAX_FN_LINES)
            .iter()
            .any(|(_, name, _)| name == function)
        {
            stale.push(format!(
                "{file}: fn {function} is short now (or gone): take it out of LONG_FNS"
            ));
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
