//! A task's output files: when the task ends (finished, failed or stopped), the agent's files in
//! its workspace (`browserd_agent::workspace::agent_file_names`: what `write_file` /
//! `replace_file` wrote and saved extractions; not `todo.md`, not downloads) are read, their
//! secret values replaced by placeholders, and handed to the store.
//!
//! Secrets: the agent fills `<secret>name</secret>` placeholders in every action's parameters
//! before running it, `write_file` included, so a file can hold a value the model never saw.
//! Stored files are redacted with the task's secrets (`Secrets::redact`, as everything else the
//! agent emits): the file shows `<secret>name</secret>`, never the value.

use std::path::Path;

use browserd_agent::secrets::Secrets;
use browserd_store::{
    NewOutputFile, OUTPUT_FILE_MAX_BYTES, OUTPUT_FILES_MAX_COUNT, OUTPUT_FILES_MAX_TASK_BYTES,
};

/// The media type of an agent file (the file actions only write these extensions).
pub fn content_type_of(file_name: &str) -> &'static str {
    let ext = file_name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "md" => "text/markdown; charset=utf-8",
        "txt" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "jsonl" => "application/jsonl",
        "csv" => "text/csv; charset=utf-8",
        "html" => "text/html; charset=utf-8",
        "xml" => "application/xml",
        _ => "application/octet-stream",
    }
}

fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

/// Reads the agent's files of workspace `dir` (blocking I/O: call it off the runtime). Over
/// [`OUTPUT_FILE_MAX_BYTES`] per file or [`OUTPUT_FILES_MAX_TASK_BYTES`] per task (files in
/// name order), a file is recorded as skipped with the reason; unreadable files are skipped
/// too. Never fails.
pub fn collect_output_files(dir: &Path, secrets: &Secrets) -> Vec<NewOutputFile> {
    let names = browserd_agent::workspace::agent_file_names(dir);
    if names.len() > OUTPUT_FILES_MAX_COUNT {
        tracing::warn!(
            files = names.len(),
            kept = OUTPUT_FILES_MAX_COUNT,
            "more output files than recorded per task"
        );
    }
    let mut stored: u64 = 0;
    let mut files = Vec::new();
    for name in names.into_iter().take(OUTPUT_FILES_MAX_COUNT) {
        let path = dir.join(&name);
        let content_type = content_type_of(&name).to_owned();
        let size = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
        let skipped = |reason: String| NewOutputFile {
            file_name: name.clone(),
            content_type: content_type.clone(),
            size,
            content: Err(reason),
        };
        if size > OUTPUT_FILE_MAX_BYTES {
            files.push(skipped(format!(
                "{size} bytes: over the {} MiB per-file cap",
                mib(OUTPUT_FILE_MAX_BYTES)
            )));
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) => {
                files.push(skipped(format!("could not be read: {}", err.kind())));
                continue;
            }
        };
        let bytes = if secrets.is_empty() {
            bytes
        } else {
            match String::from_utf8(bytes) {
                Ok(text) => secrets.redact(&text).into_bytes(),
                Err(_) => {
                    files.push(skipped(
                        "not UTF-8 text, so it could not be checked for secret values".to_owned(),
                    ));
                    continue;
                }
            }
        };
        let size = bytes.len() as u64;
        if size > OUTPUT_FILE_MAX_BYTES {
            files.push(NewOutputFile {
                size,
                ..skipped(format!(
                    "{size} bytes: over the {} MiB per-file cap",
                    mib(OUTPUT_FILE_MAX_BYTES)
                ))
            });
            continue;
        }
        if stored + size > OUTPUT_FILES_MAX_TASK_BYTES {
            files.push(NewOutputFile {
                size,
                ..skipped(format!(
                    "{size} bytes: over the {} MiB per-task cap of output files",
                    mib(OUTPUT_FILES_MAX_TASK_BYTES)
                ))
            });
            continue;
        }
        stored += size;
        files.push(NewOutputFile {
            file_name: name,
            content_type,
            size,
            content: Ok(bytes),
        });
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use browserd_agent::{SecretEntry, SensitiveData};

    #[test]
    fn agent_files_are_collected_redacted_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("todo.md"), "- [ ] plan").unwrap();
        std::fs::write(root.join("results.md"), "login hunter2 worked").unwrap();
        std::fs::write(root.join("data.json"), "{\"a\":1}").unwrap();
        std::fs::write(root.join("image.png"), [0u8, 1, 2]).unwrap();
        std::fs::create_dir(root.join("downloads")).unwrap();
        std::fs::write(root.join("downloads").join("x.txt"), "x").unwrap();
        let big = std::fs::File::create(root.join("big.txt")).unwrap();
        big.set_len(OUTPUT_FILE_MAX_BYTES + 1).unwrap();
        let mut data = SensitiveData::default();
        data.0
            .insert("password".into(), SecretEntry::Value("hunter2".into()));
        let files = collect_output_files(root, &Secrets::new(&data));
        let names: Vec<&str> = files.iter().map(|f| f.file_name.as_str()).collect();
        assert_eq!(names, ["big.txt", "data.json", "results.md"]);
        assert!(
            files[0]
                .content
                .as_ref()
                .unwrap_err()
                .contains("per-file cap")
        );
        assert_eq!(files[0].size, OUTPUT_FILE_MAX_BYTES + 1);
        assert_eq!(files[1].content_type, "application/json");
        let text = String::from_utf8(files[2].content.clone().unwrap()).unwrap();
        assert_eq!(text, "login <secret>password</secret> worked");
        assert_eq!(files[2].size, text.len() as u64);
        assert_eq!(files[2].content_type, "text/markdown; charset=utf-8");
    }
}
