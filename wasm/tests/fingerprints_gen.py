#!/usr/bin/env python3
"""Writes testdata/fingerprints.json: the fingerprint vectors every target must agree on.

The expected values are computed here, independently of idem-core: SHA-256 from Python's
hashlib, field encodings built byte by byte from the rule in DESIGN.md §2, canonical JSON
from Python's json module (sort_keys, no whitespace) for the simple documents, and the
strings published in RFC 8785 (§3.2.2, §3.2.3, Appendix B) for number formatting and key
ordering, where Python's own formatting differs from ECMAScript's.

The "strings" cases are JavaScript strings given as UTF-16 code units (hex), because some
hold lone surrogates, which neither this file's JSON readers outside JavaScript nor Rust's
strings can carry: the bindings must refuse those with the message given, and accept the
well-formed ones. Natively, vectors.rs checks that the refused ones are indeed not
well-formed and fingerprints the others.

Checked by: wasm/tests/vectors.rs (Rust, native), wasm/tests/web.rs (wasm in Node and in
headless Chromium, through the JS bindings) and wasm/js/test/package.test.mjs (the packed
npm package in Node). Rerun after adding a case:

    python3 wasm/tests/fingerprints_gen.py > testdata/fingerprints.json
"""

import copy
import hashlib
import json
import struct
import sys


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def simple_jcs(value) -> str:
    """RFC 8785 for documents of strings without controls, integers, literals and ASCII
    member names: there it coincides with Python's sorted, compact json.dumps."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def remove(value, path):
    """Removes the member or element at an RFC 6901 pointer ('*' = every one)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]

    def walk(node, tokens):
        head, rest = tokens[0], tokens[1:]
        if isinstance(node, dict):
            names = [n for n in node if head == "*" or n == head]
            for n in names:
                if rest:
                    walk(node[n], rest)
                else:
                    del node[n]
        elif isinstance(node, list):
            idx = [i for i in range(len(node)) if head == "*" or head == str(i)]
            for i in reversed(idx):
                if rest:
                    walk(node[i], rest)
                else:
                    del node[i]

    walk(value, tokens)


def fields_bytes(fields):
    out = b""
    for name, value in sorted(fields, key=lambda f: f[0].encode()):
        n = name.encode()
        out += struct.pack(">Q", len(n)) + n + struct.pack(">Q", len(value)) + value
    return out


def main():
    raw = [
        ("empty", b""),
        ("abc (FIPS 180-2)", b"abc"),
        ("448 bits (FIPS 180-2)", b"abcdbcdecdefdefgefghfghighijhijkijkljklmjklmnklmnolmnopmnopnopq"),
        ("order payload", b'{"sku":"A-1","qty":2}'),
        ("every byte value", bytes(range(256))),
        ("utf-8 text", "Grüße, €".encode()),
    ]
    bytes_cases = [{"name": n, "hex": b.hex(), "fingerprint": sha(b)} for n, b in raw]

    field_sets = [
        ("one field", [("amount", b"100")]),
        ("two fields", [("amount", b"100"), ("to", b"acct-9")]),
        ("two fields, other order", [("to", b"acct-9"), ("amount", b"100")]),
        ("ab|c, not a|bc", [("ab", b"c")]),
        ("a|bc, not ab|c", [("a", b"bc")]),
        ("empty value and binary value", [("note", b""), ("blob", bytes([0, 255, 10]))]),
        ("names sort by UTF-8 bytes", [("é", b"1"), ("z", b"2"), ("Z", b"3")]),
        ("no fields", []),
    ]
    fields_cases = [
        {
            "name": n,
            "fields": [[name, value.hex()] for name, value in fs],
            "fingerprint": sha(fields_bytes(fs)),
        }
        for n, fs in field_sets
    ]
    fields_cases.append(
        {
            "name": "duplicate name",
            "fields": [["a", "31"], ["b", "32"], ["a", "33"]],
            "error": 'fields: name "a" appears twice, names must be unique',
        }
    )

    json_cases = []

    def case(name, text, canonical, ignored=()):
        json_cases.append(
            {
                "name": name,
                "text": text,
                "ignored": list(ignored),
                "canonical": canonical,
                "fingerprint": sha(canonical.encode()),
            }
        )

    # Simple documents: Python computes the canonical text.
    order = {"sku": "A-1", "qty": 2, "address": {"city": "Köln", "zip": "50667"}, "gift": False, "note": None}
    case("order, reordered with whitespace", json.dumps(order, indent=2), simple_jcs(order))
    traced = {"trace_id": "t-123", "order": order, "items": [{"sku": "A", "span": 1}, {"sku": "B", "span": 2}]}
    for ignored in (["/trace_id"], ["/trace_id", "/items/*/span"], ["/order/address/zip", "/items/1"], ["/nothing/here"]):
        expected = copy.deepcopy(traced)
        for p in ignored:
            remove(expected, p)
        case("ignored " + ", ".join(ignored), json.dumps(traced, indent=1), simple_jcs(expected), ignored)
    escaped = {"a/b": {"c~d": 1, "keep": 2}}
    case("pointer escapes ~1 and ~0", json.dumps(escaped), '{"a/b":{"keep":2}}', ["/a~1b/c~0d"])
    case("nested arrays and literals", "[ [ ], { }, [ null , true , false ] , -7 ]", "[[],{},[null,true,false],-7]")

    # RFC 8785 §3.2.2: the main example, output as published.
    case(
        "RFC 8785 §3.2.2 example",
        '{\n  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n'
        '  "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",\n'
        '  "literals": [null, true, false]\n}',
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    )
    # RFC 8785 §3.2.3: member names sort by UTF-16 code units, output as published.
    case(
        "RFC 8785 §3.2.3 sorting",
        '{\n  "\\u20ac": "Euro Sign",\n  "\\r": "Carriage Return",\n'
        '  "\\ufb33": "Hebrew Letter Dalet With Dagesh",\n  "1": "One",\n'
        '  "\\ud83d\\ude00": "Emoji: Grinning Face",\n  "\\u0080": "Control",\n'
        '  "\\u00f6": "Latin Small Letter O With Diaeresis"\n}',
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001F600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    )
    # RFC 8785 Appendix B: IEEE 754 bits -> the published ECMAScript string. The input
    # literal is Python's shortest round-trip repr of the same double.
    appendix_b = [
        ("0000000000000000", "0"), ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"), ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"), ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"), ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ]
    for bits, published in appendix_b:
        (double,) = struct.unpack(">d", bytes.fromhex(bits))
        literal = repr(double)
        case(f"RFC 8785 Appendix B {bits}", "[" + literal + "]", "[" + published + "]")
    # Other spellings of numbers, with their ECMAScript form.
    for literal, published in [("1E21", "1e+21"), ("1.0", "1"), ("-1.5E+2", "-150"), ("1e-7", "1e-7"),
                               ("0.1", "0.1"), ("100000000000000000000", "100000000000000000000"),
                               ("-0.0", "0")]:
        case(f"number {literal}", '{"n":' + literal + "}", '{"n":' + published + "}")

    # Noncharacters are accepted and written as they are (see the json module's docs),
    # literal or escaped; names sort by UTF-16 code units (UTF-16-BE bytes sort alike).
    for name, text, canonical in [
        ("noncharacter U+FFFF, literal", '["\uffff"]', '["\uffff"]'),
        ("noncharacter U+FDD0, escaped", '["\\ufdd0"]', '["\ufdd0"]'),
        ("noncharacter U+10FFFF, escaped pair", '["\\udbff\\udfff"]', '["\U0010FFFF"]'),
        ("noncharacters U+FFFE, U+FDEF, U+1FFFF", '"\ufffe\\ufdef\\ud83f\\udfff"', '"\ufffe\ufdef\U0001FFFF"'),
    ]:
        case(name, text, canonical)
    names = {"\uffff": 1, "\U0001F600": 2, "\ufdd0": 3, "\U0010FFFF": 4, "\ud7ff": 5}
    by_utf16 = sorted(names, key=lambda n: n.encode("utf-16-be"))
    case(
        "noncharacter member names sort by UTF-16 code units",
        json.dumps(names),
        "{" + ",".join(json.dumps(n, ensure_ascii=False) + ":" + str(names[n]) for n in by_utf16) + "}",
    )

    # Refusals: the message is the contract between Rust and JS.
    json_errors = [
        {"name": "duplicate member", "text": '{"a":1,"a":2}', "ignored": [],
         "error": 'json: duplicate member name "a" at byte 7'},
        {"name": "trailing comma", "text": "[1,]", "ignored": [],
         "error": "json: invalid syntax at byte 3, expected a JSON value"},
        {"name": "lone surrogate", "text": '"\\ud800"', "ignored": [],
         "error": "json: escape \\ud800 at byte 1 is a lone surrogate, which I-JSON forbids"},
        {"name": "lone low surrogate, escaped", "text": '["a\\udfffb"]', "ignored": [],
         "error": "json: escape \\udfff at byte 3 is a lone surrogate, which I-JSON forbids"},
        {"name": "high surrogate escape before another escape", "text": '{"\\ud83d\\u0041":1}', "ignored": [],
         "error": "json: escape \\ud83d at byte 2 is a lone surrogate, which I-JSON forbids"},
        {"name": "number too large", "text": "[1e400]", "ignored": [],
         "error": "json: number 1e400 at byte 1 is not a finite IEEE 754 double"},
        {"name": "bad path", "text": "{}", "ignored": ["a"],
         "error": "ignored path \"a\": must be empty or start with '/'"},
        {"name": "whole document path", "text": "{}", "ignored": [""],
         "error": 'ignored path "": the empty pointer names the whole document, which cannot be ignored'},
    ]

    # JavaScript strings, as UTF-16 code units. A lone surrogate has no UTF-8 form (a
    # converter would put U+FFFD in its place): every binding that takes a string refuses
    # it, naming the argument and the first lone surrogate.
    def units(text, surrogate=None):
        """`text`'s UTF-16 code units in hex, with U+FFFF replaced by `surrogate`."""
        out = []
        for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
            out.append(f"{surrogate if unit == 0xFFFF and surrogate else unit:04x}")
        return " ".join(out)

    def lone(field, at, unit):
        return f"{field}: not well-formed UTF-16: code unit {at} is a lone surrogate (\\u{unit:04x})"

    strings = []
    for unit in (0xD800, 0xDBFF, 0xDC00, 0xDFFF):
        strings.append({"name": f"fingerprintJson, lone {unit:04x} inside a string", "function": "fingerprintJson",
                        "units": units('["a\uffffb"]', unit), "error": lone("text", 3, unit)})
    strings.append({"name": "canonicalJson, lone low surrogate as a member name", "function": "canonicalJson",
                    "units": units('{"\uffff":1}', 0xDC00), "error": lone("text", 2, 0xDC00)})
    strings.append({"name": "fingerprintJson, pair in the wrong order", "function": "fingerprintJson",
                    "units": "005b 0022 de00 d83d 0022 005d", "error": lone("text", 2, 0xDE00)})
    strings.append({"name": "fingerprintJson, high surrogate at the end", "function": "fingerprintJson",
                    "units": "0031 0020 d83d", "error": lone("text", 2, 0xD83D)})
    strings.append({"name": "fingerprintBytes, lone surrogate in a string", "function": "fingerprintBytes",
                    "units": units("x\uffff", 0xDFFF), "error": lone("bytes", 1, 0xDFFF)})
    for name, text in [("U+FFFD, the replacement character itself", '["a\ufffdb"]'),
                       ("a surrogate pair", '["\U0001F600"]'),
                       ("noncharacter U+FFFF", '["\uffff"]')]:
        strings.append({"name": f"fingerprintJson, {name}", "function": "fingerprintJson",
                        "units": units(text), "fingerprint": sha(simple_jcs(json.loads(text)).encode())})
    strings.append({"name": "fingerprintBytes, a surrogate pair", "function": "fingerprintBytes",
                    "units": units("x\U0001F600"), "fingerprint": sha("x\U0001F600".encode())})

    out = {
        "about": "Fingerprint vectors shared by every target; written by wasm/tests/fingerprints_gen.py.",
        "bytes": bytes_cases,
        "fields": fields_cases,
        "json": json_cases + json_errors,
        "strings": strings,
    }
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
