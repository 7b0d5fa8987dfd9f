//! Who asks: the API key a front end authenticated, and what its credential allows.

use browserd_types::ApiKeyId;
use browserd_types::dto::TicketScope;

/// The authenticated API key of a request or tool call. Every task the core reads or changes
/// must be this key's; another key's task is not found.
#[derive(Clone, Debug)]
pub struct Caller {
    pub key_id: ApiKeyId,
    /// What the credential allows on the task's WebSockets: a key (header, subprotocol) may do
    /// everything ([`TicketScope::Control`]); a ticket what it was issued for.
    pub scope: TicketScope,
}

impl Caller {
    /// A caller authenticated by its key.
    pub fn key(key_id: ApiKeyId) -> Self {
        Self {
            key_id,
            scope: TicketScope::Control,
        }
    }
}
