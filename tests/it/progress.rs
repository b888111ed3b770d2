//! `hfx run`'s progress as a user sees it: on a terminal (a pseudo-terminal
//! from util-linux's `script`), each step with its time; `-q` shows none;
//! piped, none unless `-v`.

use std::process::Command;

use crate::common::*;

/// An IR JSON program through the ONNX fixes: a run without the worker.
const RUN: &str = "run --backend onnx --no-default-plugins --plugins plugins/onnx \
                   examples/graphs/dynamic-batch-sort.json -o";

/// What a terminal shows for `hfx <args>`: its stdout and stderr, as drawn.
fn on_a_terminal(args: &str) -> String {
    let hfx = env!("CARGO_BIN_EXE_hfx");
    let out = Command::new("script")
        .args(["-qec", &format!("{hfx} {args}"), "/dev/null"])
        .current_dir(root())
        .env("COLUMNS", "200")
        .output()
        .expect("util-linux's `script` (Debian's bsdutils)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "hfx {args}:\n{text}");
    text
}

#[test]
fn a_terminal_shows_each_step_with_its_time_and_quiet_shows_none() {
    plugin_dir("plugins/onnx/fix-alias");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fixed.json");
    let shown = on_a_terminal(&format!("{RUN} {}", out.display()));
    // A finished step stays as `  [   0.0 s] fx stages: 5 nodes  (0.0 s)`; the
    // spinner's frames pad the step to the terminal's width instead.
    let step = shown
        .split(['\r', '\n'])
        .find_map(|l| l.find("] fx stages: 5 nodes  (").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no finished `fx stages` step:\n{shown}"));
    assert!(step.split_whitespace().nth(6) == Some("s)"), "{step}");
    assert!(shown.contains("wrote "), "the summary follows the steps:\n{shown}");

    let quiet = on_a_terminal(&format!("-q {RUN} {}", out.display()));
    assert!(!quiet.contains("fx stages:"), "-q shows no step:\n{quiet}");

    let piped = Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(RUN.split_whitespace())
        .arg(&out)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert_eq!(String::from_utf8_lossy(&piped.stderr), "", "piped stderr stays empty");
}
