//! Embeds the git commit the binary was built from (benchmark results name it).
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    // A build that names its commit (scripts/gpu-check build does) is believed: two checkouts
    // of the repository sharing one target folder share this script's last run, whose
    // watched files below are the other checkout's, and a binary built in one was measured
    // as the other's commit (lab/results/suites-809b917-4xh100). The variable's change
    // reruns the script.
    println!("cargo:rerun-if-env-changed=COHORT_BUILD_COMMIT");
    let commit = std::env::var("COHORT_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["describe", "--always", "--dirty", "--abbrev=12"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=COHORT_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and the index - wherever git
    // keeps them (a worktree's are not under ../../.git, and two checkouts sharing a target
    // folder must not share a stale commit).
    let mut watched = vec!["HEAD".to_string(), "index".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for w in watched {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &w]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
