//! What the lab's end-to-end bench tests share.

/// Whether this machine has the 2 cores a served bench needs (the server pinned to one, the
/// generator to another); if not, says so on stderr as `SKIPPED WHAT: ...`, which
/// scripts/test.sh counts as a skip (straight to stderr: libtest keeps eprintln!).
pub fn two_cores_or_skip(what: &str) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {what}: needs 2 cores (server and generator apart), have {cores}"
        );
    }
    cores >= 2
}
