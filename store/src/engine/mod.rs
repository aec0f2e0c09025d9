//! The redb engine: opening the file, where its bytes live, the journal, the writer
//! and its one write transaction, the tables, the replay cache, and bounded waits.

pub(crate) mod backend;
pub(crate) mod cache;
pub(crate) mod clock;
pub(crate) mod handle;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod open;
pub(crate) mod tables;
pub(crate) mod wait;
pub(crate) mod writer;
