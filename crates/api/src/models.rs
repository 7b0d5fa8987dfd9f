//! The catalog of model names the server can run. The api only needs the names (to validate
//! `model` in requests) and the default; the llm crate owns the provider configuration.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;
use browserd_types::dto::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::extract::Caller;

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

/// The models a task may name.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// Configured model names, sorted.
    pub models: Vec<String>,
    /// The model of tasks that name none (`null`: every task must name one).
    pub default: Option<String>,
}

/// List the models a task may name in `model`.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "tasks",
    responses(
        (status = 200, description = "Configured models", body = ModelList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_models(State(state): State<AppState>, _caller: Caller) -> Json<ModelList> {
    Json(ModelList {
        models: state.tasks.models().names().map(str::to_owned).collect(),
        default: state.tasks.models().default_model().map(str::to_owned),
    })
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
