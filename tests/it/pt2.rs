//! `.pt2` in and out: real torch.export archives of tiny random transformers
//! models, read and written back by hfx, loaded and run by torch.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use hfx::graph::pt2::{convert, schema::ExportedProgram, Pt2};

/// Equal programs, or the first differing JSON path.
fn assert_program_eq(a: &ExportedProgram, b: &ExportedProgram, what: &str) {
    if a == b {
        return;
    }
    fn diff(a: &serde_json::Value, b: &serde_json::Value, path: String) -> Option<String> {
        use serde_json::Value::*;
        match (a, b) {
            (Object(x), Object(y)) => {
                for k in x.keys().chain(y.keys()) {
                    match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => {
                            if let Some(d) = diff(p, q, format!("{path}.{k}")) {
                                return Some(d);
                            }
                        }
                        (p, q) => return Some(format!("{path}.{k}: {p:?} vs {q:?}")),
                    }
                }
                None
            }
            (Array(x), Array(y)) if x.len() == y.len() => x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| diff(p, q, format!("{path}[{i}]"))),
            _ if a == b => None,
            _ => Some(format!(
                "{path}: {} vs {}",
                a.to_string().chars().take(300).collect::<std::string::String>(),
                b.to_string().chars().take(300).collect::<std::string::String>()
            )),
        }
    }
    let d =
        diff(&serde_json::to_value(a).unwrap(), &serde_json::to_value(b).unwrap(), String::new());
    panic!("{what}: programs differ at {}", d.unwrap_or_else(|| "(float NaN?)".into()));
}

const ARCHS: &[&str] = &["llama", "qwen2", "qwen3", "gpt2", "bert", "vit"];
const MODES: &[&str] = &["static", "dynamic"];

fn harness(args: &[&str]) {
    run_python("pt2_fixture.py", args)
}

/// Every fixture archive, traced once per target folder (and once per test process).
fn fixtures() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = root().join("target/pt2-fixtures");
        harness(&["export-all", dir.to_str().unwrap()]);
        dir
    })
    .clone()
}

fn fixture(dir: &Path, arch: &str, mode: &str) -> PathBuf {
    dir.join(format!("{arch}_{mode}.pt2"))
}

#[test]
fn read_write_round_trip_runs_identically_in_torch() {
    let dir = fixtures();
    let out = tempfile::tempdir().unwrap();
    let mut quads: Vec<String> = Vec::new();
    for arch in ARCHS {
        for mode in MODES {
            let original = fixture(&dir, arch, mode);
            let pt2 = Pt2::open(&original).unwrap();
            // Through the IR and back: the program is the same, field for field.
            let program = &pt2.programs["model"];
            let graph = convert::to_ir(program).unwrap();
            let back = convert::from_ir(&graph, program).unwrap();
            assert_program_eq(&back, program, &format!("{arch} {mode}"));
            let copy = out.path().join(format!("{arch}_{mode}.pt2"));
            pt2.write(&copy, &[("model".to_string(), back)].into()).unwrap();
            // Nothing the schema holds is lost: the re-serialized JSON equals the original.
            let again = Pt2::open(&copy).unwrap();
            assert_eq!(again.programs, pt2.programs, "{arch} {mode}");
            let json_of = |p: &Pt2| -> serde_json::Value {
                let entry = p
                    .archive()
                    .entries()
                    .iter()
                    .find(|e| e.name.ends_with("models/model.json"))
                    .unwrap();
                serde_json::from_slice(p.archive().bytes(entry)).unwrap()
            };
            assert_eq!(json_of(&again), json_of(&pt2), "{arch} {mode}: JSON changed");
            // Every other entry is copied byte for byte, and data stays aligned;
            // the sample inputs (a pickle) are written empty.
            for entry in pt2.archive().entries().iter().filter(|e| !e.name.ends_with(".json")) {
                let copied = again.archive().entry(&entry.name).unwrap();
                let expected = if entry.name.contains("/data/sample_inputs/") {
                    &[][..]
                } else {
                    pt2.archive().bytes(entry)
                };
                assert_eq!(again.archive().bytes(copied), expected, "{}", entry.name);
                assert_eq!(copied.offset % 64, 0, "{} not 64-byte aligned", entry.name);
            }
            quads.extend([
                original.display().to_string(),
                copy.display().to_string(),
                arch.to_string(),
                mode.to_string(),
            ]);
        }
    }
    let args: Vec<&str> =
        std::iter::once("compare-all").chain(quads.iter().map(String::as_str)).collect();
    harness(&args);
}

#[test]
fn weights_are_byte_ranges_and_tied_weights_share_them() {
    let dir = fixtures();
    let pt2 = Pt2::open(&fixture(&dir, "gpt2", "static")).unwrap();
    let weights = &pt2.weights["model"].config;
    // GPT-2 ties lm_head to the token embedding: one stored file for both.
    let wte = &weights["transformer.wte.weight"];
    let head = &weights["lm_head.weight"];
    assert_eq!(wte.path_name, head.path_name);
    let bytes = pt2.weight("model", "lm_head.weight").unwrap().unwrap();
    assert_eq!(bytes.len(), 128 * 32 * 4);
    assert_eq!(
        bytes.as_ptr(),
        pt2.weight("model", "transformer.wte.weight").unwrap().unwrap().as_ptr()
    );
}

#[test]
fn sympy_sizes_and_range_constraints_are_read() {
    let dir = fixtures();
    let pt2 = Pt2::open(&fixture(&dir, "llama", "dynamic")).unwrap();
    let program: &ExportedProgram = &pt2.programs["model"];
    assert!(!program.range_constraints.is_empty());
    assert!(program
        .range_constraints
        .values()
        .all(|r| r.min_val == Some(2) && r.max_val.is_none()));
    let ids = &program.graph_module.graph.tensor_values["input_ids"];
    let symbolic = ids.sizes.iter().filter(|s| matches!(s, hfx::graph::pt2::schema::SymInt::AsExpr(e) if e.expr_str.starts_with("Symbol("))).count();
    assert_eq!(symbolic, 2, "batch and sequence are symbolic");
}

/// A copy of a fixture with its model JSON replaced by `edit(json)`.
fn with_model_json(edit: impl Fn(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let dir = fixtures();
    let pt2 = Pt2::open(&fixture(&dir, "bert", "static")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.pt2");
    let mut w = hfx::graph::pt2::archive::ArchiveWriter::create(&path).unwrap();
    for e in pt2.archive().entries() {
        let bytes = pt2.archive().bytes(e);
        if e.name.ends_with("models/model.json") {
            w.add(&e.name, edit(String::from_utf8(bytes.to_vec()).unwrap()).as_bytes()).unwrap();
        } else {
            w.add(&e.name, bytes).unwrap();
        }
    }
    w.finish().unwrap();
    (tmp, path)
}

fn open_error(path: &Path) -> String {
    let e = Pt2::open(path).err().expect("must fail").to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    e
}

#[test]
fn malformed_archives_get_a_one_line_error() {
    let (_t, path) = with_model_json(|j| j[..j.len() / 2].to_string());
    assert!(open_error(&path).contains("models/model.json: EOF while parsing"));
    let (_t, path) = with_model_json(|j| j.replacen("\"as_tensor\"", "\"as_quantum_tensor\"", 1));
    assert!(open_error(&path).contains("unknown variant `as_quantum_tensor`"));
    let (_t, path) = with_model_json(|j| {
        j.replacen("\"graph_module\": {", "\"graph_module\": {\"novelty\": 1, ", 1)
    });
    assert!(open_error(&path).contains("unknown field `novelty`"));
    let (_t, path) = with_model_json(|j| j.replace("\"major\": 8", "\"major\": 9"));
    assert!(open_error(&path)
        .contains("schema version 9.20 is not supported (this hfx reads 8.0 to 8.20"));

    // A node reading a value nobody defines: the archive opens, its program does not convert.
    let (_t, path) = with_model_json(|j| {
        j.replacen(
            "{\"as_tensor\": {\"name\": \"input_ids\"}}, \"kind\"",
            "{\"as_tensor\": {\"name\": \"ghost\"}}, \"kind\"",
            1,
        )
    });
    let out = hfx(&[
        "run",
        "--backend",
        "dynamo",
        path.to_str().unwrap(),
        "-o",
        path.with_extension("out.pt2").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("dangling value reference `ghost`") && stderr.contains("bad.pt2"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let dir = fixtures();
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture(&dir, "bert", "static")).unwrap();
    let truncated = tmp.path().join("truncated.pt2");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    assert!(open_error(&truncated).contains("not a readable .pt2 zip archive"));

    // An archive without its model JSON.
    let pt2 = Pt2::open(&fixture(&dir, "bert", "static")).unwrap();
    let missing = tmp.path().join("missing.pt2");
    let mut w = hfx::graph::pt2::archive::ArchiveWriter::create(&missing).unwrap();
    for e in pt2.archive().entries().iter().filter(|e| !e.name.contains("models/")) {
        w.add(&e.name, pt2.archive().bytes(e)).unwrap();
    }
    w.finish().unwrap();
    assert!(open_error(&missing).contains("no model JSON under"));
}

fn hfx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .current_dir(root())
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap()
}

fn count_target(path: &Path, target: &str) -> usize {
    let pt2 = Pt2::open(path).unwrap();
    pt2.programs["model"].graph_module.graph.nodes.iter().filter(|n| n.target == target).count()
}

#[test]
fn run_applies_the_onnx_fx_fixes_to_real_traces_without_changing_outputs() {
    plugin_dir("plugins/onnx/fix-assertion");
    let dir = fixtures();
    let out = tempfile::tempdir().unwrap();
    let mut quads: Vec<String> = Vec::new();
    let mut total_asserts = 0;
    for arch in ARCHS {
        for mode in MODES {
            let original = fixture(&dir, arch, mode);
            let fixed = out.path().join(format!("{arch}_{mode}.pt2"));
            let result = hfx(&[
                "run",
                "--backend",
                "onnx",
                "--plugins",
                "plugins/onnx",
                original.to_str().unwrap(),
                "-o",
                fixed.to_str().unwrap(),
            ]);
            let stdout = String::from_utf8_lossy(&result.stdout);
            assert!(
                result.status.success(),
                "{arch} {mode}: {}",
                String::from_utf8_lossy(&result.stderr)
            );
            let asserts = count_target(&original, "torch.ops.aten._assert_tensor_metadata.default");
            total_asserts += asserts;
            if asserts > 0 {
                assert!(
                    stdout.contains(&format!(
                        "onnx-fix-assertion             calls {asserts:>5}  changed {asserts:>5}"
                    )),
                    "{arch} {mode}: {stdout}"
                );
            }
            assert_eq!(
                count_target(&fixed, "torch.ops.aten._assert_tensor_metadata.default"),
                0,
                "{arch} {mode}"
            );
            assert_eq!(count_target(&fixed, "torch.ops.aten.alias.default"), 0, "{arch} {mode}");
            quads.extend([
                original.display().to_string(),
                fixed.display().to_string(),
                arch.to_string(),
                mode.to_string(),
            ]);
        }
    }
    assert!(total_asserts > 100, "the traces should hold runtime asserts to fix ({total_asserts})");
    let args: Vec<&str> =
        std::iter::once("compare-all").chain(quads.iter().map(String::as_str)).collect();
    harness(&args);
}

#[test]
fn run_dynamo_without_plugins_writes_an_equivalent_archive() {
    let dir = fixtures();
    let out = tempfile::tempdir().unwrap();
    let fixed = out.path().join("qwen3_dynamic.pt2");
    let original = fixture(&dir, "qwen3", "dynamic");
    let result = hfx(&[
        "run",
        "--backend",
        "dynamo",
        original.to_str().unwrap(),
        "-o",
        fixed.to_str().unwrap(),
    ]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_program_eq(
        &Pt2::open(&fixed).unwrap().programs["model"],
        &Pt2::open(&original).unwrap().programs["model"],
        "qwen3 dynamic",
    );
    let pte = out.path().join("model.pte");
    let result = hfx(&[
        "run",
        "--backend",
        "dynamo",
        original.to_str().unwrap(),
        "-o",
        pte.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&result.stderr)
        .contains("a .pte output needs an ExecuTorch backend"));
    assert!(!pte.exists());
}

/// A deterministic fuzz pass over the reader (the coverage-guided target is
/// `fuzz/fuzz_targets/pt2_open.rs`): random byte flips, truncations and
/// splices of a real archive must give an error or a program, never a panic.
#[test]
fn mutated_archives_never_panic_the_reader() {
    let dir = fixtures();
    let original = std::fs::read(fixture(&dir, "gpt2", "dynamic")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("mutant.pt2");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut errors, mut opened) = (0, 0);
    for round in 0..400 {
        let mut bytes = original.clone();
        match round % 4 {
            0 => bytes.truncate((next() % bytes.len() as u64) as usize),
            1 => {
                for _ in 0..1 + next() % 16 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << (next() % 8);
                }
            }
            2 => {
                // Damage the tail, where the central directory lives.
                let tail = bytes.len().saturating_sub(4096);
                let at = tail + (next() % (bytes.len() - tail) as u64) as usize;
                bytes[at] = next() as u8;
            }
            _ => {
                let from = (next() % bytes.len() as u64) as usize;
                let to = (next() % bytes.len() as u64) as usize;
                let len = (next() % 512) as usize;
                let chunk: Vec<u8> = bytes[from..(from + len).min(bytes.len())].to_vec();
                let end = (to + chunk.len()).min(bytes.len());
                bytes[to..end].copy_from_slice(&chunk[..end - to]);
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        match std::panic::catch_unwind(|| {
            Pt2::open(&path).map(|p| p.programs.values().map(convert::to_ir).count())
        }) {
            Ok(Ok(_)) => opened += 1,
            Ok(Err(e)) => {
                assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
                errors += 1;
            }
            Err(_) => panic!("the reader panicked on mutant {round}"),
        }
    }
    assert!(errors > 100, "mutations should mostly be caught ({errors} errors, {opened} opened)");
}

#[test]
fn argument_kinds_without_values_survive_the_ir() {
    // Real graphs here use no `as_int_lists`/`as_complex`/`as_float_lists`: plant them.
    let (_t, path) = with_model_json(|j| {
        // `{"as_ints": [a, b]}` → `{"as_int_lists": [[3], [a, b]]}`
        let start = j.find("{\"as_ints\": [").unwrap();
        let end = start + j[start..].find("]}").unwrap();
        let items = &j[start + "{\"as_ints\": [".len()..end];
        format!("{}{{\"as_int_lists\": [[3], [{items}]]}}{}", &j[..start], &j[end + 2..])
    });
    let json = |p: &Pt2| serde_json::to_string(&p.programs["model"]).unwrap();
    let pt2 = Pt2::open(&path).unwrap();
    assert!(json(&pt2).contains("as_int_lists"));
    let program = &pt2.programs["model"];
    let back = convert::from_ir(&convert::to_ir(program).unwrap(), program).unwrap();
    assert_program_eq(&back, program, "planted argument kinds");
}

/// Where a damaged copy of a fixture's weight goes wrong.
enum Damage {
    Short,
    Empty,
    Missing,
    /// One bit of the weight's data flipped after writing (the CRC-32 no longer matches).
    Crc,
    /// The weight's local header names a length one short of the directory's.
    LocalNameLength,
    /// The weight's local header says it is a byte longer than the directory does.
    LocalSize,
    /// torch's own archive with the CRC-32 in the weight's data descriptor changed.
    Descriptor,
}

/// A copy of the bert fixture with the storage of its first weight damaged;
/// returns the archive, the weight's fqn and its entry's name.
fn damaged(dir: &Path, damage: Damage) -> (PathBuf, String, String) {
    let original = Pt2::open(&fixture(&fixtures(), "bert", "static")).unwrap();
    let (fqn, meta) = original.weights["model"].config.iter().next().unwrap();
    let entry_name = original
        .archive()
        .entries()
        .iter()
        .find(|e| e.name.ends_with(&format!("data/weights/{}", meta.path_name)))
        .unwrap()
        .name
        .clone();
    let path = dir.join("damaged.pt2");
    let mut w = hfx::graph::pt2::archive::ArchiveWriter::create(&path).unwrap();
    for e in original.archive().entries() {
        let bytes = original.archive().bytes(e);
        match (&damage, e.name == entry_name) {
            (Damage::Short, true) => w.add(&e.name, &bytes[..bytes.len() - 4]).unwrap(),
            (Damage::Empty, true) => w.add(&e.name, &[]).unwrap(),
            (Damage::Missing, true) => {}
            _ => w.add(&e.name, bytes).unwrap(),
        }
    }
    w.finish().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let entry = Pt2::open(&path).unwrap().archive().entry(&entry_name).cloned();
    match damage {
        Damage::Crc => bytes[entry.unwrap().offset as usize + 7] ^= 0x10,
        Damage::LocalNameLength | Damage::LocalSize => {
            // The local header is right before the name, padding and data: find its signature.
            let offset = entry.unwrap().offset as usize;
            let local =
                (0..offset).rev().find(|&i| bytes[i..i + 4] == [0x50, 0x4b, 0x03, 0x04]).unwrap();
            let (at, delta) = if let Damage::LocalNameLength = damage {
                (local + 26, -1i64)
            } else {
                (local + 22, 1)
            };
            let width = if at == local + 26 { 2 } else { 4 };
            let mut value = [0u8; 8];
            value[..width].copy_from_slice(&bytes[at..at + width]);
            let value = (u64::from_le_bytes(value) as i64 + delta) as u64;
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        _ => {}
    }
    if let Damage::Descriptor = damage {
        // torch writes CRC and sizes after the data (flag bit 3): `PK\x07\x08`, CRC, sizes.
        bytes = std::fs::read(fixture(&fixtures(), "bert", "static")).unwrap();
        let entry = original.archive().entry(&entry_name).unwrap();
        let end = (entry.offset + entry.len) as usize;
        assert_eq!(bytes[end..end + 4], [0x50, 0x4b, 0x07, 0x08], "torch writes data descriptors");
        bytes[end + 4] ^= 1;
    }
    std::fs::write(&path, &bytes).unwrap();
    (path, fqn.clone(), entry_name)
}

/// `hfx run` on a damaged archive, for `backend`: fails with one line naming
/// the archive and `expect`, and leaves neither output nor temp file.
fn refused_by_run(dir: &Path, input: &Path, backend: &str, expect: &[&str]) {
    let out = dir.join(if backend == "onnx" { "out.onnx" } else { "out.pt2" });
    let mut args =
        vec!["run", "--backend", backend, input.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let plugins = root().join("plugins/onnx").display().to_string();
    let dynamo = root().join("plugins/dynamo").display().to_string();
    if backend == "onnx" {
        args.extend(["--plugins", &dynamo, "--plugins", &plugins]);
    }
    let result = hfx(&args);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success(), "{backend}: accepted: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{backend}: {stderr}");
    assert!(stderr.contains(&input.display().to_string()), "{backend}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "{backend}: `{e}` not in: {stderr}");
    }
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "damaged.pt2")
        .collect();
    assert!(left.is_empty(), "{backend}: left behind: {left:?}");
}

#[test]
fn damaged_weights_are_refused_by_both_backends() {
    plugin_dir("plugins/onnx/translate-matmul");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (damage, what) in [
        (Damage::Short, "holds"),
        (Damage::Empty, "is empty, the tensor needs"),
        (Damage::Missing, "is missing"),
        (Damage::Crc, "is corrupt (CRC-32 mismatch)"),
    ] {
        let (path, fqn, entry) = damaged(dir, damage);
        let weight = format!("weight `{fqn}`");
        let expect = [weight.as_str(), entry.as_str(), what];
        let e = Pt2::open(&path)
            .unwrap()
            .weight("model", &fqn)
            .expect_err("weight refused")
            .to_string();
        assert!(expect.iter().all(|x| e.contains(x)), "{e}");
        refused_by_run(dir, &path, "dynamo", &expect);
        refused_by_run(dir, &path, "onnx", &expect);
    }
    for (damage, what) in [
        (Damage::LocalNameLength, "local header names another entry"),
        (Damage::LocalSize, "local header says"),
        (
            Damage::Descriptor,
            "local header's data descriptor disagrees with the directory's CRC-32",
        ),
    ] {
        let (path, _, entry) = damaged(dir, damage);
        let e = Pt2::open(&path).err().expect("archive refused").to_string();
        assert!(e.contains(&entry) && e.contains(what), "{e}");
        refused_by_run(dir, &path, "dynamo", &[&entry, what]);
        refused_by_run(dir, &path, "onnx", &[&entry, what]);
    }
}

#[test]
fn a_fifo_as_input_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("input.pt2");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let out = tmp.path().join("out.pt2");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(["run", "--backend", "dynamo", fifo.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .current_dir(root())
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("hfx hung on a FIFO input");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("input.pt2") && stderr.contains("FIFO"), "{stderr}");
}

#[test]
fn every_weight_of_real_archives_passes_the_checks() {
    // No false alarms: torch's own archives (data descriptors, tied weights, views) pass.
    let dir = fixtures();
    for arch in ARCHS {
        for mode in MODES {
            let pt2 = Pt2::open(&fixture(&dir, arch, mode)).unwrap();
            pt2.check_payloads().unwrap_or_else(|e| panic!("{arch} {mode}: {e}"));
            for fqn in pt2.weights["model"].config.keys() {
                assert!(pt2.weight("model", fqn).unwrap().is_some(), "{arch} {mode}: {fqn}");
            }
        }
    }
}

use crate::fuzz_bodies;

/// Every fuzz seed and every crasher the fuzzers found (`fuzz/regressions/<target>/`,
/// one file per finding, fixed since) replayed through its target's code: each
/// must end in a value or an error. Crashers found so far, by target:
/// - ir_json `bert_dynamic.json` (the seed itself): a graph after dead-code
///   elimination wrote values naming erased producers, and its JSON was refused.
#[test]
fn fuzz_seeds_and_crashers_replay_without_panics() {
    let mut replayed = 0;
    for (target, body) in fuzz_bodies::TARGETS {
        for folder in ["seeds", "regressions"] {
            let dir = root().join("fuzz").join(folder).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                if std::panic::catch_unwind(|| body(&data)).is_err() {
                    panic!("fuzz target {target} panics on {}", path.display());
                }
                replayed += 1;
            }
        }
    }
    assert!(replayed >= 20, "only {replayed} inputs replayed");
}

/// The cost of checking every weight (sizes and CRC-32) on the 125M-parameter
/// Llama `.pt2` of `bench/pt2_bench.py` (run that first to make it), in a
/// release build: `cargo test --release --test it pt2::weight_check_cost -- --ignored --nocapture`.
/// Prints the check's wall and CPU time beside a `.pt2` write of the same
/// archive with the checks already done (remembered per entry).
#[test]
#[ignore = "benchmark: needs bench/pt2_bench.py's archive (cargo xtask test --full skips it)"]
fn weight_check_cost_on_a_125m_llama() {
    let input = root().join("target/bench/llama125m.pt2");
    let out = tempfile::tempdir_in(root().join("target")).unwrap();
    let cpu = || -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
        (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
    };
    for round in 0..3 {
        let pt2 = Pt2::open(&input).unwrap();
        let (wall, cpu0) = (std::time::Instant::now(), cpu());
        pt2.check_payloads().unwrap();
        let (check_wall, check_cpu) = (wall.elapsed().as_secs_f64(), cpu() - cpu0);
        let wall = std::time::Instant::now();
        pt2.write(&out.path().join("copy.pt2"), &Default::default()).unwrap();
        let write_wall = wall.elapsed().as_secs_f64();
        let bytes: u64 = pt2.archive().entries().iter().map(|e| e.len).sum();
        println!(
            "round {round}: check {:.3} s wall, {check_cpu:.2} s CPU ({:.0} MB); .pt2 write after it {write_wall:.3} s",
            check_wall,
            bytes as f64 / 1e6
        );
    }
}

/// A copy of the bert fixture at `path` with `edit(entry name, bytes)`
/// giving each entry's new bytes (None leaves it out).
fn edited_fixture(path: &Path, edit: impl Fn(&str, &[u8]) -> Option<Vec<u8>>) {
    let original = Pt2::open(&fixture(&fixtures(), "bert", "static")).unwrap();
    let mut w = hfx::graph::pt2::archive::ArchiveWriter::create(path).unwrap();
    for e in original.archive().entries() {
        if let Some(bytes) = edit(&e.name, original.archive().bytes(e)) {
            w.add(&e.name, &bytes).unwrap();
        }
    }
    w.finish().unwrap();
}

/// A torch.save pickle that creates `marker` when unpickled.
fn pickle_payload(dir: &Path, marker: &Path) -> Vec<u8> {
    let payload = dir.join("payload.pt");
    harness(&["pickle-payload", marker.to_str().unwrap(), payload.to_str().unwrap()]);
    std::fs::read(payload).unwrap()
}

fn run_backend(input: &Path, backend: &str, out: &Path, verify: bool) -> std::process::Output {
    let mut args =
        vec!["run", "--backend", backend, input.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let plugins = root().join(format!("plugins/{backend}")).display().to_string();
    args.extend(["--plugins", &plugins]);
    if verify {
        args.push("--verify");
    }
    hfx(&args)
}

/// A `.pt2` is input from whoever sent it: a weight stored pickled (its
/// `__reduce__` creates a marker file when unpickled) is refused, with one
/// line naming the file and the weight, by every backend, before any worker
/// loads it (ExecuTorch lowers in the worker; a dynamo artifact is verified
/// there). Sample inputs, a pickle torch loads with a fallback to
/// `weights_only=False`, never pass into what the worker or the recipient of
/// the artifact loads: the host rebuilds the archive from what it checked.
#[test]
fn pickles_in_a_pt2_are_never_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let marker = dir.join("pwned");
    let payload = pickle_payload(dir, &marker);
    let original = Pt2::open(&fixture(&fixtures(), "bert", "static")).unwrap();
    let (fqn, meta) = original.weights["model"].config.iter().next().unwrap();
    let entry = format!("bert/data/weights/{}", meta.path_name);

    let pickled = dir.join("pickled.pt2");
    edited_fixture(&pickled, |name, bytes| {
        if name == entry {
            return Some(payload.clone());
        }
        if name.ends_with("model_weights_config.json") {
            let mut config: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            config["config"][fqn.as_str()]["use_pickle"] = true.into();
            return Some(serde_json::to_vec(&config).unwrap());
        }
        Some(bytes.to_vec())
    });
    let cases = [
        ("executorch", "out.pte", false),
        ("dynamo", "out.pt2", true),
        ("dynamo", "plain.pt2", false),
        ("onnx", "out.onnx", false),
    ];
    for (backend, out, verify) in cases {
        let result = run_backend(&pickled, backend, &dir.join(out), verify);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success(), "{backend}: accepted: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{backend}: {stderr}");
        let expected = format!("weight `{fqn}` is stored pickled");
        for part in [
            pickled.to_str().unwrap(),
            &expected,
            "pickled weights are not loaded from untrusted files",
        ] {
            assert!(stderr.contains(part), "{backend}: `{part}` not in: {stderr}");
        }
        assert!(!marker.exists(), "{backend}: the pickle ran");
        assert!(!dir.join(out).exists(), "{backend}: wrote {out}");
    }

    let sampled = dir.join("sample-inputs.pt2");
    edited_fixture(&sampled, |name, bytes| {
        Some(if name.ends_with("data/sample_inputs/model.pt") {
            payload.clone()
        } else {
            bytes.to_vec()
        })
    });
    let out = dir.join("sampled-out.pt2");
    let result = run_backend(&sampled, "dynamo", &out, false);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    // Whoever loads the artifact with torch loads no pickle from it.
    harness(&["load", out.to_str().unwrap()]);
    assert!(!marker.exists(), "the dynamo artifact carried the pickle on");
    let result = run_backend(&sampled, "executorch", &dir.join("sampled.pte"), false);
    assert!(
        !marker.exists(),
        "the worker unpickled the sample inputs: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
}
