//! The checks of an open that keep a bad file untouched: the read-only look first, the
//! atomic creation of a new file, the schema, and errors that name the cause.

use super::*;

impl StoreBuilder {
    /// Reads the schema of an existing store through a read-only open, which writes
    /// nothing, so a newer or damaged file is refused untouched.
    ///
    /// True when the file is of this build's schema (false: it has none yet, is older,
    /// or needs a recovery first).
    pub(super) fn precheck(
        &self,
        location: &Location,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<bool, OpenError> {
        let label = location.label();
        match self.open_without_writing(location, concurrency, deadline)? {
            Some(db) => {
                let schema = guarded(label, || read_schema(&db))?.map_err(|e| storage(label, e))?;
                let current = matches!(schema, Ok(Some(SCHEMA_VERSION)));
                check_schema(label, schema)?;
                Ok(current)
            }
            // An unclean shutdown: only a writable open repairs it, and then the schema
            // is checked inside the writable open.
            None => Ok(false),
        }
    }

    /// The writable open of `location`, initialized ([`StoreBuilder::initialize`]).
    ///
    /// A file not known to be of this build's schema (`current` false) that is to be
    /// written through a journal is first initialized by an open without one, whose
    /// commit syncs the file itself: the schema that makes builds which know no journal
    /// refuse the file is durable in it before the journal holds any of its commits.
    pub(super) fn writable(
        &self,
        location: &Location,
        current: bool,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<Database, OpenError> {
        let label = location.label();
        if location.is_journaled() && !current {
            let plain = location.clone().journaled(None);
            let db = self.open_for_writing(&plain, concurrency, deadline)?;
            self.initialize(&db, label, deadline)?;
        }
        let db = self.open_for_writing(location, concurrency, deadline)?;
        self.initialize(&db, label, deadline)?;
        Ok(db)
    }

    /// The store for [`StoreBuilder::read_only`] on a file.
    pub(super) fn open_file_read_only(
        self,
        path: &Path,
        concurrency: ConcurrencyMode,
    ) -> Result<Opened, OpenError> {
        let path = path.to_path_buf();
        let deadline = Deadline::after(self.lock_timeout);
        match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => return Err(OpenError::IsDirectory { path }),
            Ok(meta) if meta.len() > 0 => {}
            Ok(_) => return Err(OpenError::NoStore { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(OpenError::NoStore { path });
            }
            Err(source) => return Err(OpenError::Io { path, source }),
        }
        let location = Location::file(&path);
        let db = self.read_only_store(&location, concurrency, deadline)?;
        Ok(self.opened(Handle::ReadOnly(db), location, concurrency))
    }

    /// A read-only open of a non-empty store whose schema this build reads, which it
    /// keeps.
    pub(super) fn read_only_store(
        &self,
        location: &Location,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<redb::ReadOnlyDatabase, OpenError> {
        let label = location.label();
        let Some(db) = self.open_without_writing(location, concurrency, deadline)? else {
            return Err(OpenError::NeedsRecovery { path: label.into() });
        };
        match guarded(label, || read_schema(&db))?.map_err(|e| storage(label, e))? {
            Ok(None) => return Err(OpenError::NoStore { path: label.into() }),
            schema => check_schema(label, schema)?,
        }
        Ok(db)
    }

    /// Opens `location` read-only, waiting (until the deadline) for a process that holds it
    /// exclusively; `None` when it needs a recovery, which only a writable open does.
    pub(super) fn open_without_writing(
        &self,
        location: &Location,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<Option<redb::ReadOnlyDatabase>, OpenError> {
        let builder = self.redb_builder(concurrency);
        let label = location.label();
        retry_until(
            deadline,
            || match guarded(label, || {
                location
                    .open(false)
                    .and_then(|storage| builder.open_read_only_with_backend(storage))
            }) {
                Ok(Ok(db)) => Tried::Done(Ok(Some(db))),
                Ok(Err(DatabaseError::RepairAborted)) => Tried::Done(Ok(None)),
                Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => Tried::Held,
                Ok(Err(e)) => Tried::Done(Err(open_error(label, e, deadline))),
                Err(corrupt) => Tried::Done(Err(corrupt)),
            },
            |waited| locked(label, waited),
        )
    }

    /// Makes a new store file whole or not at all: the file is built and initialized
    /// under a temporary name beside `path`, then linked into place. A crash while
    /// creating leaves no half-made file at `path` (redb writes its header in steps, and
    /// a file cut short between them is refused as "not a redb database" on every later
    /// open). When another process created `path` first, its file is kept.
    pub(super) fn create_atomically(
        &self,
        path: &Path,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<(), OpenError> {
        static CREATING: AtomicU64 = AtomicU64::new(0);
        let io_error = |source| OpenError::Io {
            path: path.into(),
            source,
        };
        journal::remove_stale(path).map_err(io_error)?;
        let name = path
            .file_name()
            .map_or_else(|| "idem".into(), |n| n.to_string_lossy());
        let scratch = path.with_file_name(format!(
            ".{name}.creating-{}-{}",
            std::process::id(),
            CREATING.fetch_add(1, Ordering::Relaxed)
        ));
        let built = self
            .open_for_writing(&Location::file(&scratch), concurrency, deadline)
            .and_then(|db| self.initialize(&db, &scratch, deadline));
        let placed = built.and_then(|()| {
            match fs::metadata(path) {
                // An empty file at `path` holds nothing: replace it.
                Ok(meta) if meta.len() == 0 => fs::rename(&scratch, path).map_err(io_error),
                Ok(_) => Ok(()),
                Err(_) => match fs::hard_link(&scratch, path) {
                    Ok(()) => Ok(()),
                    // Created meanwhile by another process: use that one.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                    // A filesystem without hard links (FAT on a memory card): a rename,
                    // which could replace a file another process created a moment ago.
                    Err(_) if !path.exists() => fs::rename(&scratch, path).map_err(io_error),
                    Err(_) => Ok(()),
                },
            }
        });
        // The scratch name is gone after a rename; after a link it is a second name.
        let _ = fs::remove_file(&scratch);
        placed?;
        journal::sync_parent(path).map_err(io_error)
    }

    pub(super) fn open_for_writing(
        &self,
        location: &Location,
        concurrency: ConcurrencyMode,
        deadline: Deadline,
    ) -> Result<Database, OpenError> {
        let mut builder = self.redb_builder(concurrency);
        builder.set_check_integrity_on_open(self.verify_on_open);
        let label = location.label();
        retry_until(
            deadline,
            || match guarded(label, || {
                location
                    .open(true)
                    .and_then(|storage| builder.create_with_backend(storage))
            }) {
                Ok(Ok(db)) => Tried::Done(Ok(db)),
                Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => Tried::Held,
                Ok(Err(e)) => Tried::Done(Err(open_error(label, e, deadline))),
                Err(corrupt) => Tried::Done(Err(corrupt)),
            },
            |waited| locked(label, waited),
        )
    }

    /// Creates idem's tables and schema version in a file that has none yet, or upgrades
    /// an older schema this build reads to its own.
    pub(super) fn initialize(
        &self,
        db: &Database,
        path: &Path,
        deadline: Deadline,
    ) -> Result<(), OpenError> {
        let to_open_error = |e: Error| match e {
            Error::Busy { waited } => OpenError::Locked {
                path: path.into(),
                waited,
            },
            Error::Corrupt { detail } => OpenError::Corrupt {
                path: path.into(),
                detail,
            },
            Error::Storage(source) => storage(path, source),
            // Bytes in the meta table that do not decode.
            other => OpenError::Corrupt {
                path: path.into(),
                detail: other.to_string(),
            },
        };
        // The common case, a file already initialized, needs only a read, which never
        // waits for another process's write transaction.
        match guarded(path, || read_schema_of(db))?.map_err(|e| storage(path, e))? {
            // No schema yet, or an older one this build upgrades.
            Ok(None) => {}
            Ok(Some(older)) if (OLDEST_SCHEMA..SCHEMA_VERSION).contains(&older) => {}
            known_or_bad => return check_schema(path, known_or_bad),
        }
        let mut txn = begin_write(db, deadline).map_err(to_open_error)?;
        if !matches!(self.durability, Durability::Immediate) {
            txn.set_durability(self.durability)
                .map_err(|e| to_open_error(e.into()))?;
        }
        // Initializing raises neither the generation counter nor the clock floor: these
        // counters stay empty, and the commit below has nothing of theirs to write.
        let counters = Counters::default();
        let schema = {
            let mut tables = Tables::open(&txn, &counters).map_err(to_open_error)?;
            let schema = tables.schema().map_err(to_open_error)?;
            if schema.is_none() && !tables.is_empty().map_err(to_open_error)? {
                return Err(OpenError::Corrupt {
                    path: path.into(),
                    detail: "idem.records holds records but idem.meta has no schema version".into(),
                });
            }
            schema
        };
        match schema {
            Some(found) if !(OLDEST_SCHEMA..SCHEMA_VERSION).contains(&found) => {
                txn.abort().map_err(|e| storage(path, e.into()))?;
                check_schema(path, Ok(Some(found)))
            }
            // A new file, or an upgrade: `Tables::open` created the tables of this
            // schema, an upgrade rebuilds the index from the records and deletes the
            // old tables (`tables::upgrade`), and the version is recorded in the same
            // transaction: a crash before the commit leaves the old file as it was.
            None | Some(_) => {
                if let Some(from) = schema {
                    tables::upgrade(&txn, from).map_err(to_open_error)?;
                }
                {
                    let mut tables = Tables::open(&txn, &counters).map_err(to_open_error)?;
                    tables.set_schema().map_err(to_open_error)?;
                }
                txn.commit().map_err(|e| storage(path, e.into()))
            }
        }
    }
}

/// The schema version in the file, or `None` when it has no idem tables yet.
fn read_schema(db: &redb::ReadOnlyDatabase) -> Result<Result<Option<u64>, Error>, redb::Error> {
    schema_in(&db.begin_read()?)
}

/// [`read_schema`] through a writable handle.
fn read_schema_of(db: &Database) -> Result<Result<Option<u64>, Error>, redb::Error> {
    schema_in(&db.begin_read()?)
}

fn schema_in(txn: &redb::ReadTransaction) -> Result<Result<Option<u64>, Error>, redb::Error> {
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(TableError::TableDoesNotExist(_)) => {
            return Ok(match txn.open_table(RECORDS) {
                Ok(records) if !records.is_empty()? => Err(Error::Corrupt {
                    detail: "idem.records holds records but idem.meta is missing".into(),
                }),
                Ok(_) | Err(TableError::TableDoesNotExist(_)) => Ok(None),
                Err(e) => Err(e.into()),
            });
        }
        Err(e) => return Err(e.into()),
    };
    Ok(tables::read_meta(&meta, SCHEMA_KEY))
}

fn check_schema(path: &Path, schema: Result<Option<u64>, Error>) -> Result<(), OpenError> {
    match schema {
        Ok(None) => Ok(()),
        Ok(Some(found)) if (OLDEST_SCHEMA..=SCHEMA_VERSION).contains(&found) => Ok(()),
        Ok(Some(found)) if found > SCHEMA_VERSION => Err(OpenError::NewerFormat {
            path: path.into(),
            found,
            supported: SCHEMA_VERSION,
        }),
        Ok(Some(found)) => Err(OpenError::Corrupt {
            path: path.into(),
            detail: format!("schema version {found} was never written by idem"),
        }),
        Err(e) => Err(OpenError::Corrupt {
            path: path.into(),
            detail: e.to_string(),
        }),
    }
}

/// Runs a redb call that may panic on a file damaged outside redb (its documented
/// behaviour for plain opens), turning the panic into [`OpenError::Corrupt`].
fn guarded<T>(path: &Path, call: impl FnOnce() -> T) -> Result<T, OpenError> {
    catch_unwind(AssertUnwindSafe(call)).map_err(|_| OpenError::Corrupt {
        path: path.into(),
        detail: "redb could not read the file's structure".into(),
    })
}

fn storage(path: &Path, source: redb::Error) -> OpenError {
    match source {
        redb::Error::Corrupted(detail) => OpenError::Corrupt {
            path: path.into(),
            detail,
        },
        // A file shorter than its own layout says, or bytes that are not redb's.
        redb::Error::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ) =>
        {
            OpenError::Corrupt {
                path: path.into(),
                detail: e.to_string(),
            }
        }
        source => OpenError::Storage {
            path: path.into(),
            source,
        },
    }
}

/// The error of an open that waited `waited` for another process's lock and gave up.
fn locked(path: &Path, waited: Duration) -> OpenError {
    OpenError::Locked {
        path: path.into(),
        waited,
    }
}

fn open_error(path: &Path, e: DatabaseError, deadline: Deadline) -> OpenError {
    let owned: PathBuf = path.into();
    match e {
        DatabaseError::DatabaseAlreadyOpen => locked(path, deadline.waited()),
        DatabaseError::LockProtocolMismatch => OpenError::IncompatibleProcess { path: owned },
        DatabaseError::Storage(StorageError::Io(source)) => match source.kind() {
            io::ErrorKind::ReadOnlyFilesystem => OpenError::ReadOnly { path: owned },
            io::ErrorKind::IsADirectory => OpenError::IsDirectory { path: owned },
            io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => {
                storage(path, redb::Error::Io(source))
            }
            _ => OpenError::Io {
                path: owned,
                source,
            },
        },
        other => storage(path, other.into()),
    }
}
