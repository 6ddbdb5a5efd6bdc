//! docs/adding-a-service.md names the service API's types as `module::Type`: each must exist
//! in that module, so the guide cannot drift from the code (it once named a
//! `catalog::ServiceBench` that had become `ServiceCommand`).

use std::path::{Path, PathBuf};

/// Where module `module` of the guide lives: the catalog's list, or the service API's.
fn source_of(services: &Path, module: &str) -> Option<PathBuf> {
    match module {
        "catalog" => Some(services.join("catalog/src/catalog.rs")),
        "entry" | "checks" | "tools" | "listing" | "workload" | "config" | "harness" => {
            Some(services.join(format!("api/src/{module}.rs")))
        }
        _ => None,
    }
}

#[test]
fn every_type_the_guide_names_exists_where_it_says() {
    let services = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let guide = std::fs::read_to_string(services.join("../../docs/adding-a-service.md")).unwrap();
    let mut checked = 0;
    for piece in guide.split('`') {
        let Some((module, name)) = piece.split_once("::") else {
            continue;
        };
        let Some(path) = source_of(&services, module) else {
            continue;
        };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let defined = ["struct", "enum", "trait", "type", "const", "fn"]
            .iter()
            .any(|kind| source.contains(&format!("pub {kind} {name}")));
        assert!(
            defined,
            "docs/adding-a-service.md names {module}::{name}, which {} does not define",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked >= 10,
        "the guide names {checked} types; the parse found too few"
    );
}

/// The guide's recipe is what the test service did: its crate, its dependency line and its
/// catalog line, each as the guide shows it.
#[test]
fn the_guide_shows_the_lines_the_test_service_added() {
    let services = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let guide = std::fs::read_to_string(services.join("../../docs/adding-a-service.md")).unwrap();
    let manifest = std::fs::read_to_string(services.join("catalog/Cargo.toml")).unwrap();
    let catalog = std::fs::read_to_string(services.join("catalog/src/catalog.rs")).unwrap();
    let dep = "cohort-service-reverse = { path = \"../reverse\", optional = true }";
    assert!(manifest.contains(dep), "the catalog's manifest: {dep}");
    assert!(catalog.contains("&cohort_service_reverse::slice::LISTING"));
    for line in [
        "cohort-service-yours = { path = \"../yours\", default-features = false }",
        "\"cohort-service-yours/backends\",",
        "&cohort_service_yours::slice::LISTING,",
    ] {
        assert!(guide.contains(line), "the guide shows {line}");
    }
}
