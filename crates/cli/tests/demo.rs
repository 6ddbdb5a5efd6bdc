//! `cohort demo` end to end on a small set: it builds, serves, sweeps and checks every answer
//! (it exits non-zero on a wrong one); an engine it cannot start is a clear error.

mod common;
use common::{cohort, Scratch};

#[test]
fn the_demo_serves_its_index_and_prints_the_sweep() {
    let d = Scratch::new("demo");
    let out = cohort(&[
        "demo",
        "--n",
        "3000",
        "--nlist",
        "16",
        "--duration",
        "0.5",
        "--sweep",
        "200,400",
        "--engine",
        "cpu",
        "--dir",
        &d.path("demo"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(cpu engine)"), "{text}");
    assert!(text.contains("default nprobe"), "{text}");
    // A second run reuses what the first built.
    let again = cohort(&[
        "demo",
        "--n",
        "3000",
        "--nlist",
        "16",
        "--duration",
        "0.3",
        "--sweep",
        "200",
        "--engine",
        "cpu",
        "--dir",
        &d.path("demo"),
    ]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success() && text.contains("reusing data and index"),
        "{text}"
    );
}

#[test]
fn an_engine_the_machine_cannot_run_is_a_clear_error() {
    let d = Scratch::new("demo-engine");
    let out = cohort(&[
        "demo",
        "--n",
        "3000",
        "--nlist",
        "16",
        "--duration",
        "0.3",
        "--sweep",
        "200",
        "--engine",
        "no-such-engine",
        "--dir",
        &d.path("demo"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-engine"), "{err}");
}
