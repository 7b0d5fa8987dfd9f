//! The catalog of model names the server can run. The core only needs the names (to validate
//! `model` in requests) and the default; the llm crate owns the provider configuration.

use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelCatalog {
    names: BTreeSet<String>,
    default: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("default model `{0}` is not one of the configured models")]
pub struct UnknownDefaultModel(pub String);

impl ModelCatalog {
    pub fn new(
        names: impl IntoIterator<Item = String>,
        default: Option<String>,
    ) -> Result<Self, UnknownDefaultModel> {
        let names: BTreeSet<String> = names.into_iter().collect();
        if let Some(default) = &default
            && !names.contains(default)
        {
            return Err(UnknownDefaultModel(default.clone()));
        }
        Ok(Self { names, default })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    pub fn default_model(&self) -> Option<&str> {
        self.default.as_deref()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_must_be_configured() {
        assert!(ModelCatalog::new(["a".to_owned()], Some("a".to_owned())).is_ok());
        assert_eq!(
            ModelCatalog::new(["a".to_owned()], Some("b".to_owned())),
            Err(UnknownDefaultModel("b".to_owned()))
        );
    }
}
