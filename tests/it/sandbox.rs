//! Hostile plugins are contained: each failure is reported with plugin, kind,
//! stage and node; the graph is exactly as before the failed call; the host
//! survives and runs the next plugin.

use std::time::{Duration, Instant};

use crate::common::*;
use hfx::plugins::{Failure, Limits, PluginError, PluginKind, Session};
use hfx::stages::{fx_node_fix, OnPluginError};

/// Runs `hostile` (order 50) before the well-behaved relu fix (order 100) on
/// the relu/add/mul graph: under `fail` the stage stops with the hostile
/// plugin's error and the graph is untouched; under `skip` the next plugin
/// still rewrites the node.
fn contained(hostile: &str, limits: Limits) -> PluginError {
    let runtime = runtime_with(limits);
    let bad = load(&runtime, hostile);
    let good = load(&runtime, "tests/plugins/kind-node-fix");
    let plugins = [of::<kind::FxNodeFix>(&bad), of::<kind::FxNodeFix>(&good)];

    let (mut graph, _) = relu_add_mul();
    let before = graph.fingerprint();
    let error =
        fx_node_fix::run(&runtime, &plugins, &mut graph, "fx-node-fixes", OnPluginError::Fail)
            .unwrap_err();
    assert_eq!(graph.fingerprint(), before, "the failed call's changes must be rolled back");
    assert_eq!(error.plugin, bad.name());
    assert_eq!(error.kind, PluginKind::FxNodeFix);
    assert_eq!(error.stage, "fx-node-fixes");
    assert_eq!(error.node, Some(hfx::plugins::NodeRef::Fx("relu".into())));
    let line = error.to_string();
    assert!(
        line.contains(bad.name()) && line.contains("fx-node-fixes") && line.contains("`relu`"),
        "{line}"
    );
    assert!(!line.contains('\n'));

    let (mut graph, _) = relu_add_mul();
    let report =
        fx_node_fix::run(&runtime, &plugins, &mut graph, "fx-node-fixes", OnPluginError::Skip)
            .unwrap();
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.plugins[bad.name()].failed, 1);
    assert_eq!(report.plugins["test-kind-node-fix"].changed, 1, "the next plugin must still run");
    assert_eq!(targets(&graph), ["aten.clamp_min.default", "aten.add.Tensor", "aten.mul.Tensor"]);
    error
}

#[test]
fn infinite_loop_runs_out_of_fuel() {
    let limits = Limits { fuel_per_call: 20_000_000, ..Limits::default() };
    let error = contained("tests/plugins/hostile-loop", limits);
    assert_eq!(error.failure, Failure::OutOfFuel { budget: 20_000_000 });
}

#[test]
fn infinite_loop_is_stopped_by_the_deadline_when_fuel_is_plentiful() {
    let deadline = Duration::from_millis(200);
    let limits = Limits { fuel_per_call: u64::MAX / 2, deadline, ..Limits::default() };
    let runtime = runtime_with(limits);
    let bad = load(&runtime, "tests/plugins/hostile-loop");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    let start = Instant::now();
    let error = Session::new(&runtime, of::<kind::FxNodeFix>(&bad), "fx-node-fixes")
        .fx_node_fix(&mut graph, relu)
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(error.failure, Failure::Deadline { millis: 200 });
    // Not a timing assertion on speed: a bound proving the backstop fired
    // (a loop left alone would run for ages).
    assert!(took < Duration::from_secs(5), "deadline of 200 ms fired after {took:?}");
    // The full containment contract holds for the deadline path too.
    let error = contained("tests/plugins/hostile-loop", limits);
    assert!(matches!(error.failure, Failure::Deadline { .. }));
}

#[test]
fn memory_bomb_hits_the_cap() {
    let limits = Limits { memory_bytes: 16 << 20, ..Limits::default() };
    let error = contained("tests/plugins/hostile-memory", limits);
    assert_eq!(error.failure, Failure::MemoryCap { bytes: 16 << 20 });
}

#[test]
fn panic_after_mutating_is_a_trap_and_rolled_back() {
    let error = contained("tests/plugins/hostile-panic", Limits::default());
    assert!(
        matches!(&error.failure, Failure::Trap(m) if m.contains("unreachable")),
        "{:?}",
        error.failure
    );
}

#[test]
fn node_flood_hits_the_host_budget() {
    let limits = Limits { max_new_nodes: 500, ..Limits::default() };
    let error = contained("tests/plugins/hostile-flood", limits);
    assert_eq!(
        error.failure,
        Failure::HostBudget("`graph.insert-call` added more than 500 nodes in one call".into())
    );
}

#[test]
fn a_trapped_instance_is_replaced_for_the_next_call() {
    let runtime = runtime();
    let bad = load(&runtime, "tests/plugins/hostile-panic");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    let mut session = Session::new(&runtime, of::<kind::FxNodeFix>(&bad), "fx-node-fixes");
    for _ in 0..3 {
        let error = session.fx_node_fix(&mut graph, relu).unwrap_err();
        assert!(matches!(error.failure, Failure::Trap(_)));
    }
    assert_eq!(
        session.instantiations, 3,
        "each trap discards the store; each call gets a fresh instance"
    );
    // A healthy plugin keeps one instance for the whole stage run.
    let good = load(&runtime, "tests/plugins/kind-node-fix");
    let (mut graph, [_, add, _]) = relu_add_mul();
    let mut session = Session::new(&runtime, of::<kind::FxNodeFix>(&good), "fx-node-fixes");
    for _ in 0..3 {
        assert!(!session.fx_node_fix(&mut graph, add).unwrap());
    }
    assert_eq!(session.instantiations, 1);
}

#[test]
fn wasi_imports_are_refused_at_load() {
    let runtime = runtime();
    let found = discover_one(&plugin_dir("tests/plugins/hostile-wasi")).unwrap();
    let error = runtime.load(&found).err().unwrap().to_string();
    assert!(error.contains("test_hostile_wasi.wasm"), "{error}");
    assert!(error.contains("imports `wasi:clocks/wall-clock@0.2.0`"), "{error}");
    assert!(error.contains("no WASI"), "{error}");
}

#[test]
fn reading_too_much_hits_the_host_budget() {
    // The relu fix reads the node's inputs and output metadata: well over 64 bytes.
    let limits = Limits { max_read_bytes: 64, ..Limits::default() };
    let runtime = runtime_with(limits);
    let plugin = load(&runtime, "tests/plugins/kind-node-fix");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    let before = graph.fingerprint();
    let error = Session::new(&runtime, of::<kind::FxNodeFix>(&plugin), "fx-node-fixes")
        .fx_node_fix(&mut graph, relu)
        .unwrap_err();
    assert!(
        matches!(&error.failure, Failure::HostBudget(m) if m.starts_with("`graph.") && m.ends_with("` read more than 64 bytes from the host in one call")),
        "{:?}",
        error.failure
    );
    assert_eq!(graph.fingerprint(), before);
}

#[test]
fn unbounded_recursion_is_a_stack_overflow_not_a_host_crash() {
    let error = contained("tests/plugins/hostile-recursion", Limits::default());
    assert_eq!(error.failure, Failure::StackOverflow { bytes: 512 << 10 });
    assert!(error.to_string().contains("stack overflow"), "{error}");
    // The wasm stack cap leaves the host's native stack alone: the same call on
    // a thread with only 1 MiB of stack (half a test thread's) traps cleanly.
    let on_a_small_stack = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let runtime = runtime();
            let bad = load(&runtime, "tests/plugins/hostile-recursion");
            let (mut graph, [relu, _, _]) = relu_add_mul();
            Session::new(&runtime, of::<kind::FxNodeFix>(&bad), "fx-node-fixes")
                .fx_node_fix(&mut graph, relu)
                .unwrap_err()
                .failure
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(on_a_small_stack, Failure::StackOverflow { bytes: 512 << 10 });
}

#[test]
fn one_huge_memory_grow_is_refused_at_the_cap() {
    let error = contained("tests/plugins/hostile-grow", Limits::default());
    assert_eq!(error.failure, Failure::MemoryCap { bytes: 64 << 20 });
    let line = error.to_string();
    assert!(line.contains("memory limit") && line.contains(&(64u64 << 20).to_string()), "{line}");
}

#[test]
fn table_growth_is_refused_at_the_table_cap() {
    // 100000 elements: under the old allowance (1M), over the cap.
    let error = contained("tests/plugins/hostile-table", Limits::default());
    assert_eq!(error.failure, Failure::TableCap { elements: 10_000 });
    let line = error.to_string();
    assert!(line.contains("table limit") && line.contains("10000"), "{line}");
}

/// Asserts a tripped write budget: named after the host function that tripped
/// it, or unnamed when one copy out of the guest alone was over it (wasmtime's
/// hostcall fuel, before any host function runs).
#[track_caller]
fn assert_write_budget(failure: &Failure, bytes: u64, function: Option<&str>) {
    let tail = format!("wrote more than {bytes} bytes to the host in one call");
    let expected = match function {
        Some(f) => format!("`{f}` {tail}"),
        None => tail,
    };
    assert_eq!(failure, &Failure::HostBudget(expected));
}

#[test]
fn a_huge_list_in_one_host_call_hits_the_write_budget() {
    // 10M ints (80 MB): memory is raised so that the list fits in the guest and
    // only the write budget stands between it and the host.
    let limits = Limits { memory_bytes: 256 << 20, ..Limits::default() };
    let error = contained("tests/plugins/hostile-big-list", limits);
    assert_write_budget(&error.failure, 16 << 20, None);
}

#[test]
fn many_strings_over_many_host_calls_hit_the_write_budget() {
    // 64 insert-calls of 1 MiB each: every one is small, their sum is not.
    let error = contained("tests/plugins/hostile-writes", Limits::default());
    assert_write_budget(&error.failure, 16 << 20, Some("graph.insert-call"));
    // The budget is a limit: raise it and the same plugin is let through.
    let limits = Limits { max_write_bytes: 128 << 20, ..Limits::default() };
    let runtime = runtime_with(limits);
    let plugin = load(&runtime, "tests/plugins/hostile-writes");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    assert!(Session::new(&runtime, of::<kind::FxNodeFix>(&plugin), "fx-node-fixes")
        .fx_node_fix(&mut graph, relu)
        .unwrap());
}

#[test]
fn a_huge_error_message_is_refused_in_one_line() {
    let error = contained("tests/plugins/hostile-message", Limits::default());
    assert_eq!(
        error.failure,
        Failure::HostBudget("returned an error message of 1048575 bytes (at most 4096)".into())
    );
    assert!(error.to_string().len() < 300, "{error}");
}

#[test]
fn a_huge_describe_is_refused_at_load() {
    let runtime = runtime();
    let found = discover_one(&plugin_dir("tests/plugins/hostile-describe")).unwrap();
    let error = runtime.load(&found).err().unwrap().to_string();
    assert!(
        error.contains("test_hostile_describe.wasm") && error.contains("test-hostile-describe"),
        "{error}"
    );
    assert!(
        error.contains("describe returned 2 targets in 1048616 bytes (at most 65536)"),
        "{error}"
    );
    assert!(error.len() < 400 && !error.contains('\n'), "{error}");
}

#[test]
fn a_translation_writing_huge_attributes_hits_the_write_budget_and_is_rolled_back() {
    use hfx::onnx::TranslationBuilder;
    let runtime = runtime();
    let bad = load(&runtime, "tests/plugins/hostile-translation");
    let good = load(&runtime, "tests/plugins/kind-translation");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    let x = graph.subgraph(0).unwrap().inputs[0];
    let mut builder = TranslationBuilder::new(20);
    builder.value_names.insert(x, "x".into());
    let before = graph.fingerprint();
    let error = Session::new(&runtime, of::<kind::OnnxTranslation>(&bad), "onnx-translations")
        .translate(&mut graph, relu, &mut builder)
        .unwrap_err();
    assert_write_budget(&error.failure, 16 << 20, Some("builder.add-node"));
    assert_eq!(
        (error.plugin.as_str(), error.kind, error.stage.as_str()),
        ("test-hostile-translation", PluginKind::OnnxTranslation, "onnx-translations")
    );
    assert_eq!(error.node, Some(hfx::plugins::NodeRef::Fx("relu".into())));
    assert!(builder.nodes.is_empty(), "the emitted nodes must be rolled back");
    assert_eq!(builder.value_names.len(), 1);
    assert_eq!(graph.fingerprint(), before);
    // The next translation still runs on the same builder.
    Session::new(&runtime, of::<kind::OnnxTranslation>(&good), "onnx-translations")
        .translate(&mut graph, relu, &mut builder)
        .unwrap();
    assert_eq!(builder.nodes.len(), 1);
    assert_eq!(builder.nodes[0].op_type, "Relu");
}

/// Translates `node` of the relu/add/mul graph with `hostile-outputs`, whose
/// `add-node` asks for more output names than the host can hold: the call
/// fails naming plugin, stage, node and `builder.add-node`, and the builder
/// and graph are as before.
fn refused_outputs(node: usize) -> PluginError {
    use hfx::onnx::TranslationBuilder;
    let runtime = runtime();
    let bad = load(&runtime, "tests/plugins/hostile-outputs");
    let (mut graph, nodes) = relu_add_mul();
    let mut builder = TranslationBuilder::new(20);
    builder.value_names.insert(graph.subgraph(0).unwrap().inputs[0], "x".into());
    let before = graph.fingerprint();
    let start = Instant::now();
    let error = Session::new(&runtime, of::<kind::OnnxTranslation>(&bad), "onnx-translations")
        .translate(&mut graph, nodes[node], &mut builder)
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "refused before the work, not after: {:?}",
        start.elapsed()
    );
    assert_eq!(
        (error.plugin.as_str(), error.kind, error.stage.as_str()),
        ("test-hostile-outputs", PluginKind::OnnxTranslation, "onnx-translations")
    );
    assert!(
        builder.nodes.is_empty() && builder.value_names.len() == 1,
        "the builder must be rolled back"
    );
    assert_eq!(graph.fingerprint(), before);
    let line = error.to_string();
    assert!(
        line.contains("test-hostile-outputs")
            && line.contains("`builder.add-node`")
            && !line.contains('\n'),
        "{line}"
    );
    error
}

#[test]
fn add_node_with_u32_max_outputs_is_refused_before_the_host_allocates() {
    // Before the bound: 4 billion names, "memory allocation of 103079215080 bytes failed", SIGABRT.
    let error = refused_outputs(2);
    assert_eq!(
        error.failure,
        Failure::HostBudget(
            "`builder.add-node` was asked for 4294967295 outputs (at most 65536)".into()
        )
    );
}

#[test]
fn add_node_output_names_from_a_long_op_type_are_charged_before_they_are_made() {
    // 60 000 names each repeating a 4 KiB op type: 500 MB of host memory for 4 KiB handed in.
    let error = refused_outputs(1);
    let Failure::HostBudget(message) = &error.failure else { panic!("{:?}", error.failure) };
    assert!(message.starts_with("`builder.add-node` would allocate"), "{message}");
    assert!(
        message.contains(
            "60000 output names of a 4096-byte op type, over the write budget of 16777216 bytes"
        ),
        "{message}"
    );
    // A longer op type is no identifier: refused whatever the count (2400 here, 2.5 GB of names before).
    let error = refused_outputs(0);
    assert_eq!(
        error.failure,
        Failure::HostBudget(
            "`builder.add-node` was given an op type of 1048576 bytes (at most 4096)".into()
        )
    );
}

/// The peak resident memory of a finished child (its own and that of the
/// children it waited for), from `wait4`; and how it ended.
fn wait_with_peak(mut child: std::process::Child) -> (std::process::ExitStatus, String, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
    (std::process::ExitStatus::from_raw(status), stderr, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn hfx_survives_a_translation_asking_for_gigabytes_of_output_names_in_one_line() {
    // `hostile-outputs` end to end: on `relu_silu` its relu translation asks
    // for 2400 names of a 1 MiB op type (before the bounds: 2.5 GB peak), on
    // `doubler` its mul translation for u32::MAX names (before: "memory
    // allocation of 103079215080 bytes failed", SIGABRT).
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_dir("tests/plugins/hostile-outputs");
    let out = dir.path().join("out.onnx");
    let python = python();
    for (model, node, reason) in [
        ("relu_silu", "relu", "was given an op type of 1048576 bytes (at most 4096)"),
        ("doubler", "mul", "was asked for 4294967295 outputs (at most 65536)"),
    ] {
        let spec = format!("python:hfx_test_models:{model}");
        let args = [
            "run",
            "--backend",
            "onnx",
            "--plugins",
            plugin.to_str().unwrap(),
            "--model-fn",
            &spec,
            "-o",
            out.to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
        ];
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
            .args(args)
            .current_dir(dir.path())
            .env("PYTHONPATH", root().join("tests/python"))
            .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (status, stderr, peak) = wait_with_peak(child);
        assert_eq!(
            status.code(),
            Some(1),
            "{model}: hfx must exit with an error, not a signal ({status:?}): {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("memory allocation of"),
            "{model}: {stderr}"
        );
        let error: Vec<&str> =
            stderr.lines().filter(|l| l.contains("test-hostile-outputs")).collect();
        assert_eq!(error.len(), 1, "{model}: one line names the plugin:\n{stderr}");
        let expected =
            format!("at node `{node}`: exceeded the host budget: `builder.add-node` {reason}");
        assert!(
            error[0].contains("onnx-translations") && error[0].ends_with(&expected),
            "{model}: {}",
            error[0]
        );
        // hfx and its Python worker (the larger of the two): far below the gigabytes asked for.
        assert!(peak < 1 << 30, "{model}: peak resident memory {} MiB", peak >> 20);
        assert!(!out.exists());
    }
}

#[test]
fn non_contract_imports_are_refused_at_load_naming_each() {
    let runtime = runtime();
    let found = discover_one(&plugin_dir("tests/plugins/hostile-import")).unwrap();
    let error = runtime.load(&found).err().unwrap().to_string();
    assert!(error.contains("test_hostile_import.wasm"), "{error}");
    assert!(error.contains("`evil:host/spawn`") && error.contains("`system`"), "{error}");
    assert!(!error.contains('\n'), "{error}");
}

#[test]
fn a_core_module_importing_env_system_is_refused_at_load() {
    // (module (import "env" "system" (func (param i32 i32) (result i32)))),
    // dropped in as a plugin's component. (Inside a component a core import
    // can only be met by a component import, which the test above covers.)
    let core: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, core version 1
        0x01, 0x07, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f, // type: (i32, i32) -> i32
        0x02, 0x0e, 0x01, 0x03, b'e', b'n', b'v', 0x06, b's', b'y', b's', b't', b'e', b'm', 0x00,
        0x00, // import env.system
    ];
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("core");
    std::fs::create_dir(&plugin).unwrap();
    std::fs::write(plugin.join("core.wasm"), core).unwrap();
    let manifest =
        std::fs::read_to_string(root().join("tests/plugins/hostile-wasi/plugin.toml")).unwrap();
    let manifest = manifest
        .replace("test-hostile-wasi", "test-hostile-core")
        .replace("test_hostile_wasi.wasm", "core.wasm");
    std::fs::write(plugin.join("plugin.toml"), manifest).unwrap();
    let found = discover_one(&plugin).unwrap();
    // Refused before anything is compiled, linked or run, naming what it imports.
    let error = runtime().load(&found).err().unwrap().to_string();
    assert!(
        error.contains("core.wasm")
            && error.contains("not a component")
            && error.contains("`env.system`"),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
}

fn where_call(rows: i64) -> hfx::plugins::patching::PatchedCall {
    use hfx::plugins::patching::{CallValue, Device, Dim, LiveTensor, PatchedCall, TensorMeta};
    let tensor = |dtype: &str| {
        CallValue::Tensor(LiveTensor {
            meta: TensorMeta {
                dtype: dtype.into(),
                shape: vec![Dim::Fixed(rows), Dim::Fixed(4)],
                strides: vec![],
                device: Device { kind: "cpu".into(), index: None },
            },
            contiguous: true,
            sizes: vec![rows, 4],
        })
    };
    PatchedCall {
        target: "torch.where".into(),
        values: vec![tensor("bool"), tensor("float32"), tensor("float32")],
        args: vec![0, 1, 2],
        kwargs: vec![],
    }
}

#[test]
fn patch_programs_cannot_reach_files_processes_or_private_attributes() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/hostile-patch");
    let mut session = Session::new(&runtime, of::<kind::Patch>(&plugin), "patches");
    for (rows, refused) in [
        (1, "os.system"),
        (2, "builtins.__file__"),
        (3, "torch.save"),
        (4, "__class__"),
        (5, "slot 9999"),
        (8, "-inf is not finite"),
    ] {
        let call = where_call(rows);
        let error =
            session.patch(&call, |program| hfx::trace::check_program(&call, program)).unwrap_err();
        assert_eq!(error.plugin, "test-hostile-patch");
        assert!(matches!(error.failure, Failure::Invalid(_)), "{error}");
        let line = error.to_string();
        assert!(
            line.contains(refused) && line.contains("`torch.where`") && line.contains("patches"),
            "{line}"
        );
    }
    // A well-formed answer still goes through.
    let call = where_call(7);
    assert!(session.patch(&call, |program| hfx::trace::check_program(&call, program)).is_ok());
}

#[test]
fn a_patch_program_cannot_call_a_method_it_took_from_a_tensor() {
    // Only the worker can tell that `x.numpy` is a bound method: it refuses
    // callable attributes, the trace fails naming plugin and target, and
    // nothing is written.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pt2");
    let plugin = plugin_dir("tests/plugins/hostile-patch");
    let spec = "python:hfx_test_models:where_six_rows";
    let result = hfx_with_python(
        dir.path(),
        &[
            "run",
            "--backend",
            "onnx",
            "--plugins",
            plugin.to_str().unwrap(),
            "--model-fn",
            spec,
            // The hostile patch acts on the call's static row count.
            "--static",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success() && !out.exists(), "{stderr}");
    assert!(
        stderr.contains("test-hostile-patch")
            && stderr.contains("torch.where")
            && stderr.contains("callable")
            && stderr.contains("refused by the plugin sandbox"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line, no traceback: {stderr}");
}
