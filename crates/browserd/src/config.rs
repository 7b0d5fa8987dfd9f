//! The optional TOML config file. This binary only reads the model names and the default
//! model; the llm crate owns the full `[models.<name>]` format.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use browserd_api::ModelCatalog;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct ConfigFile {
    default_model: Option<String>,
    #[serde(default)]
    models: BTreeMap<String, toml::Table>,
}

pub fn parse_model_catalog(text: &str) -> anyhow::Result<ModelCatalog> {
    let file: ConfigFile = toml::from_str(text)?;
    let mut names = Vec::new();
    for (name, table) in &file.models {
        collect_model_names(name, table, &mut names)?;
    }
    Ok(ModelCatalog::new(names, file.default_model)?)
}

/// A model entry is a table with a `provider` key. TOML reads an unquoted
/// `[models.gpt-4.1-mini]` as nested tables `gpt-4` → `1-mini`, so tables without `provider`
/// are walked and their names joined with `.` again (`[models."gpt-4.1-mini"]` works as well).
fn collect_model_names(
    name: &str,
    table: &toml::Table,
    names: &mut Vec<String>,
) -> anyhow::Result<()> {
    if table.contains_key("provider") {
        names.push(name.to_owned());
        return Ok(());
    }
    let mut found = false;
    for (part, value) in table {
        if let toml::Value::Table(inner) = value {
            collect_model_names(&format!("{name}.{part}"), inner, names)?;
            found = true;
        }
    }
    anyhow::ensure!(found, "model `{name}` has no `provider`");
    Ok(())
}

pub fn load_model_catalog(path: &Path) -> anyhow::Result<ModelCatalog> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    parse_model_catalog(&text).with_context(|| format!("in config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_names_and_default() {
        let catalog = parse_model_catalog(
            r#"
default_model = "gpt-4.1-mini"
[models.gpt-4.1-mini]
provider = "openai"
base_url = "https://api.openai.com/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
[models.gpt-4.1-mini.price]
input = 0.4
[models."claude-4.5"]
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
"#,
        )
        .unwrap();
        assert_eq!(catalog.default_model(), Some("gpt-4.1-mini"));
        assert_eq!(
            catalog.names().collect::<Vec<_>>(),
            ["claude-4.5", "gpt-4.1-mini"]
        );
    }

    #[test]
    fn rejects_a_default_that_is_not_configured() {
        let err = parse_model_catalog("default_model = \"nope\"\n").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        assert!(parse_model_catalog("").unwrap().default_model().is_none());
        let err = parse_model_catalog("[models.x]\nmodel = \"m\"\n").unwrap_err();
        assert!(err.to_string().contains("provider"), "{err}");
    }
}
