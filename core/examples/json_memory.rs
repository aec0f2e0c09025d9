//! Peak memory of canonical JSON on large documents, as the process's peak RSS.
//!
//! ```text
//! cargo run --release -p idem-core --example json_memory -- SHAPE MB [canonical|fingerprint]
//! ```
//!
//! SHAPE is `zeros` (`[0,0,0,…]`) or `orders` (an array of order objects). The document of
//! about MB megabytes is built first; the peak RSS is then reset (Linux `clear_refs`) and
//! read again after the canonical text (or only its fingerprint) is made. Printed: the
//! document's size, the RSS with the document alone, the peak during the call, and the
//! peak as a multiple of the document's size. One process per measurement: a peak never
//! goes down. The size limit is lifted (`_up_to` with `usize::MAX`): the default,
//! `MAX_JSON_BYTES`, is 16 MiB.
//!
//! Measured on 50 MB (x86-64 Linux, release): before the canonicalizer streamed, `zeros`
//! peaked at 902 MiB (18.0x) and `orders` at 630 MiB (12.6x), for both modes; since,
//! `canonical` peaks at about 2.0x (the input and the output) and `fingerprint` at 1.04x.

use std::fmt::Write as _;
use std::time::Instant;

use idem_core::Fingerprint;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape = args.first().map_or("zeros", String::as_str);
    let mb: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(50);
    let mode = args.get(2).map_or("canonical", String::as_str);
    let text = match shape {
        "zeros" => zeros(mb << 20),
        "orders" => orders(mb << 20),
        other => panic!("unknown shape {other:?}: zeros or orders"),
    };
    let size = text.len();
    reset_peak();
    let before = status_kb("VmRSS:");
    let started = Instant::now();
    let out = match mode {
        "canonical" => Fingerprint::canonical_json_up_to(&text, &[], usize::MAX).map(|c| c.len()),
        "fingerprint" => Fingerprint::of_json_up_to(&text, &[], usize::MAX).map(|_| 32),
        other => panic!("unknown mode {other:?}: canonical or fingerprint"),
    };
    let elapsed = started.elapsed();
    let out = out.unwrap_or_else(|e| panic!("{e}"));
    let peak = status_kb("VmHWM:");
    let mib = |kb: u64| kb as f64 / 1024.0;
    println!(
        "{shape} {mode}: document {:.1} MiB, output {out} bytes, RSS with the document {:.1} MiB, \
         peak {:.1} MiB = {:.2}x the document, {:.2} s",
        size as f64 / (1 << 20) as f64,
        mib(before),
        mib(peak),
        peak as f64 * 1024.0 / size as f64,
        elapsed.as_secs_f64()
    );
}

/// `[0,0,…,0]` of about `size` bytes.
fn zeros(size: usize) -> String {
    let mut text = String::with_capacity(size + 2);
    text.push('[');
    while text.len() + 2 < size {
        text.push_str("0,");
    }
    text.push_str("0]");
    text
}

/// An array of order objects of about `size` bytes, members in no particular order.
fn orders(size: usize) -> String {
    let mut text = String::with_capacity(size + 512);
    text.push('[');
    let mut i = 0u64;
    while text.len() < size {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(
            text,
            r#"{{"sku":"A-{i}","qty":{},"price":{}.{:02},"address":{{"zip":"{:05}","city":"Köln","street":"Hauptstraße {}"}},"gift":{},"note":null,"trace_id":"t-{i:x}","items":[{{"id":{i},"n":1}},{{"id":{},"n":2}}]}}"#,
            i % 7 + 1,
            i % 1000,
            i % 100,
            i % 100_000,
            i % 300,
            i % 2 == 0,
            i + 1,
        );
        i += 1;
    }
    text.push(']');
    text
}

/// Resets the peak RSS (VmHWM) to the current RSS.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("Linux /proc/self/clear_refs");
}

/// A `kB` line of /proc/self/status.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}
