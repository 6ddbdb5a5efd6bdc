//! The k-NN index tools of the sharded index, through the real binary: `cohort index place`
//! (recorded and read back), `cohort index build --stream` (Centaur's model over these
//! indexes is the lab's: lab/cli/tests/it/centaur_model.rs).

use crate::common;
use common::Scratch;
use std::process::{Command, Output};

/// `cohort CMD --log-level warn ARGS...` (a model tool takes every argument after its name
/// as its own).
fn cohort(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cohort"))
        .arg(args[0])
        .args(["--log-level", "warn"])
        .args(&args[1..])
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: &Output) -> String {
    let t = text(o);
    assert!(o.status.success(), "{t}");
    t
}

/// A SIFT-like 6000 x 16 set with 50 queries under `d/data`; its folder.
fn small_data(d: &Scratch) -> String {
    let data = d.path("data");
    ok(&cohort(&[
        "data",
        "synth",
        "--n",
        "6000",
        "--dim",
        "16",
        "--queries",
        "50",
        "--out",
        &data,
    ]));
    data
}

fn small_index(d: &Scratch) -> (String, String) {
    let data = small_data(d);
    let ix = d.path("ix.index");
    ok(&cohort(&[
        "index",
        "build",
        "--base",
        &format!("{data}/base.fvecs"),
        "--nlist",
        "64",
        "--out",
        &ix,
    ]));
    (ix, format!("{data}/query.fvecs"))
}

#[test]
fn a_recorded_placement_is_shown_by_index_info() {
    let d = Scratch::new("knn-place");
    let (ix, _) = small_index(&d);
    let shown = ok(&cohort(&["index", "place", &ix, "--devices", "3"]));
    assert!(shown.contains("device 2"), "{shown}");
    assert!(ok(&cohort(&["index", "info", &ix])).contains("none recorded"));
    ok(&cohort(&[
        "index",
        "place",
        &ix,
        "--devices",
        "3",
        "--write",
    ]));
    let info = ok(&cohort(&["index", "info", &ix]));
    assert!(info.contains("recorded for 3 devices"), "{info}");
    let bad = cohort(&["index", "place", &ix, "--devices", "0"]);
    assert!(!bad.status.success(), "{}", text(&bad));
}

#[test]
fn a_streamed_build_writes_the_same_index_and_leaves_nothing_beside_it() {
    let d = Scratch::new("knn-stream");
    let data = small_data(&d);
    let base = format!("{data}/base.fvecs");
    let build = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "index", "build", "--base", &base, "--nlist", "16", "--sample", "6000",
        ];
        a.extend(["--iters", "4", "--device", "cpu", "--out", out]);
        a.extend(extra);
        ok(&cohort(&a))
    };
    let whole = d.path("whole.index");
    let streamed = d.path("streamed.index");
    build(&whole, &[]);
    let said = build(&streamed, &["--stream", "--stream-rows", "1000"]);
    assert!(said.contains("streaming 6000 x 16"), "{said}");
    assert!(
        std::fs::read(&whole).unwrap() == std::fs::read(&streamed).unwrap(),
        "the streamed index differs from the in-memory build's"
    );
    let left: Vec<String> = std::fs::read_dir(d.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp") || n.contains("assignments"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A base of another kind than .fvecs/.bvecs: a clear error, not a crash.
    let npy = d.path("base.npy");
    std::fs::write(&npy, b"not numpy").unwrap();
    let o = cohort(&[
        "index", "build", "--base", &npy, "--nlist", "4", "--stream", "--out", &streamed,
    ]);
    assert!(
        !o.status.success() && text(&o).contains(".fvecs or .bvecs"),
        "{}",
        text(&o)
    );
}
