//! A 2-D float weight quantized to 4 bits as it streams: blockwise
//! round-to-nearest along K, in ONNX Runtime's `MatMulNBits` layout, computed
//! as ONNX Runtime's `MlasQuantizeBlockwise` computes it
//! (`onnxruntime/quantization/matmul_nbits_quantizer.py`,
//! `quantize_matmul_4bits`), a few rows of N at a time.
//!
//! Each of the three tensors a quantized weight becomes (packed values,
//! scales, zero points) is its own [`Int4Part`] of the same source: written
//! one after the other, each reads the source again, so no part is held
//! whole in memory.

use hfx_dtype::DType;

use super::transpose::Release;

/// A 2-D float weight `W` (K x N as the MatMul reads it) to quantize, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int4Weight {
    /// The reduction dimension (MatMul's K) and the output one (N).
    pub k: usize,
    pub n: usize,
    /// The source is stored N x K (an `nn.Linear` weight: each output's row
    /// contiguous) rather than K x N.
    pub stored_n_by_k: bool,
    /// The stored elements' dtype (float32, bfloat16 or float16).
    pub stored: DType,
    /// The scales' dtype: the MatMul's float type.
    pub scale: DType,
    /// Elements of K per block (16 or more, a power of 2).
    pub block: usize,
    /// Zero point 8 for every block, none written (ONNX Runtime GenAI's
    /// default); otherwise each block's zero point spans its range.
    pub symmetric: bool,
}

/// Which tensor of a quantized weight: `MatMulNBits`'s B (uint8 [N,
/// blocks, block/2], two values a byte, the first in the low nibble), its
/// scales ([N, blocks] in [`Int4Weight::scale`]) or its zero points (uint8 [N,
/// ceil(blocks/2)], packed as the values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int4Part {
    Packed,
    Scales,
    ZeroPoints,
}

/// Rows of N quantized per pass over the source: a K x N source is read a
/// tile of this many columns at a time.
const ROWS: usize = 64;

impl Int4Weight {
    /// Blocks per row of N.
    pub fn blocks(&self) -> usize {
        self.k.div_ceil(self.block)
    }

    /// Bytes of `part`.
    pub fn len(&self, part: Int4Part) -> usize {
        let per_row = match part {
            Int4Part::Packed => self.blocks() * self.block / 2,
            Int4Part::Scales => self.blocks() * self.scale.size(),
            Int4Part::ZeroPoints => self.blocks().div_ceil(2),
        };
        self.n * per_row
    }

    /// The ONNX dims of `part`.
    pub fn dims(&self, part: Int4Part) -> Vec<i64> {
        let (n, blocks) = (self.n as i64, self.blocks() as i64);
        match part {
            Int4Part::Packed => vec![n, blocks, self.block as i64 / 2],
            Int4Part::Scales => vec![n, blocks],
            Int4Part::ZeroPoints => vec![n, (blocks + 1) / 2],
        }
    }

    /// Streams `part` of the quantized `source` to `out`; `release` is
    /// called with each run of an N x K source's rows once quantized.
    pub fn write(
        &self,
        source: &[u8],
        part: Int4Part,
        out: &mut impl std::io::Write,
        release: Release<'_>,
    ) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(self.len(part) / self.n.max(1) * ROWS);
        let layout = Layout { k: self.k, n: self.n, stored_n_by_k: self.stored_n_by_k };
        layout.rows_of_n(source, self.stored, release, |rows| {
            bytes.clear();
            for row in rows.chunks_exact(self.k) {
                self.quantize_row(row, part, &mut bytes);
            }
            out.write_all(&bytes)
        })
    }

    /// One row of N (K values) quantized: `part`'s bytes appended to `out`.
    fn quantize_row(&self, row: &[f32], part: Int4Part, out: &mut Vec<u8>) {
        let mut zero_points = 0u8;
        for (b, block) in row.chunks(self.block).enumerate() {
            let (scale, zero_point) = self.scale_and_zero_point(block);
            match part {
                Int4Part::Scales => encode(self.scale, scale, out),
                Int4Part::ZeroPoints if b % 2 == 0 => zero_points = zero_point,
                Int4Part::ZeroPoints => out.push(zero_points | zero_point << 4),
                Int4Part::Packed => {
                    // As the kernel sees the scale: in the stored scales' dtype.
                    let scale = round_trip(self.scale, scale);
                    let reciprocal = if scale != 0.0 { 1.0 / scale } else { 0.0 };
                    let zero_point = zero_point as f32;
                    let quantized = |v: f32| nibble(v * reciprocal + zero_point);
                    let pairs = block.chunks_exact(2);
                    let odd = pairs.remainder();
                    out.extend(pairs.map(|pair| quantized(pair[0]) | quantized(pair[1]) << 4));
                    if let [last] = odd {
                        out.push(quantized(*last));
                    }
                    // A last block shorter than the block size is padded with zeros.
                    out.resize(out.len() + self.block / 2 - block.len().div_ceil(2), 0);
                }
            }
        }
        if part == Int4Part::ZeroPoints && self.blocks() % 2 == 1 {
            out.push(zero_points);
        }
    }

    /// A block's scale and zero point, as `MlasQuantizeBlockwise` picks them:
    /// symmetric, the value of largest magnitude maps to -8 (zero point 8);
    /// otherwise the block's range, widened to hold 0, spans 0..=15.
    fn scale_and_zero_point(&self, block: &[f32]) -> (f32, u8) {
        // Compared as `std::min` and `std::max` compare: a NaN is skipped.
        let (min, max) = block.iter().fold((f32::MAX, f32::MIN), |(min, max), &v| {
            (if v < min { v } else { min }, if max < v { v } else { max })
        });
        if self.symmetric {
            let extreme = if max.abs() > min.abs() { max } else { min };
            return (-extreme / 8.0, 8);
        }
        let (min, max) = (min.min(0.0), max.max(0.0));
        let scale = (max - min) / 15.0;
        let zero_point = if scale != 0.0 { -min / scale } else { min };
        (scale, zero_point.round().clamp(0.0, 15.0) as u8)
    }
}

/// How a 2-D weight `W` (K x N as the MatMul reads it) is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    k: usize,
    n: usize,
    /// Stored N x K (an `nn.Linear` weight) rather than K x N.
    stored_n_by_k: bool,
}

impl Layout {
    /// Calls `each` with up to [`ROWS`] rows of N at a time, in order, each
    /// row its K values; `release` is called with each run of an N x K
    /// source's rows once read.
    fn rows_of_n(
        &self,
        source: &[u8],
        stored: DType,
        release: Release<'_>,
        mut each: impl FnMut(&[f32]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let (k, n, size) = (self.k, self.n, stored.size());
        let mut values = vec![0f32; ROWS.min(n) * k];
        for first in (0..n).step_by(ROWS) {
            let rows = ROWS.min(n - first);
            if self.stored_n_by_k {
                let run = &source[first * k * size..(first + rows) * k * size];
                decode_into(stored, run, &mut values);
                if let Some(release) = release {
                    release(run);
                }
            } else {
                for i in 0..k {
                    let run = &source[(i * n + first) * size..(i * n + first + rows) * size];
                    for (j, element) in run.chunks_exact(size).enumerate() {
                        values[j * k + i] = decode(stored, element);
                    }
                }
            }
            each(&values[..rows * k])?;
        }
        Ok(())
    }
}

/// A 2-D float weight quantized to int8 per output channel (each of N's
/// columns its own scale), symmetric (zero point 0), as ONNX Runtime's
/// `quantize_dynamic(per_channel=True, reduce_range=True)` quantizes a
/// MatMul's B (`onnxruntime/quantization/base_quantizer.py`,
/// `quantize_weight_per_channel_impl`): written K x N, the layout
/// `DynamicQuantizeMatMul`'s B has.
///
/// Why 7 bits ([`INT8_WEIGHT_RANGE`], -64..=64) and not ONNX Runtime's
/// default -127..=127: its x86 kernels for uint8 activations times int8
/// weights on a CPU without VNNI (AVX2: `vpmaddubsw`) add pairs of products
/// in int16, which two full-range products overflow. On such a CPU a tiny
/// Llama's logits were 0.09 off (a quarter of their largest value) with
/// 8-bit weights and 0.009 with 7-bit ones, ONNX Runtime's own quantizer
/// alike; a VNNI CPU gets the same 7-bit weights right. The artifact runs
/// wherever it is deployed, so its weights are the ones every CPU adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8Weight {
    /// The reduction dimension (MatMul's K) and the output one (N).
    pub k: usize,
    pub n: usize,
    /// The source is stored N x K (an `nn.Linear` weight) rather than K x N.
    pub stored_n_by_k: bool,
    /// The stored elements' dtype (float32, bfloat16 or float16).
    pub stored: DType,
    /// The scales' dtype: the MatMul's float type.
    pub scale: DType,
}

/// The largest magnitude of an int8 weight's values: ONNX Runtime's
/// reduced range for int8 (`ONNX_INT_TYPE_REDUCED_RANGE`), 7 bits.
pub const INT8_WEIGHT_RANGE: f64 = 64.0;

/// Which tensor of an int8 weight: the values (int8 [K, N]) or the scales
/// ([N] in [`Int8Weight::scale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Part {
    Values,
    Scales,
}

impl Int8Weight {
    fn layout(&self) -> Layout {
        Layout { k: self.k, n: self.n, stored_n_by_k: self.stored_n_by_k }
    }

    /// Bytes of `part`.
    pub fn len(&self, part: Int8Part) -> usize {
        match part {
            Int8Part::Values => self.k * self.n,
            Int8Part::Scales => self.n * self.scale.size(),
        }
    }

    /// The ONNX dims of `part`.
    pub fn dims(&self, part: Int8Part) -> Vec<i64> {
        match part {
            Int8Part::Values => vec![self.k as i64, self.n as i64],
            Int8Part::Scales => vec![self.n as i64],
        }
    }

    /// Each column's scale: its largest magnitude over [`INT8_WEIGHT_RANGE`],
    /// as ONNX Runtime's `compute_scale_zp` computes it in float64 (1 where
    /// the column is all zeros).
    fn scales(&self, source: &[u8], release: Release<'_>) -> std::io::Result<Vec<f64>> {
        let mut scales = Vec::with_capacity(self.n);
        self.layout().rows_of_n(source, self.stored, release, |rows| {
            for row in rows.chunks_exact(self.k) {
                let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                let scale = 2.0 * largest as f64 / (2.0 * INT8_WEIGHT_RANGE);
                scales.push(if (scale as f32) < f32::MIN_POSITIVE { 1.0 } else { scale });
            }
            Ok(())
        })?;
        Ok(scales)
    }

    /// Streams `part` of the quantized `source` to `out`: the scales in one
    /// pass over the source, the values in a second, K rows at a time;
    /// `release` is called with each run of the source once read.
    pub fn write(
        &self,
        source: &[u8],
        part: Int8Part,
        out: &mut impl std::io::Write,
        release: Release<'_>,
    ) -> std::io::Result<()> {
        let scales = self.scales(source, release)?;
        if part == Int8Part::Scales {
            let mut bytes = Vec::with_capacity(self.len(part));
            for &scale in &scales {
                encode(self.scale, scale as f32, &mut bytes);
            }
            return out.write_all(&bytes);
        }
        let (k, n, size) = (self.k, self.n, self.stored.size());
        // numpy's `round` (half to even) of the value over the float64 scale.
        let quantize = |v: f32, j: usize| {
            (v as f64 / scales[j]).round_ties_even().clamp(-INT8_WEIGHT_RANGE, INT8_WEIGHT_RANGE)
                as i8 as u8
        };
        let mut tile = vec![0u8; ROWS.min(k) * n];
        for first in (0..k).step_by(ROWS) {
            let rows = ROWS.min(k - first);
            for j in 0..n {
                for i in 0..rows {
                    let at =
                        if self.stored_n_by_k { j * k + first + i } else { (first + i) * n + j };
                    tile[i * n + j] =
                        quantize(decode(self.stored, &source[at * size..][..size]), j);
                }
            }
            out.write_all(&tile[..rows * n])?;
            if let (Some(release), false) = (release, self.stored_n_by_k) {
                release(&source[first * n * size..(first + rows) * n * size]);
            }
        }
        if let (Some(release), true) = (release, self.stored_n_by_k) {
            release(source);
        }
        Ok(())
    }
}

fn decode(dtype: DType, element: &[u8]) -> f32 {
    match dtype {
        DType::Bfloat16 => half::bf16::from_le_bytes([element[0], element[1]]).to_f32(),
        DType::Float16 => half::f16::from_le_bytes([element[0], element[1]]).to_f32(),
        _ => f32::from_le_bytes([element[0], element[1], element[2], element[3]]),
    }
}

/// `bytes`, elements of `dtype`, decoded into `out` (as many as both hold):
/// [`decode`] with the dtype matched once per run rather than per element.
fn decode_into(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let elements = bytes.chunks_exact(dtype.size());
    match dtype {
        DType::Bfloat16 => {
            for (v, e) in out.iter_mut().zip(elements) {
                *v = half::bf16::from_le_bytes([e[0], e[1]]).to_f32();
            }
        }
        DType::Float16 => {
            for (v, e) in out.iter_mut().zip(elements) {
                *v = half::f16::from_le_bytes([e[0], e[1]]).to_f32();
            }
        }
        _ => {
            for (v, e) in out.iter_mut().zip(elements) {
                *v = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            }
        }
    }
}

/// `x.round().clamp(0.0, 15.0) as u8` (rounding half away from zero, NaN to
/// 0) without a call to `roundf`: clamped first (rounding is monotonic and the
/// bounds are integers), then truncated and rounded up where the fraction,
/// exact in float32, is at least a half.
fn nibble(x: f32) -> u8 {
    let clamped = x.clamp(0.0, 15.0);
    let whole = clamped as u8;
    whole + u8::from(clamped - f32::from(whole) >= 0.5)
}

fn encode(dtype: DType, value: f32, out: &mut Vec<u8>) {
    match dtype {
        DType::Bfloat16 => out.extend_from_slice(&half::bf16::from_f32(value).to_le_bytes()),
        DType::Float16 => out.extend_from_slice(&half::f16::from_f32(value).to_le_bytes()),
        _ => out.extend_from_slice(&value.to_le_bytes()),
    }
}

/// `value` as `dtype` holds it.
fn round_trip(dtype: DType, value: f32) -> f32 {
    let mut bytes = Vec::with_capacity(4);
    encode(dtype, value, &mut bytes);
    decode(dtype, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONNX Runtime 1.32's `quantize_matmul_4bits` (the `MlasQuantizeBlockwise`
    /// RTN that `MatMulNBitsQuantizer` calls) on the weight [`weight`] builds,
    /// K 40, N 3, block 32, printed once by:
    /// ```text
    /// w = (np.sin(np.arange(120) * 0.37) * (1 + np.arange(120) % 7)).astype(np.float32).reshape(40, 3)
    /// w[:, 2] = np.abs(w[:, 2])
    /// packed = np.zeros((3, 2, 16), "uint8"); zp = np.zeros((3, 1), "uint8"); sc = np.zeros((3, 2), "float32")
    /// quantize_matmul_4bits(packed, w, sc, zp, 32, 3, 40, symmetric)
    /// ```
    const SYMMETRIC_PACKED: [[u8; 20]; 3] = [
        [72, 145, 175, 118, 214, 188, 38, 200, 143, 97, 153, 91, 68, 233, 88, 112, 80, 152, 93, 35],
        [
            39, 167, 159, 99, 151, 140, 53, 232, 105, 96, 172, 122, 116, 235, 56, 151, 96, 171,
            123, 83,
        ],
        [21, 56, 135, 80, 103, 132, 51, 6, 71, 119, 81, 104, 131, 35, 7, 71, 102, 48, 87, 129],
    ];
    #[allow(clippy::excessive_precision)] // as numpy printed them
    const SYMMETRIC_SCALES: [f32; 6] = [
        -0.8324126601219177,
        0.6154589056968689,
        -0.8728355169296265,
        0.8502698540687561,
        -0.7863695621490479,
        -0.6159217357635498,
    ];
    const ASYMMETRIC_PACKED: [[u8; 20]; 3] = [
        [
            183, 110, 80, 137, 57, 84, 217, 55, 112, 157, 102, 164, 186, 22, 167, 143, 96, 185,
            111, 36,
        ],
        [
            200, 88, 96, 155, 104, 115, 202, 39, 150, 159, 83, 133, 139, 20, 199, 104, 128, 239,
            175, 117,
        ],
        [229, 161, 2, 111, 83, 24, 154, 228, 130, 34, 110, 64, 25, 185, 227, 114, 67, 159, 83, 13],
    ];
    #[allow(clippy::excessive_precision)] // as numpy printed them
    const ASYMMETRIC_SCALES: [f32; 6] = [
        0.8576167821884155,
        0.5338947176933289,
        0.9299575090408325,
        0.6164079308509827,
        0.4193970859050751,
        0.32849159836769104,
    ];
    const ASYMMETRIC_ZERO_POINTS: [u8; 3] = [151, 183, 0];

    /// The weight as K x N float32 values.
    fn weight() -> Vec<f32> {
        let mut w: Vec<f32> =
            (0..120).map(|i| ((i as f64 * 0.37).sin() * (1 + i % 7) as f64) as f32).collect();
        for i in 0..40 {
            w[i * 3 + 2] = w[i * 3 + 2].abs();
        }
        w
    }

    fn written(weight: &Int4Weight, source: &[u8], part: Int4Part) -> Vec<u8> {
        let mut out = Vec::new();
        weight.write(source, part, &mut out, None).unwrap();
        assert_eq!(out.len(), weight.len(part));
        out
    }

    fn floats(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// [`weight`]'s bytes laid out K x N and N x K.
    fn sources() -> (Vec<u8>, Vec<u8>) {
        let w = weight();
        let k_by_n = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let n_by_k = (0..3)
            .flat_map(|j| (0..40).map(move |i| (i, j)))
            .flat_map(|(i, j)| w[i * 3 + j].to_le_bytes())
            .collect();
        (k_by_n, n_by_k)
    }

    /// Bit for bit ONNX Runtime's bytes, from a K x N and an N x K source.
    #[test]
    fn int4_blocks_are_onnx_runtimes_bit_for_bit() {
        let (k_by_n, n_by_k) = sources();
        for stored_n_by_k in [false, true] {
            let source = if stored_n_by_k { &n_by_k } else { &k_by_n };
            for symmetric in [true, false] {
                let int4 = Int4Weight {
                    k: 40,
                    n: 3,
                    stored_n_by_k,
                    stored: DType::Float32,
                    scale: DType::Float32,
                    block: 32,
                    symmetric,
                };
                let (packed, scales) = if symmetric {
                    (SYMMETRIC_PACKED, SYMMETRIC_SCALES)
                } else {
                    (ASYMMETRIC_PACKED, ASYMMETRIC_SCALES)
                };
                let expected: Vec<u8> =
                    packed.iter().flat_map(|row| row.iter().copied().chain([0; 12])).collect();
                assert_eq!(written(&int4, source, Int4Part::Packed), expected);
                assert_eq!(floats(&written(&int4, source, Int4Part::Scales)), scales);
                if !symmetric {
                    assert_eq!(
                        written(&int4, source, Int4Part::ZeroPoints),
                        ASYMMETRIC_ZERO_POINTS
                    );
                }
                assert_eq!(int4.dims(Int4Part::Packed), [3, 2, 16]);
            }
        }
    }

    /// A float16 weight with float16 scales, against ONNX Runtime's bytes
    /// for `w.astype(np.float16)` (the script above, scales `float16`): bit
    /// for bit, one value (row 2, byte 14) a step off the float32 weight's.
    #[test]
    fn a_float16_weight_quantizes_as_onnx_runtime_quantizes_it() {
        let halves: Vec<u8> =
            weight().iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let symmetric_scales: [u16; 6] = [47785, 14572, 47868, 15053, 47690, 47341];
        let asymmetric_scales: [u16; 6] = [15068, 14405, 15217, 14574, 14005, 13633];
        for symmetric in [true, false] {
            let int4 = Int4Weight {
                k: 40,
                n: 3,
                stored_n_by_k: false,
                stored: DType::Float16,
                scale: DType::Float16,
                block: 32,
                symmetric,
            };
            let mut packed = if symmetric { SYMMETRIC_PACKED } else { ASYMMETRIC_PACKED };
            if symmetric {
                packed[2][14] = 6;
            }
            let expected: Vec<u8> =
                packed.iter().flat_map(|row| row.iter().copied().chain([0; 12])).collect();
            assert_eq!(written(&int4, &halves, Int4Part::Packed), expected);
            let scales: Vec<u16> = written(&int4, &halves, Int4Part::Scales)
                .chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let want = if symmetric { symmetric_scales } else { asymmetric_scales };
            assert_eq!(scales, want);
        }
    }

    /// [`nibble`] is `round().clamp(0.0, 15.0) as u8` for every float
    /// sampled across the whole range of bit patterns, and each float within
    /// a few steps of every half between -1 and 16 (where rounding turns).
    #[test]
    fn nibble_rounds_half_away_from_zero_then_clamps() {
        let reference = |x: f32| x.round().clamp(0.0, 15.0) as u8;
        let sampled = (0..u32::MAX).step_by(4099).map(f32::from_bits);
        let halves = (-2..=32).flat_map(|h| {
            let half = h as f32 / 2.0;
            (-4i32..=4).map(move |step| f32::from_bits(half.to_bits().wrapping_add_signed(step)))
        });
        let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 0.49999997];
        for x in sampled.chain(halves).chain(special) {
            assert_eq!(nibble(x), reference(x), "{x:e} ({:#x})", x.to_bits());
        }
    }

    /// A bfloat16 N x K weight past several tiles of [`ROWS`] rows, its last
    /// block padded, with zero and NaN blocks: each part as the elementwise
    /// definition computes it (each value decoded alone, `f32::round`).
    #[test]
    fn a_streamed_bfloat16_weight_is_the_elementwise_definition() {
        let (k, n, block) = (100usize, 3 * ROWS + 5, 32usize);
        let mut values: Vec<f32> =
            (0..k * n).map(|i| ((i as f64 * 0.7).sin() * (1.0 + (i % 13) as f64)) as f32).collect();
        values[..block].fill(0.0);
        values[k..k + block].fill(-0.0);
        values[2 * k + 3] = f32::NAN;
        let source: Vec<u8> =
            values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect();
        for symmetric in [true, false] {
            let int4 = Int4Weight {
                k,
                n,
                stored_n_by_k: true,
                stored: DType::Bfloat16,
                scale: DType::Float32,
                block,
                symmetric,
            };
            let (mut packed, mut scales, mut zero_points) = (Vec::new(), Vec::new(), Vec::new());
            for row in source.chunks_exact(2 * k) {
                let row: Vec<f32> =
                    row.chunks_exact(2).map(|e| decode(DType::Bfloat16, e)).collect();
                let mut pending = None;
                for chunk in row.chunks(block) {
                    let (scale, zero_point) = int4.scale_and_zero_point(chunk);
                    scales.extend(scale.to_le_bytes());
                    match pending.take() {
                        None => pending = Some(zero_point),
                        Some(low) => zero_points.push(low | zero_point << 4),
                    }
                    let reciprocal = if scale != 0.0 { 1.0 / scale } else { 0.0 };
                    let q = |i: usize| {
                        chunk.get(i).map_or(0, |&v| {
                            (v * reciprocal + zero_point as f32).round().clamp(0.0, 15.0) as u8
                        })
                    };
                    packed.extend((0..block / 2).map(|p| q(2 * p) | q(2 * p + 1) << 4));
                }
                zero_points.extend(pending);
            }
            assert_eq!(written(&int4, &source, Int4Part::Packed), packed, "{symmetric}");
            assert_eq!(written(&int4, &source, Int4Part::Scales), scales, "{symmetric}");
            assert_eq!(written(&int4, &source, Int4Part::ZeroPoints), zero_points);
        }
    }

    /// ONNX Runtime 1.32's `quantize_dynamic(per_channel=True,
    /// weight_type=QuantType.QInt8, reduce_range=True)` on a model of one `MatMul(x, w)`, `w`
    /// the weight [`weight`] builds (K 40, N 3), printed once by:
    /// ```text
    /// g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    ///     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 40])],
    ///     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [numpy_helper.from_array(w, "w")])
    /// onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "f.onnx")
    /// quantize_dynamic("f.onnx", "q.onnx", per_channel=True, weight_type=QuantType.QInt8, reduce_range=True)
    /// for i in onnx.load("q.onnx").graph.initializer: print(i.name, numpy_helper.to_array(i).T.tolist())
    /// ```
    /// (`w_quantized` printed transposed: a row per column of N; `w_zero_point` all 0).
    const INT8_COLUMNS: [[i8; 40]; 3] = [
        [
            0, 34, 54, -5, -56, -13, 18, 10, 20, -36, -29, -20, 13, 46, 2, -31, -60, 1, 52, 15,
            -10, -9, -25, 26, 29, 29, -11, -48, -3, 27, 64, 4, -47, -17, 2, 9, 30, -15, -28, -37,
        ],
        [
            7, 46, 5, -19, -64, -10, 37, 18, 8, -7, -33, 1, 25, 43, -4, -44, -6, 14, 64, 14, -30,
            -18, -15, 6, 35, 10, -22, -48, 1, 42, 7, -8, -62, -18, 22, 18, 22, -5, -36, -20,
        ],
        [
            21, 59, 4, 41, 9, 0, 64, 24, 12, 20, 34, 4, 41, 36, 17, 61, 7, 35, 10, 7, 58, 27, 2,
            18, 40, 2, 39, 46, 12, 61, 10, 28, 10, 13, 50, 29, 9, 17, 44, 0,
        ],
    ];
    #[allow(clippy::excessive_precision)] // as numpy printed them
    const INT8_SCALES: [f32; 3] = [0.10405158251523972, 0.10910443961620331, 0.09829619526863098];

    /// Bit for bit ONNX Runtime's int8 values (K x N) and scales, from a
    /// K x N and an N x K source.
    #[test]
    fn int8_channels_are_onnx_runtimes_bit_for_bit() {
        let (k_by_n, n_by_k) = sources();
        let expected: Vec<u8> =
            (0..40).flat_map(|i| (0..3).map(move |j| INT8_COLUMNS[j][i] as u8)).collect();
        for stored_n_by_k in [false, true] {
            let source = if stored_n_by_k { &n_by_k } else { &k_by_n };
            let int8 = Int8Weight {
                k: 40,
                n: 3,
                stored_n_by_k,
                stored: DType::Float32,
                scale: DType::Float32,
            };
            let written = |part| {
                let mut out = Vec::new();
                int8.write(source, part, &mut out, None).unwrap();
                assert_eq!(out.len(), int8.len(part));
                out
            };
            assert_eq!(written(Int8Part::Values), expected, "stored N x K: {stored_n_by_k}");
            assert_eq!(floats(&written(Int8Part::Scales)), INT8_SCALES);
            assert_eq!(
                (int8.dims(Int8Part::Values), int8.dims(Int8Part::Scales)),
                (vec![40, 3], vec![3])
            );
        }
    }
}
