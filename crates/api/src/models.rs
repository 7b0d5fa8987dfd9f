//! `GET /v1/models`: the core's model catalog ([`browserd_tasks::ModelCatalog`]).

use axum::Json;
use axum::extract::State;
use browserd_types::dto::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::extract::Caller;

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
        models: state
            .core
            .tasks()
            .models()
            .names()
            .map(str::to_owned)
            .collect(),
        default: state
            .core
            .tasks()
            .models()
            .default_model()
            .map(str::to_owned),
    })
}
