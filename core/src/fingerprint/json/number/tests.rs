//! The parser held against core's `f64::from_str`, which rounds correctly: hard cases,
//! exact midpoints between doubles and just either side, and random literals.

use super::*;
use alloc::format;
use alloc::string::{String, ToString};
use proptest::prelude::*;

fn check(literal: &str) {
    let expected: f64 = literal.parse().unwrap();
    assert_eq!(
        parse(literal).to_bits(),
        expected.to_bits(),
        "{literal}: expected {expected:e}"
    );
}

/// The decimal digits of m · 2^k, exactly, and the power of ten they are scaled by:
/// value = digits · 10^-places. Schoolbook arithmetic on digits, one doubling or one
/// multiplication by 5 at a time (m · 2^-j = m · 5^j · 10^-j).
fn exact(m: u64, k: i32) -> (Vec<u8>, u32) {
    let mut digits: Vec<u8> = m.to_string().bytes().map(|b| b - b'0').collect();
    let (factor, times) = if k >= 0 { (2, k) } else { (5, -k) };
    for _ in 0..times {
        let mut carry = 0;
        for d in digits.iter_mut().rev() {
            let x = *d * factor + carry;
            *d = x % 10;
            carry = x / 10;
        }
        if carry > 0 {
            digits.insert(0, carry);
        }
    }
    (digits, if k >= 0 { 0 } else { k.unsigned_abs() })
}

fn text(digits: &[u8], places: u32) -> String {
    let digits: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
    format!("{digits}e-{places}")
}

/// The exact midpoint above the positive finite double `x`, and texts a hair above and a
/// hair below it.
fn midpoint_texts(x: f64) -> [String; 3] {
    let bits = x.to_bits();
    let (field, fraction) = ((bits >> 52) as i32, bits & ((1 << 52) - 1));
    let (m, k) = if field == 0 {
        (fraction, -1074)
    } else {
        (fraction | 1 << 52, field - 1075)
    };
    let (digits, places) = exact(2 * m + 1, k - 1);
    let mut above = digits.clone();
    above.push(1);
    let mut below = digits.clone();
    for d in below.iter_mut().rev() {
        if *d > 0 {
            *d -= 1;
            break;
        }
        *d = 9;
    }
    below.push(9);
    [
        text(&digits, places),
        text(&above, places + 1),
        text(&below, places + 1),
    ]
}

#[test]
fn hard_cases() {
    #[rustfmt::skip]
    let cases = [
        "0", "-0", "0.0", "0e0", "-0.0e-7", "0.000e999999999999999999999", "1", "-1", "1.5",
        "0.1", "0.3", "1e-7", "0.000001", "333333333.33333325", "1424953923781206.2",
        "123456789012345678901234567890", "9007199254740992", "9007199254740993",
        "9007199254740994", "9007199254740995", "9007199254740993.00000000000000000000001",
        "1e22", "1e23", "9.999999999999999e22", "8.98846567431158e307", "1e308",
        "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308",
        "1e309", "-1e400", "1E99999999999999999999", "2.2250738585072011e-308",
        "2.2250738585072012e-308", "2.2250738585072014e-308", "4.9406564584124654e-324",
        "5e-324", "2.4703282292062327e-324", "2.4703282292062328e-324", "1e-323", "1e-400",
        "1e-99999999999999999999", "0.00000000000000000000000000000000000000001e+40",
        "1000000000000000000000000000000000000000e-39",
    ];
    for literal in cases {
        check(literal);
    }
}

#[test]
fn midpoints_round_to_even_and_a_hair_decides() {
    let doubles = [
        0.0,
        f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff), // the largest subnormal
        f64::MIN_POSITIVE,
        1.0,
        9007199254740992.0,
        1e23,
        f64::from_bits(0x7fef_ffff_ffff_fffe),
        f64::MAX, // its midpoint above rounds to infinity
    ];
    for x in doubles {
        for literal in midpoint_texts(x) {
            check(&literal);
        }
    }
    // Past MAX_DIGITS: the longest midpoint (768 digits, below the largest subnormal)
    // then 300 zeros and a 1 is still above it.
    let [mid, _, _] = midpoint_texts(f64::from_bits(0x000f_ffff_ffff_fffe));
    let (digits, places) = mid.split_once("e-").unwrap();
    let places: u32 = places.parse().unwrap();
    let far = format!("{digits}{}1e-{}", "0".repeat(300), places + 301);
    assert_eq!(digits.len(), 768);
    check(&far);
    check(&format!("{digits}{}e-{}", "0".repeat(300), places + 300));
}

#[test]
fn quotient_corrects_estimates_one_too_high() {
    // 2^63 + 2^32 - 1: its top 32 bits, 2^31, understate it by almost 2^32.
    let divisor = Big(vec![u32::MAX, 1 << 31]);
    let mut exact = divisor.clone();
    exact.shl(53);
    assert_eq!(quotient(&exact, &divisor, 0), (1 << 53, Ordering::Less));
    // One less: the top bits say 2^26 for the first digit and 2^27 for the second, the
    // quotient is 2^53 - 1 with the remainder divisor - 1, more than half.
    let mut below = exact.clone();
    below.sub(&Big(vec![1]));
    assert_eq!(
        quotient(&below, &divisor, 0),
        ((1 << 53) - 1, Ordering::Greater)
    );
    // The same through the shifts: dividend · 2^3 / (divisor · 2^3).
    let (mut num, mut den) = (below.clone(), divisor.clone());
    num.shl(3);
    den.shl(6);
    assert_eq!(quotient(&num, &den, 3), ((1 << 53) - 1, Ordering::Greater));
}

proptest! {
    #[test]
    fn agrees_with_core_on_short_literals(
        negative in any::<bool>(),
        int in "0|[1-9][0-9]{0,24}",
        fraction in proptest::option::of("[0-9]{1,24}"),
        exp in proptest::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
    ) {
        let mut literal = String::from(if negative { "-" } else { "" });
        literal.push_str(&int);
        if let Some(f) = fraction {
            literal.push('.');
            literal.push_str(&f);
        }
        if let Some((e, sign, digits)) = exp {
            literal.push_str(&format!("{e}{sign}{digits}"));
        }
        check(&literal);
    }

    #[test]
    fn agrees_with_core_on_long_literals(digits in "[0-9]{1,1000}", exp in -1400i32..400) {
        check(&format!("0.{digits}e{exp}"));
    }

    #[test]
    fn agrees_with_core_at_midpoints(bits in 0u64..0x7ff0_0000_0000_0000) {
        for literal in midpoint_texts(f64::from_bits(bits)) {
            check(&literal);
        }
    }
}
