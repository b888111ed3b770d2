//! What a plugin is: `plugin.toml` and what the component declares itself.
//!
//! A component built with hfx-sdk's attribute macros carries a custom section,
//! [`META_SECTION`], stating its kind, contract version, name, version and
//! targets ([`ComponentMeta`]). `plugin.toml` then states only what the code
//! cannot: backend, order, upstream ranges and why (and the component's file
//! if not [`DEFAULT_COMPONENT`]). A manifest may still state the others, as
//! old manifests and components built without the SDK's macros do; where both
//! state a fact they must agree, or the plugin is refused naming both values.
//! [`Manifest`] is the result: every fact, wherever it was stated.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Contract versions this host loads (`api` in the manifest).
pub const SUPPORTED_APIS: &[&str] = &["0.1", "0.2"];

/// The custom section of a component that declares it (written by hfx-sdk's
/// attribute macros): UTF-8 JSON, a [`ComponentMeta`].
pub const META_SECTION: &str = "hfx:plugin-meta";

/// A declaration larger than this is refused (the cap of `describe`'s answer).
pub const MAX_META_BYTES: usize = super::sandbox::MAX_DESCRIBE_BYTES;

/// The component's file when the manifest names none, where the builder writes it.
pub const DEFAULT_COMPONENT: &str = hfx_plugin_build::DEFAULT_COMPONENT;

/// Everything known about a plugin: its `plugin.toml` completed with what its
/// component declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub plugin: PluginSection,
    /// Upstream packages and the version ranges the workaround applies to.
    #[serde(default)]
    pub upstream: BTreeMap<String, String>,
    #[serde(default)]
    pub why: Option<Why>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    pub backend: Backends,
    pub api: String,
    /// Path of the component, relative to the manifest's folder.
    pub component: String,
    /// Stable order within a stage: lower runs first; ties break by name.
    #[serde(default = "default_order")]
    pub order: i32,
    #[serde(default)]
    pub targets: Vec<String>,
}

/// `plugin.toml` as written: strict, every fact the component can state optional.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    pub plugin: PluginFile,
    #[serde(default)]
    pub upstream: BTreeMap<String, String>,
    #[serde(default)]
    pub why: Option<Why>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
}

/// The `[plugin]` table of `plugin.toml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginFile {
    pub name: Option<String>,
    pub version: Option<String>,
    pub kind: Option<PluginKind>,
    pub backend: Backends,
    pub api: Option<String>,
    /// Path of the component, relative to the manifest's folder [default: `plugin.wasm`].
    pub component: Option<String>,
    #[serde(default = "default_order")]
    pub order: i32,
    pub targets: Option<Vec<String>>,
}

/// What a component declares about itself, from its [`META_SECTION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentMeta {
    pub api: String,
    pub kind: PluginKind,
    pub name: String,
    pub version: String,
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Why {
    pub upstream_issue: Option<String>,
    pub summary: Option<String>,
}

/// The `[reference]` table: the reference exporter's registrations this
/// plugin answers, by their keys in `docs/reference-parity.md`
/// (`BACKEND KIND TARGET`, `onnx patch torch.roll`); `tools/reference-parity.py`
/// checks each names a registration the pinned reference makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub answers: Vec<String>,
}

fn default_order() -> i32 {
    100
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    Patch,
    FxNodeFix,
    FxProgramFix,
    OnnxTranslation,
    OnnxIrFix,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Patch => "patch",
            PluginKind::FxNodeFix => "fx-node-fix",
            PluginKind::FxProgramFix => "fx-program-fix",
            PluginKind::OnnxTranslation => "onnx-translation",
            PluginKind::OnnxIrFix => "onnx-ir-fix",
        }
    }

    /// Kinds dispatched per target need at least one.
    fn needs_targets(self) -> bool {
        self != PluginKind::FxProgramFix
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Backend {
    #[serde(rename = "dynamo")]
    Dynamo,
    #[serde(rename = "onnx")]
    Onnx,
    #[serde(rename = "executorch")]
    Executorch,
    #[serde(rename = "executorch.xnnpack")]
    ExecutorchXnnpack,
    #[serde(rename = "executorch.cuda")]
    ExecutorchCuda,
    #[serde(rename = "openvino")]
    Openvino,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Dynamo => "dynamo",
            Backend::Onnx => "onnx",
            Backend::Executorch => "executorch",
            Backend::ExecutorchXnnpack => "executorch.xnnpack",
            Backend::ExecutorchCuda => "executorch.cuda",
            Backend::Openvino => "openvino",
        }
    }

    /// An ExecuTorch backend: its artifact is a `.pte`.
    pub fn is_executorch(self) -> bool {
        matches!(self, Backend::Executorch | Backend::ExecutorchXnnpack | Backend::ExecutorchCuda)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backends a plugin serves: `backend = "onnx"`, or a list for one
/// workaround several backends need (`backend = ["onnx", "executorch"]`, as
/// the reference registers one patch for several). Never empty, no repeats.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backends(Vec<Backend>);

impl Backends {
    pub fn one(backend: Backend) -> Backends {
        Backends(vec![backend])
    }

    pub fn iter(&self) -> impl Iterator<Item = Backend> + '_ {
        self.0.iter().copied()
    }

    /// Whether a plugin of these backends runs for `backend`: one it names;
    /// every backend for a `dynamo` plugin (every backend starts from the
    /// dynamo export: the reference's OnnxExporter and ExecutorchExporter
    /// extend DynamoExporter); the ExecuTorch delegates for `executorch`;
    /// `openvino` for an `onnx` plugin (OpenVINO reads the model hfx's ONNX
    /// stages write: their patches, fixes and translations are its own).
    pub fn serve(&self, backend: Backend) -> bool {
        self.iter().any(|b| {
            b == backend
                || b == Backend::Dynamo
                || (b == Backend::Executorch
                    && matches!(backend, Backend::ExecutorchXnnpack | Backend::ExecutorchCuda))
                || (b == Backend::Onnx && backend == Backend::Openvino)
        })
    }
}

impl fmt::Display for Backends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Backend::as_str).collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for Backends {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0[..] {
            [one] => one.serialize(serializer),
            many => many.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Backends {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Backends, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Backend),
            Many(Vec<Backend>),
        }
        let list = match OneOrMany::deserialize(deserializer)? {
            OneOrMany::One(b) => vec![b],
            OneOrMany::Many(list) => list,
        };
        if list.is_empty() {
            return Err(serde::de::Error::custom(
                "backend: an empty list (name at least one backend)",
            ));
        }
        let mut seen = Vec::new();
        for b in &list {
            if seen.contains(b) {
                return Err(serde::de::Error::custom(format!("backend: `{b}` named twice")));
            }
            seen.push(*b);
        }
        Ok(Backends(list))
    }
}

impl Manifest {
    /// A manifest that states every fact itself (a component without a
    /// declaration); the error is one line without the file name.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        ManifestFile::parse(text)?.complete(None)
    }
}

impl ManifestFile {
    /// Parses and validates what the file states; the error is one line without the file name.
    pub fn parse(text: &str) -> Result<ManifestFile, String> {
        let manifest: ManifestFile =
            toml::from_str(text).map_err(|e| one_line_toml_error(text, &e))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// The component's path relative to the plugin folder.
    pub fn component(&self) -> &str {
        self.plugin.component.as_deref().unwrap_or(DEFAULT_COMPONENT)
    }

    fn validate(&self) -> Result<(), String> {
        let p = &self.plugin;
        if let Some(name) = &p.name {
            validate_name(name).map_err(|e| format!("plugin.name {e}"))?;
        }
        if let Some(version) = &p.version {
            validate_version(version).map_err(|e| format!("plugin.version {e}"))?;
        }
        if let Some(api) = &p.api {
            validate_api(api).map_err(|e| format!("plugin.api {e}"))?;
        }
        if let Some(component) = &p.component {
            validate_component_path(component)?;
        }
        if let Some(targets) = &p.targets {
            validate_targets(targets).map_err(|e| format!("plugin.targets {e}"))?;
        }
        for key in self.reference.iter().flat_map(|r| &r.answers) {
            // The target may hold spaces: the reference keys a conversion of a
            // Python builtin by its repr (`<built-in function add>`).
            let mut parts = key.splitn(3, ' ');
            if parts.by_ref().take(2).filter(|part| !part.is_empty()).count() != 2
                || parts.next().is_none_or(|target| target.trim().is_empty())
            {
                return Err(format!(
                    "reference.answers `{key}`: give a registration's key, `BACKEND KIND TARGET` (`onnx patch torch.roll`)"
                ));
            }
        }
        for (package, range) in &self.upstream {
            semver::VersionReq::parse(range)
                .map_err(|e| format!("upstream.{package} `{range}`: {e}"))?;
        }
        Ok(())
    }

    /// Every fact of the plugin: what the file states, completed with what
    /// the component declares. A fact stated by both must agree; one stated
    /// by neither is an error naming it. The error is one line without the
    /// file name (it is about the manifest).
    pub fn complete(self, meta: Option<&ComponentMeta>) -> Result<Manifest, String> {
        let p = self.plugin;
        let name =
            merge("name", p.name, meta.map(|m| &m.name), |a, b| a == b, |v| format!("`{v}`"))?;
        let version = merge(
            "version",
            p.version,
            meta.map(|m| &m.version),
            |a, b| a == b,
            |v| format!("`{v}`"),
        )?;
        let kind =
            merge("kind", p.kind, meta.map(|m| &m.kind), |a, b| a == b, |v| format!("`{v}`"))?;
        let api = merge("api", p.api, meta.map(|m| &m.api), |a, b| a == b, |v| format!("`{v}`"))?;
        let targets = match (p.targets, meta) {
            (None, None) => Vec::new(),
            (targets, meta) => merge(
                "targets",
                targets,
                meta.map(|m| &m.targets),
                |a, b| same_targets(a, b),
                |v| format!("{v:?}"),
            )?,
        };
        if kind.needs_targets() && targets.is_empty() {
            return Err(format!(
                "plugin.targets is empty: a {kind} plugin is dispatched by target"
            ));
        }
        Ok(Manifest {
            plugin: PluginSection {
                name,
                version,
                kind,
                backend: p.backend,
                api,
                component: p.component.unwrap_or_else(|| DEFAULT_COMPONENT.to_string()),
                order: p.order,
                targets,
            },
            upstream: self.upstream,
            why: self.why,
            reference: self.reference,
        })
    }
}

/// One fact from the manifest (`stated`) and the component (`declared`).
fn merge<T: Clone>(
    field: &str,
    stated: Option<T>,
    declared: Option<&T>,
    agree: impl Fn(&T, &T) -> bool,
    show: impl Fn(&T) -> String,
) -> Result<T, String> {
    match (stated, declared) {
        (Some(stated), Some(declared)) if !agree(&stated, declared) => Err(format!(
            "plugin.{field} {} differs from the component's {} (its {META_SECTION} section); \
             drop `{field}` from plugin.toml, the component states it",
            show(&stated),
            show(declared)
        )),
        (Some(stated), _) => Ok(stated),
        (None, Some(declared)) => Ok(declared.clone()),
        (None, None) => Err(format!(
            "plugin.{field} is missing, and the component carries no {META_SECTION} section stating it \
             (build it with hfx-sdk's attribute macros, or state `{field}` in plugin.toml)"
        )),
    }
}

/// Targets are a set: order and repetition do not matter.
pub fn same_targets(a: &[String], b: &[String]) -> bool {
    let set = |v: &[String]| {
        let mut v: Vec<String> = v.to_vec();
        v.sort();
        v.dedup();
        v
    };
    set(a) == set(b)
}

impl ComponentMeta {
    /// The declaration of `component` (a component or core module), or
    /// `None` when it carries none. Nested modules are searched: the SDK's
    /// section lives in the core module the component embeds. Two
    /// declarations, one over [`MAX_META_BYTES`] or one that does not parse
    /// or validate are errors; so are bytes that are not WebAssembly.
    pub fn read(component: &[u8]) -> Result<Option<ComponentMeta>, String> {
        let mut found: Option<&[u8]> = None;
        for payload in wasmparser::Parser::new(0).parse_all(component) {
            // wasmparser's messages may span lines (a bad magic number prints arrays).
            let one_line = |e: wasmparser::BinaryReaderError| {
                e.message().split_whitespace().collect::<Vec<_>>().join(" ")
            };
            let payload = payload
                .map_err(|e| format!("not a valid WebAssembly component: {}", one_line(e)))?;
            let wasmparser::Payload::CustomSection(section) = payload else { continue };
            if section.name() != META_SECTION {
                continue;
            }
            if found.is_some() {
                return Err(format!("carries more than one {META_SECTION} section"));
            }
            if section.data().len() > MAX_META_BYTES {
                return Err(format!(
                    "its {META_SECTION} section is {} bytes, over the {MAX_META_BYTES}-byte limit",
                    section.data().len()
                ));
            }
            found = Some(section.data());
        }
        let Some(bytes) = found else { return Ok(None) };
        let meta: ComponentMeta = serde_json::from_slice(bytes).map_err(|e| {
            format!("its {META_SECTION} section is not valid: {}", e.to_string().replace('\n', " "))
        })?;
        meta.validate().map_err(|e| format!("its {META_SECTION} section: {e}"))?;
        Ok(Some(meta))
    }

    fn validate(&self) -> Result<(), String> {
        validate_api(&self.api).map_err(|e| format!("api {e}"))?;
        validate_name(&self.name).map_err(|e| format!("name {e}"))?;
        validate_version(&self.version).map_err(|e| format!("version {e}"))?;
        validate_targets(&self.targets).map_err(|e| format!("targets {e}"))
    }
}

fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if !ok {
        return Err(format!("`{name}`: use lowercase letters, digits and `-`"));
    }
    Ok(())
}

fn validate_version(version: &str) -> Result<(), String> {
    semver::Version::parse(version).map(drop).map_err(|e| format!("`{version}`: {e}"))
}

fn validate_api(api: &str) -> Result<(), String> {
    if !SUPPORTED_APIS.contains(&api) {
        return Err(format!(
            "`{api}` is not supported by this hfx (supported: {})",
            SUPPORTED_APIS.join(", ")
        ));
    }
    Ok(())
}

fn validate_targets(targets: &[String]) -> Result<(), String> {
    if let Some(t) = targets.iter().find(|t| t.trim().is_empty() || t.trim() != t.as_str()) {
        return Err(format!("has a blank or padded entry `{t}`"));
    }
    Ok(())
}

/// The component must be a plain relative path inside the plugin's folder.
/// (cap-std enforces the same at open time, symlinks included; this check only
/// gives the clearer message.)
fn validate_component_path(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if path.is_empty() || p.is_absolute() || path.starts_with('/') || path.contains('\\') {
        return Err(format!(
            "plugin.component `{path}` must be a relative path inside the plugin folder"
        ));
    }
    if p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(format!("plugin.component `{path}` must not leave the plugin folder"));
    }
    Ok(())
}

/// toml's errors span several lines with a source excerpt: keep the message and the line.
fn one_line_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[plugin]
name = "onnx-fix-alias"
version = "1.0.0"
kind = "fx-node-fix"
backend = "onnx"
api = "0.1"
component = "fix.wasm"
targets = ["aten.alias.default"]
[upstream]
torch = ">=2.12, <2.16"
[why]
upstream-issue = "https://example.invalid/1"
"#;

    #[test]
    fn parses_a_full_manifest() {
        let m = Manifest::parse(GOOD).unwrap();
        assert_eq!(m.plugin.kind, PluginKind::FxNodeFix);
        assert_eq!(m.plugin.order, 100);
        assert_eq!(m.upstream["torch"], ">=2.12, <2.16");
    }

    /// `backend` is one name or a list of distinct ones; an empty or
    /// repeating list is refused in one line; dynamo serves every backend.
    #[test]
    fn a_plugin_serves_one_backend_or_a_list() {
        let both = Manifest::parse(
            &GOOD.replace(r#"backend = "onnx""#, r#"backend = ["onnx", "executorch"]"#),
        )
        .unwrap();
        assert!(
            both.plugin.backend.serve(Backend::Onnx)
                && both.plugin.backend.serve(Backend::ExecutorchXnnpack)
        );
        assert!(!both.plugin.backend.serve(Backend::Dynamo));
        assert_eq!(both.plugin.backend.to_string(), "onnx,executorch");
        let one = Manifest::parse(GOOD).unwrap();
        assert!(
            one.plugin.backend.serve(Backend::Onnx)
                && !one.plugin.backend.serve(Backend::Executorch)
        );
        assert!(Backends::one(Backend::Dynamo).serve(Backend::Onnx));
        // OpenVINO reads the ONNX stages' model: an ONNX plugin serves it, not the reverse.
        assert!(one.plugin.backend.serve(Backend::Openvino));
        assert!(!Backends::one(Backend::Openvino).serve(Backend::Onnx));
        for (list, expected) in [("[]", "an empty list"), (r#"["onnx", "onnx"]"#, "named twice")] {
            let e =
                Manifest::parse(&GOOD.replace(r#"backend = "onnx""#, &format!("backend = {list}")))
                    .unwrap_err();
            assert!(e.contains(expected) && !e.contains('\n'), "{list}: {e}");
        }
    }

    #[test]
    fn rejects_unknown_fields_with_the_line() {
        let text = GOOD.replace("api = \"0.1\"", "api = \"0.1\"\ncolour = \"red\"");
        let e = Manifest::parse(&text).unwrap_err();
        assert!(e.contains("unknown field `colour`") && e.starts_with("line 8:"), "{e}");
        assert!(!e.contains('\n'));
    }

    /// `[reference] answers` lists registration keys; a key that is not a
    /// backend, a kind and a target (which may hold spaces), or another field
    /// there, is refused in one line.
    #[test]
    fn reference_answers_are_registration_keys() {
        let with = |table: &str| format!("{GOOD}[reference]\n{table}\n");
        let m = Manifest::parse(&with(r#"answers = ["onnx fx-node-fix _fix_alias"]"#)).unwrap();
        assert_eq!(m.reference.unwrap().answers, ["onnx fx-node-fix _fix_alias"]);
        let builtin = r#"answers = ["openvino conversion-extension <built-in function add>"]"#;
        assert!(Manifest::parse(&with(builtin)).is_ok());
        assert!(Manifest::parse(GOOD).unwrap().reference.is_none());
        for (table, expected) in [
            (r#"answers = ["_fix_alias"]"#, "reference.answers `_fix_alias`: give"),
            (r#"answers = ["onnx patch"]"#, "reference.answers `onnx patch`: give"),
            (r#"answers = ["onnx  patch"]"#, "reference.answers `onnx  patch`: give"),
            (r#"answers = "onnx patch torch.roll""#, "invalid type"),
            ("answer = []", "unknown field `answer`"),
        ] {
            let e = Manifest::parse(&with(table)).unwrap_err();
            assert!(e.contains(expected) && !e.contains('\n'), "{table}: {e}");
        }
    }

    #[test]
    fn rejects_paths_outside_the_folder() {
        for path in ["../x.wasm", "/etc/x.wasm", "a/../../x.wasm", "./x.wasm"] {
            let e = Manifest::parse(&GOOD.replace("fix.wasm", path)).unwrap_err();
            assert!(e.contains("plugin.component"), "{path}: {e}");
        }
    }

    #[test]
    fn rejects_wrong_api_kind_and_ranges() {
        assert!(Manifest::parse(&GOOD.replace("\"0.1\"", "\"9.0\""))
            .unwrap_err()
            .contains("not supported"));
        assert!(Manifest::parse(&GOOD.replace("fx-node-fix", "node-fix"))
            .unwrap_err()
            .contains("unknown variant"));
        assert!(Manifest::parse(&GOOD.replace(">=2.12, <2.16", "two-ish"))
            .unwrap_err()
            .contains("upstream.torch"));
        assert!(Manifest::parse(&GOOD.replace("[\"aten.alias.default\"]", "[]"))
            .unwrap_err()
            .contains("targets"));
    }

    const SHORT: &str = "[plugin]\nbackend = \"onnx\"\n[why]\nsummary = \"x\"\n";

    fn meta() -> ComponentMeta {
        ComponentMeta {
            api: "0.1".into(),
            kind: PluginKind::FxNodeFix,
            name: "onnx-fix-alias".into(),
            version: "1.0.0".into(),
            targets: vec!["aten.alias.default".into()],
        }
    }

    /// A core module of one custom section.
    fn module_with_section(name: &str, data: &[u8]) -> Vec<u8> {
        let mut body = vec![name.len() as u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        let mut bytes = b"\0asm\x01\0\0\0\0".to_vec();
        let mut size = body.len();
        loop {
            let byte = (size & 0x7f) as u8;
            size >>= 7;
            bytes.push(if size == 0 { byte } else { byte | 0x80 });
            if size == 0 {
                break;
            }
        }
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn the_component_completes_a_short_manifest() {
        let file = ManifestFile::parse(SHORT).unwrap();
        assert_eq!(file.component(), DEFAULT_COMPONENT);
        let m = file.complete(Some(&meta())).unwrap();
        assert_eq!(
            (m.plugin.name.as_str(), m.plugin.version.as_str(), m.plugin.kind),
            ("onnx-fix-alias", "1.0.0", PluginKind::FxNodeFix)
        );
        assert_eq!(
            (m.plugin.api.as_str(), m.plugin.component.as_str(), m.plugin.order),
            ("0.1", "plugin.wasm", 100)
        );
        assert_eq!(m.plugin.targets, ["aten.alias.default"]);
        // Without a declaration the short manifest lacks facts, and says which.
        let e = ManifestFile::parse(SHORT).unwrap().complete(None).unwrap_err();
        assert!(e.contains("plugin.name is missing") && e.contains("hfx:plugin-meta"), "{e}");
    }

    #[test]
    fn a_restated_fact_must_agree() {
        // Agreeing restatements (an old manifest) are fine; targets are a set.
        let m = ManifestFile::parse(GOOD).unwrap().complete(Some(&meta())).unwrap();
        assert_eq!(m.plugin.kind, PluginKind::FxNodeFix);
        let both = GOOD.replace(
            "[\"aten.alias.default\"]",
            "[\"aten.alias.default\", \"aten.alias.default\"]",
        );
        ManifestFile::parse(&both).unwrap().complete(Some(&meta())).unwrap();
        for (from, to, says) in [
            ("kind = \"fx-node-fix\"", "kind = \"onnx-ir-fix\"", "plugin.kind `onnx-ir-fix` differs from the component's `fx-node-fix`"),
            ("version = \"1.0.0\"", "version = \"1.0.1\"", "plugin.version `1.0.1` differs from the component's `1.0.0`"),
            ("name = \"onnx-fix-alias\"", "name = \"other\"", "plugin.name `other` differs from the component's `onnx-fix-alias`"),
            ("[\"aten.alias.default\"]", "[\"aten.view.default\"]", "plugin.targets [\"aten.view.default\"] differs from the component's [\"aten.alias.default\"]"),
        ] {
            let e = ManifestFile::parse(&GOOD.replace(from, to)).unwrap().complete(Some(&meta())).unwrap_err();
            assert!(e.contains(says) && !e.contains('\n'), "{to}: {e}");
        }
    }

    #[test]
    fn reads_the_declaration_of_a_module() {
        let json = br#"{"api":"0.1","kind":"fx-node-fix","name":"onnx-fix-alias","version":"1.0.0","targets":["aten.alias.default"]}"#;
        assert_eq!(
            ComponentMeta::read(&module_with_section(META_SECTION, json)).unwrap(),
            Some(meta())
        );
        assert_eq!(ComponentMeta::read(&module_with_section("other", json)).unwrap(), None);
        let mut two = module_with_section(META_SECTION, json);
        two.extend_from_slice(&module_with_section(META_SECTION, json)[8..]);
        assert!(ComponentMeta::read(&two).unwrap_err().contains("more than one"));
        let bad = br#"{"api":"0.1","kind":"fx-node-fix","name":"x","version":"1.0.0","targets":[],"colour":1}"#;
        assert!(ComponentMeta::read(&module_with_section(META_SECTION, bad))
            .unwrap_err()
            .contains("unknown field `colour`"));
        let old =
            br#"{"api":"0.9","kind":"fx-node-fix","name":"x","version":"1.0.0","targets":[]}"#;
        let e = ComponentMeta::read(&module_with_section(META_SECTION, old)).unwrap_err();
        assert!(e.contains("api `0.9` is not supported"), "{e}");
        assert!(ComponentMeta::read(b"\0asm\x01\0\0\0\0\x7f")
            .unwrap_err()
            .contains("not a valid WebAssembly"));
    }
}
