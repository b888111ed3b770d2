//! The report as one HTML page, rendered from [`Report`] alone: inline CSS,
//! inline SVG charts (the timeline, the worker's memory, op histograms), and
//! one small script that filters the node changes. Every text that comes
//! from the run (node, op, plugin, path names) goes through [`Esc`].

use std::collections::BTreeMap;
use std::fmt::{self, Write};

use super::schema::{ComponentReport, GenerationReport, Parity, Report, StageEntry};
use crate::stages::OpHistogram;

/// Ops drawn per histogram; the rest are in the table below it.
const OPS_DRAWN: usize = 30;
/// Characters of a chart label; longer ones are cut (the whole in its tooltip).
const LABEL_CHARS: usize = 40;

/// `write!` into a `String`, which cannot fail.
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// Text escaped for HTML (elements and quoted attributes, SVG included).
struct Esc<'a>(&'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

const STYLE: &str = r#"
:root { --fg: #1d232b; --muted: #5b6573; --line: #d8dde4; --bg-alt: #f4f6f8; --ok: #17803d; --bad: #b42318;
        --worker: #7c5cbf; --host: #2f6fb3; --fx: #2f8f83; --onnx: #c76b1e; --mem: #8a6d3b; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); margin: 0 auto; max-width: 1180px; padding: 16px 24px 48px; }
h1 { font-size: 24px; margin: 8px 0 12px; } h2 { font-size: 20px; margin: 32px 0 8px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 20px 0 6px; } h4 { font-size: 14px; margin: 12px 0 4px; color: var(--muted); }
nav a { margin-right: 14px; } a { color: var(--host); }
table { border-collapse: collapse; margin: 4px 0 8px; } th, td { text-align: left; padding: 3px 10px 3px 0; vertical-align: top; border-bottom: 1px solid var(--line); }
th { color: var(--muted); font-weight: 600; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; word-break: break-all; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; } .muted { color: var(--muted); }
details { margin: 4px 0; } summary { cursor: pointer; }
svg.chart { width: 100%; height: auto; display: block; margin: 4px 0 8px; }
svg.chart text { font: 12px system-ui, sans-serif; fill: var(--fg); } svg.chart .value { fill: var(--muted); }
.bar-worker { fill: var(--worker); } .bar-host { fill: var(--host); } .bar-fx { fill: var(--fx); } .bar-onnx { fill: var(--onnx); } .bar-mem { fill: var(--mem); }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; vertical-align: middle; }
.swatch-worker { background: var(--worker); } .swatch-host { background: var(--host); }
.columns { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 24px; }
#plugin-set td { white-space: nowrap; }
#changes-search { position: sticky; top: 0; background: #fff; padding: 8px 0; border-bottom: 1px solid var(--line); z-index: 1; }
#change-search { font: inherit; padding: 4px 8px; width: 420px; max-width: 100%; }
tr.change td { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
"#;

/// Filters the node changes by the search box (and by `#search=...` in
/// the address, so a filtered view can be linked), opening the lists with a match.
const SCRIPT: &str = r#"
(function () {
  var box = document.getElementById("change-search");
  var count = document.getElementById("change-count");
  var rows = document.querySelectorAll("tr.change");
  var lists = document.querySelectorAll("details.changes");
  function apply() {
    var query = box.value.trim().toLowerCase();
    var shown = 0;
    for (var i = 0; i < rows.length; i++) {
      var hit = query === "" || rows[i].textContent.toLowerCase().indexOf(query) !== -1;
      rows[i].hidden = !hit;
      if (hit) shown++;
    }
    for (var j = 0; j < lists.length && query !== ""; j++) {
      lists[j].open = lists[j].querySelector("tr.change:not([hidden])") !== null;
    }
    count.textContent = shown + " of " + rows.length + " node changes shown";
  }
  box.addEventListener("input", apply);
  var asked = /(?:^#|&)search=([^&]*)/.exec(location.hash);
  if (asked) {
    try { box.value = decodeURIComponent(asked[1]); } catch (e) { box.value = asked[1]; }
  }
  apply();
})();
"#;

/// The page of a run that failed: its error, and the detail the line left out.
pub fn render_failure(report: &super::schema::FailureReport) -> String {
    let mut out = String::with_capacity(4 * 1024);
    put!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"generator\" content=\"hfx {} (report schema {})\">\n<title>hfx report: failed</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>The run failed</h1>\n<p>{}</p>\n",
        Esc(&report.hfx_version),
        report.schema_version,
        Esc(&report.error)
    );
    if let Some(detail) = &report.detail {
        put!(out, "<pre>{}</pre>\n", Esc(detail));
    }
    put!(out, "</body>\n</html>\n");
    out
}

pub fn render(report: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    put!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"hfx {} (report schema {})\">\n<title>hfx report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        Esc(&report.hfx_version),
        report.schema_version,
        Esc(&report.written)
    );
    summary(&mut out, report);
    put!(out, "<nav><a href=\"#environment\">Environment</a><a href=\"#plugin-set\">Plugins</a>");
    if report.generation.is_some() {
        put!(out, "<a href=\"#generation\">Generation check</a>");
    }
    for (index, c) in report.components.iter().enumerate() {
        put!(out, "<a href=\"#component-{index}\">Component {}</a>", Esc(&c.name));
    }
    put!(out, "</nav>\n");
    environment(&mut out, report);
    plugin_set(&mut out, report);
    if let Some(g) = &report.generation {
        generation(&mut out, g);
    }
    let changes: usize =
        report.components.iter().flat_map(|c| &c.stages).map(|s| s.changes.len()).sum();
    put!(
        out,
        "<section id=\"changes-search\"><label for=\"change-search\">Filter node changes </label>\
         <input type=\"search\" id=\"change-search\" placeholder=\"plugin, node or op (aten.alias, Gather, …)\" autocomplete=\"off\"> \
         <span id=\"change-count\" class=\"muted\">{changes} node changes</span></section>\n"
    );
    for (index, c) in report.components.iter().enumerate() {
        component(&mut out, index, c);
    }
    put!(
        out,
        "<footer class=\"muted\"><p>Written by hfx {} · report schema {} · the same facts as <code>--report FILE.json</code>.</p></footer>\n\
         <script>{SCRIPT}</script>\n</body>\n</html>\n",
        Esc(&report.hfx_version),
        report.schema_version
    );
    out
}

fn summary(out: &mut String, report: &Report) {
    put!(out, "<header id=\"summary\">\n<h1>hfx export report</h1>\n<table>\n");
    row(out, "Written", &format!("<code>{}</code>", Esc(&report.written)));
    row(out, "Backend", &Esc(&report.backend).to_string());
    if let Some(first) = &report.trace_shared_with {
        row(
            out,
            "Trace",
            &format!("the {} export's (one trace for every backend of the run)", Esc(first)),
        );
    }
    let names: Vec<String> = report.components.iter().map(|c| Esc(&c.name).to_string()).collect();
    row(out, "Components", &names.join(", "));
    if let Some(class) = report.components.iter().find_map(|c| c.model_class.as_deref()) {
        row(out, "Model", &Esc(class).to_string());
    }
    row(out, "Total time", &seconds(report.total_seconds));
    row(out, "Parity", &parity_verdict(report));
    if let Some(g) = &report.generation {
        row(
            out,
            "Generation check",
            &verdict(g.identical, "greedy tokens identical to eager", "tokens differ from eager"),
        );
    }
    row(
        out,
        "hfx",
        &format!("{} (report schema {})", Esc(&report.hfx_version), report.schema_version),
    );
    put!(out, "</table>\n</header>\n");
}

fn parity_verdict(report: &Report) -> String {
    let checked: Vec<&Parity> =
        report.components.iter().filter_map(|c| c.parity.as_ref()).collect();
    if checked.is_empty() {
        return match &report.generation {
            // The components of a generation export are checked by generating with all of them.
            Some(g) => verdict(
                g.identical,
                "the generation check passed (below)",
                "the generation check failed (below)",
            ),
            None => "<span class=\"muted\">not verified (run with --verify)</span>".into(),
        };
    }
    let outputs: Vec<bool> =
        checked.iter().flat_map(|p| &p.checks).flat_map(|c| &c.outputs).map(|o| o.ok).collect();
    let bad = outputs.iter().filter(|ok| !**ok).count();
    let tolerance = checked.iter().map(|p| p.tolerance).fold(0.0, f64::max);
    if bad == 0 {
        format!(
            "<span class=\"ok\">ok</span>: {} output check(s) within atol/rtol {tolerance:e}",
            outputs.len()
        )
    } else {
        format!("<span class=\"bad\">MISMATCH</span>: {bad} of {} output check(s) beyond atol/rtol {tolerance:e}", outputs.len())
    }
}

fn environment(out: &mut String, report: &Report) {
    let env = &report.environment;
    put!(out, "<section id=\"environment\">\n<h2>Environment</h2>\n<table>\n<tr><th>package</th><th>version</th><th></th></tr>\n");
    let python = env
        .python
        .as_deref()
        .map_or_else(|| "<span class=\"muted\">unknown</span>".to_string(), |p| Esc(p).to_string());
    put!(
        out,
        "<tr><td>python</td><td>{python}</td><td class=\"muted\">the trace worker's: <code>{}</code></td></tr>\n",
        Esc(&env.interpreter)
    );
    for (package, version) in &env.upstream {
        let from = if env.targets.contains(package) { "--target" } else { "installed" };
        put!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"muted\">{from}</td></tr>\n",
            Esc(package),
            Esc(version)
        );
    }
    put!(
        out,
        "<tr><td>hfx</td><td>{}</td><td></td></tr>\n</table>\n</section>\n",
        Esc(&report.hfx_version)
    );
}

fn plugin_set(out: &mut String, report: &Report) {
    let set = &report.plugin_set;
    put!(out, "<section id=\"plugin-set\">\n<h2>Plugins</h2>\n<p>Lock: ");
    let lock_path =
        set.lock.path.as_deref().map(|p| format!(" <code>{}</code>", Esc(p))).unwrap_or_default();
    match set.lock.status.as_str() {
        "matched" => put!(out, "<span class=\"ok\">matched</span>{lock_path}"),
        "drift" => put!(out, "<span class=\"bad\">drift</span> from{lock_path}"),
        _ => put!(out, "<span class=\"muted\">none</span> (no lock file; <code>hfx plugins lock</code> writes one)"),
    }
    if set.lock.locked {
        put!(out, " · <code>--locked</code>");
    }
    put!(out, "</p>\n");
    if !set.lock.drift.is_empty() {
        put!(out, "<ul>");
        for d in &set.lock.drift {
            put!(out, "<li>{}</li>", Esc(d));
        }
        put!(out, "</ul>\n");
    }
    put!(
        out,
        "<table>\n<tr><th>plugin</th><th>version</th><th>kind</th><th>backends</th><th class=\"num\">order</th>\
         <th class=\"num\">calls</th><th class=\"num\">changed</th><th class=\"num\">failed</th><th>component sha256</th><th>plugin.toml sha256</th></tr>\n"
    );
    for p in &set.plugins {
        put!(
            out,
            "<tr><td title=\"{folder}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num{}\">{}</td><td class=\"mono\" title=\"{c}\">{}</td><td class=\"mono\" title=\"{m}\">{}</td></tr>\n",
            Esc(&p.name),
            Esc(&p.version),
            Esc(&p.kind),
            Esc(&p.backends),
            p.order,
            p.calls,
            p.changed,
            if p.failed > 0 { " bad" } else { "" },
            p.failed,
            Esc(short(&p.component_sha256)),
            Esc(short(&p.manifest_sha256)),
            folder = Esc(&p.folder),
            c = Esc(&p.component_sha256),
            m = Esc(&p.manifest_sha256),
        );
    }
    put!(out, "</table>\n");
    if !set.skipped.is_empty() {
        put!(out, "<h4>Skipped</h4>\n<ul>");
        for s in &set.skipped {
            put!(out, "<li>{} {}: {}</li>", Esc(&s.name), Esc(&s.version), Esc(&s.reason));
        }
        put!(out, "</ul>\n");
    }
    put!(out, "</section>\n");
}

fn generation(out: &mut String, g: &GenerationReport) {
    put!(
        out,
        "<section id=\"generation\">\n<h2>Generation check</h2>\n<p>{}",
        verdict(
            g.identical,
            "greedy tokens identical to eager generate()",
            "tokens differ from eager generate()"
        )
    );
    if !g.providers.is_empty() {
        put!(out, " · providers {}", Esc(&g.providers.join(", ")));
    }
    if let Some(tolerance) = &g.tolerance {
        put!(out, " · held to {}", Esc(tolerance));
    }
    put!(out, "</p>\n<table>\n<tr><th class=\"num\">step</th><th>tokens</th><th>eager tokens</th><th class=\"num\">max abs (logits)</th><th></th></tr>\n");
    for (index, s) in g.steps.iter().enumerate() {
        put!(
            out,
            "<tr><td class=\"num\">{index}</td><td class=\"mono\">{:?}</td><td class=\"mono\">{:?}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
            s.tokens,
            s.eager_tokens,
            error(s.max_abs),
            verdict(s.ok, "ok", "MISMATCH")
        );
    }
    put!(out, "</table>\n");
    if !g.calls.is_empty() {
        let calls: Vec<String> =
            g.calls.iter().map(|c| format!("{} {}", Esc(&c.plugin), c.calls)).collect();
        put!(out, "<p class=\"muted\">Component calls: {}</p>\n", calls.join(", "));
    }
    put!(out, "</section>\n");
}

fn component(out: &mut String, index: usize, c: &ComponentReport) {
    put!(
        out,
        "<section class=\"component\" id=\"component-{index}\">\n<h2>Component {}</h2>\n<table>\n",
        Esc(&c.name)
    );
    if let Some(class) = &c.model_class {
        row(out, "Model", &Esc(class).to_string());
    }
    if let Some(hub) = &c.hub {
        row(out, "From", &Esc(hub).to_string());
    }
    if let Some(a) = &c.artifact {
        row(out, "Artifact", &format!("{} <code>{}</code>", Esc(&a.format), Esc(&a.path)));
    }
    if let Some(r) = &c.reference {
        row(out, "Eager reference", &format!("<code>{}</code>", Esc(r)));
    }
    if let Some(w) = &c.weights {
        row(out, "Weights", &Esc(w).to_string());
    }
    put!(out, "</table>\n");
    timeline(out, c);
    memory(out, c);
    nodes(out, c);
    ops(out, c);
    stage_plugins(out, c);
    changes(out, c);
    parity(out, c);
    trace_notes(out, c);
    put!(out, "</section>\n");
}

fn timeline(out: &mut String, c: &ComponentReport) {
    put!(out, "<section class=\"timeline\">\n<h3>Timeline</h3>\n");
    put!(out, "<p class=\"legend muted\">runs in<span class=\"swatch-worker\"></span>the worker (Python)<span class=\"swatch-host\"></span>the host</p>\n");
    let end = c.timeline.last().map_or(0.0, |s| s.start_seconds + s.seconds);
    let bars: Vec<Bar> = c
        .timeline
        .iter()
        .map(|s| Bar {
            label: s.name.clone(),
            start: s.start_seconds,
            length: s.seconds,
            value: seconds(s.seconds),
            class: if s.runs_in == "worker" { "bar-worker" } else { "bar-host" },
        })
        .collect();
    chart(out, &format!("timeline of component {}", c.name), &bars, end, &WIDE);
    put!(out, "<details><summary>Steps as a table</summary><table>\n<tr><th>step</th><th>runs in</th><th class=\"num\">starts at</th><th class=\"num\">took</th></tr>\n");
    for s in &c.timeline {
        put!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            Esc(&s.name),
            Esc(&s.runs_in),
            seconds(s.start_seconds),
            seconds(s.seconds)
        );
    }
    put!(out, "</table></details>\n</section>\n");
}

fn memory(out: &mut String, c: &ComponentReport) {
    if c.worker_peak_rss_mib.is_empty() {
        return;
    }
    put!(out, "<section class=\"memory\">\n<h3>Worker peak memory (RSS) after each step</h3>\n");
    let bars: Vec<Bar> = c
        .worker_peak_rss_mib
        .iter()
        .map(|p| Bar {
            label: p.step.clone(),
            start: 0.0,
            length: p.mib,
            value: format!("{:.0} MiB", p.mib),
            class: "bar-mem",
        })
        .collect();
    let most = c.worker_peak_rss_mib.iter().map(|p| p.mib).fold(0.0, f64::max);
    chart(out, "worker peak resident memory", &bars, most, &WIDE);
    put!(out, "</section>\n");
}

fn nodes(out: &mut String, c: &ComponentReport) {
    let n = &c.nodes;
    put!(out, "<section class=\"nodes\">\n<h3>Nodes</h3>\n<table>\n");
    row(out, "FX program as read", &n.fx_before.to_string());
    row(out, "after the FX stages", &n.fx_after.to_string());
    if let Some(before) = n.onnx_before_optimization {
        row(out, "ONNX, from the ONNX stages", &before.to_string());
    }
    if let Some(written) = n.onnx_written {
        row(out, "ONNX, written", &written.to_string());
    }
    put!(out, "</table>\n");
    if let Some(o) = &c.optimization {
        put!(out, "<h4>Generic ONNX passes</h4>\n<table>\n");
        for (what, count) in [
            ("Identity nodes removed", o.identities_removed),
            ("duplicates merged", o.duplicates_merged),
            ("nodes folded", o.nodes_folded),
            ("no-op nodes removed", o.no_op_nodes_removed),
            ("pairs merged", o.pairs_merged),
            ("weights stored transposed", o.weights_stored_transposed),
            ("batch norms and pads fused into convolutions", o.fused_into_convolutions),
            ("constants lifted", o.constants_lifted),
            ("dead nodes removed", o.dead_nodes_removed),
            ("nodes after", o.nodes_after),
        ] {
            put!(out, "<tr><td>{what}</td><td class=\"num\">{count}</td></tr>\n");
        }
        put!(out, "</table>\n");
    }
    put!(out, "</section>\n");
}

fn ops(out: &mut String, c: &ComponentReport) {
    put!(out, "<section class=\"ops\">\n<h3>Ops</h3>\n<div class=\"columns\">\n");
    histogram(out, "FX program as read (before the stages)", &c.ops.fx_before, "bar-fx");
    match (&c.ops.onnx_written, &c.ops.onnx_before_optimization) {
        (Some(onnx), _) => histogram(out, "ONNX model as written", onnx, "bar-onnx"),
        (None, Some(onnx)) => histogram(out, "ONNX, from the ONNX stages", onnx, "bar-onnx"),
        (None, None) => histogram(out, "FX program after the stages", &c.ops.fx_after, "bar-fx"),
    }
    put!(out, "</div>\n</section>\n");
}

fn histogram(out: &mut String, title: &str, ops: &OpHistogram, class: &'static str) {
    let nodes: u64 = ops.values().sum();
    put!(out, "<div>\n<h4>{} · {} ops, {nodes} nodes</h4>\n", Esc(title), ops.len());
    let mut sorted: Vec<(&String, &u64)> = ops.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let bars: Vec<Bar> = sorted
        .iter()
        .take(OPS_DRAWN)
        .map(|(op, n)| Bar {
            label: op.to_string(),
            start: 0.0,
            length: **n as f64,
            value: n.to_string(),
            class,
        })
        .collect();
    let most = sorted.first().map_or(0.0, |(_, n)| **n as f64);
    chart(out, title, &bars, most, &HALF);
    if sorted.len() > OPS_DRAWN {
        put!(out, "<p class=\"muted\">and {} more op(s), below</p>\n", sorted.len() - OPS_DRAWN);
    }
    put!(out, "<details><summary>All {} ops</summary><table>\n<tr><th>op</th><th class=\"num\">nodes</th></tr>\n", sorted.len());
    for (op, n) in &sorted {
        put!(out, "<tr><td class=\"mono\">{}</td><td class=\"num\">{n}</td></tr>\n", Esc(op));
    }
    put!(out, "</table></details>\n</div>\n");
}

fn stage_plugins(out: &mut String, c: &ComponentReport) {
    put!(
        out,
        "<section class=\"stage-plugins\">\n<h3>Plugins by stage</h3>\n<table>\n<tr><th>stage</th><th>plugin</th><th class=\"num\">calls</th>\
         <th class=\"num\">changed</th><th class=\"num\">failed</th></tr>\n"
    );
    if !c.patches.is_empty() {
        for p in &c.patches {
            put!(
                out,
                "<tr><td>patches (trace)</td><td>{}</td><td class=\"num\">{}</td><td class=\"num muted\">answered</td><td class=\"num\"></td></tr>\n",
                Esc(&p.plugin),
                p.calls
            );
        }
    }
    for s in &c.stages {
        if s.plugins.is_empty() {
            put!(out, "<tr><td>{}</td><td class=\"muted\">no plugin called</td><td></td><td></td><td></td></tr>\n", Esc(&s.name));
        }
        for p in &s.plugins {
            put!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num{}\">{}</td></tr>\n",
                Esc(&s.name),
                Esc(&p.plugin),
                p.calls,
                p.changed,
                if p.failed > 0 { " bad" } else { "" },
                p.failed
            );
        }
    }
    put!(out, "</table>\n");
    if c.patch_calls_cached > 0 {
        put!(
            out,
            "<p class=\"muted\">{} patched call(s) answered from the worker's cache (described as a call a plugin answered before).</p>\n",
            c.patch_calls_cached
        );
    }
    let stages: Vec<String> = c
        .stages
        .iter()
        .map(|s| {
            format!(
                "{} {}{}",
                Esc(&s.name),
                seconds(s.seconds),
                if s.dead_code_removed > 0 {
                    format!(", dead code removed {}", s.dead_code_removed)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    put!(out, "<p class=\"muted\">{}</p>\n", stages.join(" · "));
    for s in c.stages.iter().filter(|s| !s.skipped_failures.is_empty()) {
        put!(out, "<h4>{}: failures passed over (--on-plugin-error skip)</h4>\n<ul>", Esc(&s.name));
        for f in &s.skipped_failures {
            put!(out, "<li class=\"mono\">{}</li>", Esc(f));
        }
        put!(out, "</ul>\n");
    }
    put!(out, "</section>\n");
}

fn changes(out: &mut String, c: &ComponentReport) {
    put!(out, "<section class=\"changes\">\n<h3>Node changes</h3>\n");
    for s in &c.stages {
        changes_of(out, s);
    }
    put!(out, "</section>\n");
}

fn changes_of(out: &mut String, s: &StageEntry) {
    let changed: u64 = s.plugins.iter().map(|p| p.changed).sum();
    if s.changes.is_empty() && s.changes_unrecorded == 0 {
        if changed > 0 {
            put!(out, "<p class=\"muted\">{}: {changed} change(s) to the whole program, none to one node.</p>\n", Esc(&s.name));
        }
        return;
    }
    put!(
        out,
        "<details class=\"changes\"><summary>{}: {} node change(s)",
        Esc(&s.name),
        s.changes.len() as u64 + s.changes_unrecorded
    );
    if s.changes_unrecorded > 0 {
        put!(out, ", the first {} listed", s.changes.len());
    }
    put!(out, "</summary>\n<table>\n<tr><th>plugin</th><th>node</th><th>op</th><th></th><th>became</th></tr>\n");
    for change in &s.changes {
        let mut became = change.became.join(", ");
        if change.became_unlisted > 0 {
            put!(became, ", … {} more", change.became_unlisted);
        }
        if change.became.is_empty() {
            became = "(removed)".into();
        }
        put!(
            out,
            "<tr class=\"change\"><td>{}</td><td>{}</td><td>{}</td><td>→</td><td>{}</td></tr>\n",
            Esc(&change.plugin),
            Esc(&change.node),
            Esc(&change.op),
            Esc(&became)
        );
    }
    put!(out, "</table></details>\n");
}

fn parity(out: &mut String, c: &ComponentReport) {
    put!(out, "<section class=\"parity\">\n<h3>Parity against eager PyTorch</h3>\n");
    let Some(p) = &c.parity else {
        put!(
            out,
            "<p class=\"muted\">Not verified here{}.</p>\n</section>\n",
            if c.name == "model" {
                " (run with --verify)"
            } else {
                ": the generation check stands for it"
            }
        );
        return;
    };
    put!(out, "<p>In {} at atol/rtol {:e}.</p>\n", Esc(&p.runtime), p.tolerance);
    if let Some(layers) = p.layers {
        put!(out, "<p>On the model's first {layers} layers (--verify-layers: its config truncated, the same checkpoint), not the whole model.</p>\n");
    }
    for check in &p.checks {
        put!(out, "<h4>inputs {}</h4>\n", Esc(&shapes(&check.inputs)));
        put!(
            out,
            "<table>\n<tr><th class=\"num\">output</th><th>name</th><th>shape</th><th class=\"num\">max abs</th><th class=\"num\">max rel</th><th></th></tr>\n"
        );
        for o in &check.outputs {
            let shape = if o.shape == o.expected_shape {
                format!("{:?}", o.shape)
            } else if let Some(kept) = o.trailing {
                format!("{:?} (its last {kept} positions: eager's sliding window)", o.shape)
            } else {
                format!("{:?} (eager {:?})", o.shape, o.expected_shape)
            };
            put!(
                out,
                "<tr><td class=\"num\">{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                o.index,
                Esc(o.name.as_deref().unwrap_or("")),
                Esc(&shape),
                error(o.max_abs),
                error(o.max_rel),
                verdict(o.ok, "ok", "MISMATCH")
            );
        }
        put!(out, "</table>\n");
    }
    put!(out, "</section>\n");
}

fn trace_notes(out: &mut String, c: &ComponentReport) {
    if c.decomposed.is_empty()
        && c.fixed_axes.is_empty()
        && c.size_guards.is_empty()
        && c.lowering.is_none()
    {
        return;
    }
    put!(out, "<section class=\"notes\">\n<h3>Notes</h3>\n<ul>\n");
    for d in &c.decomposed {
        put!(
            out,
            "<li>decomposed <code>{}</code>: {} node(s) into {} (no translation or fix handles it)</li>\n",
            Esc(&d.op),
            d.nodes,
            d.became
        );
    }
    for f in &c.fixed_axes {
        put!(
            out,
            "<li>torch.export fixed <code>{}[{}] = {}</code> in a dynamic export: the exported model accepts only this size</li>\n",
            Esc(&f.input),
            f.axis,
            f.size
        );
    }
    for g in &c.size_guards {
        put!(out, "<li>valid only where torch.export's guard <code>{}</code> holds, which a <code>.pt2</code> or <code>.pte</code> does not check (an ONNX model checks each guard it can read)</li>\n", Esc(g));
    }
    if let Some(l) = &c.lowering {
        use super::schema::Lowering;
        match l {
            Lowering::Portable { kernel_calls, operators, values, arena_bytes, bytes, constant_bytes, .. } => put!(
                out,
                "<li>portable .pte: {kernel_calls} kernel call(s), {operators} operator(s), {values} value(s); planned arena {arena_bytes} bytes; {bytes} bytes ({constant_bytes} of constants)</li>\n"
            ),
            Lowering::Delegated { delegated_nodes, portable_nodes, bytes, .. } => put!(
                out,
                "<li>delegated .pte: {delegated_nodes} node(s) delegated, {portable_nodes} portable kernel call(s); {bytes} bytes</li>\n"
            ),
        }
    }
    put!(out, "</ul>\n</section>\n");
}

/// One horizontal bar of a chart: `start` and `length` in the chart's unit.
struct Bar {
    label: String,
    start: f64,
    length: f64,
    value: String,
    class: &'static str,
}

/// A chart's width in its own units, and where its bars start and how far
/// they reach: labels on the left, values after the bars.
struct Layout {
    width: f64,
    labels: f64,
    area: f64,
}

/// A chart across the page.
const WIDE: Layout = Layout { width: 960.0, labels: 270.0, area: 560.0 };
/// A chart in one of two columns (op histograms side by side).
const HALF: Layout = Layout { width: 580.0, labels: 290.0, area: 220.0 };

/// Horizontal bars on one scale (`full` units span the bar area): a
/// timeline when the bars have starts, a histogram when they all start at 0.
fn chart(out: &mut String, title: &str, bars: &[Bar], full: f64, layout: &Layout) {
    if bars.is_empty() {
        put!(out, "<p class=\"muted\">none</p>\n");
        return;
    }
    const ROW: f64 = 22.0;
    let Layout { width, labels, area } = *layout;
    let height = bars.len() as f64 * ROW + 8.0;
    let scale = if full > 0.0 && full.is_finite() { area / full } else { 0.0 };
    put!(
        out,
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{}\">\n",
        Esc(title)
    );
    for (index, bar) in bars.iter().enumerate() {
        let y = index as f64 * ROW + 4.0;
        let x = labels + bar.start.max(0.0) * scale;
        let width = (bar.length.max(0.0) * scale).max(if bar.length > 0.0 { 1.0 } else { 0.0 });
        let label = cut(&bar.label);
        put!(
            out,
            "<g><title>{}: {}</title><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect class=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{width:.1}\" height=\"14\" rx=\"2\"></rect>\
             <text class=\"value\" x=\"{:.1}\" y=\"{:.1}\">{}</text></g>\n",
            Esc(&bar.label),
            Esc(&bar.value),
            labels - 8.0,
            y + 12.0,
            Esc(&label),
            bar.class,
            y + 1.0,
            x + width + 6.0,
            y + 12.0,
            Esc(&bar.value)
        );
    }
    put!(out, "</svg>\n");
}

/// A label cut to [`LABEL_CHARS`] characters.
fn cut(label: &str) -> String {
    if label.chars().count() <= LABEL_CHARS {
        return label.to_string();
    }
    let kept: String = label.chars().take(LABEL_CHARS - 1).collect();
    format!("{kept}…")
}

fn row(out: &mut String, name: &str, html: &str) {
    put!(out, "<tr><th>{}</th><td>{html}</td></tr>\n", Esc(name));
}

fn verdict(ok: bool, yes: &str, no: &str) -> String {
    if ok {
        format!("<span class=\"ok\">{}</span>", Esc(yes))
    } else {
        format!("<span class=\"bad\">{}</span>", Esc(no))
    }
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn error(e: Option<f64>) -> String {
    e.map_or_else(|| "—".to_string(), |e| format!("{e:.2e}"))
}

/// The first 12 hex digits of a hash (the whole in the cell's tooltip).
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// `input_ids [2, 8], attention_mask [2, 8]`.
fn shapes(inputs: &BTreeMap<String, Vec<u64>>) -> String {
    let each: Vec<String> =
        inputs.iter().map(|(name, shape)| format!("{name} {shape:?}")).collect();
    each.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_in_elements_and_attributes() {
        assert_eq!(
            Esc(r#"<a href="x">&'</a>"#).to_string(),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let mut out = String::new();
        let bar = Bar {
            label: "aten.<lambda>&\"x\"".into(),
            start: 0.0,
            length: 2.0,
            value: "2".into(),
            class: "bar-fx",
        };
        chart(&mut out, "ops <of> \"x\"", &[bar], 2.0, &WIDE);
        assert!(
            !out.contains("<lambda>")
                && !out.contains("\"x\"\"")
                && out.contains("aten.&lt;lambda&gt;&amp;&quot;x&quot;"),
            "{out}"
        );
        assert!(out.contains("aria-label=\"ops &lt;of&gt; &quot;x&quot;\""), "{out}");
    }

    #[test]
    fn an_empty_or_zero_chart_draws_nothing_wrong() {
        let mut out = String::new();
        chart(&mut out, "t", &[], 0.0, &HALF);
        assert!(out.contains("none"));
        let mut out = String::new();
        let bar = Bar {
            label: "read".into(),
            start: 0.0,
            length: 0.0,
            value: "0.0 ms".into(),
            class: "bar-host",
        };
        chart(&mut out, "t", &[bar], 0.0, &WIDE);
        assert!(
            out.contains("width=\"0.0\"") && !out.contains("NaN") && !out.contains("inf"),
            "{out}"
        );
    }

    #[test]
    fn long_labels_are_cut_on_a_character() {
        let long = "aten._scaled_dot_product_flash_attention_for_cpu.default";
        assert_eq!(cut(long).chars().count(), LABEL_CHARS);
        assert!(cut(long).ends_with('…'));
        assert_eq!(cut("é".repeat(50).as_str()).chars().count(), LABEL_CHARS);
    }
}
