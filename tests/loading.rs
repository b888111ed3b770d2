//! Plugin loading: bad manifests and components get a one-line error naming
//! the file; compiled components are cached and verified.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use hfx::plugins::cache::CacheOutcome;
use hfx::plugins::{Runtime, RuntimeOptions};

/// A copy of the fix-alias plugin in a temp folder, with its manifest edited.
fn plugin_copy(edit: impl FnOnce(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let src = plugin_dir("plugins/onnx/fix-alias");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fix-alias");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(src.join("onnx_fix_alias.wasm"), dir.join("onnx_fix_alias.wasm")).unwrap();
    let manifest = std::fs::read_to_string(src.join("plugin.toml")).unwrap();
    std::fs::write(dir.join("plugin.toml"), edit(manifest)).unwrap();
    (tmp, dir)
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
    let (_tmp, dir) = plugin_copy(|m| m.replace("order = 100", "order = 100\npriority = 1"));
    let e = load_error(&dir);
    assert!(e.starts_with(&dir.join("plugin.toml").display().to_string()), "{e}");
    assert!(e.contains("unknown field `priority`"), "{e}");
}

#[test]
fn component_path_outside_the_folder() {
    let (_tmp, dir) = plugin_copy(|m| m.replace("\"onnx_fix_alias.wasm\"", "\"../onnx_fix_alias.wasm\""));
    std::fs::copy(dir.join("onnx_fix_alias.wasm"), dir.parent().unwrap().join("onnx_fix_alias.wasm")).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("must not leave the plugin folder"), "{e}");

    let (_tmp, dir) = plugin_copy(|m| m.replace("\"onnx_fix_alias.wasm\"", "\"/etc/passwd\""));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("relative path"), "{e}");
}

#[test]
fn symlink_out_of_the_folder_is_refused() {
    let (tmp, dir) = plugin_copy(|m| m.replace("\"onnx_fix_alias.wasm\"", "\"linked.wasm\""));
    let outside = tmp.path().join("outside.wasm");
    std::fs::copy(dir.join("onnx_fix_alias.wasm"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("linked.wasm")).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("linked.wasm") && e.contains("outside the plugin folder"), "{e}");
}

#[test]
fn missing_component() {
    let (_tmp, dir) = plugin_copy(|m| m.replace("\"onnx_fix_alias.wasm\"", "\"absent.wasm\""));
    let e = load_error(&dir);
    assert!(e.contains("absent.wasm") && e.contains("not found"), "{e}");
}

#[test]
fn wrong_api_version() {
    let (_tmp, dir) = plugin_copy(|m| m.replace("api = \"0.1\"", "api = \"0.9\""));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("plugin.api `0.9` is not supported"), "{e}");
}

#[test]
fn corrupt_wasm() {
    let (_tmp, dir) = plugin_copy(|m| m);
    let path = dir.join("onnx_fix_alias.wasm");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, bytes).unwrap();
    let e = load_error(&dir);
    assert!(e.contains("onnx_fix_alias.wasm") && e.contains("not a valid WebAssembly component"), "{e}");
}

#[test]
fn wrong_kind_for_the_component() {
    let (_tmp, dir) = plugin_copy(|m| m.replace("kind = \"fx-node-fix\"", "kind = \"onnx-ir-fix\""));
    let e = load_error(&dir);
    assert!(e.contains("does not implement the `onnx-ir-fix` world"), "{e}");
}

#[test]
fn manifest_targets_must_match_describe() {
    let (_tmp, dir) = plugin_copy(|m| m.replace("[\"aten.alias.default\"]", "[\"aten.alias.default\", \"aten.view.default\"]"));
    let e = load_error(&dir);
    assert!(e.contains("plugin.toml") && e.contains("differ from what the component describes"), "{e}");
}

#[test]
fn compiled_components_are_cached_and_verified() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() }).unwrap();
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
    hfx::stages::fx_node_fix::run(&runtime, &[&plugin], &mut graph, "fx-node-fixes", hfx::stages::OnPluginError::Fail).unwrap();
    assert_eq!(targets(&graph), ["aten.mul.Tensor"]);
}

#[test]
fn the_same_plugin_twice_is_an_error() {
    let runtime = runtime();
    let dir = plugin_dir("plugins/onnx/fix-alias");
    let e = hfx::plugins::load_all(&runtime, &[dir.clone(), dir]).err().unwrap().to_string();
    assert!(e.contains("found twice"), "{e}");
}
