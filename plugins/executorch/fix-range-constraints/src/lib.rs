//! Bounds every unbounded size symbol, so ExecuTorch can plan memory: its
//! planner sizes each dynamic tensor at its upper bound
//! (`DYNAMIC_BOUND`), and torch.export leaves `Dim.AUTO` sizes at `int_oo`.
//!
//! The bound is the reference's (`_fix_range_constraints`, transformers
//! 5.24): `max(4 * min, floor)`, where the floor keeps the product of the N
//! unbounded sizes near 2^24 elements, clamped to 64..=1024. The reference
//! also takes 4 x the traced size, which a program fix does not see; at the
//! sizes a trace uses (a handful of tokens or a batch of two) the floor is
//! the larger.

use hfx_sdk::prelude::*;

/// The product of the unbounded sizes' bounds aims at this many elements.
const ELEMENTS: f64 = (1u64 << 24) as f64;

#[hfx_sdk::fx_program_fix]
fn bound_sizes(graph: &Graph) -> Result<()> {
    let unbounded: Vec<RangeConstraint> =
        graph.range_constraints().into_iter().filter(|r| r.max.is_none()).collect();
    if unbounded.is_empty() {
        return Ok(());
    }
    let floor = ELEMENTS.powf(1.0 / unbounded.len() as f64).round().clamp(64.0, 1024.0) as i64;
    for range in unbounded {
        let max = range.min.saturating_mul(4).max(floor);
        graph.set_range_constraint(&RangeConstraint { max: Some(max), ..range })?;
    }
    Ok(())
}
