//! Hostile IR rewrites, one per op type offered: each must leave the model
//! as it was. `Relu`: rewires, adds and removes nodes, then errs. `Neg`:
//! adds an initializer past the constant cap. `Abs`: adds nodes past the
//! node budget. `Sigmoid`: removes its node with readers left and returns ok
//! (a malformed graph). `Tanh`: adds a thousand small initializers, past the
//! write budget.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_ir_fix(targets = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh"])]
fn hostile_fusion(model: &Model, node: OnnxNodeId) -> Result<bool> {
    let input = model.inputs(node)?[0].clone();
    let output = model.outputs(node)?[0].clone();
    match model.op_type(node)?.as_str() {
        "Relu" => {
            let (_, out) =
                model.add_node("Gelu", "com.microsoft", &[input], &["gelu".into()], &[])?;
            model.replace_uses(&output, &out[0])?;
            model.remove_node(node)?;
            model.import_opset("com.microsoft", 1)?;
            Err(error("refused after rewriting", Some(node)))
        }
        "Neg" => {
            let values = vec![0.5; 1 << 20];
            let constant =
                Constant { elem_type: 1, dims: vec![1 << 20], data: ConstantData::Floats(values) };
            model.add_initializer("huge", &constant)?;
            Ok(true)
        }
        "Abs" => {
            for _ in 0..20_000 {
                model.add_node("Identity", "", &[input.clone()], &["copy".into()], &[])?;
            }
            Ok(true)
        }
        "Sigmoid" => {
            model.remove_node(node)?;
            Ok(true)
        }
        _ => {
            let constant = Constant {
                elem_type: 1,
                dims: vec![4096],
                data: ConstantData::Floats(vec![1.0; 4096]),
            };
            for _ in 0..1000 {
                model.add_initializer("scale", &constant)?;
            }
            Ok(true)
        }
    }
}
