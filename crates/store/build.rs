// Recompile (and re-embed `sqlx::migrate!`) when a migration changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
