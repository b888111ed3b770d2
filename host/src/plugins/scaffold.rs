//! `hfx plugins new`: a plugin crate that builds with `cargo xtask
//! build-plugins` and passes `hfx plugins verify` as generated. Inside the hfx
//! repository (`plugins/<backend>/<name>`) it joins the workspace; elsewhere it
//! is its own workspace depending on the SDK by path.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::manifest::{Backend, PluginKind};
use crate::graph::{
    Argument, Dim, Graph, NamedArgument, OutputDecl, RangeConstraint, TensorMeta, ValueMeta,
};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Plugin name (lowercase, digits, `-`): also the crate name.
    pub name: String,
    #[arg(long, value_parser = parse_kind)]
    pub kind: PluginKind,
    #[arg(long, default_value = "onnx", value_parser = parse_backend)]
    pub backend: Backend,
    /// Folder to create [default: plugins/<backend>/<name>].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The hfx-sdk crate, for a plugin outside the hfx repository [default: an installed hfx's own SDK, else that of the checkout hfx was built in].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

fn parse_kind(s: &str) -> Result<PluginKind, String> {
    toml::Value::String(s.into())
        .try_into()
        .map_err(|_| format!("unknown kind `{s}` (patch, fx-node-fix, fx-program-fix, onnx-translation, onnx-ir-fix)"))
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    toml::Value::String(s.into()).try_into().map_err(|_| format!("unknown backend `{s}`"))
}

/// The hfx repository this binary was built from (its SDK and workspace).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the repository")
        .to_path_buf()
}

pub fn new_plugin(args: &NewArgs) -> Result<()> {
    let valid = !args.name.is_empty()
        && args.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && args.name.starts_with(|c: char| c.is_ascii_lowercase());
    if !valid {
        bail!(
            "plugin name `{}`: start with a letter; use lowercase letters, digits and `-`",
            args.name
        );
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| Path::new("plugins").join(args.backend.as_str()).join(&args.name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let files = render(args, &dir)?;
    for (path, text) in &files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("files live in folders"))?;
        crate::atomic::write_bytes_atomically(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("created {} ({} plugin for {})", dir.display(), args.kind, args.backend);
    println!("build:  cargo xtask build-plugins {}", dir.display());
    println!("check:  hfx plugins verify --plugins {}", dir.display());
    Ok(())
}

/// Relative path and content of every file of the new crate. The source
/// states the kind and the targets (its attribute), `Cargo.toml` the name and
/// version; the manifest only what the code cannot say.
fn render(args: &NewArgs, dir: &Path) -> Result<Vec<(String, String)>> {
    let (feature, source, selftest) = template(args.kind);
    let cargo = cargo_toml(&args.name, feature, dir, args.sdk.as_deref())?;
    let manifest = format!(
        "[plugin]\nbackend = \"{backend}\"\n\
         # Within a stage lower runs first (default 100).\n# order = 100\n\n\
         # The upstream versions this workaround is for; it is skipped outside them.\n\
         # [upstream]\n# torch = \">=2.12, <2.16\"\n\n[why]\nsummary = \"TODO: what breaks without this plugin\"\n\
         # upstream-issue = \"https://github.com/...\"\n",
        backend = args.backend,
    );
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo),
        ("plugin.toml".to_string(), manifest),
        ("src/lib.rs".to_string(), source.to_string()),
    ];
    if let Some(case) = selftest {
        files.push(("selftest/basic.json".to_string(), case));
    }
    Ok(files)
}

/// In the repository's `plugins/*/*`, a workspace member; elsewhere standalone.
fn cargo_toml(name: &str, feature: &str, dir: &Path, sdk: Option<&Path>) -> Result<String> {
    let repo = repository();
    let absolute = std::env::current_dir()?.join(dir);
    let parent = absolute.parent().and_then(Path::parent).and_then(|p| p.canonicalize().ok());
    let member = sdk.is_none() && parent.is_some_and(|p| p == repo.join("plugins"));
    let package = format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n");
    if member {
        return Ok(format!("{package}[dependencies]\nhfx-sdk = {{ workspace = true, features = [\"{feature}\"] }}\n"));
    }
    // An installed hfx's own SDK (its version's), else the checkout's it was built in.
    let sdk =
        sdk.map(Path::to_path_buf).unwrap_or_else(|| match crate::installed::Installed::find() {
            Some(installed) => installed.sdk().join("sdk"),
            None => repo.join("sdk"),
        });
    let sdk = sdk.canonicalize().with_context(|| format!("the SDK at {}", sdk.display()))?;
    Ok(format!(
        "{package}[dependencies]\nhfx-sdk = {{ path = {:?}, features = [\"{feature}\"] }}\n\n\
         # A workspace of its own, with the profile `cargo xtask build-plugins` builds guests with.\n\
         [workspace]\n\n[profile.plugin]\ninherits = \"release\"\nopt-level = \"s\"\nlto = true\ncodegen-units = 1\n\
         panic = \"abort\"\nstrip = true\ndebug = false\n",
        sdk.display().to_string()
    ))
}

/// SDK feature, `src/lib.rs` and an optional self-test per kind. The
/// sources are `sdk/templates/*.rs`, which the kind-coverage test plugins
/// compile as they are (the IR-fix template is the TopK fix itself), so every
/// template is a tested plugin.
fn template(kind: PluginKind) -> (&'static str, &'static str, Option<String>) {
    match kind {
        PluginKind::FxNodeFix => ("fx-node-fix", NODE_FIX, Some(node_fix_case())),
        PluginKind::FxProgramFix => ("fx-program-fix", PROGRAM_FIX, Some(program_fix_case())),
        PluginKind::Patch => ("patch", PATCH, None),
        PluginKind::OnnxTranslation => ("onnx-translation", TRANSLATION, None),
        PluginKind::OnnxIrFix => ("onnx-ir-fix", IR_FIX, None),
    }
}

fn tensor(shape: &[Dim]) -> TensorMeta {
    TensorMeta::new("float32", shape.to_vec())
}

/// `x → detach → mul(·, 2.0)`; the fix leaves only the `mul`.
fn node_fix_case() -> String {
    let shape = [Dim::Symbolic("s0".into()), Dim::Fixed(8)];
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(tensor(&shape)));
    let detach = g
        .push_node(
            0,
            "aten.detach.default",
            vec![NamedArgument::positional("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(tensor(&shape))],
        )
        .expect("valid");
    let d = g.node(detach).expect("live").output_values().next().expect("one output");
    let mul = g
        .push_node(
            0,
            "aten.mul.Tensor",
            vec![
                NamedArgument::positional("self", Argument::Tensor(d)),
                NamedArgument::positional("other", Argument::Float(2.0)),
            ],
            vec![OutputDecl::Tensor(tensor(&shape))],
        )
        .expect("valid");
    let out = g.node(mul).expect("live").output_values().next().expect("one output");
    g.set_outputs(0, vec![Argument::Tensor(out)]).expect("valid");
    case(&g, r#""expect-targets": ["aten.mul.Tensor"]"#)
}

/// An unbounded batch symbol; the fix bounds it.
fn program_fix_case() -> String {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(tensor(&[Dim::Symbolic("s0".into())])));
    g.set_outputs(0, vec![Argument::Tensor(x)]).expect("valid");
    g.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).expect("valid");
    case(&g, r#""expect-ranges": { "s0": [2, 4096] }"#)
}

fn case(graph: &Graph, expectation: &str) -> String {
    format!("{{\n\"input\": {},\n{expectation}\n}}\n", graph.to_json())
}

const NODE_FIX: &str = include_str!("../../../sdk/templates/fx_node_fix.rs");

const PROGRAM_FIX: &str = include_str!("../../../sdk/templates/fx_program_fix.rs");

const PATCH: &str = include_str!("../../../sdk/templates/patch.rs");

const TRANSLATION: &str = include_str!("../../../sdk/templates/onnx_translation.rs");

const IR_FIX: &str = include_str!("../../../plugins/onnx/fix-topk-sorted/src/lib.rs");
