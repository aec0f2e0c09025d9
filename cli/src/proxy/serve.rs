//! Serving: the listener, its bounded connections, and the graceful stop on a signal.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_store::Receiver;
use idem_store::http::{IdempotencyLayer, RequestBody, Settings};
use tokio::sync::Semaphore;
use tower::Layer;

use super::ProxyArgs;
use super::forward::Upstream;
use super::front::{AccessLog, Front};
use super::metrics::Metrics;
use super::timed::Timed;
use crate::exit::Failure;

/// What one proxy serves with, whatever its store.
pub(super) struct Serving<'a> {
    pub(super) args: &'a ProxyArgs,
    pub(super) settings: Settings,
    pub(super) upstream: Upstream,
    pub(super) metrics: Arc<Metrics>,
    pub(super) log: Option<AccessLog>,
}

impl Serving<'_> {
    /// Serves on `--listen` until a stop signal, on any receiver.
    pub(super) async fn serve<R: Receiver>(self, store: Arc<R>) -> Result<(), Failure> {
        let Serving {
            args,
            settings,
            upstream,
            metrics,
            log,
        } = self;
        let listen = args.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let timed = Arc::new(Timed {
            inner: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
        });
        let forward = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
            let upstream = upstream.clone();
            async move { Ok::<_, Infallible>(upstream.forward(request).await) }
        });
        let layer = IdempotencyLayer::new(timed, settings);
        let running = layer.running();
        let keyed = layer.layer(forward);
        let front = Front {
            keyed,
            store: Arc::clone(&store),
            metrics,
            log,
        };
        let service = tower::service_fn(move |request: Request<Incoming>| {
            let front = front.clone();
            async move { front.call(request).await }
        });
        println!("listening http://{local}");
        let graceful = GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(args.max_connections));
        let header_timeout = Duration::from_millis(args.header_timeout.max(1));
        let mut stop = std::pin::pin!(stop_signal());
        loop {
            // At the bound, no connection is accepted until one ends: the operating
            // system's backlog holds the next ones.
            let permit = tokio::select! {
                permit = Arc::clone(&connections).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = &mut stop => break,
            };
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // A connection that failed before it was accepted (reset), or no
                    // file left for it: the next one may work, after a breath so that a
                    // process out of files does not spin.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
                () = &mut stop => break,
            };
            let _ = stream.set_nodelay(true);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(service.clone()),
                );
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                // A client that hangs up mid-request: its claimed request finishes anyway.
                let _ = connection.await;
                drop(permit);
            });
        }
        drop(listener);
        eprintln!("idem proxy: stopping, finishing the requests in flight");
        let drain = Duration::from_millis(args.drain_timeout.max(1));
        let drained = async {
            graceful.shutdown().await;
            // A request whose client hung up runs on in a task of its own until its key
            // is settled, and the store may still be giving back a claim nobody took.
            running.idle().await;
            store.idle().await;
        };
        tokio::select! {
            () = drained => Ok(()),
            () = tokio::time::sleep(drain) => Err(Failure::runtime(format!(
                "proxy: requests still running after {} ms (--drain-timeout), stopped anyway; a key claimed by a request cut off stays pending until its lease ends",
                drain.as_millis()
            ))),
        }
    }
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
