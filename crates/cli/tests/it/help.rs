//! What `--help` shows: the product's commands only (the lab's are `cohort-lab`'s, which the
//! help names), and `--virtual-gpus` only on the commands that use GPUs while every command
//! line that passed it before (before the subcommand, as the README writes it) still does.

use crate::common;
use common::cohort;

fn help(args: &[&str]) -> String {
    let out = cohort(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_lab_commands_are_the_lab_binarys() {
    let h = help(&["--help"]);
    for cmd in [
        "serve", "node", "load", "demo", "data", "index", "facever", "gpus", "selftest",
    ] {
        assert!(
            h.contains(&format!("\n  {cmd} ")),
            "{cmd} missing from:\n{h}"
        );
    }
    for cmd in ["bench", "sim", "model"] {
        assert!(!h.contains(&format!("\n  {cmd} ")), "{cmd} listed in:\n{h}");
        let out = cohort(&[cmd, "--help"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {out:?}");
    }
    assert!(h.contains("cohort-lab"), "{h}");
    // What serving facever needs is the product's: filling its database.
    let h = help(&["facever", "load-db", "--help"]);
    assert!(h.contains("--memcached") && h.contains("--data"), "{h}");
}

#[test]
fn virtual_gpus_shows_only_where_gpus_are_used() {
    for cmd in [
        &["serve", "--help"][..],
        &["node", "--help"],
        &["selftest", "--help"],
        &["gpus", "--help"],
    ] {
        assert!(help(cmd).contains("--virtual-gpus"), "{cmd:?}");
    }
    for cmd in [
        &["--help"][..],
        &["data", "fetch", "--help"],
        &["data", "synth", "--help"],
        &["load", "--help"],
    ] {
        assert!(!help(cmd).contains("--virtual-gpus"), "{cmd:?}");
    }
    // Accepted before the subcommand (README) and after it, and checked either way.
    let check = [
        "--service",
        "echo",
        "--udp",
        "127.0.0.1:0",
        "--check-config",
    ];
    for head in [
        &["--virtual-gpus", "0:2x8", "serve"][..],
        &["serve", "--virtual-gpus", "0:2x8"],
    ] {
        let args: Vec<&str> = head.iter().chain(&check).copied().collect();
        let out = cohort(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    for head in [
        &["--virtual-gpus", "bad", "serve"][..],
        &["serve", "--virtual-gpus", "bad"],
    ] {
        let args: Vec<&str> = head.iter().chain(&check).copied().collect();
        let out = cohort(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--virtual-gpus"));
    }
}
