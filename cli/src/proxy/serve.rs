//! Serving: the listener, its bounded connections, and the graceful stop on a signal.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_store::Receiver;
use idem_store::http::{IdempotencyLayer, RequestBody, Settings};
use tokio::sync::{Semaphore, watch};
use tower::Layer;

use super::ProxyArgs;
use super::admin::Admin;
use super::cors::Cors;
use super::forward::Upstream;
use super::front::{AccessLog, Front, Router};
use super::metrics::Metrics;
use super::routes::Route;
use super::timed::Timed;
use super::trace::Tracing;
use crate::exit::Failure;

/// What one proxy serves with, whatever its store.
pub(super) struct Serving<'a> {
    pub(super) args: &'a ProxyArgs,
    pub(super) settings: Settings,
    /// The routes with rules of their own (`--routes`), first match first.
    pub(super) routes: Vec<Route>,
    pub(super) tracing: Arc<Tracing>,
    pub(super) upstream: Upstream,
    pub(super) metrics: Arc<Metrics>,
    pub(super) log: Option<AccessLog>,
    pub(super) cors: Cors,
}

impl Serving<'_> {
    /// Serves on `--listen` until a stop signal, on any receiver.
    pub(super) async fn serve<R: Receiver>(self, store: Arc<R>) -> Result<(), Failure> {
        let Serving {
            args,
            settings,
            routes,
            tracing,
            upstream,
            metrics,
            log,
            cors,
        } = self;
        let listen = args.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let admin_listen = args.admin_listen;
        let admin_listener = tokio::net::TcpListener::bind(admin_listen)
            .await
            .map_err(|e| Failure::runtime(format!("--admin-listen {admin_listen}: {e}")))?;
        let admin_local = admin_listener
            .local_addr()
            .map_err(|e| Failure::runtime(format!("--admin-listen {admin_listen}: {e}")))?;
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
        // Every route's layer shares the default one's running requests and kept
        // settlements: the drain and the metrics see them all.
        let keyed = Arc::new(Router {
            routes: routes
                .into_iter()
                .map(|route| {
                    let service = layer.with_settings(route.settings).layer(forward.clone());
                    (route.pattern, route.methods, service)
                })
                .collect(),
            default: layer.layer(forward),
        });
        let unsettled = {
            let layer = layer.clone();
            Arc::new(move || layer.unsettled())
        };
        let stopping_flag = Arc::new(AtomicBool::new(false));
        let admin = Arc::new(Admin {
            store: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
            unsettled,
            stopping: Arc::clone(&stopping_flag),
        });
        let front = Front {
            keyed,
            metrics,
            log,
            cors: Arc::new(cors),
            tracing: Arc::clone(&tracing),
        };
        // The admin listener answers until the proxy exits, through the drain too.
        let admin = AbortOnDrop(tokio::spawn(admin.serve(admin_listener)));
        println!("listening http://{local}");
        println!("admin http://{admin_local}");
        tracing.start();
        let graceful = GracefulShutdown::new();
        // Requests that reached the service and whose answer is not written yet, in all,
        // and the stop, which each connection watches.
        let answering = Busy::default();
        let (stopping, stop_seen) = watch::channel(false);
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
            // This connection's requests being answered, also counted in all.
            let busy = Busy::default();
            let service = tower::service_fn({
                let (front, busy, answering) = (front.clone(), busy.clone(), answering.clone());
                move |request: Request<Incoming>| {
                    let front = front.clone();
                    let counted = (busy.enter(), answering.enter());
                    async move {
                        let answer = front.call(request).await?;
                        // Counted until hyper has written the answer's last byte.
                        Ok::<_, Infallible>(answer.map(|body| Counted {
                            body,
                            _counted: counted,
                        }))
                    }
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            let connection = graceful.watch(connection);
            let mut stop_seen = stop_seen.clone();
            tokio::spawn(async move {
                // A client that hangs up mid-request: its claimed request finishes anyway.
                tokio::select! {
                    _ = connection => {}
                    // Closed at the stop when it answers nothing: it has not sent a whole
                    // request head, or it sits between requests.
                    () = silent_at_stop(&mut stop_seen, &busy) => {}
                }
                drop(permit);
            });
        }
        drop(listener);
        eprintln!("idem proxy: stopping, finishing the requests in flight");
        stopping_flag.store(true, Ordering::SeqCst);
        let _ = stopping.send(true);
        let drain = Duration::from_millis(args.drain_timeout.max(1));
        let drained = async {
            graceful.shutdown().await;
            // A request whose client hung up runs on in a task of its own until its key
            // is settled, and the store may still be giving back a claim nobody took.
            running.idle().await;
            store.idle().await;
        };
        let stopped = tokio::select! {
            () = drained => Ok(()),
            () = tokio::time::sleep(drain) => stopped_anyway(drain, running.count(), answering.count()),
        };
        drop(admin);
        tracing.flush().await;
        stopped
    }
}

/// A task aborted when this is dropped: the admin listener's, which ends with the proxy.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The end of a stop that reached `--drain-timeout` with `claimed` keyed requests whose
/// keys are not settled and `answering` answers not written: a failure when a key is
/// left claimed, which stays pending until its lease ends; otherwise only requests
/// without a claim were cut off, and nothing is left behind.
fn stopped_anyway(drain: Duration, claimed: usize, answering: usize) -> Result<(), Failure> {
    if claimed > 0 {
        return Err(Failure::runtime(format!(
            "proxy: {claimed} claimed requests still running after {} ms (--drain-timeout), stopped anyway; their keys stay pending until their leases end",
            drain.as_millis()
        )));
    }
    eprintln!(
        "idem proxy: {answering} answers without a claim (passed through, or replays) still being written after {} ms (--drain-timeout), cut off; no key was left claimed",
        drain.as_millis()
    );
    Ok(())
}

/// Ready when the stop comes and the connection answers nothing at that moment; never,
/// when it is answering, whose end the graceful shutdown waits for.
async fn silent_at_stop(stop_seen: &mut watch::Receiver<bool>, busy: &Busy) {
    if stop_seen.wait_for(|stopped| *stopped).await.is_ok() && busy.count() == 0 {
        return;
    }
    std::future::pending::<()>().await;
}

/// A count of answers in progress, shared by clones.
#[derive(Debug, Clone, Default)]
struct Busy(Arc<AtomicUsize>);

/// One answer counted until it is dropped.
#[derive(Debug)]
struct Answering(Arc<AtomicUsize>);

impl Busy {
    fn enter(&self) -> Answering {
        self.0.fetch_add(1, Ordering::SeqCst);
        Answering(Arc::clone(&self.0))
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body, counted as being answered until hyper drops it: written whole, or
/// its connection gone.
struct Counted<B> {
    body: B,
    _counted: (Answering, Answering),
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
