//! The few JS built-ins the bindings call, declared here rather than taken from `js-sys`:
//! linking `js-sys` keeps its async task machinery and a closure shim for each of its
//! callback signatures in the module (the function table holds them, so no optimizer can
//! drop them), 5 KB of code that nothing here calls. Names and TypeScript types are those
//! of `js-sys`, so the generated `.d.ts` is the same.

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// A JS array.
    #[wasm_bindgen(typescript_type = "Array<any>")]
    pub type Array;

    /// `new Array()`.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Array;

    /// `Array.isArray(value)`.
    #[wasm_bindgen(static_method_of = Array, js_name = isArray)]
    pub fn is_array(value: &JsValue) -> bool;

    /// `array.length`.
    #[wasm_bindgen(method, getter)]
    pub fn length(this: &Array) -> u32;

    /// `array[index]`.
    #[wasm_bindgen(method, indexing_getter)]
    pub fn get(this: &Array, index: u32) -> JsValue;

    /// `array.push(value)`.
    #[wasm_bindgen(method)]
    pub fn push(this: &Array, value: &JsValue) -> u32;

    /// A JS string.
    #[wasm_bindgen(is_type_of = JsValue::is_string, typescript_type = "string")]
    pub type JsString;

    /// `string.length`: UTF-16 code units.
    #[wasm_bindgen(method, getter)]
    pub fn length(this: &JsString) -> u32;

    /// `string.charCodeAt(index)`: the UTF-16 code unit at `index`.
    #[wasm_bindgen(method, js_name = charCodeAt)]
    fn char_code_at(this: &JsString, index: u32) -> u16;

    /// A plain JS object.
    #[wasm_bindgen(typescript_type = "object")]
    pub type Object;

    /// `{}`.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Object;

    /// `Object.keys(object)`.
    #[wasm_bindgen(static_method_of = Object)]
    pub fn keys(object: &Object) -> Array;

    /// `Object.entries(object)`: `[name, value]` pairs.
    #[wasm_bindgen(static_method_of = Object)]
    pub fn entries(object: &Object) -> Array;

    /// An `ArrayBuffer`.
    #[wasm_bindgen(typescript_type = "ArrayBuffer")]
    pub type ArrayBuffer;

    /// A `Uint8Array` (a Node `Buffer` is one).
    #[wasm_bindgen(typescript_type = "Uint8Array")]
    pub type Uint8Array;

    /// `new Uint8Array(buffer)`: a view of an `ArrayBuffer`.
    #[wasm_bindgen(constructor)]
    pub fn new(buffer: &JsValue) -> Uint8Array;

    /// `new Uint8Array(length)`, zeroed.
    #[wasm_bindgen(constructor)]
    pub fn new_with_length(length: u32) -> Uint8Array;

    /// `Uint8Array.from(bytes)`: a fresh array holding a copy of `bytes`.
    #[wasm_bindgen(static_method_of = Uint8Array, js_name = from)]
    fn copy_of_bytes(bytes: &[u8]) -> Uint8Array;

    /// The bytes of `array`, copied into the module once: `Object(array)` is `array`
    /// itself, and the glue copies what an import returns as `Vec<u8>`.
    #[wasm_bindgen(js_name = Object)]
    fn copy_into_module(array: &Uint8Array) -> Vec<u8>;

    /// `Reflect.get(target, key)`; throws when `target` is not an object.
    #[wasm_bindgen(js_namespace = Reflect, js_name = get, catch)]
    pub fn reflect_get(target: &JsValue, key: &JsValue) -> Result<JsValue, JsValue>;

    /// `Reflect.set(target, key, value)`; throws when `target` is not an object.
    #[wasm_bindgen(js_namespace = Reflect, js_name = set, catch)]
    pub fn reflect_set(target: &JsValue, key: &JsValue, value: &JsValue) -> Result<bool, JsValue>;

    /// `String(n)`: a number as JS writes it.
    #[wasm_bindgen(js_name = String)]
    pub fn number_to_string(n: f64) -> String;
}

impl Array {
    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = JsValue> + '_ {
        (0..self.length()).map(|i| self.get(i))
    }
}

impl<A: AsRef<JsValue>> FromIterator<A> for Array {
    fn from_iter<I: IntoIterator<Item = A>>(items: I) -> Array {
        let array = Array::new();
        for item in items {
            array.push(item.as_ref());
        }
        array
    }
}

impl JsString {
    /// The UTF-16 code units, in order (a call into JS for each).
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.length()).map(|i| self.char_code_at(i))
    }

    /// Whether the string is well-formed UTF-16: no lone surrogate.
    pub fn is_valid_utf16(&self) -> bool {
        char::decode_utf16(self.iter()).all(|c| c.is_ok())
    }
}

impl From<&str> for JsString {
    fn from(text: &str) -> JsString {
        JsValue::from_str(text).unchecked_into()
    }
}

impl From<&[u8]> for Uint8Array {
    /// A fresh `Uint8Array` holding a copy of `bytes`.
    fn from(bytes: &[u8]) -> Uint8Array {
        Uint8Array::copy_of_bytes(bytes)
    }
}

impl Uint8Array {
    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        copy_into_module(self)
    }
}
