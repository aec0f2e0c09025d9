//! The sender ledger: intents, their keys and their retries.
