//! The tensor element types hfx knows, in one table shared by the host and
//! the plugin SDK: torch's name (what the WIT contract and the IR carry, as a
//! string, so a new dtype never changes the contract), bytes per element, the
//! ONNX `TensorProto.DataType` code, the `.pt2` schema's `ScalarType` code,
//! and the limits of the float and integer types.
//!
//! No dependencies: it compiles for the host and for `wasm32-unknown-unknown`.

#![no_std]

/// A tensor element type, named as torch names it (`torch.float32` → `float32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    Uint8,
    Int8,
    Uint16,
    Int16,
    Uint32,
    Int32,
    Uint64,
    Int64,
    Float16,
    Bfloat16,
    Float32,
    Float64,
    Complex32,
    Complex64,
    Complex128,
    Float8E4m3fn,
    Float8E5m2,
    Float8E4m3fnuz,
    Float8E5m2fnuz,
    Float8E8m0fnu,
}

/// What each dtype is, one row each: (dtype, torch name, bytes, ONNX code, `.pt2` code).
/// ONNX code 0 (`UNDEFINED`): ONNX has no such type.
const TABLE: &[(DType, &str, u8, i32, i32)] = &[
    (DType::Bool, "bool", 1, 9, 12),
    (DType::Uint8, "uint8", 1, 2, 1),
    (DType::Int8, "int8", 1, 3, 2),
    (DType::Uint16, "uint16", 2, 4, 28),
    (DType::Int16, "int16", 2, 5, 3),
    (DType::Uint32, "uint32", 4, 12, 34),
    (DType::Int32, "int32", 4, 6, 4),
    (DType::Uint64, "uint64", 8, 13, 35),
    (DType::Int64, "int64", 8, 7, 5),
    (DType::Float16, "float16", 2, 10, 6),
    (DType::Bfloat16, "bfloat16", 2, 16, 13),
    (DType::Float32, "float32", 4, 1, 7),
    (DType::Float64, "float64", 8, 11, 8),
    (DType::Complex32, "complex32", 4, 0, 9),
    (DType::Complex64, "complex64", 8, 14, 10),
    (DType::Complex128, "complex128", 16, 15, 11),
    (DType::Float8E4m3fn, "float8_e4m3fn", 1, 17, 29),
    (DType::Float8E5m2, "float8_e5m2", 1, 19, 30),
    (DType::Float8E4m3fnuz, "float8_e4m3fnuz", 1, 18, 31),
    (DType::Float8E5m2fnuz, "float8_e5m2fnuz", 1, 20, 32),
    (DType::Float8E8m0fnu, "float8_e8m0fnu", 1, 24, 33),
];

impl DType {
    /// Every dtype, in table order.
    pub fn all() -> impl Iterator<Item = DType> {
        TABLE.iter().map(|row| row.0)
    }

    const fn row(self) -> &'static (DType, &'static str, u8, i32, i32) {
        // Every variant has exactly one row (tested below); a loop, to be const.
        let mut i = 0;
        while i < TABLE.len() {
            if TABLE[i].0 as u8 == self as u8 {
                return &TABLE[i];
            }
            i += 1;
        }
        &TABLE[0]
    }

    /// torch's name: `float32`, `bfloat16`, `float8_e4m3fn`.
    pub const fn name(self) -> &'static str {
        self.row().1
    }

    /// The dtype of a torch name; None for a name hfx does not know.
    pub fn from_name(name: &str) -> Option<DType> {
        TABLE.iter().find(|row| row.1 == name).map(|row| row.0)
    }

    /// Bytes per element as stored.
    pub const fn size(self) -> usize {
        self.row().2 as usize
    }

    /// ONNX `TensorProto.DataType`; None where ONNX has no such type (`complex32`).
    pub fn onnx(self) -> Option<i32> {
        Some(self.onnx_code()).filter(|&code| code != 0)
    }

    /// ONNX `TensorProto.DataType`, 0 (`UNDEFINED`) where ONNX has no such
    /// type; const, for `match` patterns.
    pub const fn onnx_code(self) -> i32 {
        self.row().3
    }

    pub fn from_onnx(code: i32) -> Option<DType> {
        TABLE.iter().find(|row| row.3 == code && code != 0).map(|row| row.0)
    }

    /// The `.pt2` schema's `ScalarType` code (`float32` is 7).
    pub const fn pt2(self) -> i32 {
        self.row().4
    }

    pub fn from_pt2(code: i32) -> Option<DType> {
        TABLE.iter().find(|row| row.4 == code).map(|row| row.0)
    }

    /// A floating-point type (the float8 formats included).
    pub fn is_floating(self) -> bool {
        matches!(self, DType::Float16 | DType::Bfloat16 | DType::Float32 | DType::Float64)
            || self.name().starts_with("float8")
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DType::Complex32 | DType::Complex64 | DType::Complex128)
    }

    /// `torch.finfo(dtype).min` / `.max` for the float types models compute in.
    pub fn float_limits(self) -> Option<(f64, f64)> {
        let max = match self {
            DType::Float16 => 65504.0,
            DType::Bfloat16 => 3.3895313892515355e38,
            DType::Float32 => f32::MAX as f64,
            DType::Float64 => f64::MAX,
            _ => return None,
        };
        Some((-max, max))
    }

    /// `torch.iinfo(dtype).min` / `.max` (u64's max saturates at i64's).
    pub fn int_limits(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::Int8 => (i8::MIN as i64, i8::MAX as i64),
            DType::Int16 => (i16::MIN as i64, i16::MAX as i64),
            DType::Int32 => (i32::MIN as i64, i32::MAX as i64),
            DType::Int64 => (i64::MIN, i64::MAX),
            DType::Uint8 => (0, u8::MAX as i64),
            DType::Uint16 => (0, u16::MAX as i64),
            DType::Uint32 => (0, u32::MAX as i64),
            DType::Uint64 => (0, i64::MAX),
            DType::Bool => (0, 1),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_its_own_and_codes_are_unique() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.0.row(), row, "{:?} finds its own row", row.0);
            assert_eq!(DType::from_name(row.1), Some(row.0));
            assert_eq!(DType::from_pt2(row.4), Some(row.0));
            if let Some(code) = row.0.onnx() {
                assert_eq!(DType::from_onnx(code), Some(row.0));
            }
            for other in &TABLE[i + 1..] {
                assert!(
                    row.1 != other.1 && row.4 != other.4 && (row.3 == 0 || row.3 != other.3),
                    "{:?} / {:?}",
                    row.0,
                    other.0
                );
            }
        }
        assert_eq!(DType::all().count(), 21);
    }

    #[test]
    fn known_values() {
        assert_eq!(DType::Float32.onnx(), Some(1));
        assert_eq!(DType::Bfloat16.onnx(), Some(16));
        assert_eq!(DType::Complex32.onnx(), None);
        assert_eq!(DType::Float32.pt2(), 7);
        assert_eq!(DType::Complex128.size(), 16);
        assert!(DType::Float8E5m2.is_floating() && !DType::Int8.is_floating());
    }
}
