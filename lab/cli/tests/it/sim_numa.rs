//! `cohort-lab sim numa` as a user runs it: a figure's table with whole column names, progress on
//! stderr when it is not a terminal, and its JSON and plot written.

use std::process::Command;

#[test]
fn a_figure_prints_whole_names_says_how_far_it_is_and_writes_its_files() {
    let out = std::env::temp_dir().join(format!("cohort-sim-numa-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args([
            "sim",
            "numa",
            "fig11",
            "--scale",
            "0.02",
            "--log-level",
            "warn",
        ])
        .args([
            "--workload",
            "stream-triad-64M",
            "--workload",
            "srad-2d",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{stderr}");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("workload"))
        .expect("a table");
    for name in ["2-sockets-of-ideal", "8-sockets-of-ideal", "8-ideal"] {
        assert!(header.split_whitespace().any(|c| c == name), "{header}");
    }
    // Every row's cells line up under the header's columns.
    let row = stdout
        .lines()
        .find(|l| l.starts_with("srad-2d"))
        .expect("a row");
    assert_eq!(row.len(), header.len(), "{header}\n{row}");
    // 2 workloads x 7 distinct machines (an `-of-ideal` bar reuses its machine's runs): a
    // line at every tenth.
    assert!(
        stderr.contains("fig11: 14 of 14 simulations done"),
        "{stderr}"
    );
    assert!(
        stderr.contains("fig11: 2 of 14 simulations done"),
        "{stderr}"
    );
    for f in ["sim-numa-fig11.json", "sim-numa-fig11.png"] {
        assert!(out.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
