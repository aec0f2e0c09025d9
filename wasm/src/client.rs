//! `IdemClient`: the sender ledger of idem-core, for JavaScript.

use crate::sys::{Array, JsString, Object, Uint8Array};
use idem_core::ledger::{self, Intent, Ledger, LedgerConfig, LedgerError, Reply, ResolvedAs};
use idem_core::quote::Quoted;
use idem_core::{Fingerprint, Timestamp};
use wasm_bindgen::prelude::*;

use crate::js::{self, Builder, Fields};
use crate::types::{
    Attempts, BeginResult, BytesInput, ClientOptions, Effect, IntentRecords, IntentView,
    IntentViews, Keys, MaybeIntentView, PreparedIntent, ResolvedAsInput,
};

const OPTIONS: &[&str] = &[
    "serverRetentionMs",
    "safetyMarginMs",
    "baseBackoffMs",
    "maxBackoffMs",
    "seed",
];
const REPLY: &[&str] = &["status", "body", "retryAt"];

/// The intents of one browser client: a key per intent, kept across reconnects and
/// reloads, reused by every retry, never sent after the server could have forgotten it.
///
/// Persist [`IdemClient::snapshot`] after every call that changes it (`begin`, `due`,
/// `onResponse`, `onTransportError`, `resolve`, `forget`); after a reload, [`IdemClient::restore`]
/// gives it back with in-flight intents queued again under the same key.
///
/// Or persist one record per intent: after each change, write `intent(key)` for every
/// key of [`IdemClient::take_changes`] (delete the record of a key that is gone) and
/// `ledgerState()` when it differs from the last one written; [`IdemClient::restore_parts`]
/// reads them back. Several copies of one client (browser tabs) stay in step with
/// `prepare` and `put`.
#[wasm_bindgen]
pub struct IdemClient {
    ledger: Ledger,
    /// Keys changed by this client's own transitions since the last `takeChanges`.
    changes: Vec<String>,
}

#[wasm_bindgen]
impl IdemClient {
    /// A client with no intents. Every option is optional; `seed` defaults to 8 bytes
    /// from `crypto.getRandomValues`.
    ///
    /// # Errors
    ///
    /// An unknown or malformed option, or settings that cannot work (the margin not
    /// below the retention, for instance).
    #[wasm_bindgen(constructor)]
    pub fn new(options: Option<ClientOptions>) -> Result<IdemClient, JsError> {
        let options = Fields::new("options", &JsValue::from(options), OPTIONS)?;
        let seed = match options.unsigned("seed")? {
            Some(seed) => seed,
            None => u64::from_le_bytes(js::random_bytes("options.seed")?),
        };
        let defaults = LedgerConfig::with_seed(seed);
        let config = LedgerConfig {
            server_retention_ms: options
                .unsigned("serverRetentionMs")?
                .unwrap_or(defaults.server_retention_ms),
            safety_margin_ms: options
                .unsigned("safetyMarginMs")?
                .unwrap_or(defaults.safety_margin_ms),
            base_backoff_ms: options
                .unsigned("baseBackoffMs")?
                .unwrap_or(defaults.base_backoff_ms),
            max_backoff_ms: options
                .unsigned("maxBackoffMs")?
                .unwrap_or(defaults.max_backoff_ms),
            ..defaults
        };
        Ok(IdemClient::from(Ledger::new(config).map_err(js::error)?))
    }

    /// Starts a new intent for one user action: a fresh UUIDv7 key from `nowMs` and 16
    /// random bytes, queued and due at once. `random` defaults to bytes from
    /// `crypto.getRandomValues`; pass it only to supply your own secure random bytes (or
    /// fixed ones in tests). Call once per user action, never for a retry.
    ///
    /// # Errors
    ///
    /// A malformed argument (a string that is not well-formed UTF-16 among them), an
    /// invalid operation, or `random` reused within one ms.
    pub fn begin(
        &mut self,
        operation: &JsString,
        payload: BytesInput,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
        random: Option<Uint8Array>,
    ) -> Result<BeginResult, JsError> {
        let intent = self.new_intent(operation, &payload, now_ms, random)?;
        let begun = Builder::new()
            .set("key", intent.key.as_str())
            .set("fingerprint", intent.fingerprint.to_hex());
        self.changes.push(intent.key.clone());
        self.ledger.put(intent);
        Ok(begun.build())
    }

    /// Makes a new intent as `begin` does but does not keep it: returns its key,
    /// fingerprint and record bytes, for a driver that persists the intent first and then
    /// adds it with `put` (so an intent is never sent before it is durable).
    ///
    /// # Errors
    ///
    /// As `begin`.
    pub fn prepare(
        &self,
        operation: &JsString,
        payload: BytesInput,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
        random: Option<Uint8Array>,
    ) -> Result<PreparedIntent, JsError> {
        let intent = self.new_intent(operation, &payload, now_ms, random)?;
        Ok(Builder::new()
            .set("key", intent.key.as_str())
            .set("fingerprint", intent.fingerprint.to_hex())
            .set("intent", js::uint8_array(&intent.encode()))
            .build())
    }

    /// Takes in an intent record (`intent(key)` bytes, `prepare`'s `intent`) written by
    /// another copy of this client or by `prepare`: adds it, or replaces the intent with
    /// its key unless that one is finished (a finished intent never changes). Returns
    /// whether anything changed. Not reported by `takeChanges`: the record is already
    /// persisted.
    ///
    /// # Errors
    ///
    /// Bytes that are not a valid intent record.
    pub fn put(&mut self, intent: &[u8]) -> Result<bool, JsError> {
        Ok(self.ledger.put(Intent::decode(intent).map_err(js::error)?))
    }

    /// Call when `nowMs` reaches `nextWakeup()` (or at any time): expires queued intents
    /// at their deadline and puts the due ones in flight. Send every attempt returned,
    /// with its key in the `Idempotency-Key` header, then report the reply with
    /// `onResponse` or the failure with `onTransportError`.
    ///
    /// # Errors
    ///
    /// A malformed `nowMs`.
    pub fn due(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Attempts, JsError> {
        let now = js::timestamp("nowMs", now_ms)?;
        let polled = self.ledger.poll(now);
        self.changes.extend(polled.expired);
        self.changes
            .extend(polled.attempts.iter().map(|a| a.key.clone()));
        let attempts: Array = polled
            .attempts
            .into_iter()
            .map(|a| {
                JsValue::from(
                    Builder::new()
                        .set("key", a.key)
                        .set("operation", a.operation)
                        .set("payload", js::uint8_array(&a.payload))
                        .set("attempt", a.attempt)
                        .build::<Object>(),
                )
            })
            .collect();
        Ok(attempts.unchecked_into())
    }

    /// The server answered the attempt for `key`: 2xx completes, 422 is a conflict, 409
    /// and 408/425/429/5xx retry (at `retryAt` when given, else after a backoff), other
    /// 3xx/4xx fail; a 503 whose body is idem's problem `unknown` (the receiver does not
    /// know the outcome either) stops the intent as `unknown`, for a person to look. A
    /// late or duplicate reply is ignored.
    ///
    /// # Errors
    ///
    /// A malformed reply or time, or no intent with `key`.
    #[wasm_bindgen(js_name = onResponse)]
    pub fn on_response(
        &mut self,
        key: &JsString,
        reply: crate::types::Reply,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Effect, JsError> {
        let key = js::string("key", key)?;
        let fields = Fields::new("reply", &reply, REPLY)?;
        let status = fields
            .get("status")
            .ok_or_else(|| js::invalid("reply.status", "missing, expected an HTTP status code"))?;
        let status = u16::try_from(js::unsigned("reply.status", &status)?)
            .map_err(|_| js::invalid("reply.status", "must be from 0 to 65535"))?;
        let body = fields.bytes("body")?.unwrap_or_default();
        let retry_at = fields
            .get("retryAt")
            .map(|v| {
                let ms = v
                    .as_f64()
                    .ok_or_else(|| js::invalid("reply.retryAt", "expected a number"))?;
                js::timestamp("reply.retryAt", ms)
            })
            .transpose()?;
        let now = js::timestamp("nowMs", now_ms)?;
        let reply = Reply {
            status,
            body,
            retry_at,
        };
        let effect = self.ledger.on_reply(&key, reply, now).map_err(js::error)?;
        Ok(self.report(&key, effect))
    }

    /// The attempt in flight for `key` failed before any reply (offline, connection
    /// reset, timeout): queue it again after a backoff, never past its deadline.
    ///
    /// # Errors
    ///
    /// A malformed time, or no intent with `key`.
    #[wasm_bindgen(js_name = onTransportError)]
    pub fn on_transport_error(
        &mut self,
        key: &JsString,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Effect, JsError> {
        let key = js::string("key", key)?;
        let now = js::timestamp("nowMs", now_ms)?;
        let effect = self
            .ledger
            .on_transport_error(&key, now)
            .map_err(js::error)?;
        Ok(self.report(&key, effect))
    }

    /// The intent with `key`, or `undefined`.
    ///
    /// # Errors
    ///
    /// `key` is not a string, or not well-formed UTF-16.
    pub fn get(&self, key: &JsString) -> Result<MaybeIntentView, JsError> {
        Ok(match self.ledger.get(&js::string("key", key)?) {
            Some(intent) => view(intent).unchecked_into(),
            None => JsValue::UNDEFINED.unchecked_into(),
        })
    }

    /// Every intent, oldest first.
    pub fn list(&self) -> IntentViews {
        let all: Array = self.ledger.iter().map(|i| JsValue::from(view(i))).collect();
        all.unchecked_into()
    }

    /// When `due` next has something to do (ms since the epoch; it may be in the past:
    /// call `due` at once), or `undefined` when nothing is queued.
    #[wasm_bindgen(js_name = nextWakeup)]
    pub fn next_wakeup(&self) -> Option<f64> {
        self.ledger.next_wakeup().map(|t| t.as_millis() as f64)
    }

    /// Removes a settled intent (completed, failed, conflict, or expired or unknown and
    /// resolved) once the application took its outcome, and returns it. An expired or
    /// unknown intent is resolved first (`resolve`): its effect may or may not have
    /// happened.
    ///
    /// # Errors
    ///
    /// No intent with `key`, the intent is still queued or in flight, or it is expired
    /// or unknown and nobody resolved it.
    pub fn forget(&mut self, key: &JsString) -> Result<IntentView, JsError> {
        let intent = self.ledger.forget(&js::string("key", key)?)?;
        self.changes.push(intent.key.clone());
        Ok(view(&intent))
    }

    /// Records what happened to an expired or unknown intent, as someone who asked the
    /// receiver found (`"completed"`, `"failed"` or `"not_executed"`), with their reason
    /// (1–1024 bytes, one line). It keeps its state, now with its `resolution`, and may
    /// then be forgotten. Returns the intent.
    ///
    /// # Errors
    ///
    /// A malformed argument, no intent with `key`, an intent that is neither expired nor
    /// unknown or is resolved already, or a reason that breaks its rule.
    pub fn resolve(
        &mut self,
        key: &JsString,
        #[wasm_bindgen(js_name = resolvedAs)] resolved_as: ResolvedAsInput,
        reason: &JsString,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<IntentView, JsError> {
        let key = js::string("key", key)?;
        let name = js::string("resolvedAs", &resolved_as)?;
        let resolved_as = ResolvedAs::from_name(&name).ok_or_else(|| {
            js::invalid(
                "resolvedAs",
                &format!(
                    "{}, expected \"completed\", \"failed\" or \"not_executed\"",
                    Quoted(&name)
                ),
            )
        })?;
        let reason = js::string("reason", reason)?;
        let now = js::timestamp("nowMs", now_ms)?;
        let intent = self.ledger.resolve(&key, resolved_as, &reason, now)?;
        let resolved = view(intent);
        self.changes.push(key);
        Ok(resolved)
    }

    /// The keys of the intents changed since the last call by `begin`, `due` (sent or
    /// expired), `onResponse`, `onTransportError`, `resolve` and `forget`, oldest change first (a key
    /// may repeat): what a storage with one record per intent writes next. Each call
    /// starts a new list.
    #[wasm_bindgen(js_name = takeChanges)]
    pub fn take_changes(&mut self) -> Keys {
        let keys: Array = self.changes.drain(..).map(JsValue::from).collect();
        keys.unchecked_into()
    }

    /// The record of the intent with `key` (a version byte, then postcard), or
    /// `undefined` when there is none.
    pub fn intent(&self, key: &str) -> Option<Vec<u8>> {
        self.ledger.get(key).map(Intent::encode)
    }

    /// The settings and backoff state without the intents (a snapshot that holds no
    /// intent): the record kept beside the intents' own. It changes when a retry backs
    /// off.
    #[wasm_bindgen(js_name = ledgerState)]
    pub fn ledger_state(&self) -> Vec<u8> {
        self.ledger.state_snapshot()
    }

    /// The client kept as `ledgerState()` and one `intent(key)` record per intent (in
    /// any order); in-flight intents are queued again with their key. `state` may also be
    /// a whole `snapshot()`.
    ///
    /// # Errors
    ///
    /// A damaged or newer-format record, or two records with one key.
    #[wasm_bindgen(js_name = restoreParts)]
    pub fn restore_parts(state: &[u8], intents: IntentRecords) -> Result<IdemClient, JsError> {
        let records: Array = intents.unchecked_into();
        let mut decoded = Vec::new();
        for record in records.iter() {
            decoded.push(Intent::decode(&js::bytes("intents", &record)?).map_err(js::error)?);
        }
        Ok(IdemClient::from(
            Ledger::restore_parts(state, decoded).map_err(js::error)?,
        ))
    }

    /// The whole client as bytes, to persist after every change.
    pub fn snapshot(&self) -> Vec<u8> {
        self.ledger.snapshot()
    }

    /// The client `snapshot` wrote; in-flight intents are queued again with their key.
    ///
    /// # Errors
    ///
    /// Bytes that are empty, from a newer format, malformed or invalid.
    pub fn restore(bytes: &[u8]) -> Result<IdemClient, JsError> {
        Ok(IdemClient::from(Ledger::restore(bytes).map_err(js::error)?))
    }

    /// How many intents the client holds.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.ledger.len()
    }
}

impl IdemClient {
    /// The ledger inside, for Rust callers and tests.
    #[must_use]
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// A new intent with this client's settings, not yet kept.
    fn new_intent(
        &self,
        operation: &JsString,
        payload: &BytesInput,
        now_ms: f64,
        random: Option<Uint8Array>,
    ) -> Result<Intent, JsError> {
        let operation = js::string("operation", operation)?;
        let payload = js::bytes("payload", payload)?;
        let now = js::timestamp("nowMs", now_ms)?;
        let random = match random {
            Some(bytes) => <[u8; 16]>::try_from(bytes.to_vec())
                .map_err(|b| js::invalid("random", &format!("{} bytes, expected 16", b.len())))?,
            None => js::random_bytes("random")?,
        };
        let fingerprint = Fingerprint::of_bytes(&payload);
        let intent = Intent::new(
            &operation,
            payload,
            fingerprint,
            now,
            random,
            self.ledger.config(),
        )
        .map_err(js::error)?;
        if self.ledger.get(&intent.key).is_some() {
            return Err(js::error(LedgerError::DuplicateKey { key: intent.key }));
        }
        Ok(intent)
    }

    /// Notes `key` as changed unless `effect` says nothing happened, and converts it.
    fn report(&mut self, key: &str, effect: ledger::Effect) -> Effect {
        if effect != ledger::Effect::Ignored {
            self.changes.push(key.into());
        }
        convert(effect)
    }
}

impl From<Ledger> for IdemClient {
    fn from(ledger: Ledger) -> IdemClient {
        IdemClient {
            ledger,
            changes: Vec::new(),
        }
    }
}

fn convert(effect: ledger::Effect) -> Effect {
    match effect {
        ledger::Effect::Finished(state) => Builder::new()
            .set("effect", "finished")
            .set("state", state.name()),
        ledger::Effect::Requeued { at } => Builder::new()
            .set("effect", "requeued")
            .set("at", js::number(at.as_millis())),
        ledger::Effect::Ignored => Builder::new().set("effect", "ignored"),
    }
    .build()
}

fn view(intent: &Intent) -> IntentView {
    let ms = |t: Timestamp| js::number(t.as_millis());
    Builder::new()
        .set("key", intent.key.as_str())
        .set("operation", intent.operation.as_str())
        .set("state", intent.state.name())
        .set("attempts", intent.attempts)
        .set("createdAt", ms(intent.created_at))
        .set("nextAttemptAt", ms(intent.next_attempt_at))
        .set("deadline", ms(intent.deadline))
        .set("fingerprint", intent.fingerprint.to_hex())
        .set("payload", js::uint8_array(&intent.payload))
        .maybe("lastStatus", intent.last_status)
        .maybe("status", intent.outcome.as_ref().map(|o| o.code))
        .maybe(
            "body",
            intent.outcome.as_ref().map(|o| js::uint8_array(&o.body)),
        )
        .maybe(
            "resolution",
            intent.resolution.as_ref().map(|r| {
                Builder::new()
                    .set("resolvedAs", r.resolved_as.name())
                    .set("reason", r.reason.as_str())
                    .set("resolvedAt", ms(r.resolved_at))
                    .build::<Object>()
            }),
        )
        .build()
}
