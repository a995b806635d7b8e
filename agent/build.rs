//! Checks the agent's layers before the library compiles
//! (`layers/check.rs`): an import of a higher layer, a module without a
//! layer or an import cycle among production modules fails `cargo build`
//! with the rule and the modules that break it.

#[path = "layers/scan.rs"]
mod scan;

#[path = "layers/check.rs"]
mod check;

fn main() {
    let root = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=layers");
    let broken = check::violations(&root.join("src"));
    if !broken.is_empty() {
        for b in &broken {
            eprintln!("error: {b}");
        }
        eprintln!(
            "the agent's layers are broken ({} rule(s)): see agent/ARCHITECTURE.md, \"The layers\"",
            broken.len()
        );
        std::process::exit(1);
    }
}
