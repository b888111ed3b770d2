//! BLT's byte-group hash (`byte_group_hash_function`) computed in limbs,
//! the reference's `_patch_byte_group_hash`.
//!
//! The hash of each window of `group_size` bytes is `sum(byte_k * prime**k)`
//! in int64 (wrapping), then `% max_hash`. Its powers and sums pass 2**53,
//! which ONNX Runtime's int64 `Pow` and `ReduceSum` compute through double,
//! and 2**31, where OpenVINO's CPU plugin computes int64 (in int32, its
//! `%` through float32, exact below 2**24). Each power, known when the call
//! comes, is split into base-2**b limbs (its value modulo 2**64, as torch's
//! wrapping gives it); each lane sums the window's bytes times one limb of
//! each power, and one pass from the lowest lane carries into the next and
//! folds each digit into the running remainder `% max_hash`, so no value
//! leaves what both runtimes compute exactly. The last carry dropped is
//! int64's wraparound; the last digit's top bit says the int64 sum was
//! negative, whose remainder is 2**64 lower. The reference uses 8-bit limbs
//! and leaves a table past 2**16 to the original; here the limbs narrow
//! (4, 2, 1 bits) so that a digit times a limb's weight stays below 2**24
//! for tables up to 2**23 (BLT's own is 500002). A lane (a group's ids
//! times limbs, plus the carry) stays exact for ids below 2**20; BLT's are
//! bytes, below 260.

use hfx_sdk::prelude::*;

/// What OpenVINO's CPU plugin computes `%` exactly below (float32's mantissa).
const EXACT: u64 = 1 << 24;

#[hfx_sdk::patch(targets = ["transformers.models.blt.modeling_blt.byte_group_hash_function"])]
fn patch_byte_group_hash(call: PatchedCall) -> Result<Program> {
    let Some(tokens) = call.param(0, "token_ids").filter(|&s| call.tensor(s).is_some()) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let read = |index, name, default| match call.param(index, name) {
        None => Some(default),
        Some(slot) => call.int(slot),
    };
    let (Some(group), Some(prime), Some(max_hash)) =
        (read(1, "group_size", 2), read(2, "prime", 1_000_000_007), read(3, "max_hash", 30_000))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some(bits) = limb_bits(max_hash) else { return Ok(ProgramBuilder::passthrough(&call)) };
    if !(1..=64).contains(&group) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let (group, max_hash) = (group as usize, max_hash as u64);
    let count = 64 / bits;
    let base = 1u64 << bits;
    // prime**k modulo 2**64: the int64 torch's wrapping power holds, unsigned.
    let powers: Vec<u64> = (0..group)
        .scan(1u64, |power, _| {
            let this = *power;
            *power = power.wrapping_mul(prime as u64);
            Some(this)
        })
        .collect();

    let mut p = ProgramBuilder::new(&call);
    let int64 = p.dtype("int64");
    let device = p.getattr(tokens, "device");
    let batch = p.size(tokens, 0);
    let width = p.int(group as i64 - 1);
    let padding_shape = p.pack(&[batch, width]);
    let padding =
        p.call_kw("torch.zeros", &[padding_shape], &[("dtype", int64), ("device", device)]);
    let tokens = p.call("torch.Tensor.to", &[tokens, int64]);
    let parts = p.pack(&[padding, tokens]);
    let one = p.int(1);
    let padded = p.call("torch.cat", &[parts, one]);
    let size = p.int(group as i64);
    let windows = p.call("torch.Tensor.unfold", &[padded, one, size, one]);
    // limbs[position][k]: the position-th base-2**b digit of prime**k.
    let rows: Vec<Slot> = (0..count)
        .map(|position| {
            let digits: Vec<Slot> = powers
                .iter()
                .map(|power| p.int(((power >> (bits * position)) % base) as i64))
                .collect();
            p.pack(&digits)
        })
        .collect();
    let rows = p.pack(&rows);
    let limbs = p.call_kw("torch.tensor", &[rows], &[("dtype", int64), ("device", device)]);
    let minus_two = p.int(-2);
    let minus_one = p.int(-1);
    let windows = p.call("torch.Tensor.unsqueeze", &[windows, minus_two]);
    let products = p.call("torch.mul", &[windows, limbs]);
    let lanes = p.call("torch.sum", &[products, minus_one]);

    let modulus = p.int(max_hash as i64);
    let mask = p.int(base as i64 - 1);
    let divisor = p.int(base as i64);
    let (mut value, mut carry, mut digit) = (None, None, None);
    for position in 0..count {
        let index = p.int(position as i64);
        let lane = p.call("torch.select", &[lanes, minus_one, index]);
        let total = match carry {
            Some(carry) => p.call("torch.add", &[lane, carry]),
            None => lane,
        };
        let this = p.call("torch.bitwise_and", &[total, mask]);
        if position + 1 < count {
            let whole = p.call("torch.sub", &[total, this]);
            carry = Some(p.call("torch.floor_divide", &[whole, divisor]));
        }
        // digit * (2**(b * position) % max_hash) < 2**b * max_hash <= 2**24.
        let weight = p.int(pow_mod(2, (bits * position) as u64, max_hash) as i64);
        let term = p.call("torch.mul", &[this, weight]);
        let sum = match value {
            Some(value) => p.call("torch.add", &[value, term]),
            None => term,
        };
        value = Some(p.call("torch.remainder", &[sum, modulus]));
        digit = Some(this);
    }
    let (value, digit) = (value.expect("64 / b limbs"), digit.expect("64 / b limbs"));
    let top = p.int(1 << (bits - 1));
    let negative = p.call("torch.ge", &[digit, top]);
    let negative = p.call("torch.Tensor.to", &[negative, int64]);
    let wrap = p.int(pow_mod(2, 64, max_hash) as i64);
    let lowered = p.call("torch.mul", &[negative, wrap]);
    let value = p.call("torch.sub", &[value, lowered]);
    let value = p.call("torch.add", &[value, modulus]);
    let hashes = p.call("torch.remainder", &[value, modulus]);
    Ok(p.finish(hashes))
}

/// The widest limb (bits dividing 64) whose digit times a weight below
/// `max_hash` stays below [`EXACT`]; None past 2**23 or for no table.
fn limb_bits(max_hash: i64) -> Option<usize> {
    let max_hash = u64::try_from(max_hash).ok().filter(|&m| m > 0)?;
    [8, 4, 2, 1].into_iter().find(|&bits| max_hash << bits <= EXACT)
}

/// `base**exponent % modulus`.
fn pow_mod(base: u64, exponent: u64, modulus: u64) -> u64 {
    let (mut result, mut base, mut exponent) = (1 % modulus as u128, base as u128, exponent);
    let modulus = modulus as u128;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = result * base % modulus;
        }
        base = base * base % modulus;
        exponent >>= 1;
    }
    result as u64
}
