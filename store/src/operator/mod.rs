//! The operator's work over every table: reads by id and by filter, sweep, stats and
//! check, export and import, and the JSON views of records.

pub(crate) mod maintain;
pub(crate) mod read;
pub(crate) mod transfer;
pub(crate) mod view;
