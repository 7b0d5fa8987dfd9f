//! The optional TOML config file. The llm crate owns its format (`default_model`,
//! `[models.<name>]`, `BROWSERD_LLM_*` overrides); this module turns it into the api's model
//! catalog.

use std::path::Path;

use anyhow::Context;
use browserd_api::ModelCatalog;
use browserd_llm::ModelsConfig;

/// Reads the model configuration: the file when given, then `BROWSERD_LLM_*` overrides.
pub fn load_models(path: Option<&Path>) -> anyhow::Result<ModelsConfig> {
    let mut models = match path {
        Some(path) => ModelsConfig::from_file(path)
            .with_context(|| format!("in config file {}", path.display()))?,
        None => ModelsConfig::default(),
    };
    models
        .apply_process_env()
        .context("in BROWSERD_LLM_* environment variables")?;
    Ok(models)
}

/// The names a task may pick, and the default.
pub fn model_catalog(models: &ModelsConfig) -> anyhow::Result<ModelCatalog> {
    Ok(ModelCatalog::new(
        models.models.keys().cloned(),
        models.default_model.clone(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_names_and_default() {
        let models = ModelsConfig::from_toml_str(
            r#"
default_model = "gpt-4.1-mini"
[models.gpt-4.1-mini]
provider = "openai"
base_url = "https://api.openai.com/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
[models.gpt-4.1-mini.price]
input = 0.4
output = 1.6
[models."claude-4.5"]
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
"#,
        )
        .unwrap();
        let catalog = model_catalog(&models).unwrap();
        assert_eq!(catalog.default_model(), Some("gpt-4.1-mini"));
        assert_eq!(
            catalog.names().collect::<Vec<_>>(),
            ["claude-4.5", "gpt-4.1-mini"]
        );
    }

    #[test]
    fn rejects_a_default_that_is_not_configured() {
        let err = ModelsConfig::from_toml_str("default_model = \"nope\"\n").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let empty = ModelsConfig::from_toml_str("").unwrap();
        assert!(model_catalog(&empty).unwrap().default_model().is_none());
        let err = ModelsConfig::from_toml_str("[models.x]\nmodel = \"m\"\n").unwrap_err();
        assert!(err.to_string().contains("provider"), "{err}");
    }
}
