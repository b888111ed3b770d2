//! Test plugin: bounds every unbounded size symbol at 4096 (the shape of the
//! ExecuTorch `int_oo` range widening, on the program-fix world).

use hfx_sdk::prelude::*;

struct BoundRanges;

impl Guest for BoundRanges {
    fn describe() -> Vec<String> {
        Vec::new()
    }

    fn apply(graph: &Graph) -> Result<(), Error> {
        for range in graph.range_constraints() {
            if range.max.is_none() {
                graph.set_range_constraint(&RangeConstraint { max: Some(4096), ..range })?;
            }
        }
        Ok(())
    }
}

hfx_sdk::register_fx_program_fix!(BoundRanges);
