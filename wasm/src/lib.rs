//! Browser bindings of idem.
