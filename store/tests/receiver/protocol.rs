//! The file's own blocking API under contention: threads share one store. (The
//! protocol's inputs and answers are the conformance suite's, on every engine.)

use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Timestamp};
use idem_store::Store;

fn at(ms: u64) -> Timestamp {
    Timestamp(T0 + ms)
}

fn open(dir: &tempfile::TempDir, config: Config) -> Store {
    Store::builder()
        .config(config)
        .open(dir.path().join("idem.redb"))
        .unwrap()
}

#[test]
fn many_threads_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Config::default());
    let key = id("shop", "charge", "contended");
    let decisions: Vec<Decision> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| scope.spawn(|| store.begin(&key, fp("a"), at(0)).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let claims = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Claimed { .. }))
        .count();
    assert_eq!(claims, 1, "{decisions:?}");
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d, Decision::Claimed { .. } | Decision::InProgress { .. }))
    );
    assert_eq!(store.generation().unwrap(), Generation(1));
}
