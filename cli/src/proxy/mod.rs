//! `idem proxy`: its flags, and the wiring from them to a store, an upstream and a server.
//!
//! A reverse proxy that gives any HTTP backend idempotency keys, on the store's tower
//! layer (`idem_store::http`): [`serve`] listens and stops, [`front`] passes every
//! request on the public listener through the layer, [`forward`] sends them upstream,
//! [`admin`] answers the operator's `/healthz` and `/metrics` on a listener of its own,
//! [`metrics`], [`timed`] and [`deadline`] measure and bound them.

mod admin;
mod cors;
mod deadline;
mod forward;
mod front;
mod metrics;
#[cfg(feature = "otel")]
mod otel;
mod routes;
mod serve;
mod timed;
mod trace;

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{ArgGroup, Args};
use http::HeaderName;
use idem_core::Config;
use idem_store::http::{AnswerConfig, ReplayStatus, Settings, Tenant};

use crate::exit::{Ending, Failure};
use crate::session::{Access, Session, open_failure};
use crate::time::parse_duration;
use forward::upstream;
use front::AccessLog;
use metrics::Metrics;
use serve::Serving;

/// `idem proxy`'s flags.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("tenant_source").args(["tenant", "tenant_header"])))]
pub(crate) struct ProxyArgs {
    /// The address to listen on; 127.0.0.1 unless you mean to expose it.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8480")]
    pub(crate) listen: std::net::SocketAddr,
    /// The admin listener's address: GET /healthz and GET /metrics, kept off the public
    /// listener, which forwards every path to the backend. Loopback by default; a load
    /// balancer or Prometheus on another machine needs an address it can reach (e.g.
    /// 10.0.0.5:8481), kept from clients by the network. Port 0 picks a free one; the
    /// second line of output names it (admin http://ADDR).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8481")]
    pub(crate) admin_listen: std::net::SocketAddr,
    /// The backend, an http:// URL; the request's path and query are appended to it.
    #[arg(long, value_name = "URL", required_unless_present = "check_config")]
    pub(crate) upstream: Option<String>,
    /// Routes with rules of their own, from a TOML file: per method and path pattern,
    /// whether a key is required, which JSON fields and headers count toward the
    /// fingerprint, which response headers are replayed, the body limit, the wait, the
    /// lease and the retention.
    /// The first route that matches a request gives its rules; the flags give the rest.
    /// docs/proxy.md has the format.
    #[arg(long, value_name = "FILE")]
    pub(crate) routes: Option<PathBuf>,
    /// Checks a routes file (--routes) and prints its routes, starting nothing; at the
    /// first error, exit 2 naming the file, the line where there is one, and the rule.
    #[arg(long, value_name = "FILE")]
    pub(crate) check_config: Option<PathBuf>,
    /// One tenant for every request (a single-tenant deployment).
    #[arg(long, value_name = "NAME")]
    pub(crate) tenant: Option<String>,
    /// The header that carries the tenant, set by your authentication in front.
    #[arg(long, value_name = "NAME")]
    pub(crate) tenant_header: Option<String>,
    /// The status of a replayed 2xx: the original one, or 200.
    #[arg(long, value_name = "original|200", default_value = "original", value_parser = ["original", "200"])]
    pub(crate) replay_status: String,
    /// Answer a POST or PATCH without an Idempotency-Key with 400 instead of passing it.
    #[arg(long)]
    pub(crate) require_key: bool,
    /// The most body bytes buffered and fingerprinted; a larger body is a 413.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub(crate) body_limit: usize,
    /// How long the upstream may take to answer a keyed request, head and body whole
    /// (a request passed through: its head); past it the key is unknown (504).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "25s")]
    pub(crate) upstream_timeout: u64,
    /// A browser origin whose pages may call the proxy across origins (repeat for more):
    /// https://shop.example, or http://localhost:5173 in development. Their preflights
    /// are answered, and every answer to them carries Access-Control-Allow-Origin and
    /// exposes Retry-After and Idempotent-Replayed; any other origin gets nothing.
    // The doc is the --help text, where an origin reads best bare.
    #[allow(rustdoc::bare_urls)]
    #[arg(long, value_name = "ORIGIN")]
    pub(crate) cors_origin: Vec<String>,
    /// A request header that is part of the fingerprint (repeat for more).
    #[arg(long, value_name = "NAME")]
    pub(crate) fingerprint_header: Vec<String>,
    /// How long a client may take to send a request's head; past it the connection is
    /// closed (also an idle keep-alive connection waiting for its next request).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub(crate) header_timeout: u64,
    /// How long a keyed request's body may take to arrive whole; past it 408, nothing
    /// claimed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub(crate) body_timeout: u64,
    /// The most connections open at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// How long a claim holds its key without a word from its request (the lease): while
    /// the upstream works on a keyed request, the proxy extends it every third of it,
    /// so an upstream slower than the lease keeps its key; a proxy that dies stops, and
    /// after the lease a retry finds the key Unknown. E.g. --lease 2m.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub(crate) lease: u64,
    /// How long a request whose key is claimed by a request still running waits for its
    /// outcome and gets the replay, instead of 409 at once; past it, 409 with
    /// Retry-After. The waiters of one key share one reader of the store, across replicas
    /// too (a read every 20 ms to 500 ms). Without it, 409 at once. E.g. --wait-in-flight 10s.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(crate) wait_in_flight: Option<u64>,
    /// On SIGTERM or Ctrl-C, how long the requests in flight may take to finish before
    /// the proxy exits anyway; connections that have not sent a whole request head are
    /// closed at once. The exit status is 1 only when a claimed key was left unsettled.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub(crate) drain_timeout: u64,
    /// With a store file, the free space kept on its filesystem for settling the
    /// requests already claimed (on Redis, the memory kept under its maxmemory): while
    /// less is free, new claims are answered 503 (nothing forwarded) and /healthz says
    /// why; replays and settles go on. Bytes, or with KiB,
    /// MiB or GiB: 4MiB, 512KiB. 0 keeps none.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "4MiB")]
    pub(crate) space_reserve: u64,
    /// With a database --db (postgres://, mysql://), the most database connections this
    /// replica opens.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) pool: usize,
    /// One JSON line per request (at, method, path, key, status, answer, ms, trace_id,
    /// span_id) to FILE, appended, or to stdout with `-`.
    #[arg(long, value_name = "FILE")]
    pub(crate) access_log: Option<PathBuf>,
}

pub(crate) fn run(session: &Session, args: &ProxyArgs) -> Ending {
    // The global flags that make no sense for a server are refused, not ignored.
    if session.clock.is_fixed() {
        return Err(Failure::usage(
            "--now: idem proxy answers each request at the time it comes (a database's clock on a database); --now applies to one command",
        ));
    }
    if session.json {
        return Err(Failure::usage(
            "--json: idem proxy writes JSON lines to its access log (--access-log); --json applies to one command's output",
        ));
    }
    if let Some(path) = &args.check_config {
        let routes = routes::load(path, &Settings::default()).map_err(Failure::usage)?;
        println!("{}: {} routes, valid", path.display(), routes.len());
        for route in &routes {
            println!("  {}", route.summary);
        }
        return Ok(0);
    }
    let tracing = trace::Tracing::from_env()?;
    let mut settings = settings(args)?;
    let mut routes = match &args.routes {
        Some(path) => {
            routes::load(path, &settings).map_err(|e| Failure::usage(format!("--routes: {e}")))?
        }
        None => Vec::new(),
    };
    if tracing.exporting() {
        // Each outcome keeps the trace context of the request that ran, for the spans
        // of its replays to link to.
        for settings in
            std::iter::once(&mut settings).chain(routes.iter_mut().map(|r| &mut r.settings))
        {
            settings.kept_headers.push(trace::KEPT_TRACE);
        }
    }
    let cors = cors::Cors::new(&args.cors_origin)?;
    let config = Config {
        lease_ms: args.lease,
        ..Config::default()
    };
    let file = session.engine()? == "file";
    let metrics = Arc::new(Metrics::new(file));
    let upstream = upstream(args, Arc::clone(&metrics))?;
    let log = access_log(args)?;
    if args.max_connections == 0 {
        return Err(Failure::usage("--max-connections: 0, needs at least 1"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("proxy: cannot start the runtime: {e}")))?;
    let serving = Serving {
        args,
        settings,
        routes,
        tracing: Arc::new(tracing),
        upstream,
        metrics,
        log,
        cors,
    };
    if file {
        // A file is opened on this thread, which waits for its lock.
        let store = session
            .builder(config, Access::Create)?
            .space_reserve(args.space_reserve)
            .open_blocking(&session.db)
            .map_err(open_failure)?;
        runtime.block_on(serving.serve(Arc::new(store.into_store())))?;
    } else {
        if args.pool == 0 {
            return Err(Failure::usage("--pool: 0 connections, needs at least 1"));
        }
        let builder = session
            .builder(config, Access::Create)?
            .pool_size(args.pool)
            .space_reserve(args.space_reserve);
        runtime.block_on(async {
            let store = builder.open(&session.db).await.map_err(open_failure)?;
            serving.serve(Arc::new(store)).await
        })?;
    }
    Ok(0)
}

fn access_log(args: &ProxyArgs) -> Result<Option<AccessLog>, Failure> {
    let Some(path) = &args.access_log else {
        return Ok(None);
    };
    let out: Box<dyn Write + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::LineWriter::new(std::io::stdout()))
    } else {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Failure::runtime(format!("--access-log: cannot open {}: {e}", path.display()))
            })?;
        Box::new(std::io::LineWriter::new(file))
    };
    Ok(Some(Arc::new(Mutex::new(out))))
}

fn settings(args: &ProxyArgs) -> Result<Settings, Failure> {
    let tenant = match (&args.tenant, &args.tenant_header) {
        (Some(name), _) => {
            idem_core::RecordId::new(name, "o", "k")
                .map_err(|e| Failure::usage(format!("--tenant: {}", e.problem())))?;
            Tenant::Fixed(name.clone())
        }
        (None, Some(header)) => Tenant::Header(header_name("--tenant-header", header)?),
        (None, None) => {
            return Err(Failure::usage(
                "--tenant or --tenant-header: give one; without either, each client would pick its tenant with a header of its own",
            ));
        }
    };
    let fingerprint_headers = args
        .fingerprint_header
        .iter()
        .map(|name| header_name("--fingerprint-header", name))
        .collect::<Result<_, _>>()?;
    let replay_status = match args.replay_status.as_str() {
        "200" => ReplayStatus::Ok,
        _ => ReplayStatus::Original,
    };
    if args.body_limit == 0 {
        return Err(Failure::usage("--body-limit: 0 bytes, needs at least 1"));
    }
    Ok(Settings {
        tenant,
        require_key: args.require_key,
        body_limit: args.body_limit,
        body_timeout: Some(Duration::from_millis(args.body_timeout.max(1))),
        fingerprint_headers,
        answers: AnswerConfig {
            replay_status,
            ..AnswerConfig::default()
        },
        wait_in_flight: args.wait_in_flight.map(Duration::from_millis),
        ..Settings::default()
    })
}

fn header_name(flag: &str, name: &str) -> Result<HeaderName, Failure> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Failure::usage(format!("{flag}: {name:?} is not an HTTP header name")))
}

/// Parses a size: bytes, or a number with KiB, MiB or GiB.
fn parse_size(text: &str) -> Result<u64, String> {
    const RULE: &str = "bytes, or a number with KiB, MiB or GiB (512KiB, 4MiB)";
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let scale: u64 = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("expected {RULE}")),
    };
    let value: u64 = number.parse().map_err(|_| format!("expected {RULE}"))?;
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("too large; expected {RULE}"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_binary_units_and_refuse_the_rest() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        for bad in ["", "MiB", "4MB", "4 MiB", "-1", "99999999999GiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
