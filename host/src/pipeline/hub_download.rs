//! `--model-id`'s download step: what the Hugging Face cache lacks of a
//! model, fetched by huggingface_hub before the trace.
//!
//! Offline first: a model the cache holds whole ([`model_id::lookup`]) is
//! taken from it without a network call; with `HF_HUB_OFFLINE` set, a model
//! it lacks is the one line saying so. Otherwise `hub_download.py` runs in
//! the worker's Python (`python -I -c`), outside the trace worker and its
//! sandbox (it needs the network) but as small as a step can be: it imports
//! huggingface_hub alone (no torch, no transformers, no model code), fetches
//! only the files an export reads (config, generation config, tokenizer,
//! safetensors and their index; pickles only with `--allow-pickle`; the
//! model's own code only with `--trust-remote-code`) through
//! `snapshot_download`, whose partial files never take a blob's name, and
//! reports progress and its one-line error as JSON lines. The cache is then
//! looked up again: the downloaded files are checked as any cached model
//! is, then as any model folder is (custom code, links, the worker's
//! sandbox).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::model_id::{self, HubCache, Lookup, ModelId, Resolved};
use super::Progress;

/// The download step's program, run with `python -I -c`.
const SCRIPT: &str = include_str!("hub_download.py");

/// The tail of the step's stderr kept for an error that it did not report itself.
const STDERR_TAIL: usize = 64 << 10;

/// How a `--model-id` is fetched.
#[derive(Debug, Clone)]
pub struct Download {
    /// The Python that has huggingface_hub (the trace worker's).
    pub python: String,
    /// Pickled weights (`pytorch_model.bin`) may be downloaded and loaded.
    pub allow_pickle: bool,
    /// The model's own code (`*.py`) is downloaded too.
    pub trust_remote_code: bool,
}

/// `id` from `cache`, downloading what it lacks unless the Hub is off.
pub fn fetch(
    id: &ModelId,
    cache: &HubCache,
    how: &Download,
    progress: Progress,
) -> Result<Resolved> {
    match model_id::lookup(id, cache, how.allow_pickle)? {
        Lookup::Found(resolved) => return Ok(resolved),
        Lookup::Missing(why) if offline() => {
            bail!("{why:#} [HF_HUB_OFFLINE is set: hfx reads the cache only]")
        }
        Lookup::Missing(_) => {}
    }
    download(id, cache, how, progress)?;
    match model_id::lookup(id, cache, how.allow_pickle)? {
        Lookup::Found(resolved) => Ok(resolved),
        Lookup::Missing(why) => bail!("{why:#} [after huggingface_hub downloaded it]"),
    }
}

/// huggingface_hub's own test of `HF_HUB_OFFLINE` (and the older `TRANSFORMERS_OFFLINE`).
fn offline() -> bool {
    let var = std::env::var("HF_HUB_OFFLINE")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("TRANSFORMERS_OFFLINE").ok());
    var.is_some_and(|v| matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE"))
}

/// One line of what the step reports.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    files: Option<u64>,
    bytes: Option<u64>,
    commit: Option<String>,
    progress: Option<(u64, u64)>,
    snapshot: Option<String>,
    error: Option<String>,
}

/// Runs `hub_download.py` for `id` into `cache`, its progress shown as a step.
fn download(id: &ModelId, cache: &HubCache, how: &Download, progress: Progress) -> Result<()> {
    let args = serde_json::json!({
        "repo": id.repo,
        "revision": id.revision(),
        "cache": cache.root,
        "allow_pickle": how.allow_pickle,
        "trust_remote_code": how.trust_remote_code,
    });
    progress.step("download", &format!("{id}: listing its files"));
    let mut child = Command::new(&how.python)
        .arg("-I")
        .arg("-c")
        .arg(SCRIPT)
        .arg(args.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("--model-id {id}: starting `{}` to download it (give a Python with huggingface_hub: --python or HFX_PYTHON)", how.python)
        })?;
    let stdout = child.stdout.take().context("the download step's stdout")?;
    let stderr = child.stderr.take().context("the download step's stderr")?;
    // Drained beside stdout, so neither pipe fills while the other is read.
    let stderr = std::thread::spawn(move || {
        let mut tail = Vec::new();
        let mut chunk = [0u8; 8192];
        let mut stderr = stderr;
        while let Ok(n) = stderr.read(&mut chunk) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&chunk[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        String::from_utf8_lossy(&tail).into_owned()
    });
    let mut error = None;
    let mut snapshot = None;
    let mut planned = (0, 0);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            tracing::debug!("download step: {line}");
            continue;
        };
        if let (Some(files), Some(bytes)) = (event.files, event.bytes) {
            planned = (files, bytes);
            let commit = event.commit.as_deref().unwrap_or("?");
            progress.step(
                "download",
                &format!("{id} (commit {commit}): {files} file(s), {}", megabytes(bytes)),
            );
        }
        if let Some((files, bytes)) = event.progress {
            progress.status(&format!(
                "download: {id}: {files} of {} file(s), {} of {}",
                planned.0,
                megabytes(bytes),
                megabytes(planned.1)
            ));
        }
        snapshot = event.snapshot.or(snapshot);
        error = event.error.or(error);
    }
    let status = child.wait().with_context(|| format!("--model-id {id}: the download step"))?;
    let stderr = stderr.join().unwrap_or_default();
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        tracing::debug!("download step: {line}");
    }
    if let Some(error) = error {
        bail!("{}", one_line(&error));
    }
    match (status.success(), snapshot) {
        (true, Some(_)) => Ok(()),
        _ => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            bail!(
                "--model-id {id}: the download step (`{}` with huggingface_hub) failed ({status}): {}",
                how.python,
                one_line(last)
            )
        }
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// `text` flattened to one line (what the Hub's messages hold is not hfx's to trust).
fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(2000).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_from_the_step_stay_one_line() {
        assert_eq!(one_line("a\nb\r\x1b[2Kc"), "a b  [2Kc");
        let event: Event =
            serde_json::from_str(r#"{"files": 3, "bytes": 10, "commit": "abc"}"#).unwrap();
        assert_eq!((event.files, event.bytes), (Some(3), Some(10)));
        assert!(serde_json::from_str::<Event>(r#"{"unknown": 1}"#).is_err());
    }
}
