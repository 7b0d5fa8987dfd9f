//! The browserd binary: CLI, configuration and wiring of the api and worker roles.

fn main() -> anyhow::Result<()> {
    Ok(())
}
