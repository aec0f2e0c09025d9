//! Pure `begin` decisions per second: the protocol's cost without any storage.
//!
//! Run with `cargo bench -p idem-core --bench decisions`. Prints figures; asserts nothing
//! about speed.

use std::hint::black_box;
use std::time::Instant;

use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Generation, Outcome, Record, Status, Timestamp, Verdict};

fn rate(label: &str, iterations: u64, mut step: impl FnMut(u64)) {
    // Warm up, then time a fixed number of iterations.
    for i in 0..iterations / 10 {
        step(i);
    }
    let start = Instant::now();
    for i in 0..iterations {
        step(i);
    }
    let elapsed = start.elapsed();
    let per_second = iterations as f64 / elapsed.as_secs_f64();
    let ns = elapsed.as_nanos() as f64 / iterations as f64;
    println!("{label:<40} {per_second:>14.0} /s {ns:>9.1} ns each");
}

fn main() {
    let config = Config::default();
    let fp = Fingerprint::of_bytes(b"credit 2500 to A-1");
    let now = Timestamp(1_750_000_000_000);
    let settled = Record {
        fingerprint: fp,
        generation: Generation(7),
        created_at: now,
        updated_at: now,
        status: Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(201, vec![7; 64]),
            completed_at: now,
            expires_at: now.plus_millis(86_400_000),
        },
    };
    let pending = Record {
        status: Status::Pending {
            lease_until: now.plus_millis(30_000),
        },
        ..settled.clone()
    };
    const N: u64 = 2_000_000;

    println!("idem-core begin decisions (pure, no storage)");
    rate("begin on absent key (claim)", N, |i| {
        let t = protocol::begin(None, fp, Generation(i + 1), Timestamp(now.0 + i), &config);
        black_box(matches!(t.decision, Decision::Claimed { .. }));
    });
    rate("begin on pending key (in progress)", N, |i| {
        let t = protocol::begin(Some(&pending), fp, Generation(i + 1), now, &config);
        black_box(t.decision);
    });
    rate("begin on settled key (replay, 64 B)", N, |i| {
        let t = protocol::begin(
            Some(black_box(&settled)),
            fp,
            Generation(i + 1),
            now,
            &config,
        );
        black_box(t.decision);
    });
    let other = Fingerprint::of_bytes(b"credit 9999 to A-1");
    rate("begin with another fingerprint (conflict)", N, |i| {
        let t = protocol::begin(Some(&settled), other, Generation(i + 1), now, &config);
        black_box(t.decision);
    });
    rate("record encode + decode", N / 4, |_| {
        let bytes = settled.encode();
        black_box(Record::decode(&bytes).ok());
    });
}
