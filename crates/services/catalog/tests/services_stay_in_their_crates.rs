//! Nothing outside a service's crate reaches into it: no code file under crates/ or lab/
//! names a service's crate (`cohort_service_NAME`, or `cohort_services::NAME` through the
//! catalog's re-exports), the catalog and the binaries' end-to-end tests (crates/cli/tests,
//! lab/cli/tests) excepted, and the few places below, each with the reason it cannot go
//! through the catalog. An exception that no longer names its service fails too, so the list
//! only shrinks.

use std::path::{Path, PathBuf};

/// (file from the workspace's root, service crate it names, why it may).
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "crates/cli/src/demo.rs",
        "knn",
        "`cohort demo` is the k-NN demo: it builds an index and checks recall",
    ),
    (
        "lab/experiments/src/bench/knn.rs",
        "knn",
        "`bench knn-cpu` starts a server, which a service crate cannot depend on",
    ),
    (
        "lab/experiments/src/bench/echo.rs",
        "micro",
        "`bench echo` is the physical anchor every served figure is reported beside",
    ),
];

/// The service crates under crates/services/ (their folder names), and the names each goes
/// by in code: its crate, and its modules re-exported by the catalog.
fn services(root: &Path) -> Vec<(String, Vec<String>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(root.join("services")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name == "api" || name == "catalog" {
            continue;
        }
        let mut names = vec![
            format!("cohort_service_{name}"),
            format!("cohort_services::{name}"),
        ];
        if name == "micro" {
            names.extend([
                "cohort_services::echo".into(),
                "cohort_services::spin".into(),
            ]);
        }
        v.push((name, names));
    }
    v.sort();
    v
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_code_outside_a_service_crate_names_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let services = services(&root.join("crates"));
    assert!(services.len() >= 6, "found {services:?}");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("lab"), &mut files);
    let mut found = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("crates/services/catalog/")
            || rel.starts_with("crates/cli/tests/")
            || rel.starts_with("lab/cli/tests/")
        {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (name, names) in &services {
            if rel.starts_with(&format!("crates/services/{name}/")) {
                continue;
            }
            if names.iter().any(|n| text.contains(n.as_str())) {
                found.push((rel.clone(), name.clone()));
            }
        }
    }
    for (file, service) in &found {
        assert!(
            EXCEPTIONS.iter().any(|(f, s, _)| f == file && s == service),
            "{file} names the {service} service's crate: reach it through the catalog (its entry)"
        );
    }
    for (file, service, why) in EXCEPTIONS {
        assert!(
            found.iter().any(|(f, s)| f == file && s == service),
            "{file} no longer names {service} ({why}): take it off the exceptions"
        );
    }
}
