//! `MemoryReceiver`: the receiver protocol of idem-core on an in-memory map, for service
//! workers and tests.

use crate::sys::{Array, JsString};
use idem_core::memory::MemoryReceiver as Core;
use idem_core::protocol::{Decision as CoreDecision, Resolution};
use idem_core::quote::Quoted;
use idem_core::{Config, Fingerprint, Generation, LeaseExpiry, Outcome, Record, RecordId, Status};
use idem_core::{Timestamp, Verdict};
use wasm_bindgen::prelude::*;

use crate::js::{self, Builder, Fields};
use crate::types::{
    Decision, GenerationInput, MaybeRecordView, OutcomeInput, ReceiverOptions, RecordIdInput,
    RecordViews, ResolutionInput, VerdictInput,
};

const OPTIONS: &[&str] = &[
    "leaseMs",
    "successRetentionMs",
    "failureRetentionMs",
    "maxOutcomeBytes",
    "onLeaseExpiry",
    "tombstoneRetentionMs",
];
const ID: &[&str] = &["tenant", "operation", "key"];
const OUTCOME: &[&str] = &["code", "body"];

/// Records by `(tenant, operation, key)` and the generation counter, in memory: the same
/// decisions as the durable store, for service workers that keep no file and for tests.
/// Persist it with `snapshot` and `MemoryReceiver.restore`.
#[wasm_bindgen]
pub struct MemoryReceiver {
    inner: Core,
}

#[wasm_bindgen]
impl MemoryReceiver {
    /// An empty receiver. Every option is optional (lease 30 s, retention 24 h, outcomes
    /// up to 1 MiB, an expired lease makes the record unknown).
    ///
    /// # Errors
    ///
    /// An unknown or malformed option, or settings that cannot work.
    #[wasm_bindgen(constructor)]
    pub fn new(options: Option<ReceiverOptions>) -> Result<MemoryReceiver, JsError> {
        let options = Fields::new("options", &JsValue::from(options), OPTIONS)?;
        let defaults = Config::default();
        let on_lease_expiry = match options.string("onLeaseExpiry")?.as_deref() {
            None | Some("unknown") => LeaseExpiry::Unknown,
            Some("takeover") => LeaseExpiry::Takeover,
            Some(other) => {
                return Err(js::invalid(
                    "options.onLeaseExpiry",
                    &format!("{}, expected \"unknown\" or \"takeover\"", Quoted(other)),
                ));
            }
        };
        let max_outcome_bytes = match options.unsigned("maxOutcomeBytes")? {
            Some(n) => usize::try_from(n).map_err(|_| {
                js::invalid(
                    "options.maxOutcomeBytes",
                    "larger than this platform allows",
                )
            })?,
            None => defaults.max_outcome_bytes,
        };
        let config = Config {
            lease_ms: options.unsigned("leaseMs")?.unwrap_or(defaults.lease_ms),
            success_retention_ms: options
                .unsigned("successRetentionMs")?
                .unwrap_or(defaults.success_retention_ms),
            failure_retention_ms: options
                .unsigned("failureRetentionMs")?
                .unwrap_or(defaults.failure_retention_ms),
            max_outcome_bytes,
            on_lease_expiry,
            tombstone_retention_ms: options
                .unsigned("tombstoneRetentionMs")?
                .unwrap_or(defaults.tombstone_retention_ms),
        };
        config.validate().map_err(js::error)?;
        Ok(MemoryReceiver {
            inner: Core::new(config),
        })
    }

    /// A request whose fingerprint is `fingerprint` (64 hex digits) arrives for `id`:
    /// claimed, in progress, replay, conflict, unknown (needs reconciliation), or
    /// forgotten (it ran; its outcome is past retention and only a tombstone is kept).
    ///
    /// # Errors
    ///
    /// A malformed id, fingerprint or time; a claim when the generation counter is
    /// exhausted (a restored snapshot may hold any counter).
    pub fn begin(
        &mut self,
        id: RecordIdInput,
        fingerprint: &JsString,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Decision, JsError> {
        let id = record_id(&id)?;
        let fingerprint =
            Fingerprint::from_hex(&js::string("fingerprint", fingerprint)?).map_err(js::error)?;
        let now = js::timestamp("nowMs", now_ms)?;
        Ok(decision(
            self.inner.begin(&id, fingerprint, now).map_err(js::error)?,
        ))
    }

    /// The executor holding `generation` extends its lease.
    ///
    /// # Errors
    ///
    /// Malformed input; no record; a stale generation.
    pub fn heartbeat(
        &mut self,
        id: RecordIdInput,
        generation: GenerationInput,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsError> {
        let id = record_id(&id)?;
        let generation = Generation(js::unsigned("generation", &generation.into())?);
        let now = js::timestamp("nowMs", now_ms)?;
        self.inner
            .heartbeat(&id, generation, now)
            .map_err(js::error)
    }

    /// The executor holding `generation` settles `id` with `verdict` and `outcome`.
    ///
    /// # Errors
    ///
    /// Malformed input; no record; a stale generation; an outcome over the size limit.
    pub fn complete(
        &mut self,
        id: RecordIdInput,
        generation: GenerationInput,
        verdict: VerdictInput,
        outcome: OutcomeInput,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsError> {
        let id = record_id(&id)?;
        let generation = Generation(js::unsigned("generation", &generation.into())?);
        let verdict = js::string("verdict", &verdict)?;
        let verdict = Verdict::from_name(&verdict).ok_or_else(|| {
            js::invalid(
                "verdict",
                &format!("{}, expected \"succeeded\" or \"failed\"", Quoted(&verdict)),
            )
        })?;
        let outcome = self::outcome(&outcome)?;
        let now = js::timestamp("nowMs", now_ms)?;
        self.inner
            .complete(&id, generation, verdict, outcome, now)
            .map_err(js::error)
    }

    /// The executor holding `generation` did nothing: delete the record so a retry may
    /// claim.
    ///
    /// # Errors
    ///
    /// Malformed input; no record; a stale generation.
    pub fn release(
        &mut self,
        id: RecordIdInput,
        generation: GenerationInput,
    ) -> Result<(), JsError> {
        let id = record_id(&id)?;
        let generation = Generation(js::unsigned("generation", &generation.into())?);
        self.inner.release(&id, generation).map_err(js::error)
    }

    /// The executor holding `generation` cannot tell whether its effect happened.
    ///
    /// # Errors
    ///
    /// Malformed input; no record; a stale generation.
    #[wasm_bindgen(js_name = markUnknown)]
    pub fn mark_unknown(
        &mut self,
        id: RecordIdInput,
        generation: GenerationInput,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsError> {
        let id = record_id(&id)?;
        let generation = Generation(js::unsigned("generation", &generation.into())?);
        let now = js::timestamp("nowMs", now_ms)?;
        self.inner
            .mark_unknown(&id, generation, now)
            .map_err(js::error)
    }

    /// A reconciler settles an unknown record: `"succeeded"` or `"failed"` with `outcome`,
    /// or `"not_executed"` (deletes it, so a retry claims afresh).
    ///
    /// # Errors
    ///
    /// Malformed input; no record; the record is not unknown; an oversized outcome.
    pub fn resolve(
        &mut self,
        id: RecordIdInput,
        resolution: ResolutionInput,
        outcome: Option<OutcomeInput>,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsError> {
        let id = record_id(&id)?;
        let settled = |outcome: &Option<OutcomeInput>| match outcome {
            Some(outcome) => self::outcome(outcome),
            None => Err(js::invalid("outcome", "missing, needed to settle a record")),
        };
        let resolution = match js::string("resolution", &resolution)?.as_str() {
            "succeeded" => Resolution::Succeeded(settled(&outcome)?),
            "failed" => Resolution::Failed(settled(&outcome)?),
            "not_executed" => Resolution::NotExecuted,
            other => {
                return Err(js::invalid(
                    "resolution",
                    &format!(
                        "{}, expected \"succeeded\", \"failed\" or \"not_executed\"",
                        Quoted(other)
                    ),
                ));
            }
        };
        let now = js::timestamp("nowMs", now_ms)?;
        self.inner.resolve(&id, resolution, now).map_err(js::error)
    }

    /// Sweeps up to `limit` records past their time, oldest first, and returns how many:
    /// a settled record past its retention leaves its tombstone (a retry then answers
    /// forgotten), a tombstone past its own time is deleted; pending and unknown records
    /// are never swept.
    ///
    /// # Errors
    ///
    /// A malformed time or limit.
    pub fn sweep(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
        limit: u32,
    ) -> Result<usize, JsError> {
        let now = js::timestamp("nowMs", now_ms)?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(self.inner.sweep(now, limit).len())
    }

    /// The record under `id`, or `undefined`.
    ///
    /// # Errors
    ///
    /// A malformed id.
    pub fn get(&self, id: RecordIdInput) -> Result<MaybeRecordView, JsError> {
        let id = record_id(&id)?;
        Ok(match self.inner.get(&id) {
            Some(record) => view(&id, record).unchecked_into(),
            None => JsValue::UNDEFINED.unchecked_into(),
        })
    }

    /// Every record, ordered by tenant, operation and key.
    pub fn list(&self) -> RecordViews {
        let all: Array = self.inner.iter().map(|(id, r)| view(id, r)).collect();
        all.unchecked_into()
    }

    /// The last generation handed out (0 before the first claim).
    #[wasm_bindgen(getter)]
    pub fn generation(&self) -> f64 {
        self.inner.generation().0 as f64
    }

    /// The whole receiver as bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }

    /// The receiver `snapshot` wrote.
    ///
    /// # Errors
    ///
    /// Bytes that are empty, from a newer format, malformed or invalid.
    pub fn restore(bytes: &[u8]) -> Result<MemoryReceiver, JsError> {
        Ok(MemoryReceiver {
            inner: Core::restore(bytes).map_err(js::error)?,
        })
    }
}

fn record_id(value: &JsValue) -> Result<RecordId, JsError> {
    let fields = Fields::new("id", value, ID)?;
    RecordId::new(
        &fields.required_string("tenant")?,
        &fields.required_string("operation")?,
        &fields.required_string("key")?,
    )
    .map_err(js::error)
}

fn outcome(value: &JsValue) -> Result<Outcome, JsError> {
    let fields = Fields::new("outcome", value, OUTCOME)?;
    let code = fields
        .get("code")
        .ok_or_else(|| js::invalid("outcome.code", "missing, expected an integer"))?;
    let code = code
        .as_f64()
        .filter(|c| c.fract() == 0.0 && (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(c))
        .ok_or_else(|| js::invalid("outcome.code", "expected an integer from -2^31 to 2^31 - 1"))?;
    let body = fields.bytes("body")?.unwrap_or_default();
    // In i32's range and whole, so the cast is exact.
    Ok(Outcome::new(code as i32, body))
}

fn decision(decision: CoreDecision) -> Decision {
    let ms = |t: Timestamp| js::number(t.as_millis());
    match decision {
        CoreDecision::Claimed {
            generation,
            lease_until,
        } => Builder::new()
            .set("decision", "claimed")
            .set("generation", js::number(generation.0))
            .set("leaseUntil", ms(lease_until)),
        CoreDecision::InProgress {
            generation,
            lease_until,
        } => Builder::new()
            .set("decision", "in_progress")
            .set("generation", js::number(generation.0))
            .set("leaseUntil", ms(lease_until)),
        CoreDecision::Replay {
            verdict,
            outcome,
            completed_at,
        } => Builder::new()
            .set("decision", "replay")
            .set("state", verdict.name())
            .set("code", outcome.code)
            .set("body", js::uint8_array(&outcome.body))
            .set("completedAt", ms(completed_at)),
        CoreDecision::Conflict {
            state,
            stored_fingerprint,
        } => Builder::new()
            .set("decision", "conflict")
            .set("state", state.name())
            .set("storedFingerprint", stored_fingerprint.to_hex()),
        CoreDecision::NeedsReconciliation { generation } => Builder::new()
            .set("decision", "unknown")
            .set("generation", js::number(generation.0)),
        CoreDecision::Forgotten {
            generation,
            verdict,
            completed_at,
        } => Builder::new()
            .set("decision", "forgotten")
            .set("generation", js::number(generation.0))
            .set("state", verdict.name())
            .set("completedAt", ms(completed_at)),
    }
    .build()
}

fn view(id: &RecordId, record: &Record) -> JsValue {
    let ms = |t: Timestamp| js::number(t.as_millis());
    let builder = Builder::new()
        .set("tenant", id.tenant())
        .set("operation", id.operation())
        .set("key", id.key())
        .set("state", record.state().name())
        .set("generation", js::number(record.generation.0))
        .set("fingerprint", record.fingerprint.to_hex())
        .set("createdAt", ms(record.created_at))
        .set("updatedAt", ms(record.updated_at));
    match &record.status {
        Status::Pending { lease_until } => builder.set("leaseUntil", ms(*lease_until)),
        Status::Settled {
            outcome,
            completed_at,
            expires_at,
            ..
        } => builder
            .set("completedAt", ms(*completed_at))
            .set("expiresAt", ms(*expires_at))
            .set("code", outcome.code)
            .set("body", js::uint8_array(&outcome.body)),
        Status::Unknown => builder,
        Status::Tombstone {
            verdict,
            completed_at,
            expires_at,
        } => builder
            .set("verdict", verdict.name())
            .set("completedAt", ms(*completed_at))
            .set("expiresAt", ms(*expires_at)),
    }
    .build()
}
