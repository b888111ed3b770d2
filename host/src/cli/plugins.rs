//! `hfx plugins list|inspect|verify|test|lock`: what a plugin set holds, checked.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::plugins::loading::{Purpose, SetOptions};
use crate::plugins::{self, Backend, Backends, Lock};
use crate::selftest::{self, Depth};

pub(super) fn list(args: &SetOptions, backend: Option<Backend>) -> Result<()> {
    let loaded = args.load(Purpose::Use, None)?;
    println!(
        "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} TARGETS",
        "NAME", "VERSION", "KIND", "BACKEND", "SHA256", "STATUS", "UPSTREAM"
    );
    let shown = |b: &Backends| backend.is_none_or(|want| b.iter().any(|b| b == want));
    for p in loaded.set.plugins.iter().filter(|p| shown(&p.manifest.plugin.backend)) {
        let m = &p.manifest.plugin;
        let targets =
            if p.targets.is_empty() { "(whole program)".to_string() } else { p.targets.join(", ") };
        println!(
            "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} {}",
            m.name,
            m.version,
            m.kind.as_str(),
            m.backend.to_string(),
            &p.component_sha256[..16],
            "active",
            upstream_text(&p.manifest),
            targets
        );
    }
    for s in loaded.set.skipped.iter().filter(|s| shown(&s.found.manifest.plugin.backend)) {
        let m = &s.found.manifest.plugin;
        println!(
            "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} skipped: {}",
            m.name,
            m.version,
            m.kind.as_str(),
            m.backend.to_string(),
            &s.found.component_sha256[..16],
            "skipped",
            upstream_text(&s.found.manifest),
            s.reason
        );
    }
    Ok(())
}

fn upstream_text(m: &plugins::Manifest) -> String {
    if m.upstream.is_empty() {
        return "any".into();
    }
    m.upstream.iter().map(|(p, r)| format!("{p} {r}")).collect::<Vec<_>>().join("; ")
}

pub(super) fn inspect(args: &SetOptions, name: &str) -> Result<()> {
    let loaded = args.load(Purpose::Use, None)?;
    let Some(p) = loaded.set.plugins.iter().find(|p| p.name() == name) else {
        let skipped = loaded.set.skipped.iter().find(|s| s.found.manifest.plugin.name == name);
        match skipped {
            Some(s) => bail!("plugin `{name}` is skipped: {}", s.reason),
            None => bail!(
                "no plugin `{name}` in {}",
                args.folders.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
        }
    };
    // Read again for display, as discovery reads it: through the plugin folder, bounded.
    let manifest = cap_std::fs::Dir::open_ambient_dir(&p.dir, cap_std::ambient_authority())
        .map_err(anyhow::Error::from)
        .and_then(|dir| {
            Ok(plugins::discover::read_regular(
                &dir,
                "plugin.toml",
                plugins::discover::MAX_MANIFEST_BYTES,
            )?)
        })
        .with_context(|| format!("{}", p.dir.join("plugin.toml").display()))?;
    let manifest = String::from_utf8_lossy(&manifest);
    println!("folder:           {}", p.dir.display());
    // The contract's `api` is its version's major and minor (`0.2` → `hfx:plugin@0.2.0`).
    println!("world:            hfx:plugin/{}@{}.0", p.kind(), p.manifest.plugin.api);
    println!("component sha256: {}", p.component_sha256);
    println!("manifest sha256:  {}", p.manifest_sha256);
    println!(
        "targets:          {}",
        if p.targets.is_empty() { "(whole program)".into() } else { p.targets.join(", ") }
    );
    println!("loaded in:        {:.2} ms ({:?})", p.load_time.as_secs_f64() * 1e3, p.cache);
    println!("imports:          {}", p.imports.join(", "));
    println!("exports:          {}", p.exports.join(", "));
    println!("--- plugin.toml ---\n{}", manifest.trim_end());
    Ok(())
}

/// `hfx plugins precompile`: loads the set, which compiles every component
/// the cache lacks and keeps it; says how many were compiled and where.
pub(super) fn precompile(args: &SetOptions) -> Result<()> {
    let Some(dir) = &args.runtime.cache_dir else {
        bail!("precompile fills the component cache: drop --no-cache");
    };
    let loaded = args.load(Purpose::Use, None)?;
    let compiled =
        loaded.set.plugins.iter().filter(|p| p.cache != plugins::cache::CacheOutcome::Hit).count();
    if loaded.set.plugins.iter().any(|p| p.cache == plugins::cache::CacheOutcome::Untrusted) {
        bail!(
            "the component cache {} is not trusted (see the warning above): nothing was kept",
            dir.display()
        );
    }
    println!(
        "{} plugin components in {}: {compiled} compiled now, {} already there",
        loaded.set.plugins.len(),
        dir.display(),
        loaded.set.plugins.len() - compiled
    );
    Ok(())
}

pub(super) fn verify(args: &SetOptions, strict: bool) -> Result<()> {
    let loaded = args.load(Purpose::Use, None)?;
    let mut failures = 0;
    let untrusted_cache =
        loaded.set.plugins.iter().any(|p| p.cache == plugins::cache::CacheOutcome::Untrusted);
    for p in &loaded.set.plugins {
        let results =
            selftest::run(&loaded.runtime, p, &loaded.set.plugins, &mut Depth::Structural)?;
        let failed: Vec<&String> = results.iter().filter_map(|r| r.failure.as_ref()).collect();
        failures += failed.len();
        let status = if failed.is_empty() { "ok" } else { "FAILED" };
        println!(
            "{:<26} {:<8} {:<6} self-tests: {}/{} passed",
            p.name(),
            p.manifest.plugin.version,
            status,
            results.len() - failed.len(),
            results.len()
        );
        for f in failed {
            println!("  {f}");
        }
    }
    for s in &loaded.set.skipped {
        println!(
            "{:<26} {:<8} skipped: {}",
            s.found.manifest.plugin.name, s.found.manifest.plugin.version, s.reason
        );
    }
    if !loaded.drift.is_empty() {
        println!("{} difference(s) from the lock (see warnings above)", loaded.drift.len());
    }
    if failures > 0 {
        bail!("{failures} self-test(s) failed");
    }
    if strict {
        let warnings = loaded.warnings.len() + loaded.drift.len() + usize::from(untrusted_cache);
        if warnings > 0 {
            bail!("--strict: {warnings} warning(s) (see above)");
        }
    }
    Ok(())
}

/// The worker that runs a set's self-test cases, which are as untrusted as
/// its plugins: in the OS sandbox, reading the plugin folders, writing
/// only its scratch folder and `write`.
fn case_worker(set: &SetOptions, write: Option<&Path>) -> Result<crate::trace::Worker> {
    let sandbox = crate::trace::Sandbox {
        read: set.folders.clone(),
        write: write.map(Path::to_path_buf).into_iter().collect(),
        ..Default::default()
    };
    let options = crate::trace::WorkerOptions { sandbox: Some(sandbox), ..Default::default() };
    let worker = crate::trace::Worker::start_with(
        &set.python(),
        std::time::Duration::from_secs(120),
        &options,
    )?;
    if !worker.sandbox.off().is_empty() {
        tracing::warn!(
            "the self-test worker runs with part of its OS sandbox off: {}",
            worker.sandbox.line()
        );
    }
    Ok(worker)
}

/// The self-tests of every plugin below `tested`, numerically in one worker
/// (the rest of the set only translates around an ONNX case); a plugin
/// without a case fails, except patches (tested on real traces by the test suite).
pub(super) fn test(args: &SetOptions, tested: &[std::path::PathBuf]) -> Result<()> {
    let loaded = args.load(Purpose::Use, None)?;
    let tested: Vec<std::path::PathBuf> = tested
        .iter()
        .map(|dir| dir.canonicalize().with_context(|| format!("plugin folder {}", dir.display())))
        .collect::<Result<_>>()?;
    let under_test = |p: &&plugins::Plugin| {
        p.dir.canonicalize().is_ok_and(|dir| tested.iter().any(|t| dir.starts_with(t)))
    };
    let mut worker = case_worker(args, None)?;
    let (mut passed, mut failed) = (0, 0);
    for p in loaded.set.plugins.iter().filter(under_test) {
        let results = selftest::run(
            &loaded.runtime,
            p,
            &loaded.set.plugins,
            &mut Depth::Numeric(&mut worker),
        )?;
        if results.is_empty() {
            if p.kind() == plugins::PluginKind::Patch {
                println!(
                    "-      {:<38} a patch: tested on real traces (its pattern is Python code)",
                    p.name()
                );
            } else {
                failed += 1;
                println!("FAILED {:<38} ships no self-test (selftest/*.json; `hfx plugins capture` makes one)", p.name());
            }
        }
        for r in results {
            match (&r.passed, &r.failure) {
                (Some(what), _) => {
                    passed += 1;
                    println!("ok     {:<38} {:<30} {what}", p.name(), r.case);
                }
                (None, failure) => {
                    failed += 1;
                    println!("FAILED {:<38} {}", p.name(), failure.as_deref().unwrap_or(&r.case));
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} self-test(s) failed");
    }
    Ok(())
}

/// `hfx plugins test-ops`: the set's ONNX translations on torch's OpInfo samples.
pub(super) fn test_ops(
    mut args: super::TestOpsArgs,
    progress: crate::pipeline::Progress,
) -> Result<()> {
    use crate::selftest::ops::{self, OpTestOptions};
    if !(18..=23).contains(&args.opset) {
        bail!("--opset {}: hfx writes opsets 18 to 23", args.opset);
    }
    args.set.plugins.extend(args.folders);
    let set = args.set.folder_options()?;
    let loaded = set.load(Purpose::Use, None)?;
    // The models the worker writes go here: removed on every exit path, Ctrl-C included.
    let scratch = crate::pipeline::scratch::Scratch::temp("test-ops")?;
    let mut worker = case_worker(&set, Some(scratch.path()))?;
    let options = OpTestOptions {
        only: args.ops,
        dtypes: args.dtypes,
        per_dtype: args.samples,
        opset: args.opset,
        exclusions: args.exclusions,
    };
    let report = ops::run(&loaded, &mut worker, &options, scratch.path(), progress)?;
    crate::pipeline::progress::finish();
    for (op, tally) in &report.ops {
        let skipped: usize = tally.skipped.values().sum();
        let status = if !tally.failed.is_empty() {
            "FAILED"
        } else if tally.passed == 0 {
            "-"
        } else {
            "ok"
        };
        println!(
            "{status:<6} {op:<48} {:>4} passed {:>4} failed {:>4} skipped",
            tally.passed,
            tally.failed.len(),
            skipped
        );
        for failure in &tally.failed {
            if let ops::Verdict::Failed(reason) = &failure.verdict {
                println!(
                    "         {} {} {}: {}",
                    failure.opinfo,
                    failure.dtype,
                    failure.about,
                    reason.lines().next().unwrap_or("")
                );
            }
        }
    }
    if let Some(coverage) = &report.coverage {
        println!(
            "core ATen: {} overloads, {} translated, {} excluded, {} neither",
            coverage.core,
            coverage.translated,
            coverage.excluded.len(),
            coverage.missing.len()
        );
        for op in &coverage.missing {
            println!("FAILED {op}: neither translated nor excluded (add a translation, or a reason to the exclusions)");
        }
        for op in &coverage.stale {
            println!("FAILED stale exclusion {op}");
        }
    }
    if let Some(path) = &args.report {
        crate::atomic::write_bytes_atomically(path, report.markdown(&options).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let failures = report.failures();
    if failures > 0 {
        bail!("{failures} failure(s)");
    }
    Ok(())
}

pub(super) fn lock(args: &SetOptions, output: &Path) -> Result<()> {
    let loaded = args.load(Purpose::Lock, None)?;
    let lock = Lock::of(&loaded.set.plugins, &loaded.set.upstream);
    lock.write(output).with_context(|| format!("writing {}", output.display()))?;
    println!(
        "locked {} plugin(s) against {} upstream version(s) in {}",
        lock.plugins.len(),
        lock.upstream.len(),
        output.display()
    );
    Ok(())
}

/// `hfx plugins build`: every plugin crate at or below `dirs` into its
/// component; the toolchain is checked before anything is compiled.
pub(super) fn build(dirs: &[std::path::PathBuf]) -> Result<()> {
    let crates = hfx_plugin_build::find_all(dirs)?;
    let toolchain = hfx_plugin_build::Toolchain::find()?;
    eprintln!("guest compiler: {}", toolchain.version);
    // Cargo reads a relative target folder from its own working folder, the crate's: anchor it here.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| std::env::current_dir().map(|here| here.join(d)))
        .transpose()?;
    let options = hfx_plugin_build::Options { target_dir, locked: false, quiet: false };
    let started = std::time::Instant::now();
    let built = hfx_plugin_build::build_all(&toolchain, &crates, &options)?;
    for (plugin, built) in crates.iter().zip(&built) {
        println!("built {} ({} bytes): {}", plugin.package, built.bytes, built.component.display());
    }
    println!("{} plugin(s) in {:.1} s", crates.len(), started.elapsed().as_secs_f64());
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    println!("next:  hfx plugins test {}", shown.join(" "));
    Ok(())
}
