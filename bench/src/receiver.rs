//! What the server engines' benchmarks send through idem's receiver seam, whichever
//! engine holds the store: a fresh key's begin and complete, and replays of a settled key.

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::Receiver;

use crate::measure::{BenchError, Timing, measure_tasks};

/// The fingerprint the benchmarks give a key: of its own bytes.
fn fingerprint(id: &RecordId) -> Fingerprint {
    Fingerprint::of_bytes(id.key().as_bytes())
}

/// One fresh key through `store`: begin, then complete with a 201 carrying `answer`.
///
/// # Errors
///
/// The store's error, or the key was not claimed.
pub async fn begin_then_complete<R: Receiver>(
    store: &R,
    id: &RecordId,
    answer: &[u8],
) -> Result<(), BenchError> {
    let Decision::Claimed { generation, .. } =
        store.begin(id, fingerprint(id), Timestamp(0)).await?
    else {
        return Err(format!("{id}: not claimed").into());
    };
    store
        .complete(
            id,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, answer.to_vec()),
            Timestamp(0),
        )
        .await?;
    Ok(())
}

/// `total` replays of the settled key `id` through `store`, from `callers` tasks at once.
///
/// # Errors
///
/// The store's error, or an answer that was not a replay.
pub async fn replays<R: Receiver + Clone>(
    store: &R,
    id: &RecordId,
    callers: u32,
    total: u32,
) -> Result<Timing, BenchError> {
    let id = id.clone();
    measure_tasks(
        callers,
        total,
        vec![store.clone(); callers as usize],
        move |store, _, _| {
            let id = id.clone();
            async move {
                match store.begin(&id, fingerprint(&id), Timestamp(0)).await? {
                    Decision::Replay { .. } => Ok(()),
                    other => Err(format!("{id}: not a replay: {other:?}").into()),
                }
            }
        },
    )
    .await
}
