//! The ExecuTorch backend's mechanisms end to end, both programs: `hfx run
//! --backend executorch -o out.pte` traces a tiny random model, runs the FX
//! stages (dynamo and executorch plugins), and either emits the portable
//! program itself (the worker decomposes with ExecuTorch's edge table; the
//! host lowers to kernels, plans memory and writes the FlatBuffer) or, with
//! `--delegate xnnpack`, has ExecuTorch lower the fixed program with the
//! XNNPACK partitioner in the worker. `--verify` runs the `.pte` in the
//! ExecuTorch runtime against eager PyTorch. Each architecture's programs
//! (static and dynamic, verified, loaded by the reference's runtime) are rows
//! of the export matrix (`tests/exports.rs`).

use crate::common::hfx_with_python as hfx;
use crate::common::tiny::*;
use crate::common::*;

fn plugin_folders() -> Vec<String> {
    vec!["--plugins".to_string(), root().join("plugins").display().to_string()]
}

/// The two programs of the backend: the flags that choose each.
const PORTABLE: &[&str] = &[];
const XNNPACK: &[&str] = &["--delegate", "xnnpack"];

/// The arguments of `hfx run --backend executorch PROGRAM` to `out` (a
/// `.pte` or a folder) with `extra` flags.
fn export_args(
    program: &[&str],
    arch: &str,
    set: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> =
        ["run", "--backend", "executorch", "--model", arch, "--set", set, "-o"]
            .map(String::from)
            .to_vec();
    args.extend([out.display().to_string(), "--static".into()]);
    args.extend(program.iter().chain(extra).map(|s| s.to_string()));
    args.extend(plugin_folders());
    args
}

/// `hfx run --backend executorch PROGRAM` to `out` with `extra` flags; its stdout.
fn export(
    dir: &std::path::Path,
    program: &[&str],
    arch: &str,
    set: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> String {
    let args = export_args(program, arch, set, out, extra);
    let result = hfx(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    assert!(
        result.status.success(),
        "{arch} {program:?} {extra:?}: {}{stdout}",
        String::from_utf8_lossy(&result.stderr)
    );
    stdout
}

/// A tiny Llama's program exported with `--verify` and its trace cached:
/// the export folder, the trace cache and the run's stdout.
struct Exported {
    folder: std::path::PathBuf,
    cache: String,
    stdout: String,
}

/// The tiny Llama's static portable program (`--verify`, `--trace-cache`),
/// exported once per test process into `target/executorch-fixtures/`: the
/// plain program the FX fix and the memory-planning flags change.
fn portable_llama() -> &'static Exported {
    static PORTABLE_LLAMA: std::sync::OnceLock<Exported> = std::sync::OnceLock::new();
    PORTABLE_LLAMA.get_or_init(|| {
        let dir = root().join("target/executorch-fixtures");
        // A trace cached by an earlier build's worker is not this one's.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        plain_export(&dir, PORTABLE, "portable")
    })
}

/// The tiny Llama's static `program` exported with `--verify` to `DIR/NAME/`,
/// its trace cached in `DIR/trace-cache`.
fn plain_export(dir: &std::path::Path, program: &[&str], name: &str) -> Exported {
    let folder = dir.join(name);
    let cache = dir.join("trace-cache").display().to_string();
    let stdout =
        export(dir, program, "llama", LLAMA, &folder, &["--verify", "--trace-cache", &cache]);
    Exported { folder, cache, stdout }
}

/// The ExecuTorch backend has no translations: its workarounds are FX fixes
/// and patches, and a third party's, loaded from a folder, changes the
/// `program` hfx emits (or the one ExecuTorch lowers) with no rebuild of hfx
/// (silu becomes x * sigmoid(x) in a tiny Llama's MLP: a different `.pte`,
/// still matching eager). An FX fix is not part of the trace: the run with
/// the fix takes the `plain` one's program from the trace cache.
fn a_third_party_fx_fix_changes(program: &[&str], name: &str, plain: &Exported) {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_dir("tests/plugins/executorch-silu-as-sigmoid").display().to_string();
    assert!(!plain.stdout.contains("test-executorch-silu-as-sigmoid"), "{}", plain.stdout);
    let fixed = dir.path().join(format!("fixed-{name}"));
    let with_fix = ["--verify", "--trace-cache", &plain.cache, "--plugins", &plugin];
    let stdout = export(dir.path(), program, "llama", LLAMA, &fixed, &with_fix);
    assert!(stdout.contains("the trace cache's"), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("test-executorch-silu-as-sigmoid"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("changed     2"), "{name}: one silu per layer: {line}");
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert_ne!(
        std::fs::read(plain.folder.join("model.pte")).unwrap(),
        std::fs::read(fixed.join("model.pte")).unwrap(),
        "{name}: the fix did not reach the program"
    );
}

#[test]
fn a_third_party_fx_fix_changes_the_portable_program() {
    a_third_party_fx_fix_changes(PORTABLE, "portable", portable_llama());
}

#[test]
#[ignore = "full tier: the same fix through ExecuTorch's XNNPACK lowering (the portable program's test runs the FX stage)"]
fn a_third_party_fx_fix_changes_the_xnnpack_program() {
    let dir = tempfile::tempdir().unwrap();
    a_third_party_fx_fix_changes(XNNPACK, "xnnpack", &plain_export(dir.path(), XNNPACK, "plain"));
}

/// Sizes used where a kernel takes a tensor (`x + x.shape[1]` with a dynamic
/// sequence): the portable program writes each into a 0-dim tensor at run
/// time (`scalar_tensor`, as ExecuTorch's `SymToTensorPass`), so the program
/// follows the size it is given.
#[test]
#[ignore = "full tier: sizes as tensors in the portable program (the export matrix's dynamic Llama row runs a dynamic portable program at two sizes)"]
fn sizes_used_as_tensors_follow_the_input_in_the_portable_program() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.pte");
    let plugins = root().join("plugins").display().to_string();
    let model = "hfx_test_models:adds_its_length";
    let args = [
        "run",
        "--backend",
        "executorch",
        "--model-fn",
        &format!("python:{model}"),
        "--dynamic",
        "--verify",
        "--plugins",
        &plugins,
        "-o",
        out.to_str().unwrap(),
    ];
    let result = hfx(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("stage pte-emit") && stdout.contains(" ok"), "{stdout}");
    run_python("run_pte_at.py", &[out.to_str().unwrap(), model, "2x5", "3x9", "1x2"]);
}

/// The worker's shortcuts through ExecuTorch's XNNPACK lowering (a partition
/// whose structure was seen takes the delegate graph made of it; a sorted
/// graph is not re-sorted; a retrace that would change nothing, the
/// decomposition after XNNPACK's kept ops are renamed and three op-replacing
/// passes with nothing to replace, is skipped: four on each model here; no
/// program the lowering constructs prints its shape guards) give
/// ExecuTorch's own `.pte`, byte for byte: a Llama static and dynamic (its
/// second layer's partitions replayed), the Llama quantized 8da4w (its
/// second layer's int4 linear layers replayed with their own scales, which
/// at a hidden size of 128 are too large to key by value) and a ViT (a
/// convolution's weight is stored channels-last: that partition is never
/// replayed). The skips' conditions see what a retrace would change.
#[test]
#[ignore = "full tier: ExecuTorch's own lowering run beside hfx's four times (the export matrix's XNNPACK rows check the shortcuts took effect and the program matches eager)"]
fn the_lowering_shortcuts_give_executorchs_own_bytes() {
    run_python(
        "check_lowering_shortcuts.py",
        &["llama", &overrides_json(LLAMA), "dynamic", "5", "4"],
    );
    run_python(
        "check_lowering_shortcuts.py",
        &["llama", &overrides_json(LLAMA), "static", "2", "4"],
    );
    let wider = LLAMA
        .replace("hidden_size=32,intermediate_size=64", "hidden_size=128,intermediate_size=256");
    assert_ne!(wider, LLAMA);
    run_python(
        "check_lowering_shortcuts.py",
        &["llama", &overrides_json(&wider), "static", "5", "4", "8da4w"],
    );
    run_python("check_lowering_shortcuts.py", &["vit", &overrides_json(VIT), "static", "1", "4"]);
}

/// `--quantize` on a model folder hands the float weights' checkpoint pages
/// back as it quantizes each linear layer (the worker's peak held them beside
/// the quantized copies), and quantizes as one torchao `quantize_` over the
/// whole model does.
#[test]
fn quantizing_hands_back_the_float_weights_checkpoint_pages() {
    run_python("check_quantized_pages.py", &[]);
}

/// What cannot be emitted says so in one line, naming the node and the way
/// out, and writes nothing: an op the portable runtime has no kernel for
/// (`aten.sort`), a delegate of another backend, a `.pte` from ONNX.
#[test]
fn what_cannot_be_emitted_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.pte");
    let plugins = root().join("plugins").display().to_string();
    let llama = ["--model", "llama", "--set", LLAMA];
    for (args, expected) in [
        (
            &[
                "--backend",
                "executorch",
                "--model-fn",
                "python:hfx_test_models:sorts",
                "--plugins",
                &plugins,
            ][..],
            "`aten.sort.default` has no kernel in ExecuTorch's portable runtime",
        ),
        (
            &[&llama[..], &["--backend", "onnx", "--delegate", "xnnpack"]].concat()[..],
            "--delegate xnnpack is an ExecuTorch delegate",
        ),
        (
            &[&llama[..], &["--backend", "onnx"]].concat()[..],
            "a .pte output needs an ExecuTorch backend",
        ),
    ] {
        let mut all = vec!["run", "-o", out.to_str().unwrap()];
        all.extend(args);
        let result = hfx(dir.path(), &all);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists(), "{args:?}: wrote {}", out.display());
    }
    assert_no_scratch_left(dir.path());
}

/// A dynamic portable program plans its arena for the declared maxima (a
/// batch of `MAX_BATCH`, the model's `max_position_embeddings`), not for the
/// far-off bounds a program without them gets (a batch of 64 here): a tiny
/// Llama's arena stays under a MiB, and the summary prints it next to the
/// weights with what it was planned for.
#[test]
fn a_dynamic_portable_program_plans_its_arena_for_the_declared_maxima() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = verified_portable_llama(dir.path(), &["--model", "llama", "--set", LLAMA]);
    assert!(
        stdout.contains("verify inputs {\"attention_mask\":[3,5]"),
        "verified at a second size: {stdout}"
    );
    let arena: u64 = stdout
        .split("planned arena ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(arena < 1 << 20, "arena {arena} bytes for a tiny Llama: {stdout}");
    let memory = memory_line(&stdout);
    assert!(memory.contains("planned for batch <= 4, sequence <= 64; weights 0.1 MiB"), "{memory}");
    assert!(!stdout.contains("warning"), "{stdout}");
}

/// The stdout of a verified portable export of `model` (`--model ...` or
/// `--model-fn ...`) to `dir/llama.pte`.
fn verified_portable_llama(dir: &std::path::Path, model: &[&str]) -> String {
    let out = dir.join("llama.pte").display().to_string();
    let mut args = vec!["run", "--backend", "executorch"];
    args.extend(model);
    args.extend(["--verify", "-o", &out]);
    let plugins = plugin_folders();
    args.extend(plugins.iter().map(String::as_str));
    let result = hfx(dir, &args);
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    assert!(result.status.success(), "{}{stdout}", String::from_utf8_lossy(&result.stderr));
    stdout
}

/// The summary's `  memory: ` line.
fn memory_line(stdout: &str) -> &str {
    stdout.lines().find(|l| l.starts_with("  memory: ")).unwrap_or_else(|| panic!("{stdout}"))
}

/// Inputs hfx did not size (a `--model-fn`'s, as `hfx.export`'s are) have
/// their batch and sequence axes known by their names (`input_ids`,
/// `attention_mask`): the arena is planned for the same maxima, never below
/// the sizes traced (a batch of 6, past the default 4), where a program
/// without them is planned for far-off bounds (an OPT: tens of GiB).
#[test]
#[ignore = "full tier: named --dynamic-shapes maxima (a_dynamic_portable_program_plans_its_arena_for_the_declared_maxima covers the planning)"]
fn inputs_hfx_did_not_size_are_planned_for_the_declared_maxima_by_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model-fn", "python:tiny_models:llama_with_its_inputs"];
    let stdout = verified_portable_llama(dir.path(), &model);
    let memory = memory_line(&stdout);
    assert!(memory.contains("planned for batch <= 6, sequence <= 64;"), "{memory}");
    assert!(!stdout.contains("warning"), "{stdout}");
}

/// The reference's memory-planning options (`ExecutorchConfig.alloc_graph_input`,
/// `alloc_graph_output`): the portable program's arena leaves out the graph's
/// inputs and outputs, which the ExecuTorch runtime then reads as
/// caller-provided (not memory-planned); the arena shrinks by the outputs it
/// no longer holds, the program still matches eager at two sizes, and the
/// export folder records the options as the reference's config fields. The
/// program is the shared plain one's trace (`portable_llama`), planned again.
#[test]
fn the_portable_arena_leaves_out_the_inputs_and_outputs_the_flags_name() {
    let dir = tempfile::tempdir().unwrap();
    let plain = portable_llama();
    let arena = |stdout: &str| -> u64 {
        stdout
            .split("planned arena ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"))
    };
    let whole = arena(&plain.stdout);
    let caller = dir.path().join("caller");
    let flags = [
        "--verify",
        "--no-alloc-graph-input",
        "--no-alloc-graph-output",
        "--trace-cache",
        &plain.cache,
    ];
    let stdout = export(dir.path(), PORTABLE, "llama", LLAMA, &caller, &flags);
    assert!(stdout.contains("the trace cache's"), "{stdout}");
    assert!(arena(&stdout) < whole, "{} >= {whole}: {stdout}", arena(&stdout));
    for (folder, planned) in [(&plain.folder, "planned"), (&caller, "caller")] {
        let pte = folder.join("model.pte");
        run_python("check_pte_memory.py", &[pte.to_str().unwrap(), planned, planned]);
    }
    let config = std::fs::read_to_string(caller.join("export.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let fields = &config["components"]["model"]["metadata"]["export_config"];
    assert_eq!(
        (&fields["alloc_graph_input"], &fields["alloc_graph_output"]),
        (&serde_json::json!(false), &serde_json::json!(false)),
        "{config}"
    );
    assert_eq!(fields["alloc_mutable_buffers"], serde_json::json!(true), "{config}");
}

/// The XNNPACK program gets the same options through ExecuTorch's own
/// `MemoryPlanningPass`.
#[test]
#[ignore = "full tier: the options through ExecuTorch's XNNPACK lowering (the_portable_arena_leaves_out_the_inputs_and_outputs_the_flags_name covers the flags and the check)"]
fn the_xnnpack_arena_leaves_out_the_inputs_and_outputs_the_flags_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pte");
    let flags = ["--verify", "--no-alloc-graph-input", "--no-alloc-graph-output"];
    export(dir.path(), XNNPACK, "llama", LLAMA, &out, &flags);
    run_python("check_pte_memory.py", &[out.to_str().unwrap(), "caller", "caller"]);
}

/// The memory-planning flags are refused in one line, before any work, where
/// they would change nothing or break the check: another backend, mutable
/// buffers the portable program does not have, and an XNNPACK generation
/// program whose in-place updates the runtime would keep between calls.
#[test]
fn memory_planning_flags_that_cannot_apply_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model", "llama", "--set", LLAMA];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--backend", "onnx", "--no-alloc-graph-input", "-o", "m.onnx"],
            "--backend onnx writes none",
        ),
        (
            &["--backend", "executorch", "--no-alloc-mutable-buffers", "-o", "m.pte"],
            "the portable program has no mutable buffer",
        ),
        (
            &[
                "--backend",
                "executorch",
                "--delegate",
                "xnnpack",
                "--generation",
                "--cache",
                "static",
                "--max-cache-len",
                "16",
                "--no-alloc-graph-input",
                "-o",
                "g/",
            ],
            "keeps an unplanned input's update",
        ),
    ];
    for (flags, expected) in cases {
        let args: Vec<&str> = ["run"].iter().chain(&model).chain(flags.iter()).copied().collect();
        let out = hfx(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{flags:?}: {stderr}");
    }
    assert_no_scratch_left(dir.path());
}

/// An 8da4w generation program (prefill and decode, a static cache) of
/// `arch` generates the greedy tokens of the eager model torchao quantized
/// (the same module, quantized in the worker before the capture), token for
/// token: the generation check holds a quantized model only to an agreement
/// of 0.5, and this to all of them. The folder.
fn an_8da4w_generation_program_generates_the_quantized_eager_tokens(
    arch: &str,
    set: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let flags = [
        "--verify",
        "--quantize",
        "8da4w",
        "--generation",
        "--cache",
        "static",
        "--max-cache-len",
        "32",
    ];
    let args = export_args(XNNPACK, arch, set, &out, &flags);
    let args: Vec<&str> = args.iter().map(String::as_str).filter(|a| *a != "--static").collect();
    let result = hfx(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{arch}: {}{stdout}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("identical to eager `generate`"), "{arch}: {stdout}");
    assert!(stdout.contains("  held to: 8da4w tolerance: each step's logits within"), "{stdout}");
    assert_no_scratch_left(dir.path());
    (dir, out)
}

/// Also: without `--verify`, the components are lowered in a worker of
/// their own once the trace's is gone (the run's peak memory is then the
/// trace's or the lowering's, not both), and the programs are the bytes the
/// verified run's trace worker lowered.
#[test]
#[ignore = "full tier: 8da4w prefill and decode programs generating (the export matrix's fast 8da4w cell covers the scheme)"]
fn an_8da4w_llama_generation_program_generates_the_quantized_eager_tokens() {
    let (dir, verified) =
        an_8da4w_generation_program_generates_the_quantized_eager_tokens("llama", LLAMA);
    let out = dir.path().join("unverified");
    let flags =
        ["--quantize", "8da4w", "--generation", "--cache", "static", "--max-cache-len", "32"];
    let args = export_args(XNNPACK, "llama", LLAMA, &out, &flags);
    let args: Vec<&str> = args.iter().map(String::as_str).filter(|a| *a != "--static").collect();
    let result = hfx(dir.path(), &args);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    for program in ["prefill.pte", "decode.pte"] {
        let (lowered, as_verified) = (out.join(program), verified.join(program));
        assert!(
            std::fs::read(lowered).unwrap() == std::fs::read(as_verified).unwrap(),
            "{program}"
        );
    }
}

#[test]
#[ignore = "full tier: 8da4w prefill and decode programs generating (the export matrix's fast 8da4w cell covers the scheme)"]
fn an_8da4w_qwen3_generation_program_generates_the_quantized_eager_tokens() {
    an_8da4w_generation_program_generates_the_quantized_eager_tokens("qwen3", QWEN3);
}

#[test]
#[ignore = "full tier: 8da4w prefill and decode programs generating (the export matrix's fast 8da4w cell covers the scheme)"]
fn an_8da4w_phi3_generation_program_generates_the_quantized_eager_tokens() {
    an_8da4w_generation_program_generates_the_quantized_eager_tokens("phi3", PHI3);
}

/// What ExecuTorch's `--quantize` cannot do is refused in one line before
/// any work.
#[test]
fn executorch_quantization_that_cannot_apply_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model", "llama", "--set", LLAMA];
    let xnnpack = ["--backend", "executorch.xnnpack", "-o", "m.pte"];
    let cases: &[(&[&str], &[&str], &str)] = &[
        (
            &["--backend", "executorch", "-o", "m.pte"],
            &["--quantize", "8da4w"],
            "the portable program has no kernels for torchao's quantized ops",
        ),
        (&xnnpack, &["--quantize", "int4"], "ExecuTorch's schemes are 8da4w, 4w and 8w"),
        (&xnnpack, &["--quantize", "8da4w", "--group-size", "48"], "give 32, 64, 128 or 256"),
        (&xnnpack, &["--quantize", "8w", "--group-size", "64"], "has no 4-bit groups"),
        (&xnnpack, &["--quantize-embeddings", "2w"], "give 4w or 8w"),
        (
            &xnnpack,
            &["--quantize", "8da4w", "--quantize-exclude", "lm_head"],
            "tune the ONNX backend's quantizer",
        ),
        (
            &["--backend", "onnx", "-o", "m.onnx"],
            &["--quantize-embeddings", "8w"],
            "quantizes an ExecuTorch program's embeddings",
        ),
    ];
    for (backend, flags, expected) in cases {
        let args: Vec<&str> = ["run"]
            .iter()
            .chain(&model)
            .chain(backend.iter())
            .chain(flags.iter())
            .copied()
            .collect();
        let out = hfx(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{flags:?}: {stderr}");
    }
    let traced = dir.path().join("traced.pt2");
    std::fs::write(&traced, b"not read").unwrap();
    let out = hfx(
        dir.path(),
        &[
            "run",
            traced.to_str().unwrap(),
            "--backend",
            "executorch.xnnpack",
            "--quantize",
            "8da4w",
            "-o",
            "m.pte",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("quantizes the eager model before its trace"), "{stderr}");
    assert_no_scratch_left(dir.path());
}
