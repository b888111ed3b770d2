// An FX program fix: bound every unbounded size symbol at 4096.

use hfx_sdk::prelude::*;

/// Called once per program, before the node fixes.
#[hfx_sdk::fx_program_fix]
fn bound_sizes(graph: &Graph) -> Result<()> {
    for range in graph.range_constraints() {
        if range.max.is_none() {
            graph.set_range_constraint(&RangeConstraint { max: Some(4096), ..range })?;
        }
    }
    Ok(())
}
