//! The `.pte` file: the program as a FlatBuffer (`ET12`), a 32-byte extended
//! header (`eh00`) spliced in at byte 8, and the constants in segment 0,
//! 128-byte aligned, each tensor padded to 16 bytes and streamed from the
//! `.pt2`'s memory map (never copied into memory first).

use std::io::{self, Write};
use std::path::Path;

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::lower::{EValue, Program, Storage};
use super::memory::Plan;
use super::program_generated::executorch_flatbuffer as fb;

const SEGMENT_ALIGNMENT: u64 = 128;
const CONSTANT_ALIGNMENT: u64 = 16;
const HEADER_LENGTH: usize = 32;

/// The method's pytree specs (torch's `treespec_dumps`), kept for runners
/// that rebuild structured inputs and outputs.
pub struct Specs<'a> {
    pub inputs: &'a str,
    pub outputs: &'a str,
}

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub bytes: u64,
    pub program_bytes: u64,
    pub constant_bytes: u64,
}

fn align(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The named-data key of the provenance segment: who wrote the program and
/// with which plugins (JSON). The format has no metadata field; named data is
/// the one place a reader (`executorch.exir._serialize`, the runtime's
/// `NamedDataMap`) finds a keyed blob, and kernels never look at it.
pub const PROVENANCE_KEY: &str = "hfx.provenance";

/// A constant's bytes, and the file and offset they are stored at when they
/// are a slice of a file map (then read from that file, never through hfx's map).
pub struct ConstantBytes<'a> {
    pub bytes: &'a [u8],
    pub origin: Option<(&'a std::fs::File, u64)>,
}

/// Writes `program` with its memory `plan`, constant bytes and `provenance`
/// (segment 1, named [`PROVENANCE_KEY`]) to `path`, atomically.
pub fn write(
    program: &Program,
    plan: &Plan,
    constants: &[ConstantBytes<'_>],
    specs: Specs,
    provenance: &[u8],
    path: &Path,
) -> io::Result<Written> {
    // Constant k (1-based: offsets[0] is reserved) at offsets[k] in segment 0.
    let mut offsets = vec![0u64];
    let mut at = 0u64;
    for c in constants {
        offsets.push(at);
        at = align(at + c.bytes.len() as u64, CONSTANT_ALIGNMENT);
    }
    let segment_size = at;
    let provenance_offset = align(segment_size, SEGMENT_ALIGNMENT);
    let segments = [(0, segment_size), (provenance_offset, provenance.len() as u64)];
    let flatbuffer = flatbuffer(program, plan, &offsets, &segments, specs);
    let segment_data_size = provenance_offset + provenance.len() as u64;
    // Splice the extended header in after the root offset and the identifier.
    let program_size = (flatbuffer.len() + HEADER_LENGTH) as u64;
    let segment_base = align(program_size, SEGMENT_ALIGNMENT);
    let root = u32::from_le_bytes(
        flatbuffer[0..4].try_into().expect("a finished buffer starts with its root offset"),
    ) + HEADER_LENGTH as u32;
    let mut header = Vec::with_capacity(8 + HEADER_LENGTH);
    header.extend_from_slice(&root.to_le_bytes());
    header.extend_from_slice(&flatbuffer[4..8]);
    header.extend_from_slice(b"eh00");
    header.extend_from_slice(&(HEADER_LENGTH as u32).to_le_bytes());
    header.extend_from_slice(&program_size.to_le_bytes());
    header.extend_from_slice(&segment_base.to_le_bytes());
    header.extend_from_slice(&segment_data_size.to_le_bytes());
    crate::atomic::write_atomically(path, |file| {
        let mut out = crate::atomic::DirectWriter::new(file);
        out.write_all(&header)?;
        out.write_all(&flatbuffer[8..])?;
        out.write_all(&vec![0u8; (segment_base - program_size) as usize])?;
        let zeros = [0u8; CONSTANT_ALIGNMENT as usize];
        for c in constants {
            out.write_or_copy(c.bytes, c.origin)?;
            let pad = align(c.bytes.len() as u64, CONSTANT_ALIGNMENT) - c.bytes.len() as u64;
            out.write_all(&zeros[..pad as usize])?;
        }
        out.write_all(&vec![0u8; (provenance_offset - segment_size) as usize])?;
        out.write_all(provenance)?;
        out.finish().map(drop)
    })?;
    Ok(Written {
        bytes: segment_base + segment_data_size,
        program_bytes: program_size,
        constant_bytes: segment_size,
    })
}

/// The program's FlatBuffer; `segments` are (offset, size) from the segment
/// base: the constants, then the provenance.
fn flatbuffer(
    program: &Program,
    plan: &Plan,
    constant_offsets: &[u64],
    segments: &[(u64, u64); 2],
    specs: Specs,
) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(1 << 16);
    let offset_of: std::collections::HashMap<u32, u64> = plan.offsets.iter().copied().collect();
    let root = |i: u32| match &program.values[i as usize] {
        EValue::Tensor(t) => match t.storage {
            Storage::Alias(r) => r,
            _ => i,
        },
        _ => i,
    };
    let mut values = Vec::with_capacity(program.values.len());
    for (i, v) in program.values.iter().enumerate() {
        let (kind, val) = match v {
            EValue::Null => {
                (fb::KernelTypes::Null, fb::Null::create(&mut b, &fb::NullArgs {}).as_union_value())
            }
            EValue::Int(n) => (
                fb::KernelTypes::Int,
                fb::Int::create(&mut b, &fb::IntArgs { int_val: *n }).as_union_value(),
            ),
            EValue::Bool(x) => (
                fb::KernelTypes::Bool,
                fb::Bool::create(&mut b, &fb::BoolArgs { bool_val: *x }).as_union_value(),
            ),
            EValue::Double(x) => (
                fb::KernelTypes::Double,
                fb::Double::create(&mut b, &fb::DoubleArgs { double_val: *x }).as_union_value(),
            ),
            EValue::Str(s) => {
                let s = b.create_string(s);
                (
                    fb::KernelTypes::String,
                    fb::String::create(&mut b, &fb::StringArgs { string_val: Some(s) })
                        .as_union_value(),
                )
            }
            EValue::IntList(items) => {
                let items: Vec<i64> = items.iter().map(|&x| x as i64).collect();
                let items = b.create_vector(&items);
                (
                    fb::KernelTypes::IntList,
                    fb::IntList::create(&mut b, &fb::IntListArgs { items: Some(items) })
                        .as_union_value(),
                )
            }
            EValue::DoubleList(items) => {
                let items = b.create_vector(items);
                (
                    fb::KernelTypes::DoubleList,
                    fb::DoubleList::create(&mut b, &fb::DoubleListArgs { items: Some(items) })
                        .as_union_value(),
                )
            }
            EValue::BoolList(items) => {
                let items = b.create_vector(items);
                (
                    fb::KernelTypes::BoolList,
                    fb::BoolList::create(&mut b, &fb::BoolListArgs { items: Some(items) })
                        .as_union_value(),
                )
            }
            EValue::TensorList(items) => {
                let items: Vec<i32> = items.iter().map(|&x| x as i32).collect();
                let items = b.create_vector(&items);
                (
                    fb::KernelTypes::TensorList,
                    fb::TensorList::create(&mut b, &fb::TensorListArgs { items: Some(items) })
                        .as_union_value(),
                )
            }
            EValue::OptionalTensorList(items) => {
                let items = b.create_vector(items);
                (
                    fb::KernelTypes::OptionalTensorList,
                    fb::OptionalTensorList::create(
                        &mut b,
                        &fb::OptionalTensorListArgs { items: Some(items) },
                    )
                    .as_union_value(),
                )
            }
            EValue::Tensor(t) => {
                let sizes = b.create_vector(&t.sizes);
                let dim_order = b.create_vector(&t.dim_order);
                let (data_buffer_idx, allocation) = match t.storage {
                    Storage::Constant(c) => (c as u32 + 1, None),
                    Storage::Planned | Storage::Alias(_) => {
                        (0, offset_of.get(&root(i as u32)).copied())
                    }
                    Storage::Caller | Storage::Empty => (0, None),
                };
                let allocation_info = allocation.map(|offset| {
                    fb::AllocationDetails::create(
                        &mut b,
                        &fb::AllocationDetailsArgs {
                            memory_id: 1,
                            memory_offset_low: offset as u32,
                            memory_offset_high: (offset >> 32) as u32,
                        },
                    )
                });
                let dynamism = if t.dynamic {
                    fb::TensorShapeDynamism::DYNAMIC_BOUND
                } else {
                    fb::TensorShapeDynamism::STATIC
                };
                let tensor = fb::Tensor::create(
                    &mut b,
                    &fb::TensorArgs {
                        scalar_type: fb::ScalarType(t.scalar_type),
                        storage_offset: 0,
                        sizes: Some(sizes),
                        dim_order: Some(dim_order),
                        requires_grad: false,
                        data_buffer_idx,
                        allocation_info,
                        layout: 0,
                        shape_dynamism: dynamism,
                        extra_tensor_info: None,
                    },
                );
                (fb::KernelTypes::Tensor, tensor.as_union_value())
            }
        };
        values.push(fb::EValue::create(&mut b, &fb::EValueArgs { val_type: kind, val: Some(val) }));
    }
    let values = b.create_vector(&values);
    let instructions: Vec<WIPOffset<fb::Instruction>> = program
        .chain
        .iter()
        .map(|call| {
            let args: Vec<i32> = call.args.iter().map(|&a| a as i32).collect();
            let args = b.create_vector(&args);
            let kernel = fb::KernelCall::create(
                &mut b,
                &fb::KernelCallArgs { op_index: call.operator as i32, args: Some(args) },
            );
            fb::Instruction::create(
                &mut b,
                &fb::InstructionArgs {
                    instr_args_type: fb::InstructionArguments::KernelCall,
                    instr_args: Some(kernel.as_union_value()),
                },
            )
        })
        .collect();
    let instructions = b.create_vector(&instructions);
    let inputs: Vec<i32> = program.inputs.iter().map(|&x| x as i32).collect();
    let outputs: Vec<i32> = program.outputs.iter().map(|&x| x as i32).collect();
    let chain_inputs = b.create_vector(&inputs);
    let chain_outputs = b.create_vector(&outputs);
    let chain = fb::Chain::create(
        &mut b,
        &fb::ChainArgs {
            inputs: Some(chain_inputs),
            outputs: Some(chain_outputs),
            instructions: Some(instructions),
            stacktrace: None,
        },
    );
    let chains = b.create_vector(&[chain]);
    let operators: Vec<_> = program
        .operators
        .iter()
        .map(|(name, overload)| {
            let name = b.create_string(name);
            let overload = b.create_string(overload);
            fb::Operator::create(
                &mut b,
                &fb::OperatorArgs { name: Some(name), overload: Some(overload) },
            )
        })
        .collect();
    let operators = b.create_vector(&operators);
    let delegates = b.create_vector::<WIPOffset<fb::BackendDelegate>>(&[]);
    let buffer_sizes = b.create_vector(&[0i64, plan.arena as i64]);
    let plan_inputs = b.create_vector(&inputs);
    let plan_outputs = b.create_vector(&outputs);
    let name = b.create_string("forward");
    let encoded_inp_str = b.create_string(specs.inputs);
    let encoded_out_str = b.create_string(specs.outputs);
    let container = fb::ContainerMetadata::create(
        &mut b,
        &fb::ContainerMetadataArgs {
            encoded_inp_str: Some(encoded_inp_str),
            encoded_out_str: Some(encoded_out_str),
        },
    );
    let execution_plan = fb::ExecutionPlan::create(
        &mut b,
        &fb::ExecutionPlanArgs {
            name: Some(name),
            container_meta_type: Some(container),
            values: Some(values),
            inputs: Some(plan_inputs),
            outputs: Some(plan_outputs),
            chains: Some(chains),
            operators: Some(operators),
            delegates: Some(delegates),
            non_const_buffer_sizes: Some(buffer_sizes),
            non_const_buffer_device: None,
        },
    );
    let plans = b.create_vector(&[execution_plan]);
    let segments: Vec<_> = segments
        .iter()
        .map(|&(offset, size_)| {
            fb::DataSegment::create(&mut b, &fb::DataSegmentArgs { offset, size_ })
        })
        .collect();
    let segments = b.create_vector(&segments);
    let key = b.create_string(PROVENANCE_KEY);
    let named =
        fb::NamedData::create(&mut b, &fb::NamedDataArgs { key: Some(key), segment_index: 1 });
    let named_data = b.create_vector(&[named]);
    let offsets = b.create_vector(constant_offsets);
    let constant_segment = fb::SubsegmentOffsets::create(
        &mut b,
        &fb::SubsegmentOffsetsArgs { segment_index: 0, offsets: Some(offsets) },
    );
    let root = fb::Program::create(
        &mut b,
        &fb::ProgramArgs {
            version: 0,
            execution_plan: Some(plans),
            constant_buffer: None,
            backend_delegate_data: None,
            segments: Some(segments),
            constant_segment: Some(constant_segment),
            mutable_data_segments: None,
            named_data: Some(named_data),
        },
    );
    fb::finish_program_buffer(&mut b, root);
    b.finished_data().to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::lower::tests::{dynamic_program, small_program};
    use super::super::lower::{self, Constant};
    use super::super::memory;
    use super::*;
    use crate::trace::protocol::MemoryPlanning;

    /// `program` written with `constants` and read back: the file's bytes.
    fn written(
        program: &Program,
        plan: &Plan,
        constants: &[Vec<u8>],
        provenance: &[u8],
    ) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.pte");
        let slices: Vec<ConstantBytes> =
            constants.iter().map(|bytes| ConstantBytes { bytes, origin: None }).collect();
        let specs = Specs { inputs: "in-spec", outputs: "out-spec" };
        let w = write(program, plan, &slices, specs, provenance, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(w.bytes, bytes.len() as u64);
        bytes
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_lowered_program_reads_back_with_its_plan_and_constants() {
        let (g, signature) = small_program();
        let program = lower::lower(&g, &signature, MemoryPlanning::default()).unwrap();
        let plan = memory::plan(&program);
        let weight: Vec<u8> = (0..6).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let constants: Vec<Vec<u8>> = program
            .constants
            .iter()
            .map(|c| match c {
                Constant::Archive { .. } => weight.clone(),
                Constant::Scalar(bytes) => bytes.clone(),
            })
            .collect();
        let bytes = written(&program, &plan, &constants, b"{\"by\": \"hfx\"}");

        // The extended header, spliced in after the root offset and identifier.
        assert_eq!((&bytes[4..8], &bytes[8..12]), (&b"ET12"[..], &b"eh00"[..]));
        let (program_size, segment_base) = (u64_at(&bytes, 16), u64_at(&bytes, 24));
        assert_eq!(segment_base % SEGMENT_ALIGNMENT, 0);
        assert_eq!(segment_base + u64_at(&bytes, 32), bytes.len() as u64);
        let read = fb::root_as_program(&bytes[..program_size as usize]).unwrap();

        let plans = read.execution_plan().unwrap();
        assert_eq!(plans.len(), 1);
        let method = plans.get(0);
        assert_eq!(method.name(), Some("forward"));
        let operators: Vec<(&str, &str)> = method
            .operators()
            .unwrap()
            .iter()
            .map(|o| (o.name().unwrap(), o.overload().unwrap()))
            .collect();
        let expected: Vec<(&str, &str)> =
            program.operators.iter().map(|(n, o)| (n.as_str(), o.as_str())).collect();
        assert_eq!(operators, expected);
        let chain = method.chains().unwrap().get(0);
        let calls: Vec<(i32, Vec<i32>)> = chain
            .instructions()
            .unwrap()
            .iter()
            .map(|i| {
                let call = i.instr_args_as_kernel_call().unwrap();
                (call.op_index(), call.args().unwrap().iter().collect())
            })
            .collect();
        let expected: Vec<(i32, Vec<i32>)> = program
            .chain
            .iter()
            .map(|c| (c.operator as i32, c.args.iter().map(|&a| a as i32).collect()))
            .collect();
        assert_eq!(calls, expected);
        let as_i32 = |v: &[u32]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
        assert_eq!(method.inputs().unwrap().iter().collect::<Vec<_>>(), as_i32(&program.inputs));
        assert_eq!(method.outputs().unwrap().iter().collect::<Vec<_>>(), as_i32(&program.outputs));
        let sizes: Vec<i64> = method.non_const_buffer_sizes().unwrap().iter().collect();
        assert_eq!(sizes, [0, plan.arena as i64]);

        // Each tensor where the plan put it: planned ones (and their aliases)
        // in the arena, constants in the constant segment (index + 1).
        let values = method.values().unwrap();
        assert_eq!(values.len(), program.values.len());
        let offset_of = |i: u32| plan.offsets.iter().find(|o| o.0 == i).map(|o| o.1);
        for (i, value) in program.values.iter().enumerate() {
            let EValue::Tensor(t) = value else { continue };
            let read = values.get(i).val_as_tensor().unwrap();
            let allocation = read.allocation_info().map(|a| {
                assert_eq!(a.memory_id(), 1);
                a.memory_offset_low() as u64 | (a.memory_offset_high() as u64) << 32
            });
            match t.storage {
                Storage::Planned => assert_eq!(allocation, offset_of(i as u32), "value {i}"),
                Storage::Alias(base) => assert_eq!(allocation, offset_of(base), "value {i}"),
                Storage::Constant(c) => {
                    assert_eq!((read.data_buffer_idx(), allocation), (c as u32 + 1, None))
                }
                Storage::Caller | Storage::Empty => unreachable!("every tensor here is planned"),
            }
            assert_eq!(read.sizes().unwrap().iter().collect::<Vec<_>>(), t.sizes);
        }

        // The constants, each 16-byte aligned and zero padded, then the provenance.
        let segment = read.constant_segment().unwrap();
        let offsets: Vec<u64> = segment.offsets().unwrap().iter().collect();
        assert_eq!(offsets, [0, 0, 32], "24 bytes of weight, padded to 32, then the scalar");
        let segments = read.segments().unwrap();
        assert_eq!((segments.get(0).offset(), segments.get(0).size_()), (0, 48));
        let base = segment_base as usize;
        assert_eq!(&bytes[base..base + 24], &weight[..]);
        assert_eq!(&bytes[base + 24..base + 32], &[0; 8]);
        assert_eq!(&bytes[base + 32..base + 36], &2.0f32.to_le_bytes());
        let provenance = segments.get(1);
        assert_eq!(provenance.offset() % SEGMENT_ALIGNMENT, 0);
        let at = base + provenance.offset() as usize;
        assert_eq!(&bytes[at..at + provenance.size_() as usize], b"{\"by\": \"hfx\"}");
        let named = read.named_data().unwrap().get(0);
        assert_eq!((named.key(), named.segment_index()), (Some(PROVENANCE_KEY), 1));
    }

    #[test]
    fn a_program_without_kernels_or_constants_still_reads_back() {
        let program = Program::default();
        let bytes = written(&program, &Plan::default(), &[], b"");
        let read = fb::root_as_program(&bytes[..u64_at(&bytes, 16) as usize]).unwrap();
        let method = read.execution_plan().unwrap().get(0);
        assert_eq!(method.chains().unwrap().get(0).instructions().unwrap().len(), 0);
        assert_eq!(method.values().unwrap().len(), 0);
        assert_eq!(
            read.constant_segment().unwrap().offsets().unwrap().iter().collect::<Vec<_>>(),
            [0]
        );
        let segments = read.segments().unwrap();
        assert_eq!((segments.get(0).size_(), segments.get(1).size_()), (0, 0));
        assert_eq!(method.non_const_buffer_sizes().unwrap().iter().collect::<Vec<_>>(), [0, 0]);
    }

    #[test]
    fn a_dynamic_tensor_is_written_at_its_bound_and_marked_so() {
        let (g, signature) = dynamic_program();
        let program = lower::lower(&g, &signature, MemoryPlanning::default()).unwrap();
        let plan = memory::plan(&program);
        let bytes = written(&program, &plan, &[], b"");
        let read = fb::root_as_program(&bytes[..u64_at(&bytes, 16) as usize]).unwrap();
        let values = read.execution_plan().unwrap().get(0).values().unwrap();
        for i in [program.inputs[0], program.outputs[0]] {
            let tensor = values.get(i as usize).val_as_tensor().unwrap();
            assert_eq!(tensor.shape_dynamism(), fb::TensorShapeDynamism::DYNAMIC_BOUND);
            assert_eq!(tensor.sizes().unwrap().iter().collect::<Vec<_>>(), [8, 3]);
        }
        assert_eq!(plan.arena, 2 * 8 * 3 * 4, "x and x * x live together, each at its bound");
    }
}
