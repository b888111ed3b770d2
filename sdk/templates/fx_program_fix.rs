// An FX program fix: bound every unbounded size symbol at 4096.

use hfx_sdk::prelude::*;

struct Fix;

impl Guest for Fix {
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

hfx_sdk::register_fx_program_fix!(Fix);
