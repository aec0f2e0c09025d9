//! [`BlockingStore`]: an [`AnyStore`] for a caller without an async runtime (a command
//! line tool, a script), each call run to its end on the calling thread. One wrapper
//! around the async calls, as the `postgres` crate wraps `tokio-postgres`.

use core::future::Future;
use std::ffi::OsStr;
use std::ops::ControlFlow;

use idem_core::{Record, RecordId};

use super::{AnyOpenError, AnyStore, AnyStoreBuilder, Engine};
use crate::error::Error;
use crate::file::Store;
use crate::seam::filter::ListFilter;
use crate::seam::poll::block_on;

/// An [`AnyStore`] whose calls block: the file's run on the calling thread, a
/// database's on a single-threaded runtime of this store's own. Any call of the seam's
/// traits ([`crate::Receiver`], [`crate::entity::Entities`], [`crate::token::Tokens`]) runs
/// through [`BlockingStore::call`].
#[derive(Debug)]
pub struct BlockingStore {
    store: AnyStore,
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
    runtime: Option<tokio::runtime::Runtime>,
}

impl AnyStoreBuilder {
    /// [`AnyStoreBuilder::open`] for a caller without an async runtime.
    ///
    /// # Errors
    ///
    /// As [`AnyStoreBuilder::open`]; [`AnyOpenError::Runtime`] when a database's runtime
    /// does not start.
    pub fn open_blocking(self, target: impl AsRef<OsStr>) -> Result<BlockingStore, AnyOpenError> {
        let target = target.as_ref();
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
        if super::database_of(target).is_some() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(AnyOpenError::Runtime)?;
            let store = runtime.block_on(self.open(target))?;
            return Ok(BlockingStore {
                store,
                runtime: Some(runtime),
            });
        }
        Ok(BlockingStore {
            store: block_on(self.open(target))?,
            #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
            runtime: None,
        })
    }
}

impl BlockingStore {
    /// Runs the call `call` makes on the store to its end, on this thread: any call of
    /// the seam's traits, as `store.call(|s| s.begin(&id, fingerprint, now))`.
    pub fn call<'s, F: Future>(&'s self, call: impl FnOnce(&'s AnyStore) -> F) -> F::Output {
        self.wait(call(&self.store))
    }

    /// Runs `future` to its end on this thread.
    fn wait<F: Future>(&self, future: F) -> F::Output {
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
        if let Some(runtime) = &self.runtime {
            return runtime.block_on(future);
        }
        block_on(future)
    }

    /// The store itself, for an async caller from here on. A database's calls then
    /// need the caller's tokio runtime.
    #[must_use]
    pub fn into_store(self) -> AnyStore {
        self.store
    }

    /// The engine's name: `file`, `postgres` or `mysql`.
    #[must_use]
    pub fn engine(&self) -> &'static str {
        self.store.engine()
    }

    /// See [`AnyStore::file`].
    ///
    /// # Errors
    ///
    /// As [`AnyStore::file`].
    pub fn file(&self, what: &'static str) -> Result<&Store, Error> {
        self.store.file(what)
    }

    /// See [`AnyStore::file_mut`].
    ///
    /// # Errors
    ///
    /// As [`AnyStore::file_mut`].
    pub fn file_mut(&mut self, what: &'static str) -> Result<&mut Store, Error> {
        self.store.file_mut(what)
    }

    /// The records that match `filter`, each handed to `visit` in the order
    /// [`crate::Receiver::list`] gives, until it breaks. A file streams them from one read
    /// snapshot; a database reads them first.
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn list(
        &self,
        filter: &ListFilter,
        visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        match &self.store.engine {
            Engine::File(store) => store.list(filter, visit),
            #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
            _ => {
                let mut visit = visit;
                for (id, record) in
                    self.wait(crate::seam::receiver::Receiver::list(&self.store, filter))?
                {
                    if visit(id, record).is_break() {
                        break;
                    }
                }
                Ok(())
            }
        }
    }
}
