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
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}
