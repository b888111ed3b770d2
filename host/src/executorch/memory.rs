//! Memory planning: one arena (memory id 1) holds every tensor a kernel
//! writes, the inputs and the outputs. Each tensor lives from the kernel that
//! writes it (inputs: from the start) to its last reader (outputs: to the
//! end); a view extends its base's life. Tensors are placed largest first at
//! the lowest offset no live-at-the-same-time tensor overlaps ("greedy by
//! size"), each 16-byte aligned as ExecuTorch's planner aligns them.

use super::lower::{EValue, Program, Storage};

/// ExecuTorch's default alignment for planned tensors.
pub const ALIGNMENT: u64 = 16;

/// Where each planned tensor lives.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// (value index, byte offset in the arena).
    pub offsets: Vec<(u32, u64)>,
    pub arena: u64,
}

pub fn element_size(scalar_type: i8) -> u64 {
    match scalar_type {
        0 | 1 | 11 => 1,
        2 | 5 | 15 => 2,
        3 | 6 => 4,
        _ => 8,
    }
}

pub fn plan(program: &Program) -> Plan {
    let n = program.values.len();
    let end = program.chain.len() + 1;
    // Lifetimes in instruction positions (1-based; 0 is "before the first").
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    let root = |i: usize| match &program.values[i] {
        EValue::Tensor(t) => match t.storage {
            Storage::Alias(r) => Some(r as usize),
            Storage::Planned => Some(i),
            _ => None,
        },
        _ => None,
    };
    let touch = |i: usize, at: usize, first: &mut Vec<usize>, last: &mut Vec<usize>| {
        if let Some(r) = root(i) {
            first[r] = first[r].min(at);
            last[r] = last[r].max(at);
        }
    };
    for &i in &program.inputs {
        touch(i as usize, 0, &mut first, &mut last);
    }
    for (at, call) in program.chain.iter().enumerate() {
        for &a in &call.args {
            touch(a as usize, at + 1, &mut first, &mut last);
            // A list's tensors are read (or written) where the list is.
            match &program.values[a as usize] {
                EValue::TensorList(items) => {
                    items.iter().for_each(|&t| touch(t as usize, at + 1, &mut first, &mut last))
                }
                EValue::OptionalTensorList(items) => items
                    .iter()
                    .filter(|&&t| t >= 0)
                    .for_each(|&t| touch(t as usize, at + 1, &mut first, &mut last)),
                _ => {}
            }
        }
    }
    for &o in &program.outputs {
        touch(o as usize, end, &mut first, &mut last);
    }
    let mut tensors: Vec<(u32, u64, usize, usize)> = (0..n)
        .filter_map(|i| match &program.values[i] {
            EValue::Tensor(t) if t.storage == Storage::Planned && first[i] != usize::MAX => {
                let elements: u64 = t.sizes.iter().map(|&s| s.max(0) as u64).product();
                let bytes =
                    (elements * element_size(t.scalar_type)).div_ceil(ALIGNMENT) * ALIGNMENT;
                Some((i as u32, bytes, first[i], last[i]))
            }
            _ => None,
        })
        .collect();
    // Largest first; ties by first use, then index (deterministic).
    tensors.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    let mut placed: Vec<(u64, u64, usize, usize)> = Vec::new(); // offset, bytes, first, last
    let mut plan = Plan::default();
    for (value, bytes, from, to) in tensors {
        let mut live: Vec<(u64, u64)> =
            placed.iter().filter(|p| p.2 <= to && from <= p.3).map(|p| (p.0, p.0 + p.1)).collect();
        live.sort();
        let mut offset = 0u64;
        for (start, stop) in live {
            if start >= offset + bytes.max(1) {
                break;
            }
            offset = offset.max(stop);
        }
        placed.push((offset, bytes, from, to));
        plan.arena = plan.arena.max(offset + bytes);
        plan.offsets.push((value, offset));
    }
    plan.offsets.sort();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executorch::lower::{KernelCall, Tensor};

    fn tensor(elements: i32, storage: Storage) -> EValue {
        EValue::Tensor(Tensor {
            scalar_type: 6,
            sizes: vec![elements],
            dim_order: vec![0],
            dynamic: false,
            storage,
        })
    }

    #[test]
    fn tensors_that_never_live_together_share_memory_and_live_ones_never_overlap() {
        // x -> a -> b -> c (out); a dies when b is written, so c can reuse a's bytes.
        let p = Program {
            values: vec![
                tensor(4, Storage::Planned),
                tensor(8, Storage::Planned),
                tensor(8, Storage::Planned),
                tensor(8, Storage::Planned),
                tensor(8, Storage::Alias(2)),
            ],
            operators: vec![("aten::relu".into(), "out".into())],
            inputs: vec![0],
            chain: vec![
                KernelCall { operator: 0, args: vec![0, 1, 1] },
                KernelCall { operator: 0, args: vec![1, 2, 2] },
                KernelCall { operator: 0, args: vec![4, 3, 3] }, // reads b through its view
            ],
            outputs: vec![3],
            ..Program::default()
        };
        let plan = plan(&p);
        let at = |v: u32| plan.offsets.iter().find(|o| o.0 == v).unwrap().1;
        // b (through its view) lives with c; a lives with x and b; x lives with a only.
        let spans = [(0u32, 16u64), (1, 32), (2, 32), (3, 32)];
        let live = [(0usize, 1usize), (1, 2), (2, 3), (3, 4)];
        for (i, &(a, sa)) in spans.iter().enumerate() {
            for (j, &(b, sb)) in spans.iter().enumerate().skip(i + 1) {
                let together = live[i].0 <= live[j].1 && live[j].0 <= live[i].1;
                let overlap = at(a) < at(b) + sb && at(b) < at(a) + sa;
                assert!(!(together && overlap), "{a} and {b} overlap while both live: {plan:?}");
            }
        }
        assert_eq!(
            plan.arena, 64,
            "never more than two 32-byte tensors live at once; x fits beside a: {plan:?}"
        );
        assert!(plan.offsets.iter().all(|o| o.1 % ALIGNMENT == 0));
        assert!(!plan.offsets.iter().any(|o| o.0 == 4), "a view has no memory of its own");
    }

    /// A tensor read through a list lives until the list is read: `c`,
    /// written while `a` and `b` wait in the list, never takes their bytes.
    #[test]
    fn tensors_in_a_list_live_until_the_list_is_read() {
        let p = Program {
            values: vec![
                tensor(4, Storage::Planned),
                tensor(8, Storage::Planned),
                tensor(8, Storage::Planned),
                EValue::TensorList(vec![1, 2]),
                tensor(8, Storage::Planned),
                tensor(8, Storage::Planned),
            ],
            operators: vec![
                ("aten::relu".into(), "out".into()),
                ("aten::cat".into(), "out".into()),
            ],
            inputs: vec![0],
            chain: vec![
                KernelCall { operator: 0, args: vec![0, 1, 1] },
                KernelCall { operator: 0, args: vec![0, 2, 2] },
                KernelCall { operator: 0, args: vec![0, 4, 4] },
                KernelCall { operator: 1, args: vec![3, 5, 5] },
            ],
            outputs: vec![5, 4],
            ..Program::default()
        };
        let plan = plan(&p);
        let at = |v: u32| plan.offsets.iter().find(|o| o.0 == v).unwrap().1;
        let mut starts: Vec<u64> = [1, 2, 4, 5].map(at).to_vec();
        starts.sort();
        assert_eq!(starts, [0, 32, 64, 96], "a, b, c and the result are live together: {plan:?}");
        assert_eq!(plan.arena, 128, "x fits beside a, b and c: {plan:?}");
    }
}
