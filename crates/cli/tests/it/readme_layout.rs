//! The README's layout table names every crate of the workspace (a crate added without a row
//! leaves a newcomer no map to it), and every service crate in the services' row.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// The workspace's member folders (a `crates/x/*` pattern expanded to the folders holding a
/// Cargo.toml).
fn members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = text.find("members = [").expect("a members list");
    let list = &text[start..start + text[start..].find(']').unwrap()];
    let mut out = Vec::new();
    for line in list.lines() {
        let Some(path) = line
            .trim()
            .strip_prefix('"')
            .and_then(|l| l.split('"').next())
        else {
            continue;
        };
        match path.strip_suffix("/*") {
            Some(dir) => {
                for e in std::fs::read_dir(root().join(dir)).unwrap() {
                    let e = e.unwrap().path();
                    if e.join("Cargo.toml").exists() {
                        let name = e.file_name().unwrap().to_string_lossy().to_string();
                        out.push(format!("{dir}/{name}"));
                    }
                }
            }
            None => out.push(path.to_string()),
        }
    }
    out
}

#[test]
fn the_readme_layout_names_every_crate() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let members = members();
    assert!(members.len() > 10, "read the members: {members:?}");
    let services_row = readme
        .lines()
        .find(|l| l.starts_with("| `crates/services/`"))
        .expect("a row for crates/services/");
    for m in &members {
        match m.strip_prefix("crates/services/") {
            Some(service) => assert!(
                services_row.contains(&format!("`{service}/`")),
                "README.md's crates/services/ row does not name `{service}/`"
            ),
            None => assert!(
                readme.lines().any(|l| l.starts_with(&format!("| `{m}` |"))),
                "README.md's layout table has no row for `{m}`"
            ),
        }
    }
}
