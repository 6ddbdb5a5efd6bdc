//! facever's model tool through the lab's binary: `cohort-lab model eval facever` on the
//! faces built in (filling its database is the product's `cohort facever load-db`,
//! crates/cli/tests/it/facever_served.rs).

use std::process::Command;

#[test]
fn eval_reports_the_verification_accuracy_of_the_built_in_faces() {
    let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(["model", "eval", "facever"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("held-out pairs") && text.contains("balanced accuracy"),
        "{text}"
    );
}
