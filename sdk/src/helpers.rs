//! Helpers for the rewrites most fixes are made of.

use crate::contract::types::*;

/// An error about `node`, for the host to report with plugin and stage.
pub fn error(message: impl Into<String>, node: Option<NodeId>) -> Error {
    Error { message: message.into(), node }
}

/// The `describe` answer from a list of targets.
pub fn targets(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[cfg(any(feature = "fx-node-fix", feature = "fx-program-fix", feature = "onnx-translation"))]
mod graph_ext {
    use super::error;
    use crate::contract::graph::*;

    /// Typed reads and the common rewrites, on the host's graph.
    pub trait GraphExt {
        /// The tensor value of input `name`, or an error naming the node.
        fn tensor_input(&self, node: NodeId, name: &str) -> Result<ValueId, Error>;
        /// Input `name` as an argument, or `default` when the node has none.
        fn input_or(&self, node: NodeId, name: &str, default: Argument) -> Result<Argument, Error>;
        /// Output declarations copying the node's own output metadata.
        fn output_decls(&self, node: NodeId) -> Result<Vec<OutputDecl>, Error>;
        /// Every value the node outputs, flattened in order.
        fn output_values(&self, node: NodeId) -> Result<Vec<ValueId>, Error>;
        /// Replace `node` by a call to `target` with the same outputs (metadata
        /// copied), move every reader over, and erase `node`. Returns the new node.
        fn replace_with_call(
            &self,
            node: NodeId,
            target: &str,
            inputs: Vec<NamedArgument>,
        ) -> Result<NodeId, Error>;
        /// Make the readers of `node`'s single output read input `name` instead,
        /// and erase `node`.
        fn forward_input(&self, node: NodeId, name: &str) -> Result<(), Error>;
        /// Insert `target(inputs)` before `before` with one output; returns that value.
        fn insert_value(
            &self,
            before: NodeId,
            target: &str,
            inputs: &[NamedArgument],
            output: OutputDecl,
        ) -> Result<ValueId, Error>;
        /// The only value `node` outputs.
        fn single_output(&self, node: NodeId) -> Result<ValueId, Error>;
        /// The tensor metadata of `value`; None for a value that is not a tensor.
        fn tensor_meta(&self, value: ValueId) -> Result<Option<TensorMeta>, Error>;
    }

    /// A positional input.
    pub fn positional(name: &str, value: Argument) -> NamedArgument {
        NamedArgument { name: name.into(), value, keyword: false }
    }

    /// A keyword-only input.
    pub fn keyword(name: &str, value: Argument) -> NamedArgument {
        NamedArgument { name: name.into(), value, keyword: true }
    }

    impl GraphExt for Graph {
        fn tensor_input(&self, node: NodeId, name: &str) -> Result<ValueId, Error> {
            match self.input(node, name)? {
                Some(Argument::Tensor(value)) => Ok(value),
                Some(_) => Err(error(format!("input `{name}` is not a tensor"), Some(node))),
                None => Err(error(format!("no input `{name}`"), Some(node))),
            }
        }

        fn input_or(&self, node: NodeId, name: &str, default: Argument) -> Result<Argument, Error> {
            Ok(self.input(node, name)?.unwrap_or(default))
        }

        fn output_decls(&self, node: NodeId) -> Result<Vec<OutputDecl>, Error> {
            decls_of(self, node, self.outputs(node)?)
        }

        fn output_values(&self, node: NodeId) -> Result<Vec<ValueId>, Error> {
            Ok(values_of(&self.outputs(node)?))
        }

        fn replace_with_call(
            &self,
            node: NodeId,
            target: &str,
            inputs: Vec<NamedArgument>,
        ) -> Result<NodeId, Error> {
            let outputs = self.outputs(node)?;
            let old = values_of(&outputs);
            let new = self.insert_call(node, target, &inputs, &decls_of(self, node, outputs)?)?;
            for (old, new) in old.into_iter().zip(self.output_values(new)?) {
                self.replace_uses(old, Replacement::Value(new))?;
            }
            self.erase(node)?;
            Ok(new)
        }

        fn forward_input(&self, node: NodeId, name: &str) -> Result<(), Error> {
            let input = self.tensor_input(node, name)?;
            let outputs = self.output_values(node)?;
            let [output] = outputs.as_slice() else {
                return Err(error(
                    format!("expected one output, found {}", outputs.len()),
                    Some(node),
                ));
            };
            self.replace_uses(*output, Replacement::Value(input))?;
            self.erase(node)
        }

        fn insert_value(
            &self,
            before: NodeId,
            target: &str,
            inputs: &[NamedArgument],
            output: OutputDecl,
        ) -> Result<ValueId, Error> {
            let node = self.insert_call(before, target, inputs, &[output])?;
            self.single_output(node)
        }

        fn single_output(&self, node: NodeId) -> Result<ValueId, Error> {
            match self.output_values(node)?[..] {
                [value] => Ok(value),
                ref values => {
                    Err(error(format!("expected one output, found {}", values.len()), Some(node)))
                }
            }
        }

        fn tensor_meta(&self, value: ValueId) -> Result<Option<TensorMeta>, Error> {
            Ok(match self.value_meta(value)? {
                ValueMeta::Tensor(meta) => Some(meta),
                _ => None,
            })
        }
    }

    /// Declarations copying the metadata of `outputs`, the outputs of `node`.
    fn decls_of(
        graph: &Graph,
        node: NodeId,
        outputs: Vec<Argument>,
    ) -> Result<Vec<OutputDecl>, Error> {
        let meta_of = |value: ValueId| -> Result<TensorMeta, Error> {
            match graph.value_meta(value)? {
                ValueMeta::Tensor(meta) => Ok(meta),
                _ => Err(error("tensor output without tensor metadata", Some(node))),
            }
        };
        outputs
            .into_iter()
            .map(|output| {
                Ok(match output {
                    Argument::Tensor(v) => OutputDecl::Tensor(meta_of(v)?),
                    Argument::Tensors(vs) => {
                        OutputDecl::Tensors(vs.into_iter().map(meta_of).collect::<Result<_, _>>()?)
                    }
                    Argument::SymInt(SymInt::Value(v)) => match graph.value_meta(v)? {
                        ValueMeta::SymInt(expr) => OutputDecl::SymInt(expr),
                        _ => {
                            return Err(error(
                                "sym-int output without sym-int metadata",
                                Some(node),
                            ))
                        }
                    },
                    Argument::SymBool(SymBool::Value(v)) => match graph.value_meta(v)? {
                        ValueMeta::SymBool(expr) => OutputDecl::SymBool(expr),
                        _ => {
                            return Err(error(
                                "sym-bool output without sym-bool metadata",
                                Some(node),
                            ))
                        }
                    },
                    Argument::None => OutputDecl::None,
                    _ => {
                        return Err(error("output kind not supported by output_decls", Some(node)))
                    }
                })
            })
            .collect()
    }

    /// The values `outputs` define, flattened in order.
    fn values_of(outputs: &[Argument]) -> Vec<ValueId> {
        outputs
            .iter()
            .flat_map(|output| match output {
                Argument::Tensor(v) => vec![*v],
                Argument::Tensors(vs) => vs.clone(),
                Argument::SymInt(SymInt::Value(v)) => vec![*v],
                Argument::SymFloat(SymFloat::Value(v)) => vec![*v],
                Argument::SymBool(SymBool::Value(v)) => vec![*v],
                _ => vec![],
            })
            .collect()
    }
}

#[cfg(any(feature = "fx-node-fix", feature = "fx-program-fix", feature = "onnx-translation"))]
pub use graph_ext::{keyword, positional, GraphExt};

#[cfg(feature = "onnx-ir-fix")]
mod model_ext {
    use super::error;
    use crate::contract::onnx::*;
    use crate::contract::types::Error;

    /// The most elements a pattern's constant (an epsilon, an axis list, a
    /// slice bound) is read with.
    const SMALL: u32 = 8;

    /// The reads a fusion's pattern match is made of, on the ONNX model.
    pub trait ModelExt {
        /// Whether `node` is in the default domain (a contrib op of the same
        /// name is not the pattern).
        fn is_default_domain(&self, node: OnnxNodeId) -> Result<bool, Error>;
        /// `node`'s first output.
        fn first_output(&self, node: OnnxNodeId) -> Result<String, Error>;
        /// The one reader of `node`'s only output, if it is an `op` of the
        /// default domain and the output is no graph output.
        fn only_reader(&self, node: OnnxNodeId, op: &str) -> Result<Option<OnnxNodeId>, Error>;
        /// The producer of `node`'s only input, if it is an `op` that only `node` reads.
        fn only_input_producer(
            &self,
            node: OnnxNodeId,
            op: &str,
        ) -> Result<Option<OnnxNodeId>, Error>;
        /// `node`'s input other than `known`, for a two-input node reading `known` once.
        fn other_input(&self, node: OnnxNodeId, known: &str) -> Result<Option<String>, Error>;
        /// A one-element float or integer constant's value.
        fn scalar(&self, value: &str) -> Option<f64>;
        /// A small integer constant's values.
        fn ints(&self, value: &str) -> Option<Vec<i64>>;
        /// Whether two values have one element type (None: a type is unknown).
        fn same_elem_type(&self, a: &str, b: &str) -> Option<bool>;
        /// `value`'s shape, when its rank is known.
        fn shape(&self, value: &str) -> Option<Vec<Dim>>;
        /// Removes `node` when none of its outputs is read or a graph output,
        /// then each producer of its inputs this leaves unread, and so on:
        /// what a rewrite routed around.
        fn remove_unread(&self, node: OnnxNodeId) -> Result<(), Error>;
        /// Removes `node`, whose outputs a rewrite took over (a graph
        /// output's name moved to the fused node, which [`remove_unread`]
        /// would keep), then what that leaves unread before it.
        ///
        /// [`remove_unread`]: ModelExt::remove_unread
        fn remove_rerouted(&self, node: OnnxNodeId) -> Result<(), Error>;
    }

    impl ModelExt for Model {
        fn is_default_domain(&self, node: OnnxNodeId) -> Result<bool, Error> {
            Ok(matches!(self.domain(node)?.as_str(), "" | "ai.onnx"))
        }

        fn first_output(&self, node: OnnxNodeId) -> Result<String, Error> {
            self.outputs(node)?
                .into_iter()
                .next()
                .ok_or_else(|| error("a node without outputs", None))
        }

        fn only_reader(&self, node: OnnxNodeId, op: &str) -> Result<Option<OnnxNodeId>, Error> {
            let outputs = self.outputs(node)?;
            let [out] = outputs.as_slice() else { return Ok(None) };
            if self.is_graph_output(out) {
                return Ok(None);
            }
            let readers = self.consumers(out);
            let [reader] = readers.as_slice() else { return Ok(None) };
            if self.op_type(*reader)? != op || !self.is_default_domain(*reader)? {
                return Ok(None);
            }
            Ok(Some(*reader))
        }

        fn only_input_producer(
            &self,
            node: OnnxNodeId,
            op: &str,
        ) -> Result<Option<OnnxNodeId>, Error> {
            let inputs = self.inputs(node)?;
            let [input] = inputs.as_slice() else { return Ok(None) };
            let Some(producer) = self.producer(input) else { return Ok(None) };
            if self.op_type(producer)? != op || self.consumers(input) != [node] {
                return Ok(None);
            }
            Ok(Some(producer))
        }

        fn other_input(&self, node: OnnxNodeId, known: &str) -> Result<Option<String>, Error> {
            let inputs = self.inputs(node)?;
            Ok(match inputs.as_slice() {
                [a, b] if a == known && b != known => Some(b.clone()),
                [a, b] if b == known && a != known => Some(a.clone()),
                _ => None,
            })
        }

        fn scalar(&self, value: &str) -> Option<f64> {
            match self.constant(value, SMALL)?.data {
                ConstantData::Floats(v) if v.len() == 1 => Some(v[0]),
                ConstantData::Ints(v) if v.len() == 1 => Some(v[0] as f64),
                _ => None,
            }
        }

        fn ints(&self, value: &str) -> Option<Vec<i64>> {
            match self.constant(value, SMALL)?.data {
                ConstantData::Ints(v) => Some(v),
                ConstantData::Floats(_) => None,
            }
        }

        fn same_elem_type(&self, a: &str, b: &str) -> Option<bool> {
            Some(self.value_type(a)?.elem_type == self.value_type(b)?.elem_type)
        }

        fn shape(&self, value: &str) -> Option<Vec<Dim>> {
            self.value_type(value)?.shape
        }

        fn remove_unread(&self, node: OnnxNodeId) -> Result<(), Error> {
            let mut pending = vec![node];
            while let Some(node) = pending.pop() {
                // A node reached twice is gone the second time.
                let Ok(outputs) = self.outputs(node) else { continue };
                let read = |o: &String| {
                    !o.is_empty() && (self.is_graph_output(o) || !self.consumers(o).is_empty())
                };
                if outputs.iter().any(read) {
                    continue;
                }
                let inputs = self.inputs(node)?;
                self.remove_node(node)?;
                pending.extend(inputs.iter().filter_map(|i| self.producer(i)));
            }
            Ok(())
        }

        fn remove_rerouted(&self, node: OnnxNodeId) -> Result<(), Error> {
            let inputs = self.inputs(node)?;
            self.remove_node(node)?;
            for producer in inputs.iter().filter_map(|i| self.producer(i)) {
                self.remove_unread(producer)?;
            }
            Ok(())
        }
    }
}

#[cfg(feature = "onnx-ir-fix")]
pub use model_ext::ModelExt;

// ── Dtypes, by torch name, from the one table the host shares (`hfx-dtype`) ──

/// ONNX `TensorProto.DataType` of a torch dtype name.
pub fn onnx_dtype(dtype: &str) -> Option<i64> {
    hfx_dtype::DType::from_name(dtype).and_then(hfx_dtype::DType::onnx).map(i64::from)
}

/// A floating-point dtype (the float8 formats included).
pub fn is_floating(dtype: &str) -> bool {
    hfx_dtype::DType::from_name(dtype).is_some_and(hfx_dtype::DType::is_floating)
}

/// `torch.finfo(dtype).min` / `.max` for the float dtypes a model computes in.
pub fn float_limits(dtype: &str) -> Option<(f64, f64)> {
    hfx_dtype::DType::from_name(dtype)?.float_limits()
}

/// `torch.iinfo(dtype).min` / `.max` (bool's are 0 and 1).
pub fn int_limits(dtype: &str) -> Option<(i64, i64)> {
    hfx_dtype::DType::from_name(dtype)?.int_limits()
}
