//! The optional TOML config file. The llm crate owns its format (`default_model`,
//! `[models.<name>]`, `BROWSERD_LLM_*` overrides); this module turns it into the api's model
//! catalog.

use std::path::Path;

use anyhow::Context;
use browserd_llm::ModelsConfig;
use browserd_tasks::ModelCatalog;

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

    /// The model catalogs shipped for `docker compose` and Kubernetes parse, name a configured
    /// default, cover the three wire formats and a local server (the compose one: every provider
    /// kind), build every model once its key is set, and only name key variables that the
    /// compose file and the worker pods pass on.
    #[test]
    fn shipped_model_catalogs_parse_and_build() {
        use browserd_llm::{ModelRegistry, ProviderKind};
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
        let compose = read("docker-compose.yml");
        let worker = read("deploy/base/worker.yaml");
        let secret = read("deploy/base/secret.yaml");
        for (file, local_host, passed_on) in [
            (
                "browserd.example.toml",
                "http://host.docker.internal:11434/",
                vec![compose.clone()],
            ),
            (
                "deploy/base/browserd.toml",
                ".svc.cluster.local:11434/",
                vec![worker.clone(), secret.clone()],
            ),
        ] {
            let models = ModelsConfig::from_file(root.join(file))
                .unwrap_or_else(|err| panic!("{file}: {err}"));
            let catalog = model_catalog(&models).unwrap();
            assert_eq!(catalog.default_model(), Some("gpt-4.1-mini"), "{file}");
            for kind in [
                ProviderKind::OpenAi,
                ProviderKind::Anthropic,
                ProviderKind::Gemini,
            ] {
                assert!(
                    models.models.values().any(|m| m.provider == kind),
                    "{file}: no {kind:?} model"
                );
            }
            if file == "browserd.example.toml" {
                for (name, kind) in ProviderKind::ALL {
                    assert!(
                        models.models.values().any(|m| m.provider == kind),
                        "{file}: no model of provider `{name}`"
                    );
                }
            }
            let local = models.get("local").unwrap();
            assert!(
                local.base_url.as_deref().unwrap().contains(local_host),
                "{file}: {local:?}"
            );
            assert_eq!(local.api_key_env, None, "{file}");
            // Every variable is "set"; Vertex's key file is the llm crate's test key.
            let service_account = root
                .join("crates/llm/tests/fixtures/test-service-account.json")
                .display()
                .to_string();
            let registry = ModelRegistry::with_key_lookup(models.clone(), move |name| {
                Some(if name == "GOOGLE_APPLICATION_CREDENTIALS" {
                    service_account.clone()
                } else {
                    "test-key".to_owned()
                })
            })
            .unwrap();
            for (name, model) in &models.models {
                if let Err(err) = registry.build(name) {
                    panic!("{file}: model {name}: {err}");
                }
                if let Some(var) = &model.api_key_env {
                    for text in &passed_on {
                        assert!(
                            text.contains(&format!("{var}:"))
                                || text.contains(&format!("name: {var}\n")),
                            "{file}: {var} (model {name}) is not passed to the containers"
                        );
                    }
                }
            }
        }
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
