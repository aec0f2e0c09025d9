//! A small pool of connections, each with the engine's statements prepared and its
//! session set for the protocol: `synchronous_commit = on` (an answer follows a durable
//! commit, whatever the server's default) and READ COMMITTED.
//!
//! A connection that broke (the server restarted, a backend was terminated) is dropped
//! when it comes back, and the next call connects anew: the pool recovers without a
//! restart of the process.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::Client;

use super::statements::Statements;

/// A connection with its statements.
pub(super) struct Connection {
    pub(super) client: Client,
    pub(super) statements: Arc<Statements>,
}

/// How connections are made: in the clear, or with TLS where the URL's `sslmode` asks.
#[derive(Clone)]
pub(super) enum Connector {
    /// No TLS (without the feature `postgres-tls`): an `sslmode=require` URL is refused.
    #[cfg(not(feature = "postgres-tls"))]
    Plain,
    /// rustls, with the roots it was given.
    #[cfg(feature = "postgres-tls")]
    Tls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl Connector {
    /// A client of the database `config` names; its connection runs as a task of its
    /// own, and ends when the client is dropped or the server goes away.
    pub(super) async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<Client, tokio_postgres::Error> {
        match self {
            #[cfg(not(feature = "postgres-tls"))]
            Connector::Plain => {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                tokio::spawn(async move {
                    let _ended = connection.await;
                });
                Ok(client)
            }
            #[cfg(feature = "postgres-tls")]
            Connector::Tls(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                tokio::spawn(async move {
                    let _ended = connection.await;
                });
                Ok(client)
            }
        }
    }
}

/// At most `size` connections to one database.
pub(super) struct Pool {
    config: tokio_postgres::Config,
    connector: Connector,
    statement_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

/// A connection lent by the pool; it goes back when dropped, unless it broke.
pub(super) struct Lent<'p> {
    pool: &'p Pool,
    connection: Option<Connection>,
    _permit: SemaphorePermit<'p>,
}

impl Deref for Lent<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.connection
            .as_ref()
            .expect("a lent connection is only taken by drop")
    }
}

impl DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.connection
            .as_mut()
            .expect("a lent connection is only taken by drop")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take()
            && !connection.client.is_closed()
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(connection);
        }
    }
}

impl Pool {
    pub(super) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        size: usize,
        statement_timeout: Duration,
    ) -> Pool {
        Pool {
            config,
            connector,
            statement_timeout,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size),
        }
    }

    /// How long the server lets one statement of this pool's sessions run.
    pub(super) fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// A connection: an idle one, or a new one.
    pub(super) async fn get(&self) -> Result<Lent<'_>, tokio_postgres::Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the pool's semaphore is never closed");
        let idle = {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                match idle.pop() {
                    Some(c) if c.client.is_closed() => continue,
                    other => break other,
                }
            }
        };
        let connection = match idle {
            Some(connection) => connection,
            None => self.connect().await?,
        };
        Ok(Lent {
            pool: self,
            connection: Some(connection),
            _permit: permit,
        })
    }

    async fn connect(&self) -> Result<Connection, tokio_postgres::Error> {
        let client = self.connector.connect(&self.config).await?;
        let timeout_ms = self.statement_timeout.as_millis();
        client
            .batch_execute(&format!(
                "SET synchronous_commit = on; \
                 SET default_transaction_isolation = 'read committed'; \
                 SET statement_timeout = {timeout_ms}"
            ))
            .await?;
        let statements = Statements::prepare(&client).await?;
        Ok(Connection {
            client,
            statements: Arc::new(statements),
        })
    }
}
