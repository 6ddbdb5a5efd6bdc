//! What the UCX tests share.

/// Whether UCX can be loaded; where it cannot, says the test skipped (and fails it when
/// COHORT_REQUIRE_UCX is set: CI installs UCX, so a skip there is a mistake).
pub fn ucx_or_skip() -> bool {
    match cohort_ucx::load() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var_os("COHORT_REQUIRE_UCX").is_some() {
                panic!("COHORT_REQUIRE_UCX is set and {e}");
            }
            report_skip(&format!("UCX: {e}"));
            false
        }
    }
}

/// Says on the real stderr that the running test skipped, and why (`SKIPPED TEST: REASON`,
/// which scripts/test.sh counts as a skip, not a pass): libtest keeps a passing test's
/// `eprintln!` to itself, so the skip would not show. libtest names a test's thread after it.
pub fn report_skip(reason: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}
