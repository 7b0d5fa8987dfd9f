//! The per-task workspace directory as the browser sees it: where downloads, screenshots and
//! PDFs land, and where `upload_file` and `done`'s attachments may take files from. The
//! agent's own file actions (`write_file`, `read_file`, `replace_file`) live in the agent
//! crate's workspace over the same directory.
//!
//! Names are relative, single-component-or-nested paths without `..`, absolute parts or
//! drive prefixes; every resolved path is canonicalized and must stay under the canonical
//! root (so a symlink pointing out is refused).

use std::path::{Component, Path, PathBuf};

/// Why a workspace operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(
        "invalid file name {0:?}: use a relative name like notes.md without '..' or absolute paths"
    )]
    InvalidName(String),
    #[error("{0:?} is outside the task workspace")]
    Escapes(String),
    #[error("file {0:?} does not exist")]
    NotFound(String),
    #[error("io error on {name:?}: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// A task's working directory.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Workspace {
    /// Uses (and creates) `root`.
    pub fn open(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        let root = root.canonicalize()?;
        std::fs::create_dir_all(root.join("downloads"))?;
        Ok(Self { root, _temp: None })
    }

    /// A fresh temporary workspace removed on drop.
    pub fn temporary() -> std::io::Result<Self> {
        let temp = tempfile::Builder::new()
            .prefix("browserd-task-")
            .tempdir()?;
        let mut ws = Self::open(temp.path())?;
        ws._temp = Some(temp);
        Ok(ws)
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where downloads land.
    pub fn downloads_dir(&self) -> PathBuf {
        self.root.join("downloads")
    }

    fn check_name(name: &str) -> Result<PathBuf, WorkspaceError> {
        let trimmed = name.trim();
        if trimmed.is_empty() || trimmed.contains('\0') || trimmed.contains('\\') {
            return Err(WorkspaceError::InvalidName(name.to_owned()));
        }
        let path = Path::new(trimmed);
        let mut clean = PathBuf::new();
        for comp in path.components() {
            match comp {
                Component::Normal(part) => clean.push(part),
                Component::CurDir => {}
                _ => return Err(WorkspaceError::InvalidName(name.to_owned())),
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(WorkspaceError::InvalidName(name.to_owned()));
        }
        Ok(clean)
    }

    /// Resolves `name` to a path inside the workspace (the file need not exist; its existing
    /// ancestors must resolve inside the root).
    pub fn resolve(&self, name: &str) -> Result<PathBuf, WorkspaceError> {
        let relative = Self::check_name(name)?;
        let joined = self.root.join(&relative);
        // Canonicalize the deepest existing ancestor: symlinks anywhere on the way are
        // followed and must still land in the root.
        let mut existing = joined.clone();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.file_name(), existing.parent()) {
                (Some(file), Some(parent)) => {
                    rest.push(file.to_owned());
                    existing = parent.to_path_buf();
                }
                _ => return Err(WorkspaceError::Escapes(name.to_owned())),
            }
        }
        // A dangling symlink "exists" as false; refuse symlinks in the non-existing tail.
        let mut resolved = existing
            .canonicalize()
            .map_err(|source| WorkspaceError::Io {
                name: name.to_owned(),
                source,
            })?;
        for part in rest.iter().rev() {
            resolved.push(part);
            if resolved.symlink_metadata().is_ok() {
                return Err(WorkspaceError::Escapes(name.to_owned()));
            }
        }
        if !resolved.starts_with(&self.root) {
            return Err(WorkspaceError::Escapes(name.to_owned()));
        }
        Ok(resolved)
    }

    /// True when `path` (absolute or workspace-relative) lies inside the workspace.
    pub fn contains(&self, path: &Path) -> bool {
        let candidate = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        candidate
            .canonicalize()
            .map(|p| p.starts_with(&self.root))
            .unwrap_or(false)
    }

    /// A path for a new file named like `name` that does not exist yet (`x.pdf`, `x (1).pdf`…).
    pub fn unique_path(&self, name: &str) -> Result<PathBuf, WorkspaceError> {
        let path = self.resolve(name)?;
        if !path.exists() {
            return Ok(path);
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("file")
            .to_owned();
        let ext = path
            .extension()
            .and_then(|s| s.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();
        let parent = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.root.clone());
        for n in 1..10_000 {
            let candidate = parent.join(format!("{stem} ({n}){ext}"));
            if !candidate.exists() {
                return Ok(candidate);
            }
        }
        Err(WorkspaceError::InvalidName(name.to_owned()))
    }

    /// Names of the files in the workspace (relative, sorted), downloads included.
    pub fn list(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(ft) = entry.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(path);
                } else if ft.is_file()
                    && let Ok(rel) = path.strip_prefix(&self.root)
                {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        out
    }
}

/// Sanitizes a suggested file name (download, screenshot) into a single safe component.
pub fn sanitize_file_name(name: &str, fallback: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, ':' | '*' | '?' | '"' | '<' | '>' | '|') {
                '_'
            } else {
                c
            }
        })
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').to_owned();
    if cleaned.is_empty() {
        fallback.to_owned()
    } else {
        cleaned.chars().take(200).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape() {
        let ws = Workspace::temporary().expect("ws");
        for bad in [
            "../x.md",
            "/etc/passwd",
            "a/../../x.md",
            "",
            "  ",
            "a\\b.md",
        ] {
            assert!(ws.resolve(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(ws.resolve("sub/ok.md").expect("ok").starts_with(ws.root()));
    }

    #[test]
    fn symlink_out_is_refused() {
        let ws = Workspace::temporary().expect("ws");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret.txt"), "s").expect("write");
        std::os::unix::fs::symlink(outside.path(), ws.root().join("link")).expect("symlink");
        assert!(matches!(
            ws.resolve("link/secret.txt"),
            Err(WorkspaceError::Escapes(_))
        ));
        std::os::unix::fs::symlink(
            outside.path().join("nope.md"),
            ws.root().join("dangling.md"),
        )
        .expect("symlink");
        assert!(ws.resolve("dangling.md").is_err());
    }

    #[test]
    fn lists_files_and_sanitizes_names() {
        let ws = Workspace::temporary().expect("ws");
        std::fs::write(ws.root().join("notes.md"), "one").expect("write");
        std::fs::write(ws.downloads_dir().join("report.pdf"), "%PDF").expect("write");
        assert_eq!(ws.list(), ["downloads/report.pdf", "notes.md"]);
        assert_eq!(
            ws.unique_path("notes.md").expect("unique"),
            ws.root().join("notes (1).md")
        );
        assert_eq!(sanitize_file_name("../../evil.sh", "f"), "evil.sh");
        assert_eq!(sanitize_file_name("..", "f"), "f");
    }
}
