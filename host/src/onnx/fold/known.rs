//! Known tensors: the values constant folding computes with. Floats are held
//! in f64 and integer types and bool in i64, each rounded to its ONNX type.

use super::super::proto as p;
use super::super::weights::{Bytes, Initializer};

use hfx_dtype::DType;

// ONNX `TensorProto.DataType` codes, from the one dtype table (const, for patterns).
pub(super) const FLOAT: i32 = DType::Float32.onnx_code();
pub(super) const UINT8: i32 = DType::Uint8.onnx_code();
pub(super) const INT8: i32 = DType::Int8.onnx_code();
pub(super) const UINT16: i32 = DType::Uint16.onnx_code();
pub(super) const INT16: i32 = DType::Int16.onnx_code();
pub(super) const INT32: i32 = DType::Int32.onnx_code();
pub(super) const INT64: i32 = DType::Int64.onnx_code();
pub(super) const BOOL: i32 = DType::Bool.onnx_code();
pub(super) const DOUBLE: i32 = DType::Float64.onnx_code();
pub(super) const UINT32: i32 = DType::Uint32.onnx_code();
pub(super) const UINT64: i32 = DType::Uint64.onnx_code();

/// A known tensor: floats in f64, every integer type and bool in i64.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub(super) dtype: i32,
    pub(super) dims: Vec<i64>,
    pub(super) data: Data,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Data {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl Data {
    pub(super) fn len(&self) -> usize {
        match self {
            Data::Float(v) => v.len(),
            Data::Int(v) => v.len(),
        }
    }

    /// The elements at `indices`, in order.
    pub(super) fn pick(&self, indices: impl Iterator<Item = usize>) -> Data {
        match self {
            Data::Float(v) => Data::Float(indices.map(|i| v[i]).collect()),
            Data::Int(v) => Data::Int(indices.map(|i| v[i]).collect()),
        }
    }
}

pub(super) fn is_float(dtype: i32) -> bool {
    matches!(dtype, FLOAT | DOUBLE)
}

pub(super) fn known_type(dtype: i32) -> bool {
    matches!(
        dtype,
        FLOAT | DOUBLE | UINT8 | INT8 | UINT16 | INT16 | INT32 | INT64 | BOOL | UINT32 | UINT64
    )
}

/// Axis `a` of a tensor of `rank` axes, counted from the end where negative.
pub(super) fn axis(a: i64, rank: usize) -> Option<usize> {
    let a = if a < 0 { a + rank as i64 } else { a };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

pub(super) fn count(dims: &[i64]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}

impl Known {
    pub(super) fn new(dtype: i32, dims: Vec<i64>, data: Data) -> Known {
        Known { dtype, dims, data }.rounded()
    }

    pub(super) fn ints(dims: Vec<i64>, values: Vec<i64>) -> Known {
        Known { dtype: INT64, dims, data: Data::Int(values) }
    }

    /// Values as the type holds them: f32 rounding, integer wrap, bool 0/1.
    pub(super) fn rounded(mut self) -> Known {
        match (&mut self.data, self.dtype) {
            (Data::Float(v), FLOAT) => v.iter_mut().for_each(|x| *x = *x as f32 as f64),
            (Data::Int(v), BOOL) => v.iter_mut().for_each(|x| *x = (*x != 0) as i64),
            (Data::Int(v), INT32) => v.iter_mut().for_each(|x| *x = *x as i32 as i64),
            (Data::Int(v), INT16) => v.iter_mut().for_each(|x| *x = *x as i16 as i64),
            (Data::Int(v), INT8) => v.iter_mut().for_each(|x| *x = *x as i8 as i64),
            (Data::Int(v), UINT8) => v.iter_mut().for_each(|x| *x = *x as u8 as i64),
            (Data::Int(v), UINT16) => v.iter_mut().for_each(|x| *x = *x as u16 as i64),
            (Data::Int(v), UINT32) => v.iter_mut().for_each(|x| *x = *x as u32 as i64),
            _ => {}
        }
        self
    }

    pub(super) fn floats(&self) -> Vec<f64> {
        match &self.data {
            Data::Float(v) => v.clone(),
            Data::Int(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    pub(super) fn int_values(&self) -> Option<Vec<i64>> {
        match &self.data {
            Data::Int(v) => Some(v.clone()),
            Data::Float(_) => None,
        }
    }

    /// From raw little-endian bytes of an initializer.
    pub fn from_bytes(dtype: i32, dims: &[i64], bytes: &[u8]) -> Option<Known> {
        if !known_type(dtype) {
            return None;
        }
        let n = count(dims);
        let size = element_size(dtype)?;
        if bytes.len() != n * size {
            return None;
        }
        let chunks = bytes.chunks_exact(size);
        let data = match dtype {
            FLOAT => Data::Float(
                chunks.map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            ),
            DOUBLE => {
                Data::Float(chunks.map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
            }
            INT64 | UINT64 => {
                Data::Int(chunks.map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect())
            }
            INT32 => Data::Int(
                chunks.map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            ),
            UINT32 => Data::Int(
                chunks.map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            ),
            INT16 => Data::Int(
                chunks.map(|c| i16::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            ),
            UINT16 => Data::Int(
                chunks.map(|c| u16::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            ),
            INT8 => Data::Int(chunks.map(|c| c[0] as i8 as i64).collect()),
            _ => Data::Int(chunks.map(|c| c[0] as i64).collect()), // uint8, bool
        };
        Some(Known { dtype, dims: dims.to_vec(), data })
    }

    /// Raw little-endian bytes, as an initializer stores them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() * element_size(self.dtype).unwrap_or(1));
        match (&self.data, self.dtype) {
            (Data::Float(v), FLOAT) => v.iter().for_each(|x| out.extend((*x as f32).to_le_bytes())),
            (Data::Float(v), _) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            (Data::Int(v), INT64 | UINT64) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            (Data::Int(v), INT32 | UINT32) => {
                v.iter().for_each(|x| out.extend((*x as i32).to_le_bytes()))
            }
            (Data::Int(v), INT16 | UINT16) => {
                v.iter().for_each(|x| out.extend((*x as i16).to_le_bytes()))
            }
            (Data::Int(v), _) => v.iter().for_each(|x| out.push(*x as u8)),
        }
        out
    }

    pub(super) fn initializer<'a>(&self, name: &str) -> Initializer<'a> {
        let header = p::TensorProto {
            dims: self.dims.clone(),
            data_type: Some(self.dtype),
            name: Some(name.into()),
            ..Default::default()
        };
        Initializer { header, bytes: Bytes::Owned(self.to_bytes()) }
    }

    pub(super) fn cast(&self, to: i32) -> Option<Known> {
        if !known_type(to) {
            return None;
        }
        let data = match (&self.data, is_float(to)) {
            (Data::Float(v), true) => Data::Float(v.clone()),
            (Data::Int(v), true) => Data::Float(v.iter().map(|&x| x as f64).collect()),
            (Data::Int(v), false) => Data::Int(v.clone()),
            // to bool: nonzero; to an integer: truncation toward zero, as C casts
            (Data::Float(v), false) if to == BOOL => {
                Data::Int(v.iter().map(|&x| (x != 0.0) as i64).collect())
            }
            (Data::Float(v), false) => Data::Int(v.iter().map(|&x| x.trunc() as i64).collect()),
        };
        Some(Known::new(to, self.dims.clone(), data))
    }
}

/// Bytes per element of an ONNX type; None for a type the dtype table does not know.
pub(super) fn element_size(dtype: i32) -> Option<usize> {
    DType::from_onnx(dtype).map(DType::size)
}

/// Row-major strides of `dims`.
pub(super) fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(0) as usize;
    }
    s
}

pub(super) fn broadcast_dims(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let at = |d: &[i64], i: usize| if i + d.len() >= rank { d[i + d.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// For each element of a tensor of `out` dims, the index of the element of a
/// tensor of `dims` broadcast to it.
pub(super) fn broadcast_indices(dims: &[i64], out: &[i64]) -> Vec<usize> {
    let rank = out.len();
    let padded: Vec<i64> =
        std::iter::repeat_n(1, rank - dims.len()).chain(dims.iter().copied()).collect();
    let own = strides(&padded);
    let total = count(out);
    let mut result = Vec::with_capacity(total);
    let mut index = vec![0i64; rank];
    for _ in 0..total {
        result.push(
            (0..rank).map(|k| if padded[k] == 1 { 0 } else { index[k] as usize * own[k] }).sum(),
        );
        for k in (0..rank).rev() {
            index[k] += 1;
            if index[k] < out[k] {
                break;
            }
            index[k] = 0;
        }
    }
    result
}
