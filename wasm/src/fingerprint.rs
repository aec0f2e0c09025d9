//! The fingerprint functions: the same SHA-256 bytes as `idem_core::Fingerprint`, as hex.

use crate::sys::{Array, JsString, Object};
use idem_core::Fingerprint;
use idem_core::fingerprint::MAX_JSON_BYTES;
use wasm_bindgen::prelude::*;

use crate::js;
use crate::types::{BytesInput, FieldsInput, Paths};

/// SHA-256 of `bytes` as given (a string counts as its UTF-8 bytes), as 64 hex digits.
///
/// # Errors
///
/// When `bytes` is neither a `Uint8Array` nor a string, or a string that is not
/// well-formed UTF-16 (a lone surrogate has no UTF-8 form).
#[wasm_bindgen(js_name = fingerprintBytes)]
pub fn fingerprint_bytes(bytes: BytesInput) -> Result<String, JsError> {
    Ok(Fingerprint::of_bytes(&js::bytes("bytes", &bytes)?).to_hex())
}

/// SHA-256 over named fields, independent of their order, as 64 hex digits: for each
/// field by ascending name, the name's and then the value's length (u64 big-endian)
/// before its bytes. `fields` is an object or an array of `[name, value]` pairs.
///
/// # Errors
///
/// A malformed argument, a string that is not well-formed UTF-16, or a name given twice
/// (only possible with pairs).
#[wasm_bindgen(js_name = fingerprintFields)]
pub fn fingerprint_fields(fields: FieldsInput) -> Result<String, JsError> {
    let fields: JsValue = fields.into();
    let pairs: Array = if Array::is_array(&fields) {
        fields.unchecked_into()
    } else if fields.is_object() {
        Object::entries(fields.unchecked_ref())
    } else {
        return Err(js::invalid(
            "fields",
            "expected an object or an array of [name, value] pairs",
        ));
    };
    let mut owned: Vec<(String, Vec<u8>)> = Vec::with_capacity(pairs.length() as usize);
    for (i, pair) in pairs.iter().enumerate() {
        let at = format!("fields[{i}]");
        if !Array::is_array(&pair) || pair.unchecked_ref::<Array>().length() != 2 {
            return Err(js::invalid(&at, "expected a [name, value] pair"));
        }
        let pair: Array = pair.unchecked_into();
        let name = js::string(&format!("{at}[0]"), &pair.get(0))?;
        let value = js::bytes(&format!("{at}[1]"), &pair.get(1))?;
        owned.push((name, value));
    }
    let borrowed: Vec<(&str, &[u8])> = owned
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    Ok(Fingerprint::of_fields(&borrowed)
        .map_err(js::error)?
        .to_hex())
}

/// SHA-256 of the RFC 8785 canonical form of `text` without the members at
/// `ignoredPaths` (JSON Pointers, `*` for every member or element), as 64 hex digits.
/// The limits (size, nesting, numbers, strings) are listed in the package's README.
///
/// # Errors
///
/// Text that is larger than 16 MiB of UTF-8, not well-formed UTF-16, not JSON, or not
/// within the rules of canonical JSON, or a malformed path; the message gives the byte
/// offset.
#[wasm_bindgen(js_name = fingerprintJson)]
pub fn fingerprint_json(
    text: &JsString,
    #[wasm_bindgen(js_name = ignoredPaths)] ignored_paths: Option<Paths>,
) -> Result<String, JsError> {
    let text = json_text(text)?;
    let paths = paths(&JsValue::from(ignored_paths))?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    Ok(Fingerprint::of_json(&text, &paths)
        .map_err(js::error)?
        .to_hex())
}

/// The RFC 8785 canonical text that `fingerprintJson` hashes.
///
/// # Errors
///
/// As `fingerprintJson`.
#[wasm_bindgen(js_name = canonicalJson)]
pub fn canonical_json(
    text: &JsString,
    #[wasm_bindgen(js_name = ignoredPaths)] ignored_paths: Option<Paths>,
) -> Result<String, JsError> {
    let text = json_text(text)?;
    let paths = paths(&JsValue::from(ignored_paths))?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    Fingerprint::canonical_json(&text, &paths).map_err(js::error)
}

/// The JSON text argument as UTF-8. A string of more UTF-16 code units than the size
/// limit has at least as many bytes of UTF-8: it is refused before it is copied into
/// the module's memory (which never shrinks). The exact size is checked by the core.
fn json_text(text: &JsValue) -> Result<String, JsError> {
    if text.is_string() {
        let units = text.unchecked_ref::<JsString>().length() as usize;
        if units > MAX_JSON_BYTES {
            return Err(JsError::new(&format!(
                "json: at least {units} bytes ({units} UTF-16 code units), more than the \
                 limit of {MAX_JSON_BYTES} bytes"
            )));
        }
    }
    js::string("text", text)
}

/// The ignored paths: an array of strings, or none.
fn paths(value: &JsValue) -> Result<Vec<String>, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    js::strings(
        "ignoredPaths",
        value,
        "expected an array of JSON Pointer strings",
    )
}
