//! Which portable kernel runs each op, and its schema: the table
//! `tools/executorch-kernels.py` generated from the pinned torch and
//! ExecuTorch (ExecuTorch's own `to_out_variant`, kept where the runtime
//! registers the kernel). Read once; the host never asks torch at emission.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Table {
    kernels: BTreeMap<String, Kernel>,
}

/// A kernel and its arguments in schema order (`out` ones included).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    /// `aten::add.out`, `executorch_prim::add.Scalar`.
    pub kernel: String,
    pub args: Vec<Arg>,
    pub returns: Vec<ArgType>,
    /// A scalar op on sizes: it returns a value, not an `out` tensor.
    #[serde(default)]
    pub scalar: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arg {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ArgType,
    #[serde(default)]
    pub optional: bool,
    #[serde(default)]
    pub keyword: bool,
    #[serde(default)]
    pub out: bool,
    /// The schema's default; absent when it has none (`null` is a default of None).
    #[serde(default, deserialize_with = "present")]
    pub default: Option<serde_json::Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    Tensor,
    TensorList,
    OptionalTensorList,
    Int,
    IntList,
    Float,
    FloatList,
    Bool,
    BoolList,
    Scalar,
    Str,
    ScalarType,
    MemoryFormat,
    Layout,
    Device,
}

impl Kernel {
    /// `(name, overload)` as the program's operator table spells them (`""` for `default`).
    pub fn operator(&self) -> (&str, &str) {
        let (name, overload) = self.kernel.split_once('.').unwrap_or((&self.kernel, ""));
        (name, if overload == "default" { "" } else { overload })
    }
}

/// The kernel for op `target` (`aten.add.Tensor`), if the portable runtime has one.
pub fn kernel(target: &str) -> Option<&'static Kernel> {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            serde_json::from_str(include_str!("kernels.json"))
                .expect("kernels.json is generated and committed")
        })
        .kernels
        .get(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_functional_view_memory_format_and_size_ops() {
        let add = kernel("aten.add.Tensor").unwrap();
        assert_eq!(add.operator(), ("aten::add", "out"));
        assert_eq!(
            add.args.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            ["self", "other", "alpha", "out"]
        );
        assert_eq!(add.args[2].default, Some(serde_json::json!(1)));
        assert!(add.args[3].out);
        assert_eq!(kernel("aten.permute.default").unwrap().kernel, "aten::permute_copy.out");
        assert_eq!(
            kernel("aten._to_copy.default").unwrap().kernel,
            "dim_order_ops::_to_dim_order_copy.out"
        );
        assert_eq!(kernel("_operator.mul").unwrap().operator(), ("executorch_prim::mul", "Scalar"));
        assert!(kernel("aten.sym_size.int").unwrap().scalar);
        assert!(kernel("aten.nonexistent.default").is_none());
    }
}
