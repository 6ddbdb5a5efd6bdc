//! lenet's model tools through the lab's binary: `cohort-lab model eval lenet` on the
//! repository's test digits, unknown tools refused, and training that says how far it is.

use std::process::Command;

fn testdata() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/services/lenet/src/testdata")
}

#[test]
fn model_eval_reports_the_shipped_models_accuracy_and_bad_tools_are_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(["model", "eval", "lenet", "--data"])
        .arg(testdata())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("on 1000 test images"), "{text}");
    let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(["model", "train", "knn", "--data", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(r#"services with "train": lenet"#),
        "{err}"
    );
    // An unknown tool names every tool there is.
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["model", "frob", "lenet"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("train lenet") && err.contains("centaur knn"),
        "{err}"
    );
    // `model --help` lists the tools; `--help` after TOOL SERVICE is the tool's own.
    // A tool without its service is an error (with the list), not a help request.
    let o = run(&["model", "train"]);
    assert!(!o.status.success(), "{o:?}");
    let o = run(&["model", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("eval facever") && !out.contains("load-db"),
        "{out}"
    );
    let o = run(&["model", "train", "lenet", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success()
            && out.contains("cohort-lab model train lenet")
            && out.contains("--data"),
        "{out}"
    );
}

/// MNIST-format files of `n` random images (and `n / 6` test images): enough to run the
/// trainer, not to learn anything.
fn tiny_mnist(dir: &std::path::Path, n: u32) {
    let mut seed = 12345u64;
    let mut byte = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 56) as u8
    };
    for (stem, count) in [("train", n), ("t10k", n / 6)] {
        let mut images = [2051u32, count, 28, 28]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        images.extend((0..count * 784).map(|_| byte()));
        std::fs::write(dir.join(format!("{stem}-images.idx3-ubyte")), images).unwrap();
        let mut labels = [2049u32, count]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        labels.extend((0..count).map(|_| byte() % 10));
        std::fs::write(dir.join(format!("{stem}-labels.idx1-ubyte")), labels).unwrap();
    }
}

#[test]
fn training_with_its_output_redirected_says_how_far_it_is() {
    let dir = std::env::temp_dir().join(format!("cohort-train-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    tiny_mnist(&dir, 640);
    let out = dir.join("w.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(["model", "train", "lenet", "--epochs", "1", "--data"])
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // 640 images in batches of 64: a line at every tenth of the epoch.
    for b in [1, 5, 10] {
        assert!(
            err.contains(&format!("epoch 1/1: {b} of 10 batches")),
            "{err}"
        );
    }
    assert!(out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
