//! docs/adding-a-service.md names the services crate's types as `module::Type`: each must exist
//! in that module, so the guide cannot drift from the code (it once named a
//! `catalog::ServiceBench` that had become `ServiceCommand`).

#[test]
fn every_type_the_guide_names_exists_where_it_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("../../docs/adding-a-service.md")).unwrap();
    let mut checked = 0;
    for piece in guide.split('`') {
        let Some((module, name)) = piece.split_once("::") else {
            continue;
        };
        if !["catalog", "entry", "workload", "config"].contains(&module)
            || !name.chars().all(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let source = std::fs::read_to_string(root.join(format!("src/{module}.rs"))).unwrap();
        let defined = ["struct", "enum", "trait", "type", "const", "fn"]
            .iter()
            .any(|kind| source.contains(&format!("pub {kind} {name}")));
        assert!(defined, "docs/adding-a-service.md names {module}::{name}, which src/{module}.rs does not define");
        checked += 1;
    }
    assert!(
        checked >= 8,
        "the guide names {checked} types; the parse found too few"
    );
    assert!(
        guide.contains("pub mod yours;"),
        "the guide says to add the module line"
    );
}
