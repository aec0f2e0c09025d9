//! JSON number literals to the nearest double (ties to even), without tables.
//!
//! core's `f64::from_str` gives the same doubles, but its Eisel-Lemire tables (10 KB of
//! 128-bit powers of five) and its slow path weigh ~18 KB of the browser package's wasm,
//! 15 KB gzipped. Canonical JSON needs the right double, not speed, so this parser keeps
//! only Clinger's fast path and otherwise rounds exactly with a small big integer:
//! value = num / den, and the 53-bit quotient of `num · 2^s / den` with its remainder
//! decides the rounding. Its tests hold it against core's parser.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// Significant digits kept; the ones after only tell whether the value is above what is
/// kept. The exact midpoint between two adjacent doubles has at most 768 significant
/// digits (just below the largest subnormal), and its first digit is at most one place
/// below the value's: with 800 kept, the kept digits and the whole lie on the same side
/// of every midpoint, or the kept digits are the midpoint itself and the whole above it.
const MAX_DIGITS: usize = 800;

/// Beyond this, a decimal exponent makes any value 0 or infinite; saturating there keeps
/// the arithmetic in range.
const MAX_EXPONENT: i64 = 1 << 40;

/// `literal`, which matches `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as
/// the nearest double; infinite when it rounds past `f64::MAX`.
pub(super) fn parse(literal: &str) -> f64 {
    let bytes = literal.as_bytes();
    let (negative, bytes) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let (mantissa, exponent) = match bytes.iter().position(|&b| b == b'e' || b == b'E') {
        Some(at) => (&bytes[..at], exponent(&bytes[at + 1..])),
        None => (bytes, 0),
    };
    let magnitude = nearest(&Digits::read(mantissa), exponent);
    if negative { -magnitude } else { magnitude }
}

/// The exponent after `e`: an optional sign and digits, saturated at [`MAX_EXPONENT`].
fn exponent(bytes: &[u8]) -> i64 {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, bytes),
    };
    let mut value: i64 = 0;
    for &b in digits {
        value = (value * 10 + i64::from(b - b'0')).min(MAX_EXPONENT);
    }
    if negative { -value } else { value }
}

/// The significant digits of a mantissa: value = `big` · 10^`scale` (+ a little more when
/// `cut`).
struct Digits {
    /// The kept digits as an integer.
    big: Big,
    /// The same while it fits (at most 19 digits), for the fast path.
    small: u64,
    /// How many digits `big` holds, leading zeros not counted.
    count: usize,
    scale: i64,
    /// A nonzero digit was dropped after the first [`MAX_DIGITS`].
    cut: bool,
}

impl Digits {
    fn read(mantissa: &[u8]) -> Digits {
        let mut digits = Digits {
            big: Big(Vec::new()),
            small: 0,
            count: 0,
            scale: 0,
            cut: false,
        };
        // Digits go into `big` nine at a time.
        let (mut chunk, mut chunk_len) = (0u32, 0u32);
        let mut fraction = false;
        for &b in mantissa {
            if b == b'.' {
                fraction = true;
                continue;
            }
            let digit = b - b'0';
            if digits.count == 0 && digit == 0 {
                // A leading zero.
                digits.scale -= i64::from(fraction);
            } else if digits.count < MAX_DIGITS {
                digits.count += 1;
                digits.scale -= i64::from(fraction);
                digits.small = digits.small.wrapping_mul(10).wrapping_add(u64::from(digit));
                chunk = chunk * 10 + u32::from(digit);
                chunk_len += 1;
                if chunk_len == 9 {
                    digits.big.mul_add(POW10_U32[9], chunk);
                    (chunk, chunk_len) = (0, 0);
                }
            } else {
                digits.cut |= digit != 0;
                digits.scale += i64::from(!fraction);
            }
        }
        digits.big.mul_add(POW10_U32[chunk_len as usize], chunk);
        digits
    }
}

/// 10^0 to 10^9.
const POW10_U32: [u32; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The double nearest to `digits` · 10^`exponent`, non-negative.
fn nearest(digits: &Digits, exponent: i64) -> f64 {
    if digits.count == 0 {
        return 0.0;
    }
    let e = digits.scale + exponent;
    // The value lies in [10^(count + e - 1), 10^(count + e)).
    let order = digits.count as i64 + e;
    if order > 310 {
        // At least 10^310, past f64::MAX (1.8e308).
        return f64::INFINITY;
    }
    if order < -323 {
        // Below 10^-324, under half the smallest subnormal (4.9e-324): rounds to 0.
        return 0.0;
    }
    // Clinger's fast path: both operands are exact doubles, so one rounding is all.
    if digits.count <= 19 && digits.small < 1 << 53 && (-22..=22).contains(&e) {
        let mut power = 1.0;
        for _ in 0..e.unsigned_abs() {
            power *= 10.0; // exact up to 10^22
        }
        let small = digits.small as f64; // exact below 2^53
        return if e < 0 { small / power } else { small * power };
    }
    // `order` bounds e to about -1124..=310, so the powers of ten stay a few KB at most.
    let mut num = digits.big.clone();
    let mut den = Big(vec![1]);
    if e < 0 {
        den.mul_pow10(e.unsigned_abs());
    } else {
        num.mul_pow10(e.unsigned_abs());
    }
    // value = q · 2^-s with q in [2^52, 2^53) for a normal double.
    let mut s = 53 - (num.bits() - den.bits());
    let mut q = quotient(&num, &den, s);
    if q.0 >= 1 << 53 {
        s -= 1;
        q = quotient(&num, &den, s);
    }
    if 52 - s < -1022 {
        // Subnormal: the grid is 2^-1074 whatever the value.
        s = 1074;
        q = quotient(&num, &den, s);
    }
    let (mut q, half) = q;
    if half == Ordering::Greater || (half == Ordering::Equal && (digits.cut || q & 1 == 1)) {
        q += 1;
    }
    if q == 1 << 53 {
        q >>= 1;
        s -= 1;
    }
    let exponent = 52 - s;
    if exponent > 1023 {
        f64::INFINITY
    } else if q >= 1 << 52 {
        // In range: -1022 <= exponent <= 1023.
        f64::from_bits((((exponent + 1023) as u64) << 52) | (q - (1 << 52)))
    } else {
        f64::from_bits(q) // subnormal, s = 1074
    }
}

/// floor(num · 2^s / den), below 2^54 for the `s` given, and how twice the remainder
/// compares with `den` (below, at or above half a unit). Long division in two 27-bit
/// digits, so no step needs more than 64-bit arithmetic.
fn quotient(num: &Big, den: &Big, s: i64) -> (u64, Ordering) {
    let (mut rest, mut divisor) = (num.clone(), den.clone());
    if s >= 0 {
        rest.shl(s.unsigned_abs());
    } else {
        divisor.shl(s.unsigned_abs());
    }
    let mut high = divisor.clone();
    high.shl(27);
    let q = u64::from(digit(&mut rest, &high)) << 27 | u64::from(digit(&mut rest, &divisor));
    rest.shl(1);
    (q, rest.cmp(&divisor))
}

/// floor(rest / step), for a quotient below 2^27; leaves the remainder in `rest`.
///
/// With `t` = bits(step) − 32, the top 32 bits of `step`, `st` (at least 2^31), and the
/// bits of `rest` from `t` up, `rt` (below 2^59), give the estimate ⌊rt / st⌋, which is
/// the quotient or one above it. Above: rest < (rt + 1) · 2^t and step ≥ st · 2^t, so
/// rest / step < (rt + 1) / st ≤ estimate + 1. At most one: step < (st + 1) · 2^t, so
/// rest / step > rt / (st + 1) = rt / st − rt / (st · (st + 1)) > estimate − 2^59 / 2^62.
fn digit(rest: &mut Big, step: &Big) -> u32 {
    let t = step.bits() - 32;
    let mut digit = (rest.bits_from(t) / step.bits_from(t)) as u32; // below 2^28
    let mut product = step.clone();
    product.mul_add(digit, 0);
    if product.cmp(rest) == Ordering::Greater {
        digit -= 1;
        product.sub(step);
    }
    rest.sub(&product);
    digit
}

/// A non-negative integer: 32-bit limbs, least significant first, no zero limb on top.
#[derive(Clone)]
struct Big(Vec<u32>);

impl Big {
    /// self · m + a.
    fn mul_add(&mut self, m: u32, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            let x = u64::from(*limb) * u64::from(m) + carry;
            *limb = x as u32; // the low half
            carry = x >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32); // below 2^32
        }
        self.trim(); // when m is 0
    }

    /// floor(self / 2^t) (self · 2^-t for a negative `t`), for a result below 2^64.
    fn bits_from(&self, t: i64) -> u64 {
        let mut out = 0u64;
        for (i, &limb) in self.0.iter().enumerate() {
            // Where bit 0 of this limb lands.
            let at = i as i64 * 32 - t;
            if (0..64).contains(&at) {
                out |= u64::from(limb) << at;
            } else if (-31..0).contains(&at) {
                out |= u64::from(limb >> -at);
            }
        }
        out
    }

    fn mul_pow10(&mut self, mut k: u64) {
        while k > 0 {
            let step = k.min(9);
            self.mul_add(POW10_U32[step as usize], 0);
            k -= step;
        }
    }

    /// Bit length; 0 for zero.
    fn bits(&self) -> i64 {
        match self.0.last() {
            Some(top) => self.0.len() as i64 * 32 - i64::from(top.leading_zeros()),
            None => 0,
        }
    }

    fn shl(&mut self, k: u64) {
        if self.0.is_empty() {
            return;
        }
        let (limbs, bits) = ((k / 32) as usize, (k % 32) as u32);
        if bits > 0 {
            let mut carry = 0;
            for limb in &mut self.0 {
                let x = *limb;
                *limb = (x << bits) | carry;
                carry = x >> (32 - bits);
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        if limbs > 0 {
            let mut shifted = vec![0; limbs];
            shifted.extend_from_slice(&self.0);
            self.0 = shifted;
        }
    }

    /// self − other, for other ≤ self.
    fn sub(&mut self, other: &Big) {
        let mut borrow = false;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let (x, b1) = limb.overflowing_sub(other.0.get(i).copied().unwrap_or(0));
            let (x, b2) = x.overflowing_sub(u32::from(borrow));
            *limb = x;
            borrow = b1 || b2;
        }
        self.trim();
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
}

#[cfg(test)]
mod tests;
