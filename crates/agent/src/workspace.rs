//! The per-task workspace: a directory with `todo.md` and the files the agent writes, rendered
//! into `<agent_state>` and used by the agent-owned `write_file` / `read_file` / `replace_file`.

use std::path::{Path, PathBuf};

use browserd_views::ActionResult;
use serde_json::{Value, json};

use crate::browser::ActionSpec;

const ALLOWED_EXTENSIONS: &[&str] = &["md", "txt", "json", "jsonl", "csv", "html", "xml"];
const TODO: &str = "todo.md";
/// Largest file the workspace writes or reads (bytes).
const MAX_FILE_BYTES: usize = 5 * 1024 * 1024;

/// Why a workspace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// Creating the directory failed.
    #[error("cannot create the workspace directory: {0}")]
    Create(std::io::Error),
}

/// The workspace of one task.
#[derive(Debug)]
pub struct Workspace {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Workspace {
    /// Opens (creating) `dir`, or a fresh temporary directory removed on drop.
    pub fn open(dir: Option<&Path>) -> Result<Self, WorkspaceError> {
        let (dir, temp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(WorkspaceError::Create)?;
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("browserd_agent_")
                    .tempdir()
                    .map_err(WorkspaceError::Create)?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let todo = dir.join(TODO);
        if !todo.exists() {
            std::fs::write(&todo, "").map_err(WorkspaceError::Create)?;
        }
        Ok(Self { dir, _temp: temp })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, file_name: &str) -> Result<PathBuf, String> {
        let name = file_name.trim();
        let valid_chars = !name.is_empty()
            && name.len() <= 120
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | '(' | ')')
            })
            && !name.starts_with('.');
        if !valid_chars {
            return Err(format!(
                "invalid file name `{name}`: use letters, digits, '_', '-', '.' and no directories"
            ));
        }
        let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        match ext {
            Some(e) if ALLOWED_EXTENSIONS.contains(&e.as_str()) => Ok(self.dir.join(name)),
            _ => Err(format!(
                "invalid file extension in `{name}`: allowed are {}",
                ALLOWED_EXTENSIONS.join(", ")
            )),
        }
    }

    /// Files except todo.md, sorted by name.
    fn files(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(String, String)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == TODO || self.path_of(&name).is_err() {
                    return None;
                }
                let content = std::fs::read_to_string(e.path()).ok()?;
                Some((name, content))
            })
            .collect();
        files.sort();
        files
    }

    /// The todo.md content.
    pub fn todo(&self) -> String {
        std::fs::read_to_string(self.dir.join(TODO)).unwrap_or_default()
    }

    /// `<file_system>` body: each file with its line count and (head/tail of) its content.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (name, content) in self.files() {
            let lines = content.lines().count();
            out.push_str(&format!("<file>\n{name} - {lines} lines\n<content>\n"));
            if content.chars().count() >= 600 {
                let head: String = content.chars().take(200).collect();
                let tail: String = {
                    let n = content.chars().count();
                    content.chars().skip(n - 200).collect()
                };
                let hidden = content
                    .lines()
                    .count()
                    .saturating_sub(head.lines().count() + tail.lines().count());
                out.push_str(&format!("{head}\n... {hidden} more lines ...\n{tail}"));
            } else {
                out.push_str(&content);
            }
            out.push_str("\n</content>\n</file>\n");
        }
        out
    }

    /// Writes a file under a fresh name like `extracted_content_N.md`.
    pub fn write_unique(&self, stem: &str, content: &str) -> Option<String> {
        for n in 0..10_000 {
            let name = format!("{stem}_{n}.md");
            let path = self.dir.join(&name);
            if !path.exists() {
                return std::fs::write(&path, content).ok().map(|()| name);
            }
        }
        None
    }

    /// Runs an agent-owned file action; `None` when `name` is not one.
    pub fn execute(
        &self,
        name: &str,
        params: &Value,
        available_file_paths: &[String],
    ) -> Option<ActionResult> {
        let s = |k: &str| params.get(k).and_then(Value::as_str);
        let b = |k: &str, d: bool| params.get(k).and_then(Value::as_bool).unwrap_or(d);
        let result = match name {
            "write_file" => {
                let (Some(file), Some(content)) = (s("file_name"), s("content")) else {
                    return Some(ActionResult::error(
                        "write_file needs `file_name` and `content`",
                    ));
                };
                self.write(
                    file,
                    content,
                    b("append", false),
                    b("trailing_newline", true),
                    b("leading_newline", false),
                )
            }
            "replace_file" => {
                let (Some(file), Some(old), Some(new)) =
                    (s("file_name"), s("old_str"), s("new_str"))
                else {
                    return Some(ActionResult::error(
                        "replace_file needs `file_name`, `old_str` and `new_str`",
                    ));
                };
                self.replace(file, old, new)
            }
            "read_file" => {
                let Some(file) = s("file_name") else {
                    return Some(ActionResult::error("read_file needs `file_name`"));
                };
                self.read(file, available_file_paths)
            }
            _ => return None,
        };
        Some(result.unwrap_or_else(ActionResult::error))
    }

    fn write(
        &self,
        file: &str,
        content: &str,
        append: bool,
        trailing: bool,
        leading: bool,
    ) -> Result<ActionResult, String> {
        let path = self.path_of(file)?;
        let mut text = String::new();
        if leading {
            text.push('\n');
        }
        text.push_str(content);
        if trailing {
            text.push('\n');
        }
        let mut full = if append {
            std::fs::read_to_string(&path).unwrap_or_default()
        } else {
            String::new()
        };
        full.push_str(&text);
        if full.len() > MAX_FILE_BYTES {
            return Err(format!(
                "{file} would exceed the {MAX_FILE_BYTES}-byte limit"
            ));
        }
        std::fs::write(&path, full).map_err(|e| format!("could not write {file}: {e}"))?;
        let verb = if append { "appended to" } else { "written to" };
        Ok(ActionResult::memory(format!(
            "Data {verb} file {file} successfully."
        )))
    }

    fn replace(&self, file: &str, old: &str, new: &str) -> Result<ActionResult, String> {
        let path = self.path_of(file)?;
        let content =
            std::fs::read_to_string(&path).map_err(|_| format!("file {file} does not exist"))?;
        if old.is_empty() || !content.contains(old) {
            return Err(format!("the text to replace was not found in {file}"));
        }
        std::fs::write(&path, content.replace(old, new))
            .map_err(|e| format!("could not write {file}: {e}"))?;
        Ok(ActionResult::memory(format!(
            "Successfully replaced all occurrences of the text in {file}."
        )))
    }

    fn read(&self, file: &str, available: &[String]) -> Result<ActionResult, String> {
        let path = if available.iter().any(|p| p == file) {
            PathBuf::from(file)
        } else {
            self.path_of(file)?
        };
        let meta = std::fs::metadata(&path).map_err(|_| format!("file {file} does not exist"))?;
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Err(format!("{file} is larger than {MAX_FILE_BYTES} bytes"));
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("could not read {file}: {e}"))?;
        let content = String::from_utf8_lossy(&bytes);
        let shown = format!("Read from file {file}.\n<content>\n{content}\n</content>");
        let memory: String = content.chars().take(1000).collect();
        let more = if content.chars().count() > 1000 {
            format!("\n{} more characters...", content.chars().count() - 1000)
        } else {
            String::new()
        };
        Ok(ActionResult {
            extracted_content: Some(shown),
            long_term_memory: Some(format!("Read from file {file}.\n{memory}{more}")),
            include_extracted_content_only_once: true,
            ..ActionResult::default()
        })
    }

    /// Absolute paths of `files_to_display` that exist in the workspace, with their content.
    pub fn resolve_display_files(&self, names: &[String]) -> Vec<(String, String)> {
        names
            .iter()
            .filter_map(|n| {
                let path = self.path_of(n).ok()?;
                let content = std::fs::read_to_string(&path).ok()?;
                Some((path.to_string_lossy().into_owned(), content))
            })
            .collect()
    }
}

/// The agent's files in workspace directory `dir`, by name: what `write_file` / `replace_file`
/// created and saved extractions (flat names with the text extensions the file actions accept;
/// symlinks and directories are not files here), without browser-use's internal `todo.md`.
/// The worker stores them as the task's output files when the task ends.
pub fn agent_file_names(dir: &Path) -> Vec<String> {
    let probe = Workspace {
        dir: dir.to_path_buf(),
        _temp: None,
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| name != TODO && probe.path_of(name).is_ok())
        .collect();
    names.sort();
    names
}

/// Specs of the agent-owned file actions.
pub fn file_action_specs() -> Vec<ActionSpec> {
    vec![
        ActionSpec {
            name: "write_file".into(),
            description: "Write or append text to a file in your workspace (md, txt, json, jsonl, csv, html, xml).".into(),
            params_schema: json!({
                "type": "object",
                "properties": {
                    "file_name": {"type": "string"},
                    "content": {"type": "string"},
                    "append": {"type": "boolean", "default": false},
                    "trailing_newline": {"type": "boolean", "default": true},
                    "leading_newline": {"type": "boolean", "default": false}
                },
                "required": ["file_name", "content"],
                "additionalProperties": false
            }),
            terminates_sequence: false,
            domains: Vec::new(),
        },
        ActionSpec {
            name: "replace_file".into(),
            description: "Replace every occurrence of old_str with new_str in a workspace file (e.g. tick items in todo.md).".into(),
            params_schema: json!({
                "type": "object",
                "properties": {
                    "file_name": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"}
                },
                "required": ["file_name", "old_str", "new_str"],
                "additionalProperties": false
            }),
            terminates_sequence: false,
            domains: Vec::new(),
        },
        ActionSpec {
            name: "read_file".into(),
            description: "Read a workspace file or one of the available file paths.".into(),
            params_schema: json!({
                "type": "object",
                "properties": {"file_name": {"type": "string"}},
                "required": ["file_name"],
                "additionalProperties": false
            }),
            terminates_sequence: false,
            domains: Vec::new(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn write_append_replace_read_and_reject_bad_names() {
        let ws = Workspace::open(None).unwrap();
        assert_eq!(ws.todo(), "");
        let r = ws
            .execute(
                "write_file",
                &json!({"file_name": "notes.md", "content": "a"}),
                &[],
            )
            .unwrap();
        assert!(r.error.is_none(), "{r:?}");
        ws.execute(
            "write_file",
            &json!({"file_name": "notes.md", "content": "b", "append": true}),
            &[],
        );
        assert_eq!(
            std::fs::read_to_string(ws.dir().join("notes.md")).unwrap(),
            "a\nb\n"
        );
        let r = ws
            .execute(
                "replace_file",
                &json!({"file_name": "notes.md", "old_str": "b", "new_str": "c"}),
                &[],
            )
            .unwrap();
        assert!(r.error.is_none());
        let r = ws
            .execute("read_file", &json!({"file_name": "notes.md"}), &[])
            .unwrap();
        assert!(r.extracted_content.unwrap().contains("a\nc"));
        assert!(r.include_extracted_content_only_once);
        for bad in ["../x.md", "/etc/passwd", "x.exe", ".hidden.md", ""] {
            let r = ws
                .execute(
                    "write_file",
                    &json!({"file_name": bad, "content": "x"}),
                    &[],
                )
                .unwrap();
            assert!(r.error.is_some(), "{bad} accepted");
        }
        let d = ws.describe();
        assert!(d.contains("notes.md - 2 lines"), "{d}");
        assert!(!d.contains("todo.md"));
        assert!(ws.execute("click", &json!({}), &[]).is_none());
    }

    #[test]
    fn long_files_show_head_and_tail() {
        let ws = Workspace::open(None).unwrap();
        let content: String = (0..200).map(|i| format!("line {i}\n")).collect();
        std::fs::write(ws.dir().join("big.txt"), &content).unwrap();
        let d = ws.describe();
        assert!(d.contains("line 0") && d.contains("line 199"));
        assert!(d.contains("more lines ..."));
        assert!(!d.contains("line 100\n"));
    }
}
