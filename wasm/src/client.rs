//! `IdemClient`: the sender ledger of idem-core, for JavaScript.

use idem_core::ledger::{self, Intent, Ledger, LedgerConfig, Reply};
use idem_core::{Fingerprint, Timestamp};
use js_sys::{Array, JsString, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::js::{self, Builder, Fields};
use crate::types::{
    Attempts, BeginResult, BytesInput, ClientOptions, Effect, IntentView, IntentViews,
    MaybeIntentView,
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
/// `onResponse`, `onTransportError`, `forget`); after a reload, [`IdemClient::restore`]
/// gives it back with in-flight intents queued again under the same key.
#[wasm_bindgen]
pub struct IdemClient {
    ledger: Ledger,
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
        Ok(IdemClient {
            ledger: Ledger::new(config)?,
        })
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
        let operation = js::string("operation", operation)?;
        let payload = js::bytes("payload", &payload)?;
        let now = js::timestamp("nowMs", now_ms)?;
        let random = match random {
            Some(bytes) => <[u8; 16]>::try_from(bytes.to_vec())
                .map_err(|b| js::invalid("random", &format!("{} bytes, expected 16", b.len())))?,
            None => js::random_bytes("random")?,
        };
        let fingerprint = Fingerprint::of_bytes(&payload);
        let intent = self
            .ledger
            .begin(&operation, payload, fingerprint, now, random)?;
        Ok(Builder::new()
            .set("key", intent.key.as_str())
            .set("fingerprint", intent.fingerprint.to_hex())
            .build())
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
        let attempts: Array = self
            .ledger
            .due(now)
            .into_iter()
            .map(|a| {
                JsValue::from(
                    Builder::new()
                        .set("key", a.key)
                        .set("operation", a.operation)
                        .set("payload", js::uint8_array(&a.payload))
                        .set("attempt", a.attempt)
                        .build::<js_sys::Object>(),
                )
            })
            .collect();
        Ok(attempts.unchecked_into())
    }

    /// The server answered the attempt for `key`: 2xx completes, 422 is a conflict, 409
    /// and 408/425/429/5xx retry (at `retryAt` when given, else after a backoff), other
    /// 3xx/4xx fail. A late or duplicate reply is ignored.
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
        Ok(effect(self.ledger.on_reply(&key, reply, now)?))
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
        Ok(effect(self.ledger.on_transport_error(&key, now)?))
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

    /// Removes a finished intent (completed, failed, conflict or expired) once the
    /// application took its outcome, and returns it.
    ///
    /// # Errors
    ///
    /// No intent with `key`, or the intent is still queued or in flight.
    pub fn forget(&mut self, key: &JsString) -> Result<IntentView, JsError> {
        Ok(view(&self.ledger.forget(&js::string("key", key)?)?))
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
        Ok(IdemClient {
            ledger: Ledger::restore(bytes)?,
        })
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
}

fn effect(effect: ledger::Effect) -> Effect {
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
        .build()
}
