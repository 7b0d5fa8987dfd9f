//! The one directory of a task: the agent's todo.md and files, the browser's downloads,
//! uploads, PDFs and screenshots.

use std::path::{Path, PathBuf};

/// A task's workspace directory; a temporary one is removed on drop.
#[derive(Debug)]
pub struct TaskWorkspace {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl TaskWorkspace {
    /// Uses (creating) `dir`, or a fresh temporary directory when `None`.
    pub fn open(dir: Option<&Path>) -> std::io::Result<Self> {
        match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Ok(Self {
                    dir: dir.canonicalize()?,
                    _temp: None,
                })
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("browserd-task-")
                    .tempdir()?;
                Ok(Self {
                    dir: temp.path().canonicalize()?,
                    _temp: Some(temp),
                })
            }
        }
    }

    /// The directory; give it to both `TaskConfig::workspace_dir` and
    /// `ContextOptions::workspace_dir`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
