//! Weights on their way into an ONNX model: initializers, each a tensor's
//! header and its bytes ([`Bytes`]: a slice of the memory-mapped `.pt2`, a
//! folded value, or a weight stored transposed and transposed as it
//! streams), never a copy of the map.

use super::proto as p;
use crate::graph::pt2::{Pt2, StoredTensor, TensorError};
use crate::graph::TensorMeta;
pub use crate::weights::bytes::Bytes;

#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("ONNX has no element type for torch dtype `{0}`")]
    Dtype(String),
    #[error(transparent)]
    Tensor(TensorError),
}

impl From<TensorError> for WeightError {
    fn from(e: TensorError) -> WeightError {
        match e {
            TensorError::Dtype(dtype) => WeightError::Dtype(dtype),
            other => WeightError::Tensor(other),
        }
    }
}

/// A weight on its way into the model: the tensor's fields without its bytes,
/// and where the bytes come from.
pub struct Initializer<'a> {
    pub header: p::TensorProto,
    pub bytes: Bytes<'a>,
}

/// Total bytes of the initializers.
pub fn weight_bytes(initializers: &[Initializer]) -> u64 {
    initializers.iter().map(|i| i.bytes.len() as u64).sum()
}

/// A weight's bytes as a contiguous initializer. Sizes, offsets and byte
/// counts come from the file: every step is checked.
pub fn initializer<'a>(
    pt2: &'a Pt2,
    fqn: &str,
    constant: bool,
    meta: &TensorMeta,
) -> Result<Initializer<'a>, WeightError> {
    let StoredTensor { dims, dtype, source } = pt2.contiguous_tensor(fqn, constant, meta)?;
    let data_type = dtype.onnx().ok_or_else(|| WeightError::Dtype(meta.dtype.clone()))?;
    let header = p::TensorProto {
        dims,
        data_type: Some(data_type),
        name: Some(fqn.into()),
        ..Default::default()
    };
    let bytes = match source.cast {
        Some(cast) => Bytes::Converted { source: source.bytes, cast },
        None => Bytes::Mapped(source.bytes),
    };
    Ok(Initializer { header, bytes })
}
