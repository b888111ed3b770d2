//! `--model-id org/name[@revision]`: a Hugging Face Hub model found in the
//! local Hub cache, as huggingface_hub lays it out, and then loaded as
//! `--model-dir` loads a folder: its snapshot at the revision's commit.
//!
//! ```text
//! $HF_HUB_CACHE  (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//! └── models--{org}--{name}/
//!     ├── refs/{revision}        the commit a branch or tag names (`main` unless another is asked for)
//!     ├── snapshots/{commit}/    the repository's files at that commit, links into blobs/
//!     └── blobs/
//! ```
//!
//! Resolution reads the cache and nothing else: no Python, no network
//! (`hub_download.rs` fetches what is missing, then resolves again). A
//! model that is not there is one line saying where hfx looked and how to
//! get it there. Every path component built from the id is checked first
//! (ids as huggingface_hub's `validate_repo_id` takes them, revisions as git
//! names branches), so none can lead out of the cache folder. A snapshot
//! counts as there only when whole: its `config.json`, and its weights (each
//! shard its index names); pickled weights only with `--allow-pickle`.
//!
//! Also here, since `--model-dir` and `--model-id` share it: a model folder
//! whose `config.json` names its own modeling code (`auto_map`) is loaded
//! only with `--trust-remote-code`, because that code runs in the worker.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The branch huggingface_hub resolves when no revision is named.
pub const DEFAULT_REVISION: &str = "main";

/// The longest part of an id (huggingface_hub's `REPO_ID_REGEX`).
const MAX_ID_PART: usize = 96;

/// The longest revision hfx looks up (git refuses none shorter; none is longer in practice).
const MAX_REVISION: usize = 255;

/// A ref file holds a 40-character commit hash; anything much larger is not one.
const MAX_REF_BYTES: u64 = 4096;

/// `config.json`s are kilobytes; the largest (vocabularies inlined) a few MiB.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The files transformers' `from_pretrained` takes a model's weights from,
/// each an index of shards or a single file, in the order it prefers them.
const SAFETENSORS: [&str; 2] = ["model.safetensors.index.json", "model.safetensors"];
const PICKLES: [&str; 2] = ["pytorch_model.bin.index.json", "pytorch_model.bin"];

/// An index names its shards; the largest real ones are a few MiB.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// `org/name[@revision]` as the user wrote it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelId {
    /// `org/name`, or a bare `name` (the Hub's oldest models have no org).
    pub repo: String,
    /// A branch, a tag or a commit hash, if one was named.
    pub revision: Option<String>,
}

impl ModelId {
    /// Checks `text` (`org/name` or `org/name@revision`); the error is one line.
    pub fn parse(text: &str) -> Result<ModelId> {
        let (repo, revision) = match text.split_once('@') {
            Some((repo, revision)) => (repo, Some(revision)),
            None => (text, None),
        };
        if let Err(why) = check_repo(repo) {
            let local = text.starts_with(['/', '.', '~']) || text.contains('\\');
            let hint = if local { " (a local folder is --model-dir)" } else { "" };
            bail!("--model-id `{text}`: {why}; give org/name or org/name@revision{hint}");
        }
        if let Some(revision) = revision {
            if let Err(why) = check_revision(revision) {
                bail!("--model-id `{text}`: the revision {why}; give a branch, a tag or a commit hash after `@`");
            }
        }
        Ok(ModelId { repo: repo.to_string(), revision: revision.map(str::to_string) })
    }

    /// The revision asked for: the one named, else `main`.
    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or(DEFAULT_REVISION)
    }

    /// The model's folder in the cache (huggingface_hub's `repo_folder_name`).
    fn folder_name(&self) -> String {
        std::iter::once("models").chain(self.repo.split('/')).collect::<Vec<_>>().join("--")
    }

    /// What fetches this model (and revision) into the cache on a machine with the Hub.
    fn download_command(&self) -> String {
        match &self.revision {
            Some(revision) => format!("hf download {} --revision {revision}", self.repo),
            None => format!("hf download {}", self.repo),
        }
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.revision {
            Some(revision) => write!(f, "{}@{revision}", self.repo),
            None => f.write_str(&self.repo),
        }
    }
}

/// huggingface_hub's `validate_repo_id`: one or two parts, each 1 to 96 of
/// `[A-Za-z0-9_.-]`, neither starting nor ending with `-` or `.`; no `--`
/// (the cache's separator) or `..`; no `.git` at the end.
fn check_repo(repo: &str) -> Result<()> {
    if repo.is_empty() {
        bail!("no model named");
    }
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("an empty part between `/`");
    }
    if parts.len() > 2 {
        bail!("{} parts separated by `/`, where an id has at most two", parts.len());
    }
    if repo.contains("--") || repo.contains("..") {
        bail!("`--` or `..` inside");
    }
    for part in &parts {
        if part.len() > MAX_ID_PART {
            bail!("a part of {} characters (at most {MAX_ID_PART})", part.len());
        }
        if let Some(c) =
            part.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            bail!("`{c}`, where an id has letters, digits, `-`, `_` and `.`");
        }
        if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
            bail!("`{part}` starts or ends with `-` or `.`");
        }
    }
    if repo.ends_with(".git") {
        bail!("`.git` at the end");
    }
    Ok(())
}

/// A branch or tag name as git allows it (a commit hash is one too), kept to
/// what is also a safe relative path under `refs/`: parts separated by `/`,
/// none empty or starting with `.` (so no `.` or `..`), printable ASCII
/// without git's special characters.
fn check_revision(revision: &str) -> Result<()> {
    if revision.is_empty() {
        bail!("is empty");
    }
    if revision.len() > MAX_REVISION {
        bail!("has {} characters (at most {MAX_REVISION})", revision.len());
    }
    if let Some(c) = revision
        .chars()
        .find(|&c| !c.is_ascii_graphic() || matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        bail!("holds {c:?}, which git refuses in a name");
    }
    if revision.contains("@{") {
        bail!("holds `@{{`, which git refuses in a name");
    }
    for part in revision.split('/') {
        if part.is_empty() {
            bail!("has an empty part between `/`");
        }
        if part.starts_with('.') || part.ends_with(".lock") {
            bail!("has the part `{part}`, which git refuses in a name");
        }
    }
    Ok(())
}

/// A full commit hash, as huggingface_hub's `REGEX_COMMIT_HASH` matches it.
fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where huggingface_hub keeps its cache, and the variable that says so (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubCache {
    pub root: PathBuf,
    pub from: &'static str,
}

impl HubCache {
    /// As huggingface_hub's `constants` find it: `$HF_HUB_CACHE`, else the
    /// legacy `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
    pub fn from_env() -> Result<HubCache> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<HubCache> {
        // An empty variable is treated as unset (Python would take it as the current folder).
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from);
        let expand = |value: OsString| -> PathBuf {
            let path = PathBuf::from(value);
            match (path.strip_prefix("~"), &home) {
                (Ok(rest), Some(home)) => home.join(rest),
                _ => path,
            }
        };
        let found = if let Some(v) = var("HF_HUB_CACHE") {
            HubCache { root: expand(v), from: "$HF_HUB_CACHE" }
        } else if let Some(v) = var("HUGGINGFACE_HUB_CACHE") {
            HubCache { root: expand(v), from: "$HUGGINGFACE_HUB_CACHE" }
        } else if let Some(v) = var("HF_HOME") {
            HubCache { root: expand(v).join("hub"), from: "$HF_HOME/hub" }
        } else if let Some(v) = var("XDG_CACHE_HOME") {
            HubCache {
                root: expand(v).join("huggingface/hub"),
                from: "$XDG_CACHE_HOME/huggingface/hub",
            }
        } else if let Some(home) = &home {
            HubCache { root: home.join(".cache/huggingface/hub"), from: "~/.cache/huggingface/hub" }
        } else {
            bail!("--model-id: no Hugging Face cache (none of HF_HUB_CACHE, HF_HOME or HOME is set): set HF_HOME to the folder holding hub/");
        };
        Ok(found)
    }
}

/// A Hub model resolved in the local cache: what the summary and the export
/// folder record of where the model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModel {
    /// `org/name`.
    pub id: String,
    /// The branch, tag or commit hash asked for (`main` if none was).
    pub revision: String,
    /// The commit the revision named when the model was resolved.
    pub commit: String,
}

impl fmt::Display for HubModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.revision == self.commit {
            write!(f, "{}@{}", self.id, self.commit)
        } else {
            write!(f, "{}@{} (commit {})", self.id, self.revision, self.commit)
        }
    }
}

/// A model found in the cache: which, and the snapshot folder to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub model: HubModel,
    /// `<cache>/models--org--name/snapshots/<commit>`, canonical.
    pub snapshot: PathBuf,
}

/// What the cache holds of a model.
#[derive(Debug)]
pub enum Lookup {
    /// The snapshot, whole.
    Found(Resolved),
    /// Not there, or only in part: one line saying what is missing and how to get it.
    Missing(anyhow::Error),
}

/// Finds `id` in `cache` (see [`lookup`]); what is missing is the error.
pub fn resolve(id: &ModelId, cache: &HubCache, allow_pickle: bool) -> Result<Resolved> {
    match lookup(id, cache, allow_pickle)? {
        Lookup::Found(resolved) => Ok(resolved),
        Lookup::Missing(why) => Err(why),
    }
}

/// Looks `id` up in `cache`: the revision's commit (from `refs/`, or the
/// revision itself if it is a commit hash) and its snapshot, which must hold
/// a `config.json` and weights (every shard an index names), safetensors
/// unless `allow_pickle`. A cache that is damaged (a ref that is not a
/// commit, an index that is not one) or holds only pickled weights is an
/// error, not [`Lookup::Missing`]: downloading would not change it.
pub fn lookup(id: &ModelId, cache: &HubCache, allow_pickle: bool) -> Result<Lookup> {
    macro_rules! missing {
        ($($arg:tt)*) => { return Ok(Lookup::Missing(anyhow::anyhow!($($arg)*))) };
    }
    let folder = cache.root.join(id.folder_name());
    if !folder.is_dir() {
        missing!(
            "--model-id {id}: not in the local Hugging Face cache (no {}; the cache is {}): let hfx download it (unset HF_HUB_OFFLINE), \
             or fetch it on a machine with the Hub (`{}`) and copy that cache here, or point HF_HOME (or HF_HUB_CACHE) at a cache that holds it",
            folder.display(),
            cache.from,
            id.download_command()
        );
    }
    let revision = id.revision();
    let commit = if is_commit(revision) {
        revision.to_string()
    } else {
        // `revision` passed `check_revision`: its parts stay below `refs/`.
        let reference = folder.join("refs").join(revision);
        if !reference.is_file() {
            missing!(
                "--model-id {id}: the cache holds no revision `{revision}` of {} (no {}; cached: {}): fetch it (`{}`)",
                id.repo,
                reference.display(),
                cached_revisions(&folder.join("refs")),
                id.download_command()
            );
        }
        let text = crate::input::read_to_string_bounded(&reference, MAX_REF_BYTES)?;
        let commit = text.trim();
        if !is_commit(commit) {
            bail!(
                "{}: holds `{}`, not a commit hash: the cache is damaged; fetch {} again (`{}`)",
                reference.display(),
                commit.escape_debug(),
                id.repo,
                id.download_command()
            );
        }
        commit.to_string()
    };
    // `commit` is 40 hex digits: one plain part below `snapshots/`.
    let snapshot = folder.join("snapshots").join(&commit);
    if !snapshot.is_dir() {
        let named =
            if commit == revision { String::new() } else { format!(" (refs/{revision} names it)") };
        missing!(
            "--model-id {id}: the cache holds no files of commit {commit}{named} (no {}): fetch them (`{}`)",
            snapshot.display(),
            id.download_command()
        );
    }
    // A link into blobs/ whose blob is gone does not count: `is_file` follows it.
    if !snapshot.join("config.json").is_file() {
        missing!("--model-id {id}: {} holds no config.json: the download was partial; fetch it again (`{}`)", snapshot.display(), id.download_command());
    }
    let found = match weights(&snapshot, &SAFETENSORS)? {
        Weights::Absent => {
            let pickled = weights(&snapshot, &PICKLES)?;
            if pickled != Weights::Absent && !allow_pickle {
                bail!(
                    "--model-id {id}: {} holds only pickled weights ({}), and a pickle runs code when loaded: \
                     add --allow-pickle if you trust it, or name a revision with model.safetensors",
                    snapshot.display(),
                    PICKLES.join(", ")
                )
            }
            pickled
        }
        safetensors => safetensors,
    };
    match found {
        Weights::Whole => {}
        Weights::Shard(shard) => missing!(
            "--model-id {id}: {} lacks the shard {shard} its index names: the download was partial; fetch it again (`{}`)",
            snapshot.display(),
            id.download_command()
        ),
        Weights::Absent => {
            let kinds = if allow_pickle { [SAFETENSORS, PICKLES].concat() } else { SAFETENSORS.to_vec() };
            missing!(
                "--model-id {id}: {} holds no weights ({}): the download was partial; fetch it again (`{}`)",
                snapshot.display(),
                kinds.join(", "),
                id.download_command()
            )
        }
    }
    let snapshot = snapshot.canonicalize().with_context(|| format!("{}", snapshot.display()))?;
    Ok(Lookup::Found(Resolved {
        model: HubModel { id: id.repo.clone(), revision: revision.to_string(), commit },
        snapshot,
    }))
}

/// What a snapshot holds of one kind of weights.
#[derive(Debug, PartialEq, Eq)]
enum Weights {
    /// The single file, or the index and every shard it names.
    Whole,
    /// The index, but not this shard of it.
    Shard(String),
    /// Neither the index nor the single file.
    Absent,
}

/// Whether `snapshot` holds the weights of `[index, single]`: an index
/// counts only with each shard it names (plain file names beside it; any
/// other name is refused, so no path is built from one).
fn weights(snapshot: &Path, [index, single]: &[&str; 2]) -> Result<Weights> {
    let index_path = snapshot.join(index);
    if index_path.is_file() {
        let text = crate::input::read_to_string_bounded(&index_path, MAX_INDEX_BYTES)?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", index_path.display()))?;
        let Some(map) = value.get("weight_map").and_then(|m| m.as_object()) else {
            bail!("{}: no `weight_map` object: not a checkpoint index", index_path.display());
        };
        let mut shards: Vec<&str> = Vec::new();
        for shard in map.values() {
            let plain = shard.as_str().filter(|s| {
                !s.is_empty()
                    && !s.starts_with('.')
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
            let Some(shard) = plain else {
                bail!(
                    "{}: names the shard {shard}, not a file name beside it: the checkpoint index is not one hfx reads",
                    index_path.display()
                );
            };
            if !shards.contains(&shard) {
                shards.push(shard);
            }
        }
        return Ok(match shards.iter().find(|s| !snapshot.join(s).is_file()) {
            Some(shard) => Weights::Shard(shard.to_string()),
            None => Weights::Whole,
        });
    }
    Ok(if snapshot.join(single).is_file() { Weights::Whole } else { Weights::Absent })
}

/// The revision names under `refs/` (branches and tags; `refs/pr/1` nested),
/// for the message that the one asked for is not among them.
fn cached_revisions(refs: &Path) -> String {
    fn walk(dir: &Path, prefix: &str, found: &mut Vec<String>, depth: u32) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            match entry.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => {
                    walk(&entry.path(), &format!("{name}/"), found, depth + 1)
                }
                Ok(t) if t.is_file() => found.push(name),
                _ => {}
            }
        }
    }
    let mut found = Vec::new();
    walk(refs, "", &mut found, 0);
    found.sort();
    match found.len() {
        0 => "none".into(),
        n if n > 10 => format!("{} and {} more", found[..10].join(", "), n - 10),
        _ => found.join(", "),
    }
}

/// Refuses a model folder whose `config.json` names its own modeling code
/// (`auto_map`) unless `trust_remote_code`: loading it runs that code in the
/// trace worker. `model` names the model as the user gave it.
pub fn check_remote_code(folder: &Path, model: &str, trust_remote_code: bool) -> Result<()> {
    let config = folder.join("config.json");
    if !config.is_file() {
        bail!(
            "{model}: {} is missing: a Hugging Face model folder holds config.json and the weights",
            config.display()
        );
    }
    let text = crate::input::read_to_string_bounded(&config, MAX_CONFIG_BYTES)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", config.display()))?;
    let custom_code = value.get("auto_map").is_some_and(|m| !m.is_null());
    if custom_code && !trust_remote_code {
        bail!(
            "{model} brings its own modeling code (`auto_map` in {}), which would run in the trace worker: \
             add --trust-remote-code if you trust it",
            config.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_as_huggingface_hub_checks_them() {
        for good in [
            "org/name",
            "gpt2",
            "Org-1/name_2.v3",
            "org/name@main",
            "org/name@refs/pr/1",
            "org/name@v1.0",
        ] {
            assert!(ModelId::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/abs/path",
            "org/",
            "/name",
            "a/b/c",
            "org//name",
            "../x",
            "org/..",
            "org/a..b",
            "org/a--b",
            "org/.x",
            "org/x-",
            "org/x.git",
            "org/na me",
            "org/name@",
            "org/name@../x",
            "org/name@a//b",
            "org/name@.hidden",
            "org/name@a/..",
            "org/name@x:y",
            "org/name@a\0b",
            "org/name@a.lock",
        ] {
            assert!(ModelId::parse(bad).is_err(), "{bad:?} was taken");
        }
        // The error is one line naming the id, what is wrong and what is asked.
        for (bad, error) in [
            ("a/b/c", "--model-id `a/b/c`: 3 parts separated by `/`, where an id has at most two; give org/name or org/name@revision"),
            ("./model", "--model-id `./model`: `.` starts or ends with `-` or `.`; give org/name or org/name@revision (a local folder is --model-dir)"),
            ("org/name@main@{1}", "--model-id `org/name@main@{1}`: the revision holds `@{`, which git refuses in a name; give a branch, a tag or a commit hash after `@`"),
        ] {
            assert_eq!(format!("{:#}", ModelId::parse(bad).unwrap_err()), error);
        }
        assert_eq!(ModelId::parse("org/name").unwrap().folder_name(), "models--org--name");
        assert_eq!(ModelId::parse("gpt2").unwrap().folder_name(), "models--gpt2");
    }

    #[test]
    fn the_cache_is_found_as_huggingface_hub_finds_it() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| set.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        let root = |set| HubCache::from_vars(vars(set)).unwrap().root;
        assert_eq!(
            root(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h"), ("HOME", "/u")]),
            PathBuf::from("/c")
        );
        assert_eq!(root(&[("HF_HOME", "/h"), ("HOME", "/u")]), PathBuf::from("/h/hub"));
        assert_eq!(root(&[("HF_HOME", "~/h"), ("HOME", "/u")]), PathBuf::from("/u/h/hub"));
        assert_eq!(
            root(&[("HF_HOME", ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/u")]),
            PathBuf::from("/x/huggingface/hub")
        );
        assert_eq!(root(&[("HOME", "/u")]), PathBuf::from("/u/.cache/huggingface/hub"));
        assert!(HubCache::from_vars(vars(&[])).is_err());
    }
}
