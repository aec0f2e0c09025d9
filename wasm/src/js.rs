//! Conversions between JS values and the core's plain data, each check naming its field.

use crate::sys::{self, Array, ArrayBuffer, JsString, Object, Uint8Array};
use core::fmt;
use idem_core::Timestamp;
use idem_core::quote::Quoted;
use wasm_bindgen::prelude::*;

/// Largest integer a JS number holds exactly: 2^53 − 1.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

#[wasm_bindgen]
extern "C" {
    /// Web Crypto's `crypto.getRandomValues`, where the environment has it.
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
    fn get_random_values(buf: &Uint8Array) -> Result<JsValue, JsValue>;

    /// A JS string, for the method below.
    type StringValue;

    /// `String.prototype.isWellFormed` (ES2024: Node 20, Chrome 111, Firefox 119,
    /// Safari 16.4); throws where the engine lacks it.
    #[wasm_bindgen(method, catch, js_name = isWellFormed)]
    fn is_well_formed(this: &StringValue) -> Result<bool, JsValue>;
}

/// An error for `field`: "`field`: `problem`".
pub(crate) fn invalid(field: &str, problem: &str) -> JsError {
    JsError::new(&format!("{field}: {problem}"))
}

/// A core error as a JS `Error` with its message. `From<E> for JsError` (what `?` uses)
/// compiles a copy of the formatting for each error type; this formats through `dyn`.
pub(crate) fn error(error: impl fmt::Display) -> JsError {
    message(&error)
}

fn message(error: &dyn fmt::Display) -> JsError {
    JsError::new(&error.to_string())
}

/// A short description of a JS value for error messages.
fn describe(value: &JsValue) -> String {
    if let Some(n) = value.as_f64() {
        show(n)
    } else if value.is_string() {
        String::from("a string")
    } else if value.is_undefined() {
        String::from("undefined")
    } else if value.is_null() {
        String::from("null")
    } else if Array::is_array(value) {
        String::from("an array")
    } else {
        value.js_typeof().as_string().unwrap_or_default()
    }
}

/// `n` as JS writes it. Rust's own float formatting would add ~20 KB to the module.
fn show(n: f64) -> String {
    sys::number_to_string(n)
}

/// `nowMs` and other times: a finite, non-negative number of ms since the epoch, at most
/// 2^53 − 1. A fraction (`performance.now()` based clocks) is cut to whole milliseconds.
pub(crate) fn timestamp(field: &str, ms: f64) -> Result<Timestamp, JsError> {
    if ms.is_finite() && (0.0..=MAX_SAFE_INTEGER).contains(&ms) {
        // In range and finite, so the cast neither saturates nor wraps.
        Ok(Timestamp(ms as u64))
    } else {
        Err(invalid(
            field,
            &format!(
                "{}, must be a number of milliseconds since the epoch, from 0 to 2^53 - 1",
                show(ms)
            ),
        ))
    }
}

/// A `u64` from a JS number (a safe non-negative integer) or a BigInt.
pub(crate) fn unsigned(field: &str, value: &JsValue) -> Result<u64, JsError> {
    if value.is_bigint() {
        return u64::try_from(value.clone())
            .map_err(|_| invalid(field, "BigInt out of range, must be from 0 to 2^64 - 1"));
    }
    match value.as_f64() {
        Some(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) => Ok(n as u64),
        _ => Err(invalid(
            field,
            &format!(
                "{}, must be an integer from 0 to 2^53 - 1 (or a BigInt)",
                describe(value)
            ),
        )),
    }
}

/// A JS number for a `u64`; exact up to 2^53 − 1, the nearest double above.
pub(crate) fn number(n: u64) -> JsValue {
    JsValue::from_f64(n as f64)
}

/// Bytes from a `Uint8Array` (a Node `Buffer` is one), an `ArrayBuffer`, or a string
/// (its UTF-8 encoding; refused when it is not well-formed UTF-16, see [`text`]).
pub(crate) fn bytes(field: &str, value: &JsValue) -> Result<Vec<u8>, JsError> {
    if value.is_string() {
        Ok(text(field, value)?.into_bytes())
    } else if let Some(array) = value.dyn_ref::<Uint8Array>() {
        Ok(array.to_vec())
    } else if value.is_instance_of::<ArrayBuffer>() {
        Ok(Uint8Array::new(value).to_vec())
    } else {
        Err(invalid(
            field,
            &format!("{}, expected a Uint8Array or a string", describe(value)),
        ))
    }
}

/// An array of strings (see [`text`]), named `field` in errors; `expected` says what
/// the array should be when `value` is not one.
pub(crate) fn strings(
    field: &str,
    value: &JsValue,
    expected: &str,
) -> Result<Vec<String>, JsError> {
    if !Array::is_array(value) {
        return Err(invalid(field, expected));
    }
    let mut out = Vec::new();
    for (i, item) in value.unchecked_ref::<Array>().iter().enumerate() {
        out.push(string(&format!("{field}[{i}]"), &item)?);
    }
    Ok(out)
}

/// A string argument (see [`text`]).
pub(crate) fn string(field: &str, value: &JsValue) -> Result<String, JsError> {
    if value.is_string() {
        text(field, value)
    } else {
        Err(invalid(
            field,
            &format!("{}, expected a string", describe(value)),
        ))
    }
}

/// A JS string as UTF-8, refused when it is not well-formed UTF-16.
///
/// A JS string may hold a lone surrogate, which has no UTF-8 form: converting it would
/// put U+FFFD in its place, so `"a\ud800"`, `"a\udfff"` and `"a\ufffd"` would become one
/// string, with one fingerprint. Checked on the JS string, before converting it: by the
/// engine's `isWellFormed` where it has one (microseconds for megabytes), else code unit
/// by code unit (`JsString::is_valid_utf16`, a call into JS for each: about a second for
/// 15 MB). `value` must be a string (`is_string`); anything else is an empty string.
pub(crate) fn text(field: &str, value: &JsValue) -> Result<String, JsError> {
    let string: &JsString = value.unchecked_ref();
    let well_formed = value
        .unchecked_ref::<StringValue>()
        .is_well_formed()
        .unwrap_or_else(|_| string.is_valid_utf16());
    if !well_formed {
        return Err(lone_surrogate(field, string));
    }
    Ok(value.as_string().unwrap_or_default())
}

/// The error for a string that is not well-formed UTF-16, naming its first lone surrogate.
fn lone_surrogate(field: &str, string: &JsString) -> JsError {
    let units: Vec<u16> = string.iter().collect();
    let mut at = 0;
    while let Some(&unit) = units.get(at) {
        let paired = (0xD800..0xDC00).contains(&unit)
            && units
                .get(at + 1)
                .is_some_and(|u| (0xDC00..0xE000).contains(u));
        if paired {
            at += 2;
        } else if (0xD800..0xE000).contains(&unit) {
            // Four lower-case hex digits, as `{:04x}` writes them (without its padding code).
            let hex: String = (0..4)
                .rev()
                .filter_map(|i| char::from_digit(u32::from(unit >> (4 * i)) & 0xf, 16))
                .collect();
            return invalid(
                field,
                &format!("not well-formed UTF-16: code unit {at} is a lone surrogate (\\u{hex})"),
            );
        } else {
            at += 1;
        }
    }
    invalid(field, "not well-formed UTF-16")
}

/// A fresh `Uint8Array` holding `bytes`.
pub(crate) fn uint8_array(bytes: &[u8]) -> JsValue {
    Uint8Array::from(bytes).into()
}

/// `N` random bytes from `crypto.getRandomValues`.
pub(crate) fn random_bytes<const N: usize>(field: &str) -> Result<[u8; N], JsError> {
    let buf = Uint8Array::new_with_length(N as u32);
    get_random_values(&buf).map_err(|_| {
        invalid(
            field,
            "not given, and crypto.getRandomValues is not available here; pass random bytes",
        )
    })?;
    let mut out = [0u8; N];
    out.copy_from_slice(&buf.to_vec());
    Ok(out)
}

/// Names separated by ", " (what `[&str]::join` makes, without its generic code).
struct Listed<'a>(&'a [&'a str]);

impl fmt::Display for Listed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// A plain options object whose members are read by name.
pub(crate) struct Fields<'a> {
    what: &'a str,
    object: Option<Object>,
}

impl<'a> Fields<'a> {
    /// Reads `value` as the object `what`; `undefined` and `null` are an empty object.
    /// Refuses a member not in `known`, so a misspelt option never goes unnoticed.
    pub(crate) fn new(what: &'a str, value: &JsValue, known: &[&str]) -> Result<Self, JsError> {
        if value.is_undefined() || value.is_null() {
            return Ok(Fields { what, object: None });
        }
        if !value.is_object() || Array::is_array(value) {
            return Err(invalid(
                what,
                &format!("{}, expected an object", describe(value)),
            ));
        }
        let object: Object = value.clone().unchecked_into();
        for name in Object::keys(&object).iter() {
            let name = name.as_string().unwrap_or_default();
            if !known.contains(&name.as_str()) {
                return Err(invalid(
                    what,
                    &format!(
                        "unknown member {}, expected one of {}",
                        Quoted(&name),
                        Listed(known)
                    ),
                ));
            }
        }
        Ok(Fields {
            what,
            object: Some(object),
        })
    }

    /// The member `name`, `None` when absent, `undefined` or `null`.
    pub(crate) fn get(&self, name: &str) -> Option<JsValue> {
        let object = self.object.as_ref()?;
        sys::reflect_get(object, &JsValue::from_str(name))
            .ok()
            .filter(|v| !v.is_undefined() && !v.is_null())
    }

    /// `what.name`, for error messages.
    pub(crate) fn path(&self, name: &str) -> String {
        format!("{}.{name}", self.what)
    }

    /// The member `name` as a `u64`, if present.
    pub(crate) fn unsigned(&self, name: &str) -> Result<Option<u64>, JsError> {
        self.get(name)
            .map(|v| unsigned(&self.path(name), &v))
            .transpose()
    }

    /// The member `name` as a string, if present.
    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, JsError> {
        self.get(name)
            .map(|v| string(&self.path(name), &v))
            .transpose()
    }

    /// The member `name` as a string; absent is an error.
    pub(crate) fn required_string(&self, name: &str) -> Result<String, JsError> {
        self.string(name)?
            .ok_or_else(|| invalid(&self.path(name), "missing, expected a string"))
    }

    /// The member `name` as bytes, if present.
    pub(crate) fn bytes(&self, name: &str) -> Result<Option<Vec<u8>>, JsError> {
        self.get(name)
            .map(|v| bytes(&self.path(name), &v))
            .transpose()
    }
}

/// Builds a plain JS object member by member.
pub(crate) struct Builder(Object);

impl Builder {
    pub(crate) fn new() -> Builder {
        Builder(Object::new())
    }

    /// Sets member `name` to `value`.
    pub(crate) fn set(self, name: &str, value: impl Into<JsValue>) -> Builder {
        // Defining a member of a fresh plain object cannot fail: it has no setters and is
        // not frozen.
        let _ = sys::reflect_set(&self.0, &JsValue::from_str(name), &value.into());
        self
    }

    /// Sets member `name` to `value` when there is one; leaves it out otherwise.
    pub(crate) fn maybe(self, name: &str, value: Option<impl Into<JsValue>>) -> Builder {
        match value {
            Some(v) => self.set(name, v),
            None => self,
        }
    }

    /// The object, as the typed handle `T` the `.d.ts` describes.
    pub(crate) fn build<T: JsCast>(self) -> T {
        self.0.unchecked_into()
    }
}
