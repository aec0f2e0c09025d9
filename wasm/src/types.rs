//! The TypeScript shapes of the objects that cross the boundary, and their Rust handles.
//!
//! wasm-bindgen writes the classes and functions into the `.d.ts` itself; the plain objects
//! (options, intents, decisions) are declared here and named by the handles below, so the
//! generated signatures say `IntentView` rather than `any`.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &str = r#"
/** Settings of an `IdemClient`; every member is optional. */
export interface IdemClientOptions {
  /** How long the server replays an outcome, in ms. Default 24 h. */
  serverRetentionMs?: number;
  /** How much earlier than the retention the client stops sending, in ms. Default 1 h. */
  safetyMarginMs?: number;
  /** The first retry waits up to this long, in ms; each further retry doubles it. Default 500. */
  baseBackoffMs?: number;
  /** No retry waits longer, in ms. Default 60 000. */
  maxBackoffMs?: number;
  /** Seed of the backoff jitter (not of keys). Default: 8 bytes from crypto.getRandomValues. */
  seed?: number | bigint;
}

/** A state machine: states, the initial one, and the allowed moves as [from, to]. */
export interface MachineOptions {
  states: string[];
  initial: string;
  moves: [string, string][];
}

/** An entity's state and version, as `Machine.transition` takes and returns it. */
export interface EntityView {
  state: string;
  /** Moves applied so far: 1 after the first. */
  version: number;
  /** When the last move was applied, ms since the epoch. */
  updatedAt: number;
}

/** What `Machine.transition` decided; only `applied` means the move should be written. */
export type MachineDecision =
  | { decision: "applied"; entity: EntityView }
  | { decision: "already_there"; entity: EntityView }
  | { decision: "illegal"; from: string; to: string }
  | { decision: "version_mismatch"; expected: number; current: number };

/** Where an intent is in its life. */
export type IntentState = "queued" | "in_flight" | "completed" | "failed" | "conflict" | "expired" | "unknown";

/** What happened to an expired or unknown intent, as someone who asked the receiver found. */
export type ResolvedAs = "completed" | "failed" | "not_executed";

/** The resolution of an expired or unknown intent, recorded by `IdemClient.resolve`. */
export interface IntentResolution {
  resolvedAs: ResolvedAs;
  /** How they know (who confirmed it, where). */
  reason: string;
  resolvedAt: number;
}

/** What `IdemClient.begin` made: the intent's key and its payload's fingerprint (hex). */
export interface BeginResult {
  key: string;
  fingerprint: string;
}

/** One send to perform: `payload` with `key` in the `Idempotency-Key` header. */
export interface Attempt {
  key: string;
  operation: string;
  payload: Uint8Array;
  /** Which send this is, from 1. */
  attempt: number;
}

/** The server's reply to an attempt. */
export interface Reply {
  /** The HTTP status code (0 for an opaque response). */
  status: number;
  body?: Uint8Array | string;
  /** When the server asks for the next attempt (ms since the epoch), e.g. from Retry-After. */
  retryAt?: number;
}

/** What `IdemClient.prepare` made: a new intent's key, fingerprint (hex) and record. */
export interface PreparedIntent {
  key: string;
  fingerprint: string;
  /** The intent's record, for storage and then `IdemClient.put`. */
  intent: Uint8Array;
}

/** What a reply or a transport error did to an intent. */
export type Effect =
  | { effect: "finished"; state: IntentState }
  | { effect: "requeued"; at: number }
  | { effect: "ignored" };

/** One intent as the client holds it. */
export interface IntentView {
  key: string;
  operation: string;
  state: IntentState;
  /** How many times it was sent. */
  attempts: number;
  createdAt: number;
  /** When a queued intent is due. */
  nextAttemptAt: number;
  /** Sends happen only strictly before this time. */
  deadline: number;
  /** SHA-256 of the payload, hex. */
  fingerprint: string;
  payload: Uint8Array;
  /** Status of the most recent reply, absent before any and after a transport error. */
  lastStatus?: number;
  /**
   * The definitive reply's status (completed, failed, conflict; 503 for unknown: the
   * receiver does not know the outcome either).
   */
  status?: number;
  /** The definitive reply's body (completed, failed, conflict; unknown: the receiver's problem document). */
  body?: Uint8Array;
  /**
   * An expired or unknown intent's resolution; absent until someone resolves it. Such an
   * intent without one cannot be forgotten: its effect may or may not have happened.
   */
  resolution?: IntentResolution;
}

/** Settings of a `MemoryReceiver`; every member is optional. */
export interface ReceiverOptions {
  /** How long a claim holds, in ms. Default 30 000. */
  leaseMs?: number;
  /** How long a success is replayed, in ms. Default 24 h. */
  successRetentionMs?: number;
  /** How long a failure is replayed, in ms. Default 24 h. */
  failureRetentionMs?: number;
  /** Largest outcome body, in bytes. Default 1 MiB. */
  maxOutcomeBytes?: number;
  /** What begin does with a pending record whose lease ran out. Default "unknown". */
  onLeaseExpiry?: "unknown" | "takeover";
  /** How long a tombstone outlives a settled record's retention, in ms; 0 keeps none. Default 30 days. */
  tombstoneRetentionMs?: number;
}

/** Where a record lives. */
export interface RecordId {
  tenant: string;
  operation: string;
  key: string;
}

/** How an execution ended. */
export type Verdict = "succeeded" | "failed";

/** The receiver's state names. */
export type RecordState = "pending" | "succeeded" | "failed" | "unknown" | "forgotten";

/** An outcome to store: a code of the caller's choosing and a body. */
export interface OutcomeInput {
  code: number;
  body?: Uint8Array | string;
}

/** How an unknown record is reconciled. */
export type Resolution = "succeeded" | "failed" | "not_executed";

/** The receiver's answer to begin. */
export type Decision =
  | { decision: "claimed"; generation: number; leaseUntil: number }
  | { decision: "in_progress"; generation: number; leaseUntil: number }
  | { decision: "replay"; state: Verdict; code: number; body: Uint8Array; completedAt: number }
  | { decision: "conflict"; state: RecordState; storedFingerprint: string }
  | { decision: "unknown"; generation: number }
  | { decision: "forgotten"; generation: number; state: Verdict; completedAt: number };

/** One record as the receiver keeps it. */
export interface RecordView extends RecordId {
  state: RecordState;
  generation: number;
  fingerprint: string;
  createdAt: number;
  updatedAt: number;
  leaseUntil?: number;
  completedAt?: number;
  expiresAt?: number;
  code?: number;
  body?: Uint8Array;
  /** Forgotten (a tombstone) only: how the request settled. */
  verdict?: Verdict;
}

/** Named fields to fingerprint: an object, or [name, value] pairs (duplicates are refused). */
export type Fields = Record<string, Uint8Array | string> | Array<[string, Uint8Array | string]>;
"#;

#[wasm_bindgen]
extern "C" {
    /// `MachineOptions`.
    #[wasm_bindgen(typescript_type = "MachineOptions")]
    pub type MachineOptions;
    /// `EntityView`.
    #[wasm_bindgen(typescript_type = "EntityView")]
    pub type EntityInput;
    /// `MachineDecision`.
    #[wasm_bindgen(typescript_type = "MachineDecision")]
    pub type MachineDecision;
    /// `IdemClientOptions`.
    #[wasm_bindgen(typescript_type = "IdemClientOptions")]
    pub type ClientOptions;
    /// `BeginResult`.
    #[wasm_bindgen(typescript_type = "BeginResult")]
    pub type BeginResult;
    /// `PreparedIntent`.
    #[wasm_bindgen(typescript_type = "PreparedIntent")]
    pub type PreparedIntent;
    /// `Uint8Array[]`: intent records.
    #[wasm_bindgen(typescript_type = "Uint8Array[]")]
    pub type IntentRecords;
    /// `string[]`: keys.
    #[wasm_bindgen(typescript_type = "string[]")]
    pub type Keys;
    /// `Attempt[]`.
    #[wasm_bindgen(typescript_type = "Attempt[]")]
    pub type Attempts;
    /// `Reply`.
    #[wasm_bindgen(typescript_type = "Reply")]
    pub type Reply;
    /// `Effect`.
    #[wasm_bindgen(typescript_type = "Effect")]
    pub type Effect;
    /// `IntentView`.
    #[wasm_bindgen(typescript_type = "IntentView")]
    pub type IntentView;
    /// `IntentView | undefined`.
    #[wasm_bindgen(typescript_type = "IntentView | undefined")]
    pub type MaybeIntentView;
    /// `IntentView[]`.
    #[wasm_bindgen(typescript_type = "IntentView[]")]
    pub type IntentViews;
    /// `ReceiverOptions`.
    #[wasm_bindgen(typescript_type = "ReceiverOptions")]
    pub type ReceiverOptions;
    /// `RecordId`.
    #[wasm_bindgen(typescript_type = "RecordId")]
    pub type RecordIdInput;
    /// `Verdict`.
    #[wasm_bindgen(typescript_type = "Verdict")]
    pub type VerdictInput;
    /// `OutcomeInput`.
    #[wasm_bindgen(typescript_type = "OutcomeInput")]
    pub type OutcomeInput;
    /// `Resolution`.
    #[wasm_bindgen(typescript_type = "Resolution")]
    pub type ResolutionInput;
    /// `ResolvedAs`.
    #[wasm_bindgen(typescript_type = "ResolvedAs")]
    pub type ResolvedAsInput;
    /// `number | bigint`.
    #[wasm_bindgen(typescript_type = "number | bigint")]
    pub type GenerationInput;
    /// `Decision`.
    #[wasm_bindgen(typescript_type = "Decision")]
    pub type Decision;
    /// `RecordView | undefined`.
    #[wasm_bindgen(typescript_type = "RecordView | undefined")]
    pub type MaybeRecordView;
    /// `RecordView[]`.
    #[wasm_bindgen(typescript_type = "RecordView[]")]
    pub type RecordViews;
    /// `Fields`.
    #[wasm_bindgen(typescript_type = "Fields")]
    pub type FieldsInput;
    /// `Uint8Array | string`.
    #[wasm_bindgen(typescript_type = "Uint8Array | string")]
    pub type BytesInput;
    /// `string[]`.
    #[wasm_bindgen(typescript_type = "string[]")]
    pub type Paths;
}
