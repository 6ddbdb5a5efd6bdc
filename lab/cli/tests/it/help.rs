//! What `cohort-lab --help` shows: the lab's commands, `model --help` naming the binary in
//! its usage, and `--virtual-gpus` only on the commands that use GPUs.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn model_help_names_the_binary() {
    let h = help(&["model", "--help"]);
    assert!(h.contains("Usage: cohort-lab model"), "{h}");
}

#[test]
fn the_lab_has_the_lab_commands_and_gpu_flags_where_gpus_are_used() {
    let h = help(&["--help"]);
    for cmd in ["bench", "sim", "model", "selftest"] {
        assert!(
            h.contains(&format!("\n  {cmd} ")),
            "{cmd} missing from:\n{h}"
        );
    }
    assert!(!h.contains("\n  serve "), "{h}");
    for cmd in [&["bench", "served", "--help"][..], &["selftest", "--help"]] {
        assert!(help(cmd).contains("--virtual-gpus"), "{cmd:?}");
    }
    for cmd in [
        &["--help"][..],
        &["model", "--help"],
        &["sim", "numa", "--help"],
    ] {
        assert!(!help(cmd).contains("--virtual-gpus"), "{cmd:?}");
    }
}
