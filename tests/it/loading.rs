//! Plugin loading: bad manifests and components get a one-line error naming
//! the file; compiled components are cached and verified.

use std::path::{Path, PathBuf};

use crate::common::*;
use hfx::plugins::cache::CacheOutcome;
use hfx::plugins::{Runtime, RuntimeOptions};

/// A copy of the fix-alias plugin in a temp folder, with its manifest edited.
fn plugin_copy(edit: impl FnOnce(String) -> String) -> (tempfile::TempDir, PathBuf) {
    plugin_copy_of("plugins/onnx/fix-alias", edit)
}

fn plugin_copy_of(
    relative: &str,
    edit: impl FnOnce(String) -> String,
) -> (tempfile::TempDir, PathBuf) {
    let src = plugin_dir(relative);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plugin");
    std::fs::create_dir(&dir).unwrap();
    let manifest = std::fs::read_to_string(src.join("plugin.toml")).unwrap();
    let component = manifest
        .lines()
        .find_map(|l| l.strip_prefix("component = "))
        .map_or("plugin.wasm", |c| c.trim_matches('"'));
    std::fs::copy(src.join(component), dir.join(component)).unwrap();
    std::fs::write(dir.join("plugin.toml"), edit(manifest)).unwrap();
    (tmp, dir)
}

/// The manifest with `line` added to its `[plugin]` table.
fn stating(line: &str) -> impl FnOnce(String) -> String + '_ {
    move |m| m.replacen("[plugin]\n", &format!("[plugin]\n{line}\n"), 1)
}

/// The error of loading the plugin in `dir`, as the user sees it.
fn load_error(dir: &Path) -> String {
    let runtime = runtime();
    let error = match discover_one(dir) {
        Err(e) => e.to_string(),
        Ok(found) => runtime.load(&found).err().expect("load must fail").to_string(),
    };
    assert!(!error.contains('\n'), "not one line: {error}");
    error
}

#[test]
fn unknown_field() {
    let (_tmp, dir) = plugin_copy(stating("priority = 1"));
    let e = load_error(&dir);
    assert!(e.starts_with(&dir.join("plugin.toml").display().to_string()), "{e}");
    assert!(e.contains("unknown field `priority`"), "{e}");
}

#[test]
fn component_path_outside_the_folder() {
    let (_tmp, dir) = plugin_copy(stating("component = \"../plugin.wasm\""));
    std::fs::copy(dir.join("plugin.wasm"), dir.parent().unwrap().join("plugin.wasm")).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("must not leave the plugin folder"), "{e}");

    let (_tmp, dir) = plugin_copy(stating("component = \"/etc/passwd\""));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("relative path"), "{e}");
}

#[test]
fn symlink_out_of_the_folder_is_refused() {
    let (tmp, dir) = plugin_copy(stating("component = \"linked.wasm\""));
    let outside = tmp.path().join("outside.wasm");
    std::fs::copy(dir.join("plugin.wasm"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("linked.wasm")).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("linked.wasm") && e.contains("outside the plugin folder"), "{e}");
}

#[test]
fn missing_component() {
    let (_tmp, dir) = plugin_copy(stating("component = \"absent.wasm\""));
    let e = load_error(&dir);
    assert!(e.contains("absent.wasm") && e.contains("not found"), "{e}");
}

#[test]
fn wrong_api_version() {
    let (_tmp, dir) = plugin_copy(stating("api = \"0.9\""));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("plugin.api `0.9` is not supported"), "{e}");
}

#[test]
fn corrupt_wasm() {
    let (_tmp, dir) = plugin_copy(|m| m);
    let path = dir.join("plugin.wasm");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, bytes).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("plugin.wasm") && e.contains("not a valid WebAssembly component"), "{e}");
}

#[test]
fn the_component_states_kind_targets_name_and_version() {
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    let p = &found.manifest.plugin;
    assert_eq!(
        (p.name.as_str(), p.version.as_str(), p.kind.as_str(), p.api.as_str()),
        ("onnx-fix-alias", "1.0.0", "fx-node-fix", "0.2")
    );
    assert_eq!(p.targets, ["aten.alias.default"]);
    let manifest = std::fs::read_to_string(found.manifest_path()).unwrap();
    assert!(
        !manifest.contains("kind") && !manifest.contains("targets") && !manifest.contains("name"),
        "{manifest}"
    );

    // A manifest may restate them (old manifests do) if it agrees.
    let old = "name = \"onnx-fix-alias\"\nversion = \"1.0.0\"\nkind = \"fx-node-fix\"\napi = \"0.2\"\ntargets = [\"aten.alias.default\"]";
    let (_tmp, dir) = plugin_copy(stating(old));
    runtime().load(&discover_one(&dir).unwrap()).unwrap();
}

#[test]
fn a_manifest_disagreeing_with_the_component_is_refused_naming_both() {
    let (_tmp, dir) = plugin_copy(stating("kind = \"onnx-ir-fix\""));
    let e = load_error(&dir);
    assert!(e.starts_with(&dir.join("plugin.toml").display().to_string()), "{e}");
    assert!(
        e.contains("plugin.kind `onnx-ir-fix` differs from the component's `fx-node-fix`"),
        "{e}"
    );

    let (_tmp, dir) =
        plugin_copy(stating("targets = [\"aten.alias.default\", \"aten.view.default\"]"));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("plugin.targets [\"aten.alias.default\", \"aten.view.default\"] differs from the component's [\"aten.alias.default\"]"), "{e}");

    let (_tmp, dir) = plugin_copy(stating("version = \"2.0.0\""));
    let e = load_error(&dir);
    assert!(e.contains("plugin.version `2.0.0` differs from the component's `1.0.0`"), "{e}");
}

/// hostile-describe registers a hand-written `Guest`: its component declares
/// nothing, and its manifest states kind and targets (checked at load).
#[test]
fn wrong_kind_for_a_component_without_a_declaration() {
    let (_tmp, dir) = plugin_copy_of("tests/plugins/hostile-describe", |m| {
        m.replace("kind = \"fx-node-fix\"", "kind = \"onnx-ir-fix\"")
    });
    let e = load_error(&dir);
    assert!(e.contains("does not implement the `onnx-ir-fix` world"), "{e}");

    let (_tmp, dir) = plugin_copy_of("tests/plugins/hostile-describe", |m| {
        m.replace("kind = \"fx-node-fix\"\n", "")
    });
    let e = load_error(&dir);
    assert!(
        e.contains("plugin.toml")
            && e.contains("plugin.kind is missing")
            && e.contains("hfx:plugin-meta"),
        "{e}"
    );
}

#[test]
fn compiled_components_are_cached_and_verified() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    assert_eq!(runtime.load(&found).unwrap().cache, CacheOutcome::Compiled);
    assert_eq!(runtime.load(&found).unwrap().cache, CacheOutcome::Hit);

    // Flip one byte of the cached code: the entry no longer verifies and is replaced.
    let entry = std::fs::read_dir(cache.path()).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&entry).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&entry, bytes).unwrap();
    let plugin = runtime.load(&found).unwrap();
    assert_eq!(plugin.cache, CacheOutcome::Replaced);
    assert_eq!(runtime.load(&found).unwrap().cache, CacheOutcome::Hit);

    // And the replaced component still works.
    let (mut graph, _) = alias_graph();
    hfx::stages::fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        hfx::stages::OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(targets(&graph), ["aten.mul.Tensor"]);
}

#[test]
fn the_same_plugin_twice_is_an_error() {
    let runtime = runtime();
    let dir = plugin_dir("plugins/onnx/fix-alias");
    let e = hfx::plugins::load_all(&runtime, &[dir.clone(), dir]).err().unwrap().to_string();
    assert!(e.contains("found twice"), "{e}");
}

// ── Files that are not what they seem (issue 11) ──

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success());
}

/// `discover_one` on a thread: a read that blocks (a FIFO) fails the test instead of hanging it.
fn load_error_within(dir: &Path, seconds: u64) -> String {
    let dir = dir.to_path_buf();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || send.send(load_error(&dir)).unwrap());
    receive
        .recv_timeout(std::time::Duration::from_secs(seconds))
        .expect("reading the plugin blocked")
}

#[test]
fn a_fifo_as_manifest_or_component_is_refused_at_once() {
    let (_tmp, dir) = plugin_copy(|m| m);
    std::fs::remove_file(dir.join("plugin.wasm")).unwrap();
    mkfifo(&dir.join("plugin.wasm"));
    let e = load_error_within(&dir, 20);
    assert!(e.contains("plugin.wasm") && e.contains("not a regular file (a FIFO)"), "{e}");

    let (_tmp, dir) = plugin_copy(|m| m);
    std::fs::remove_file(dir.join("plugin.toml")).unwrap();
    mkfifo(&dir.join("plugin.toml"));
    let e = load_error_within(&dir, 20);
    assert!(e.contains("plugin.toml") && e.contains("not a regular file (a FIFO)"), "{e}");
}

#[test]
fn a_folder_as_component_says_what_it_is() {
    let (_tmp, dir) = plugin_copy(|m| m);
    std::fs::remove_file(dir.join("plugin.wasm")).unwrap();
    std::fs::create_dir(dir.join("plugin.wasm")).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("component `plugin.wasm` is not a regular file (a folder)"), "{e}");
    assert!(!e.contains("outside"), "{e}");
}

#[test]
fn an_oversized_manifest_is_refused_before_it_is_read() {
    // Valid TOML (a comment), 2 MiB: the old reader parsed it whole.
    let (_tmp, dir) = plugin_copy(|m| format!("{m}\n#{}\n", "x".repeat(2 << 20)));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("over the 1048576-byte limit"), "{e}");
}

// ── The compiled-code cache (issue 11, item 6) ──

use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn cached_runtime(dir: &Path) -> Runtime {
    Runtime::new(RuntimeOptions { cache_dir: Some(dir.to_path_buf()), ..Default::default() })
        .unwrap()
}

/// The cache entry of the component with this sha256.
fn entry_of(cache: &Path, sha256: &str) -> PathBuf {
    let entries: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with(sha256)
                && p.extension().is_some_and(|e| e == "cwasm")
        })
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

#[test]
fn a_cache_entry_copied_under_another_plugins_key_does_not_run() {
    let cache = tempfile::tempdir().unwrap();
    let alias = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    let sort = discover_one(&plugin_dir("plugins/onnx/fix-sort-stable")).unwrap();
    {
        let runtime = cached_runtime(cache.path());
        assert_eq!(runtime.load(&alias).unwrap().cache, CacheOutcome::Compiled);
        assert_eq!(runtime.load(&sort).unwrap().cache, CacheOutcome::Compiled);
    }
    // The attacker's move: the alias fix's compiled code under the sort fix's key.
    std::fs::copy(
        entry_of(cache.path(), &alias.component_sha256),
        entry_of(cache.path(), &sort.component_sha256),
    )
    .unwrap();

    let runtime = cached_runtime(cache.path());
    let plugin = runtime.load(&sort).expect("the sort fix loads its own code");
    assert_eq!(plugin.cache, CacheOutcome::Replaced, "the swapped entry must not verify");
    assert_eq!(
        plugin.targets, sort.manifest.plugin.targets,
        "describe() answered by the sort fix's own code"
    );
    let (mut graph, _) = sort_stable_graph();
    hfx::stages::fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        hfx::stages::OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(targets(&graph), ["aten.sort.default"]);
    // Rewritten with its own code: the next load is a hit.
    assert_eq!(cached_runtime(cache.path()).load(&sort).unwrap().cache, CacheOutcome::Hit);
}

#[test]
fn the_cache_folder_is_created_private() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("new/components");
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    assert_eq!(cached_runtime(&cache).load(&found).unwrap().cache, CacheOutcome::Compiled);
    let mode = std::fs::metadata(&cache).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "cache folder mode {mode:o}");
    let entry = entry_of(&cache, &found.component_sha256);
    let mode = std::fs::metadata(&entry).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "cache entry mode {mode:o}");
}

#[test]
fn a_cache_folder_others_can_write_is_not_used() {
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let runtime = cached_runtime(cache.path());
    let plugin = runtime.load(&found).unwrap();
    assert_eq!(plugin.cache, CacheOutcome::Untrusted);
    assert_eq!(runtime.load(&found).unwrap().cache, CacheOutcome::Untrusted, "never a hit");
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "nothing written to an untrusted folder"
    );
    // Compiled in memory, it still works.
    let (mut graph, _) = alias_graph();
    hfx::stages::fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        hfx::stages::OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(targets(&graph), ["aten.mul.Tensor"]);

    // A folder above the cache that others can write (without the sticky bit) is refused too.
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        cached_runtime(&base.path().join("cache")).load(&found).unwrap().cache,
        CacheOutcome::Untrusted
    );
}

#[test]
fn a_cache_entry_others_can_write_is_refused_and_rewritten() {
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    assert_eq!(cached_runtime(cache.path()).load(&found).unwrap().cache, CacheOutcome::Compiled);
    let entry = entry_of(cache.path(), &found.component_sha256);
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(cached_runtime(cache.path()).load(&found).unwrap().cache, CacheOutcome::Untrusted);
    // Rewritten private: trusted again.
    assert_eq!(std::fs::metadata(&entry).unwrap().mode() & 0o777, 0o600);
    assert_eq!(cached_runtime(cache.path()).load(&found).unwrap().cache, CacheOutcome::Hit);
}

#[test]
fn a_cache_owned_by_someone_else_is_not_used() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing owners needs root");
        return;
    }
    let chown = |path: &Path| std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    assert_eq!(cached_runtime(cache.path()).load(&found).unwrap().cache, CacheOutcome::Compiled);
    chown(&entry_of(cache.path(), &found.component_sha256));
    assert_eq!(
        cached_runtime(cache.path()).load(&found).unwrap().cache,
        CacheOutcome::Untrusted,
        "an entry of another user"
    );
    assert_eq!(
        cached_runtime(cache.path()).load(&found).unwrap().cache,
        CacheOutcome::Hit,
        "rewritten as ours"
    );
    chown(cache.path());
    assert_eq!(
        cached_runtime(cache.path()).load(&found).unwrap().cache,
        CacheOutcome::Untrusted,
        "a folder of another user"
    );
}
