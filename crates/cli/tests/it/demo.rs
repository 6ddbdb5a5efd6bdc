//! `cohort demo` end to end on a small set: it builds, serves, sweeps and checks every answer
//! (it exits non-zero on a wrong one); an engine it cannot start is a clear error.

use crate::common;
use common::{cohort, Scratch};

/// `cohort demo` on 3 000 vectors in `dir`, short points, then `extra`.
fn demo(dir: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "demo",
        "--n",
        "3000",
        "--nlist",
        "16",
        "--duration",
        "0.3",
        "--dir",
        dir,
    ];
    args.extend_from_slice(extra);
    cohort(&args)
}

#[test]
fn the_demo_serves_its_index_and_prints_the_sweep() {
    let d = Scratch::new("demo");
    let dir = d.path("demo");
    let out = demo(&dir, &["--sweep", "200,400", "--engine", "cpu"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(cpu engine)"), "{text}");
    assert!(text.contains("default nprobe"), "{text}");
    // A second run reuses what the first built.
    let again = demo(&dir, &["--sweep", "200", "--engine", "cpu"]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success() && text.contains("reusing data and index"),
        "{text}"
    );
}

#[test]
fn an_engine_the_machine_cannot_run_is_a_clear_error() {
    let d = Scratch::new("demo-engine");
    let out = demo(
        &d.path("demo"),
        &["--sweep", "200", "--engine", "no-such-engine"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-engine"), "{err}");
}
