//! Floating weights converted as they stream (`--dtype` other than the
//! checkpoint's): float32, bfloat16 and float16 into one another, rounding to
//! nearest even as torch's `Tensor.to` does, a bounded chunk at a time.

use hfx_dtype::DType;

/// A conversion between two of the floating dtypes hfx converts weights between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cast {
    from: DType,
    to: DType,
}

/// Elements converted per chunk (the buffer stays small whatever the weight's size).
const CHUNK: usize = 1 << 16;

impl Cast {
    /// The conversion from `from` to `to`, if both are float32, bfloat16 or
    /// float16 and they differ.
    pub fn new(from: DType, to: DType) -> Option<Cast> {
        let convertible = |d| matches!(d, DType::Float32 | DType::Bfloat16 | DType::Float16);
        (from != to && convertible(from) && convertible(to)).then_some(Cast { from, to })
    }

    /// What turns a tensor stored as `stored` (a dtype's name, as a
    /// checkpoint index or the worker's weights plan gives it) into one of
    /// `to`: None when it is stored as it is; an error naming both when hfx
    /// does not convert between them.
    pub fn of_stored(stored: &str, to: DType) -> Result<Option<Cast>, String> {
        let from =
            DType::from_name(stored).ok_or_else(|| format!("stored as `{stored}`, not a dtype"))?;
        if from == to {
            return Ok(None);
        }
        Cast::new(from, to)
            .map(Some)
            .ok_or_else(|| format!("stored as {stored}, the tensor is {}: hfx converts only between float32, bfloat16 and float16", to.name()))
    }

    pub fn from(self) -> DType {
        self.from
    }

    pub fn to(self) -> DType {
        self.to
    }

    /// Bytes `source_len` bytes of `from` become.
    pub fn output_len(self, source_len: usize) -> usize {
        source_len / self.from.size() * self.to.size()
    }

    /// `source` (whole elements of `from`) converted, handed to `sink` a chunk at a time.
    pub fn each_chunk<E>(
        self,
        source: &[u8],
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut out = Vec::with_capacity(CHUNK * self.to.size());
        for chunk in source.chunks(CHUNK * self.from.size()) {
            out.clear();
            for element in chunk.chunks_exact(self.from.size()) {
                let value = match self.from {
                    DType::Bfloat16 => half::bf16::from_le_bytes([element[0], element[1]]).to_f32(),
                    DType::Float16 => half::f16::from_le_bytes([element[0], element[1]]).to_f32(),
                    _ => f32::from_le_bytes([element[0], element[1], element[2], element[3]]),
                };
                match self.to {
                    DType::Bfloat16 => {
                        out.extend_from_slice(&half::bf16::from_f32(value).to_le_bytes())
                    }
                    DType::Float16 => {
                        out.extend_from_slice(&half::f16::from_f32(value).to_le_bytes())
                    }
                    _ => out.extend_from_slice(&value.to_le_bytes()),
                }
            }
            sink(&out)?;
        }
        Ok(())
    }

    /// `source` converted, written to `out`.
    pub fn write(self, source: &[u8], out: &mut impl std::io::Write) -> std::io::Result<()> {
        self.each_chunk(source, |chunk| out.write_all(chunk))
    }

    /// The CRC-32 of `source` converted, in one pass: what tests check the
    /// writers' chunked passes against.
    #[cfg(test)]
    pub fn crc32(self, source: &[u8]) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        let _ = self.each_chunk(source, |chunk| {
            hasher.update(chunk);
            Ok::<(), ()>(())
        });
        hasher.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn converted(cast: Cast, source: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        cast.write(source, &mut out).unwrap();
        out
    }

    #[test]
    fn conversions_round_to_nearest_even_and_keep_special_values() {
        let floats: Vec<u8> =
            [1.0f32, -2.5, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::INFINITY, 65520.0, 1e-8]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
        let to_bf16 = Cast::new(DType::Float32, DType::Bfloat16).unwrap();
        let bf16: Vec<u16> = converted(to_bf16, &floats)
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        // 1 + 1/256 is halfway between two bfloat16s: to even (1.0); 1 + 3/256 up to 1 + 4/256.
        assert_eq!(bf16[..5], [0x3f80, 0xc020, 0x3f80, 0x3f82, 0x7f80]);
        let to_f16 = Cast::new(DType::Float32, DType::Float16).unwrap();
        let f16: Vec<u16> = converted(to_f16, &floats)
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        // 65520 rounds past float16's largest finite value: infinity, as torch gives.
        assert_eq!((f16[0], f16[5]), (0x3c00, 0x7c00));
        let back = Cast::new(DType::Bfloat16, DType::Float32).unwrap();
        let wide = converted(back, &converted(to_bf16, &floats));
        assert_eq!(f32::from_le_bytes(wide[4..8].try_into().unwrap()), -2.5);
        assert_eq!(back.output_len(6), 12);
        assert_eq!(back.crc32(&converted(to_bf16, &floats)), crc32fast::hash(&wide));
        assert!(
            Cast::new(DType::Float32, DType::Float32).is_none()
                && Cast::new(DType::Int64, DType::Float32).is_none()
        );
    }
}
