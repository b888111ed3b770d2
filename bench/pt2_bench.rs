//! The hfx side of the `.pt2` benchmark (driven by `bench/pt2_bench.py`):
//! read an archive, convert it to the IR and back, and write it; prints one
//! JSON line with the times and the peak RSS above the process's baseline.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use hfx::graph::pt2::{convert, Pt2};

/// A field of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let input = PathBuf::from(args.next().context("usage: pt2-bench IN.pt2 OUT.pt2")?);
    let output = PathBuf::from(args.next().context("usage: pt2-bench IN.pt2 OUT.pt2")?);
    let baseline = status_bytes("VmRSS:");
    let start = Instant::now();
    let pt2 = Pt2::open(&input)?;
    let program = &pt2.programs["model"];
    let graph = convert::to_ir(program).map_err(anyhow::Error::msg)?;
    let read = start.elapsed();
    let start = Instant::now();
    let back = convert::from_ir(&graph, program).map_err(anyhow::Error::msg)?;
    pt2.write(&output, &[("model".to_string(), back)].into())?;
    let write = start.elapsed();
    let peak = status_bytes("VmHWM:");
    println!(
        "{{\"read_s\": {:.4}, \"write_s\": {:.4}, \"peak_rss_above_baseline\": {}, \"nodes\": {}}}",
        read.as_secs_f64(),
        write.as_secs_f64(),
        peak.saturating_sub(baseline),
        graph.node_count()
    );
    Ok(())
}
