//! Task secrets as clients send them and the store keeps them: browser-use's `sensitive_data`
//! shape, `{"name": "value"}` (bound to no domain) or `{"https://*.bank.example": {"name":
//! "value"}}` (bound to the domains of that pattern, the patterns of `allowed_domains`).
//!
//! Values are `SecretString`s: never serialized, never in `Debug` (names only). Which patterns
//! are valid and where a secret may be used are the api's and the agent's rules; this is the
//! data and the one binding of unbound secrets to a task's `allowed_domains`.

use std::collections::BTreeMap;
use std::fmt;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One entry of [`TaskSecrets`].
#[derive(Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a secret's value (a string), or an object of name -> value (secrets bound to \
                 the domain pattern that is its key)"
)]
pub enum TaskSecret {
    /// `name -> value`, bound to no domain.
    Value(SecretString),
    /// `domain pattern -> {name -> value}`: usable only on pages of that pattern's domains.
    Bound(BTreeMap<String, SecretString>),
}

/// One entry of a task's `secrets`: a value, or the secrets bound to the domain pattern that is
/// its key.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = TaskSecret)]
pub enum TaskSecretSchema {
    /// A secret's value, bound to no domain: accepted only with `allowed_domains` (it is then
    /// bound to those domains) or `allow_secrets_on_any_domain`.
    Value(String),
    /// Secrets (name → value) bound to the domain pattern that is this entry's key.
    Bound(BTreeMap<String, String>),
}

/// A task's secrets, keyed by secret name (unbound) or domain pattern (bound).
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct TaskSecrets(pub BTreeMap<String, TaskSecret>);

impl fmt::Debug for TaskSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.names())
            .entry(&"[REDACTED]")
            .finish()
    }
}

impl TaskSecrets {
    /// A map of unbound secrets.
    pub fn unbound(values: impl IntoIterator<Item = (String, SecretString)>) -> Self {
        Self(
            values
                .into_iter()
                .map(|(name, value)| (name, TaskSecret::Value(value)))
                .collect(),
        )
    }

    /// No secret at all.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|entry| match entry {
            TaskSecret::Value(_) => false,
            TaskSecret::Bound(map) => map.is_empty(),
        })
    }

    /// Every `(pattern, name, value)`, the pattern `None` for an unbound secret.
    pub fn entries(&self) -> impl Iterator<Item = (Option<&str>, &str, &SecretString)> {
        self.0.iter().flat_map(|(key, entry)| {
            let items: Vec<(Option<&str>, &str, &SecretString)> = match entry {
                TaskSecret::Value(value) => vec![(None, key.as_str(), value)],
                TaskSecret::Bound(map) => map
                    .iter()
                    .map(|(name, value)| (Some(key.as_str()), name.as_str(), value))
                    .collect(),
            };
            items
        })
    }

    /// How many values (a name bound to two patterns counts twice).
    pub fn count(&self) -> usize {
        self.entries().count()
    }

    /// The names of the secrets bound to no domain.
    pub fn unbound_names(&self) -> Vec<&str> {
        self.entries()
            .filter(|(pattern, _, _)| pattern.is_none())
            .map(|(_, name, _)| name)
            .collect()
    }

    /// `name` or `pattern:name` of every secret (safe to show and log).
    pub fn names(&self) -> Vec<String> {
        self.entries()
            .map(|(pattern, name, _)| match pattern {
                Some(pattern) => format!("{pattern}:{name}"),
                None => name.to_owned(),
            })
            .collect()
    }

    /// The same secrets with the unbound ones bound to each of `patterns` (a task's
    /// `allowed_domains`); a value already bound under one of them to the same name wins.
    /// Without patterns nothing changes.
    pub fn bind_unbound_to(self, patterns: &[String]) -> Self {
        if patterns.is_empty() {
            return self;
        }
        let mut unbound = Vec::new();
        let mut out = BTreeMap::new();
        for (key, entry) in self.0 {
            match entry {
                TaskSecret::Value(value) => unbound.push((key, value)),
                bound @ TaskSecret::Bound(_) => {
                    out.insert(key, bound);
                }
            }
        }
        for pattern in patterns {
            let entry = out
                .entry(pattern.clone())
                .or_insert_with(|| TaskSecret::Bound(BTreeMap::new()));
            if let TaskSecret::Bound(map) = entry {
                for (name, value) in &unbound {
                    map.entry(name.clone()).or_insert_with(|| value.clone());
                }
            }
        }
        Self(out)
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn parse(json: serde_json::Value) -> TaskSecrets {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn flat_and_bound_secrets_parse_and_show_only_names() {
        let secrets = parse(serde_json::json!({
            "pw": "hunter2",
            "https://*.bank.example": {"pin": "1234", "pw": "bank-pw"},
        }));
        assert_eq!(secrets.count(), 3);
        assert_eq!(secrets.unbound_names(), ["pw"]);
        let shown = format!("{secrets:?}");
        assert!(shown.contains("https://*.bank.example:pin"), "{shown}");
        for value in ["hunter2", "1234", "bank-pw"] {
            assert!(!shown.contains(value), "{shown}");
        }
        let err = serde_json::from_value::<TaskSecrets>(serde_json::json!({"pw": 5})).unwrap_err();
        assert!(
            err.to_string().contains("a secret's value (a string)"),
            "{err}"
        );
    }

    #[test]
    fn unbound_secrets_bind_to_each_allowed_pattern_and_bound_values_win() {
        let secrets = parse(serde_json::json!({
            "pw": "hunter2",
            "a.example": {"pw": "a-pw"},
        }))
        .bind_unbound_to(&["a.example".to_owned(), "*.b.example".to_owned()]);
        assert!(secrets.unbound_names().is_empty());
        let values: Vec<(Option<&str>, &str, &str)> = secrets
            .entries()
            .map(|(p, n, v)| (p, n, v.expose_secret()))
            .collect();
        assert_eq!(
            values,
            [
                (Some("*.b.example"), "pw", "hunter2"),
                (Some("a.example"), "pw", "a-pw"),
            ]
        );
        let none = parse(serde_json::json!({"pw": "x"})).bind_unbound_to(&[]);
        assert_eq!(none.unbound_names(), ["pw"]);
    }
}
