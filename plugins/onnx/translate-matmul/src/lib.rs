//! Matrix products → ONNX: `linear` directly (MatMul with the transposed
//! weight, then the bias), as torch.onnx's ONNX-friendly table does, instead
//! of decomposing it first.

use hfx_sdk::prelude::*;

struct Matmul;

const TARGETS: &[&str] = &["aten.linear.default", "aten.matmul.default", "aten.mm.default", "aten.bmm.default", "aten.addmm.default"];

fn translate_node(e: &Emit, target: &str) -> Result<(), Error> {
    let result = match target {
        "aten.linear.default" => {
            let x = e.tensor("input")?;
            let weight = e.tensor("weight")?;
            let rank = e.rank("weight")?;
            let transposed = if rank == 2 {
                e.op("Transpose", &[&weight], &[attr("perm", Attribute::Ints(vec![1, 0]))])?
            } else {
                weight
            };
            let product = e.op("MatMul", &[&x, &transposed], &[])?;
            match e.arg("bias")? {
                Some(Argument::Tensor(_)) => {
                    let bias = e.tensor("bias")?;
                    e.op("Add", &[&product, &bias], &[])?
                }
                _ => product,
            }
        }
        "aten.addmm.default" => {
            let (input, a, b) = (e.tensor("self")?, e.tensor("mat1")?, e.tensor("mat2")?);
            let (beta, alpha) = (e.float("beta", 1.0)?, e.float("alpha", 1.0)?);
            e.op("Gemm", &[&a, &b, &input], &[attr("alpha", Attribute::Float(alpha as f32)), attr("beta", Attribute::Float(beta as f32))])?
        }
        _ => {
            let (a, b) = (e.tensor("self")?, e.tensor(if target == "aten.matmul.default" { "other" } else { "mat2" })?);
            e.op("MatMul", &[&a, &b], &[])?
        }
    };
    e.bind_output(&result)
}

impl Guest for Matmul {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let target = graph.target(node)?;
        translate_node(&Emit::new(graph, node, builder), &target)
    }
}

hfx_sdk::register_onnx_translation!(Matmul);
