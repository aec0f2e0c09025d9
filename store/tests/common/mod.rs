//! Helpers shared by the integration tests: ids, a seeded PRNG, child processes.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use std::collections::BTreeMap;

pub mod child;
pub mod disk;
pub mod machines;
pub mod tmpfs;
pub mod workload;

use idem_core::{Fingerprint, RecordId};
use idem_store::Store;
use idem_store::redb::{ReadableTable, TableDefinition, WriteTransaction};

#[allow(unused_imports)] // each test binary uses its own subset
pub use child::{expect_report, report, reports, seed, spawn_child, tell, told};

/// A fixed base time, so records never expire by accident during a test.
pub const T0: u64 = 1_700_000_000_000;

pub fn id(tenant: &str, operation: &str, key: &str) -> RecordId {
    RecordId::new(tenant, operation, key).unwrap()
}

pub fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

/// splitmix64: small, seeded, good enough to pick delays and keys.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The business table of the credit tests: credits per account.
pub const ACCOUNTS: TableDefinition<&str, u64> = TableDefinition::new("test.accounts");
/// The running total of every credit, under the key "credits".
pub const TOTAL: TableDefinition<&str, u64> = TableDefinition::new("test.total");

/// Credits `account` once and adds one to the running total; returns the account's
/// credits after this one. The writes happen in the caller's transaction.
pub fn add_credit(txn: &WriteTransaction, account: &str) -> Result<u64, String> {
    let mut accounts = txn.open_table(ACCOUNTS).map_err(|e| e.to_string())?;
    let credits = accounts
        .get(account)
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value())
        + 1;
    accounts
        .insert(account, credits)
        .map_err(|e| e.to_string())?;
    let mut total = txn.open_table(TOTAL).map_err(|e| e.to_string())?;
    let sum = total
        .get("credits")
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value());
    total
        .insert("credits", sum + 1)
        .map_err(|e| e.to_string())?;
    Ok(credits)
}

/// Credits per account and the running total, as committed.
pub fn accounts(store: &Store) -> (BTreeMap<String, u64>, u64) {
    store
        .read(|txn| {
            let accounts = match txn.open_table(ACCOUNTS) {
                Ok(table) => table
                    .iter()
                    .unwrap()
                    .map(|e| {
                        let (k, v) = e.unwrap();
                        (k.value().to_string(), v.value())
                    })
                    .collect(),
                Err(_) => BTreeMap::new(),
            };
            let total = match txn.open_table(TOTAL) {
                Ok(table) => table.get("credits").unwrap().map_or(0, |v| v.value()),
                Err(_) => 0,
            };
            (accounts, total)
        })
        .unwrap()
}
