//! The durable idempotency store of idem, on redb.
