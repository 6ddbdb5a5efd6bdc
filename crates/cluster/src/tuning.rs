//! Settings shared by the front end and the node, so that neither imports the other: how
//! long an idle thread polls before it blocks, and the UCX worker mode a role's
//! `--cluster-busy-poll` asks for.

use cohort_ucx::Mode;
use std::time::Duration;

/// How long an idle thread polls before it blocks.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// The UCX worker mode a role's `--cluster-busy-poll` asks for.
pub(crate) fn mode(busy_poll: bool) -> Mode {
    if busy_poll {
        Mode::Polled
    } else {
        Mode::Events
    }
}
