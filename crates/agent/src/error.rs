//! Errors that stop a run before it starts.

/// Why an agent could not be created.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A task setting is unusable.
    #[error("invalid task configuration: {0}")]
    InvalidConfig(String),
    /// The workspace could not be created.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
}
