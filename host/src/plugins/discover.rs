//! Finding plugins on disk. Every file access goes through cap-std: a plugin
//! folder is a capability, and nothing named in a manifest can reach outside
//! it (`..`, absolute paths and symlinks out are refused by construction).
//!
//! Nothing vanishes silently: what discovery cannot or will not read (a folder
//! it cannot open, a symlinked folder or manifest, a plugin deeper than it
//! looks) is a [`Warning`] naming the path; a plugin whose manifest or
//! component cannot be read is an error entry naming the file. Files are read
//! only when they are regular files (a FIFO or device is refused before it is
//! opened, and opened non-blocking), and never past a size limit.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, FileTypeExt, Metadata, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};

use super::error::LoadError;
use super::manifest::{ComponentMeta, Manifest, ManifestFile};

const MANIFEST: &str = "plugin.toml";
/// The marker of an opt-in set (`plugins/onnx-ort-cpu/set.toml`): a folder
/// holding it is found only when given itself (`--plugins` naming it, or
/// `hfx run --ort-fusions cpu`), never by discovery of a folder above it, so
/// a default plugin folder can ship sets no run uses unasked. It may name
/// plugins of other sets the set runs too ([`SetFile`]).
pub const OPT_IN_SET: &str = "set.toml";
/// How deep below a `--plugins` folder manifests are looked for
/// (`plugins/` → `onnx/` → `fix-alias/`).
const MAX_DEPTH: u32 = 3;
/// How many folders further down discovery looks, only to warn about plugins
/// it does not load.
const WARN_DEPTH: u32 = 3;
/// A component larger than this is refused before it is read.
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;
/// A `plugin.toml` larger than this is refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// A plugin found on disk, read but not yet compiled.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// `plugin.toml` completed with what the component declares.
    pub manifest: Manifest,
    /// What the component declares itself (`hfx:plugin-meta`), if it does.
    pub declared: Option<ComponentMeta>,
    /// The plugin's folder, for display.
    pub dir: PathBuf,
    pub manifest_sha256: String,
    pub component: Vec<u8>,
    pub component_sha256: String,
}

impl Discovered {
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join(MANIFEST)
    }

    pub fn component_path(&self) -> PathBuf {
        self.dir.join(&self.manifest.plugin.component)
    }
}

/// Something below a plugin folder that discovery skipped, and why: one line
/// naming the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// What discovery found below one folder: plugins (or errors naming a plugin's
/// file) in path order, and warnings about what it skipped.
#[derive(Debug, Default)]
pub struct Discovery {
    pub found: Vec<Result<Discovered, LoadError>>,
    pub warnings: Vec<Warning>,
}

/// Whether `folder` is an opt-in set (holds [`OPT_IN_SET`]).
pub fn is_opt_in_set(folder: &Path) -> bool {
    folder.join(OPT_IN_SET).is_file()
}

/// The folder of the ONNX Runtime fusion set for `--ort-fusions TARGET`
/// (the reference's `ort_fusions`): `onnx-ort-cpu`, `onnx-ort-cuda`,
/// `onnx-ort-webgpu` or `onnx-ort-dml` among the installed default plugins
/// (`defaults`), else in the checkout hfx was built from.
pub fn ort_fusion_set(target: &str, defaults: Option<&Path>) -> Result<PathBuf, String> {
    let name = match target {
        "cpu" => "onnx-ort-cpu",
        "cuda" => "onnx-ort-cuda",
        "webgpu" => "onnx-ort-webgpu",
        "dml" => "onnx-ort-dml",
        other => {
            return Err(format!("--ort-fusions {other}: give `cpu`, `cuda`, `webgpu` or `dml`"))
        }
    };
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("plugins");
    defaults
        .map(|d| d.join(name))
        .into_iter()
        .chain([checkout.join(name)])
        .find(|d| is_opt_in_set(d))
        .ok_or_else(|| {
            format!("--ort-fusions {target}: the `{name}` plugin set is not installed (reinstall hfx: `cargo xtask install`)")
        })
}

/// A set's `set.toml`: the plugins of other sets it runs too, each a folder
/// named relative to the set's own (`../onnx-ort-cpu/fuse-gelu`), so sets
/// that differ in a few plugins share the rest without copies.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFile {
    #[serde(default)]
    include: Vec<String>,
}

/// A `set.toml` larger than this is refused before it is read.
const MAX_SET_BYTES: u64 = 64 << 10;
/// How many plugins a set may include.
const MAX_INCLUDES: usize = 256;

/// The plugin folders `set` (the set folder at `root`) includes, each opened
/// from the folder holding the set, which an include never leaves: `..` past
/// it, an absolute path, a symlink out of it, a folder of the set itself or
/// one without a `plugin.toml` is refused, naming `set.toml` and the include.
fn set_includes(set: &Dir, root: &Path) -> Result<Vec<(PathBuf, Dir)>, LoadError> {
    let file = root.join(OPT_IN_SET);
    let bytes = read_regular(set, OPT_IN_SET, MAX_SET_BYTES)
        .map_err(|e| LoadError::new(&file, e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| LoadError::new(&file, "is not UTF-8"))?;
    let parsed: SetFile = toml::from_str(&text).map_err(|e| {
        LoadError::new(
            &file,
            format!("{} (a set.toml holds only `include = [\"../set/plugin\", ...]`)", e.message()),
        )
    })?;
    if parsed.include.is_empty() {
        return Ok(Vec::new());
    }
    if parsed.include.len() > MAX_INCLUDES {
        return Err(LoadError::new(
            &file,
            format!("includes {} plugins, over the limit of {MAX_INCLUDES}", parsed.include.len()),
        ));
    }
    // The folder holding the set, as the OS resolves `root/..`.
    let root_real = std::fs::canonicalize(root).map_err(|e| {
        LoadError::new(root, format!("cannot resolve the set folder: {}", io_reason(&e)))
    })?;
    let (Some(parent_real), Some(set_name)) = (root_real.parent(), root_real.file_name()) else {
        return Err(LoadError::new(
            &file,
            "a set folder at / has no folder above it to include from",
        ));
    };
    let parent = Dir::open_ambient_dir(parent_real, ambient_authority()).map_err(|e| {
        LoadError::new(
            parent_real,
            format!("cannot open the folder above the set: {}", io_reason(&e)),
        )
    })?;
    let shown_parent =
        root.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut included = Vec::new();
    for include in &parsed.include {
        let refuse =
            |reason: String| LoadError::new(&file, format!("include `{include}`: {reason}"));
        let relative = include_below(Path::new(set_name), include).map_err(refuse)?;
        if relative.starts_with(set_name) {
            return Err(refuse(
                "names a folder of this set, whose plugins are found without an include".into(),
            ));
        }
        let dir = parent.open_dir(&relative).map_err(|e| {
            refuse(match ReadError::from_io(e) {
                ReadError::NotFound => "not found".into(),
                ReadError::Outside => "resolves outside the folder holding the set".into(),
                other => format!("cannot be opened: {other}"),
            })
        })?;
        if !dir.symlink_metadata(MANIFEST).is_ok_and(|m| m.is_file()) {
            return Err(refuse(format!("is not a plugin folder (no regular {MANIFEST} in it)")));
        }
        included.push((shown_parent.join(&relative), dir));
    }
    Ok(included)
}

/// `include`, a path relative to the set folder `set`, as a path relative to
/// the folder holding the set; an error if it is absolute, empty or leaves
/// that folder.
fn include_below(set: &Path, include: &str) -> Result<PathBuf, String> {
    use std::path::Component;
    let path = Path::new(include);
    if path.is_absolute() {
        return Err(
            "is absolute: name the plugin folder relative to the set's (`../set/plugin`)".into()
        );
    }
    let mut parts: Vec<&std::ffi::OsStr> = vec![set.as_os_str()];
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err("leaves the folder holding the set (too many `..`)".into());
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(
                    "is absolute: name the plugin folder relative to the set's (`../set/plugin`)"
                        .into(),
                )
            }
        }
    }
    if parts.is_empty() {
        return Err("names the folder holding the set, not a plugin folder".into());
    }
    Ok(parts.iter().collect())
}

/// Every plugin below `root`, in path order; a plugin that cannot be read is an
/// error entry naming its file, so one bad plugin does not hide the others.
/// What discovery skipped is logged as a warning (see [`scan`] to get them).
pub fn discover(root: &Path) -> Result<Vec<Result<Discovered, LoadError>>, LoadError> {
    let discovery = scan(root)?;
    for warning in &discovery.warnings {
        tracing::warn!("{warning}");
    }
    Ok(discovery.found)
}

/// As [`discover`], with the warnings returned instead of logged.
pub fn scan(root: &Path) -> Result<Discovery, LoadError> {
    let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(|e| {
        LoadError::new(root, format!("cannot open plugin folder: {}", io_reason(&e)))
    })?;
    let mut discovery = Discovery::default();
    walk(&dir, root, 0, &mut discovery);
    if dir.symlink_metadata(OPT_IN_SET).is_ok_and(|m| m.is_file()) {
        for (path, included) in set_includes(&dir, root)? {
            discovery.found.push(read_plugin(&included, &path));
        }
    }
    discovery.found.sort_by(|a, b| path_of(a).cmp(path_of(b)));
    discovery.warnings.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(discovery)
}

/// Every plugin below each folder, in folder then path order, and every
/// warning. The first plugin that cannot be read stops with its error; the
/// same name and version found twice is an error too.
pub fn discover_folders(
    folders: &[PathBuf],
) -> Result<(Vec<Discovered>, Vec<Warning>), super::SetError> {
    let mut all: Vec<Discovered> = Vec::new();
    let mut warnings = Vec::new();
    for folder in folders {
        let discovery = scan(folder)?;
        warnings.extend(discovery.warnings);
        for found in discovery.found {
            let found = found?;
            let (name, version) = (&found.manifest.plugin.name, &found.manifest.plugin.version);
            if let Some(other) = all
                .iter()
                .find(|p| &p.manifest.plugin.name == name && &p.manifest.plugin.version == version)
            {
                return Err(LoadError::new(
                    found.manifest_path(),
                    format!(
                        "plugin `{name}` {version} is found twice (also in {})",
                        other.dir.display()
                    ),
                )
                .into());
            }
            all.push(found);
        }
    }
    Ok((all, warnings))
}

fn path_of(entry: &Result<Discovered, LoadError>) -> &Path {
    match entry {
        Ok(d) => &d.dir,
        Err(e) => &e.path,
    }
}

/// Folder names discovery never enters: hidden folders, build output, sources.
fn skipped_name(name: &str) -> bool {
    name.starts_with('.') || name == "target" || name == "src"
}

fn warn(out: &mut Discovery, path: PathBuf, reason: impl Into<String>) {
    out.warnings.push(Warning { path, reason: reason.into() });
}

/// `dir` is `level` folders below the root.
fn walk(dir: &Dir, path: &Path, level: u32, out: &mut Discovery) {
    if level > 0 && dir.symlink_metadata(OPT_IN_SET).is_ok_and(|m| m.is_file()) {
        return;
    }
    match dir.symlink_metadata(MANIFEST) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // Not even a stat: the folder cannot be searched (no `x` permission).
        Err(e) => return warn(out, path.to_path_buf(), unreadable_folder(&e)),
        Ok(meta) if meta.file_type().is_symlink() => match dir.metadata(MANIFEST) {
            // A symlink to a file in the plugin's own folder is followed (cap-std keeps it there).
            Ok(target) if target.is_file() => {
                out.found.push(read_plugin(dir, path));
                return;
            }
            Ok(target) => {
                out.found.push(Err(LoadError::new(
                    path.join(MANIFEST),
                    format!("is not a regular file ({})", file_kind(&target)),
                )));
                return;
            }
            Err(e) => {
                warn(
                    out,
                    path.join(MANIFEST),
                    format!("{}; the plugin is skipped", symlink_reason(&e, "its plugin folder")),
                );
                return;
            }
        },
        Ok(_) => {
            // read_plugin refuses what is not a regular file, naming it.
            out.found.push(read_plugin(dir, path));
            return;
        }
    }
    let entries = match dir.entries() {
        Ok(entries) => entries,
        Err(e) => return warn(out, path.to_path_buf(), unreadable_folder(&e)),
    };
    let mut folders = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                warn(out, path.to_path_buf(), unreadable_folder(&e));
                continue;
            }
        };
        let Ok(name) = entry.file_name().into_string() else {
            warn(out, path.join(entry.file_name()), "name is not UTF-8; skipped");
            continue;
        };
        if skipped_name(&name) {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => folders.push(name),
            Ok(t) if t.is_symlink() => match dir.metadata(&name) {
                Ok(target) if target.is_dir() => warn(
                    out,
                    path.join(&name),
                    "is a symlinked folder; discovery does not follow symlinks (give its target with --plugins)",
                ),
                Ok(_) => {} // a symlinked file beside plugin folders is not discovery's business
                Err(e) => warn(out, path.join(&name), format!("{}; not followed", symlink_reason(&e, &path.display().to_string()))),
            },
            Ok(_) => {}
            Err(e) => warn(out, path.join(&name), format!("cannot be read ({}); skipped", io_reason(&e))),
        }
    }
    folders.sort();
    for name in folders {
        match dir.open_dir(&name) {
            Ok(sub) if level < MAX_DEPTH => walk(&sub, &path.join(&name), level + 1, out),
            Ok(sub) => warn_deeper(&sub, &path.join(&name), level + 1, out),
            Err(e) => warn(out, path.join(&name), unreadable_folder(&e)),
        }
    }
}

fn unreadable_folder(e: &std::io::Error) -> String {
    format!("cannot read folder ({}); plugins in it are skipped", io_reason(e))
}

/// Looks below the deepest level discovery loads, only to warn about plugins there.
fn warn_deeper(dir: &Dir, path: &Path, level: u32, out: &mut Discovery) {
    if dir.symlink_metadata(MANIFEST).is_ok() {
        return warn(
            out,
            path.to_path_buf(),
            format!("plugin folder is {level} folders below the --plugins folder, deeper than discovery looks ({MAX_DEPTH}); not loaded (pass a folder nearer to it with --plugins)"),
        );
    }
    if level >= MAX_DEPTH + WARN_DEPTH {
        return;
    }
    let Ok(entries) = dir.entries() else { return };
    let mut folders: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !skipped_name(n))
        .collect();
    folders.sort();
    for name in folders {
        if let Ok(sub) = dir.open_dir(&name) {
            warn_deeper(&sub, &path.join(&name), level + 1, out);
        }
    }
}

/// Reads one plugin folder: its manifest, then the component the manifest
/// names, then what the component declares, which completes the manifest.
pub fn read_plugin(dir: &Dir, path: &Path) -> Result<Discovered, LoadError> {
    let manifest_path = path.join(MANIFEST);
    let bytes = read_regular(dir, MANIFEST, MAX_MANIFEST_BYTES)
        .map_err(|e| LoadError::new(&manifest_path, e.to_string()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| LoadError::new(&manifest_path, "is not UTF-8"))?;
    let file =
        ManifestFile::parse(&text).map_err(|reason| LoadError::new(&manifest_path, reason))?;
    let name = file.component().to_string();
    let component_path = path.join(&name);
    let component = read_regular(dir, &name, MAX_COMPONENT_BYTES).map_err(|e| {
        let reason = match e {
            ReadError::NotFound => {
                format!("component `{name}` not found (run `cargo xtask build-plugins`?)")
            }
            ReadError::TooLarge { size, limit } => {
                format!("component is {size} bytes, over the {limit}-byte limit")
            }
            e => format!("component `{name}` {e}"),
        };
        LoadError::new(&component_path, reason)
    })?;
    let declared = ComponentMeta::read(&component)
        .map_err(|reason| LoadError::new(&component_path, reason))?;
    let manifest = file
        .complete(declared.as_ref())
        .map_err(|reason| LoadError::new(&manifest_path, reason))?;
    Ok(Discovered {
        manifest_sha256: sha256_hex(text.as_bytes()),
        component_sha256: sha256_hex(&component),
        manifest,
        declared,
        dir: path.to_path_buf(),
        component,
    })
}

/// Why a file of a plugin could not be read.
#[derive(Debug)]
pub enum ReadError {
    NotFound,
    /// `..`, an absolute path or a symlink that leaves the folder (cap-std's refusal).
    Outside,
    /// A FIFO, device, socket or folder: never opened for reading.
    NotRegular(&'static str),
    TooLarge {
        size: u64,
        limit: u64,
    },
    /// Permission denied, I/O error, ...
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotFound => f.write_str("not found"),
            ReadError::Outside => f.write_str("resolves outside the plugin folder"),
            ReadError::NotRegular(kind) => write!(f, "is not a regular file ({kind})"),
            ReadError::TooLarge { size, limit } => {
                write!(f, "is {size} bytes, over the {limit}-byte limit")
            }
            ReadError::Io(e) => write!(f, "cannot be read: {}", io_reason(e)),
        }
    }
}

impl std::error::Error for ReadError {}

impl ReadError {
    fn from_io(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound {
            ReadError::NotFound
        } else if is_escape(&e) {
            ReadError::Outside
        } else {
            ReadError::Io(e)
        }
    }
}

/// Reads `name` below `dir` (symlinks followed only inside `dir`) if it is a
/// regular file of at most `limit` bytes. A FIFO or device is refused from its
/// metadata, before any open; the open is non-blocking and the opened file's
/// own metadata is checked again.
pub fn read_regular(dir: &Dir, name: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
    let meta = dir.metadata(name).map_err(ReadError::from_io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(file_kind(&meta)));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { size: meta.len(), limit });
    }
    let mut options = OpenOptions::new();
    // Non-blocking: a file swapped for a FIFO after the check above cannot block the open.
    options.read(true).custom_flags(libc::O_NONBLOCK);
    let file = dir.open_with(name, &options).map_err(ReadError::from_io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(file_kind(&meta)));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { size: bytes.len() as u64, limit });
    }
    Ok(bytes)
}

/// What kind of file `meta` describes, for messages.
pub fn file_kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symlink"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// cap-std's refusal of a path that leaves the directory.
fn is_escape(e: &std::io::Error) -> bool {
    e.to_string().contains("outside of the filesystem")
}

/// Why a symlink was not followed: it leaves `scope`, or leads nowhere.
fn symlink_reason(e: &std::io::Error, scope: &str) -> String {
    if is_escape(e) {
        format!("is a symlink that leads outside {scope}")
    } else if e.kind() == std::io::ErrorKind::NotFound {
        "is a dangling symlink".to_string()
    } else {
        format!("is a symlink that cannot be followed ({})", io_reason(e))
    }
}

/// An OS error in a few words (`permission denied`), without the error code
/// the standard library appends.
pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    };
    text.to_lowercase()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder holding sets `a` (including what `include` names) and `b`
    /// (one folder with a plugin.toml, one without), and a plugin `out`
    /// beside the folder.
    fn sets(include: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        for folder in ["a", "b/p", "b/empty", "out"] {
            std::fs::create_dir_all(plugins.join(folder)).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        std::fs::write(plugins.join("b/p/plugin.toml"), "").unwrap();
        std::fs::write(dir.path().join("out/plugin.toml"), "").unwrap();
        std::fs::write(plugins.join("a/set.toml"), format!("include = [{include}]\n")).unwrap();
        dir
    }

    /// What `set.toml` holding `include = [INCLUDE]` includes, relative to
    /// the temp folder, or why not.
    fn includes(include: &str) -> Result<Vec<PathBuf>, String> {
        let dir = sets(include);
        let root = dir.path().join("plugins/a");
        let set = Dir::open_ambient_dir(&root, ambient_authority()).unwrap();
        set_includes(&set, &root)
            .map(|found| {
                found.into_iter().map(|(p, _)| p.strip_prefix(dir.path()).unwrap().into()).collect()
            })
            .map_err(|e| e.reason)
    }

    #[test]
    fn a_set_includes_plugin_folders_beside_it_and_nothing_else() {
        let p = PathBuf::from("plugins/b/p");
        assert_eq!(includes(r#""../b/p", "./../b/./p/""#).unwrap(), [p.clone(), p]);
        for (include, reason) in [
            (r#""../../out""#, "include `../../out`: leaves the folder holding the set (too many `..`)"),
            (r#""/etc""#, "include `/etc`: is absolute: name the plugin folder relative to the set's (`../set/plugin`)"),
            (r#""../b/missing""#, "include `../b/missing`: not found"),
            (r#""../b/empty""#, "include `../b/empty`: is not a plugin folder (no regular plugin.toml in it)"),
            (r#""..""#, "include `..`: names the folder holding the set, not a plugin folder"),
            (r#""../a/x""#, "include `../a/x`: names a folder of this set, whose plugins are found without an include"),
            (r#""../b/p/../../../out""#, "include `../b/p/../../../out`: leaves the folder holding the set (too many `..`)"),
        ] {
            assert_eq!(includes(include).unwrap_err(), reason, "{include}");
        }
        // A symlink out of the folder holding the set is not followed.
        let dir = sets(r#""../link""#);
        std::os::unix::fs::symlink(dir.path().join("out"), dir.path().join("plugins/link"))
            .unwrap();
        let root = dir.path().join("plugins/a");
        let set = Dir::open_ambient_dir(&root, ambient_authority()).unwrap();
        let error = set_includes(&set, &root).unwrap_err();
        assert_eq!(error.reason, "include `../link`: resolves outside the folder holding the set");
        assert_eq!(error.path, root.join("set.toml"));
        // Anything but `include` is refused, in one line.
        std::fs::write(root.join("set.toml"), "includes = []\n").unwrap();
        let error = set_includes(&set, &root).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!(
                "{}: unknown field `includes`",
                root.join("set.toml").display()
            )),
            "{error}"
        );
        assert_eq!(error.lines().count(), 1, "{error}");
    }

    #[test]
    fn permission_denied_is_not_reported_as_outside_the_folder() {
        let denied = ReadError::from_io(std::io::Error::from_raw_os_error(13));
        assert_eq!(denied.to_string(), "cannot be read: permission denied");
        let escape = std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        assert_eq!(ReadError::from_io(escape).to_string(), "resolves outside the plugin folder");
    }
}
