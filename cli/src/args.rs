//! The top of `idem`'s command tree: the global flags, every command, and the main help.
//!
//! A command's own flag types (a nested command's subcommands, the shared record and
//! request arguments, the proxy's flags) live beside the code that runs it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand};
use idem_core::{State, Timestamp};

use crate::entity::EntityCommand;
use crate::exec::FingerprintArgs;
use crate::input::{IdArgs, RequestArgs};
use crate::intents::IntentsCommand;
use crate::keyed::GenerationArg;
use crate::proxy::ProxyArgs;
use crate::time::{parse_duration, parse_instant};
use crate::token::TokenCommand;

const MAIN_HELP: &str = "\
Exit status: 0 done (claimed, replay, settled, found) · 1 runtime error (I/O, corrupt file) ·
2 usage or invalid input · 3 conflict · 4 in progress · 5 unknown, needs reconciliation ·
6 stale generation, wrong state, illegal move or version mismatch · 7 not found ·
8 token not issued (never, or for another tenant or operation) · 9 token expired before
its first use · 13 forgotten: the request ran, its outcome is past retention and only a
tombstone is kept; it does not run again.
`exec` and `token consume` exit with the program's status, or the stored one on replay; a
program's exit 75 (or a status of --retry-on) releases the key instead of settling it.

Durations: 500ms, 30s, 15m, 24h, 7d. Defaults: lease 30s, retention 24h, tombstones 30d.

Time: --now replaces the clock; a command that writes refuses a --now more than 5 minutes
ahead of the system clock. The store never lets time go back: a write uses the latest time
a write used (the clock floor, shown by stats) when its clock is behind it.

get, list, intents list|get, token get, stats, export and sweep --dry-run only read: they change no
byte of the file, work on a read-only file or mount, and never wait for a process writing it.

A fleet: --db postgres://USER@HOST/DB (or IDEM_DB) names a PostgreSQL database that many
receivers share. begin, complete, release, heartbeat, mark-unknown, resolve, reconcile, exec,
get, list, stats, sweep, export, import, transition, entity and token work on it as on a file; time is the database's
clock, so --now is refused. begin, exec and import create idem's schema in a database without
it; `idem schema` prints that SQL for a DBA who applies it by hand. TLS: the URL's sslmode
(require, prefer, disable); $PGSSLROOTCERT names a PEM file of roots to trust beside the
system's.

--db mysql://USER@HOST/DB names a MariaDB database (10.6 or newer) in the same way. Its
durability is the server's: a server whose settings can lose an answered request in a crash
(innodb_flush_log_at_trx_commit other than 1, the binary log on without sync_binlog = 1) is
refused, naming the setting, unless the URL says accept_unsafe_durability=true. TLS: the
URL's require_ssl=true; $PGSSLROOTCERT's roots are trusted there too.

--db redis://[:PASSWORD@]HOST:PORT/N names a Redis server (7.0 or newer) in the same way, for
the receiver's commands (entities and tokens are refused there by name). A server that can
lose an answered request (appendonly no, appendfsync other than always, a maxmemory-policy
other than noeviction) is refused, naming the setting, unless the URL says
accept_unsafe_durability=true. `idem schema` prints idem's function library. rediss:// is
TLS, trusting $PGSSLROOTCERT's roots in place of the system's when it names a file;
?cluster=true names a node of a Redis Cluster.

Examples:
  idem demo                                   # the whole story in one screen
  idem exec shop-7 nightly-report 2025-03-01 -- ./report.sh
  idem list --state unknown
  idem resolve shop-7 charge order-991 --not-executed
  idem reconcile --with ./ask-provider.sh     # settle every unknown key a checker can
  idem token issue shop-7 redeem --ttl 15m --intent order-991
  idem token consume shop-7 redeem \"$TOKEN\" -- ./redeem.sh";

/// `idem`: make "retry after a timeout" safe, from the command line.
#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Embedded idempotency store: run an intent once, replay its outcome to every retry",
    after_help = MAIN_HELP,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// The store file, a PostgreSQL URL (postgres://user@host/db), a MariaDB one
    /// (mysql://user@host/db) or a Redis one (redis://host:port/0) [default: $IDEM_DB,
    /// else ./idem.redb].
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub(crate) db: Option<PathBuf>,
    /// A file whose content is the database's password, for a --db URL that names the
    /// user and no password: the password then shows in no process list or shell
    /// history (chmod 600 it; one trailing newline is dropped) [default:
    /// $IDEM_DB_PASSWORD_FILE].
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) db_password_file: Option<PathBuf>,
    /// Replaces the clock: RFC 3339 (2025-03-01T12:00:00Z) or milliseconds since the epoch.
    #[arg(long, global = true, value_name = "TIME", value_parser = parse_instant)]
    pub(crate) now: Option<Timestamp>,
    /// One JSON object per output line; times as integer ms, bytes as base64 in *_b64.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Every command of the CLI contract.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Claim a key, or learn who holds it or how it ended.
    #[command(after_help = "\
Prints the decision: claimed, in_progress, replay, conflict, unknown or forgotten.
Exit status: 0 claimed or replay, 3 conflict, 4 in progress, 5 unknown, 13 forgotten (the
request ran; its outcome is past retention and only a tombstone is kept: do not run it
again).

JSON: {\"decision\":\"claimed\",\"generation\":N,\"lease_until\":MS},
{\"decision\":\"in_progress\",\"generation\":N,\"lease_until\":MS},
{\"decision\":\"replay\",\"state\":\"succeeded\"|\"failed\",\"code\":INT,\"outcome_b64\":…,\"completed_at\":MS},
{\"decision\":\"conflict\",\"state\":…,\"stored_fingerprint\":HEX}, {\"decision\":\"unknown\",\"generation\":N},
{\"decision\":\"forgotten\",\"generation\":N,\"state\":\"succeeded\"|\"failed\",\"completed_at\":MS}.

Example:
  idem begin shop-7 charge order-991 --payload order.json --lease 2m")]
    Begin {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        request: RequestArgs,
        /// How long the claim holds unless renewed by heartbeat [default: 30s].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        lease: Option<u64>,
    },
    /// Settle a claimed key with its outcome (succeeded, or --failed).
    #[command(after_help = "\
Example:
  idem complete shop-7 charge order-991 --generation 7 --code 201 --outcome receipt.json")]
    Complete {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        generation: GenerationArg,
        /// The request failed definitively; the failure is replayed like a success.
        #[arg(long)]
        failed: bool,
        /// The outcome code (HTTP status, exit status) [default: 0, or 1 with --failed].
        #[arg(long, value_name = "INT", allow_negative_numbers = true)]
        code: Option<i32>,
        /// The outcome body, from a file or - for stdin [default: empty].
        #[arg(long, value_name = "FILE|-")]
        outcome: Option<PathBuf>,
        /// How long the outcome is replayed before the key may be swept [default: 24h].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        retention: Option<u64>,
    },
    /// Give a claimed key back untouched: nothing was executed, a retry may claim it.
    #[command(after_help = "\
Example:
  idem release shop-7 charge order-991 --generation 7")]
    Release {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        generation: GenerationArg,
    },
    /// Extend the lease of a claimed key while its work goes on.
    #[command(after_help = "\
Example:
  idem heartbeat shop-7 charge order-991 --generation 7 --lease 5m")]
    Heartbeat {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        generation: GenerationArg,
        /// The new lease, counted from now [default: 30s].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        lease: Option<u64>,
    },
    /// Record that nobody can tell whether a claimed key's effect happened.
    #[command(after_help = "\
Example:
  idem mark-unknown shop-7 charge order-991 --generation 7")]
    MarkUnknown {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        generation: GenerationArg,
    },
    /// Reconcile an unknown key: it succeeded, failed, or was never executed.
    #[command(
        group(ArgGroup::new("verdict").required(true).args(["succeeded", "failed", "not_executed"])),
        after_help = "\
--not-executed deletes the record, so the next retry claims a fresh generation.

A key still pending is resolved in one step once its lease has ended (its executor went
silent): it is turned unknown by its generation, then resolved. While the lease runs, its
executor may still be working; --force --generation N (the generation idem get shows)
resolves it anyway. A request through idem proxy is recorded under its method and path
(\"POST /orders\"); a key not found under the operation given names the operations it
is found under.

Examples:
  idem resolve shop-7 charge order-991 --succeeded --code 201 --outcome receipt.json
  idem resolve shop-7 charge order-991 --failed --retention 7d
  idem resolve shop-7 charge order-991 --not-executed
  idem resolve shop-7 'POST /orders' k-1 --not-executed --force --generation 12"
    )]
    Resolve {
        #[command(flatten)]
        id: IdArgs,
        /// The effect happened.
        #[arg(long)]
        succeeded: bool,
        /// The request failed definitively.
        #[arg(long)]
        failed: bool,
        /// Nothing was executed: delete the record.
        #[arg(long, conflicts_with_all = ["code", "outcome"])]
        not_executed: bool,
        /// The outcome code [default: 0, or 1 with --failed].
        #[arg(long, value_name = "INT", allow_negative_numbers = true)]
        code: Option<i32>,
        /// The outcome body, from a file or - for stdin [default: empty].
        #[arg(long, value_name = "FILE|-")]
        outcome: Option<PathBuf>,
        /// How long the resolved outcome is replayed before the key may be swept
        /// [default: 24h].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        retention: Option<u64>,
        /// Resolve a pending key whose lease still runs (its executor may still be
        /// working): needs --generation, the claim's.
        #[arg(long, requires = "generation")]
        force: bool,
        /// With --force: the generation of the pending claim to resolve.
        #[arg(long, value_name = "N", requires = "force")]
        generation: Option<u64>,
    },
    /// Settle unknown keys with a checker program that can tell what happened.
    #[command(after_help = "\
First turns the claims whose executor went silent (pending, lease run out) unknown, as a
begin on their key would. Then runs PROGRAM once per unknown record, oldest first, with
the record in its environment: IDEM_TENANT, IDEM_OPERATION, IDEM_KEY, IDEM_GENERATION,
IDEM_FINGERPRINT (64 hex digits), IDEM_CREATED_AT and IDEM_UNKNOWN_SINCE (ms since the
epoch), and ARGS after --. PROGRAM's exit status is its answer; its stdout is the
outcome body:
  0   the effect happened: the record settles as succeeded (outcome code 0)
  10  the request failed definitively: settles as failed (outcome code 1)
  11  nothing was executed: the record is deleted, a retry runs the request again
  12  cannot tell: the record stays unknown
Any other status, a signal, or a PROGRAM that cannot start stops the run with exit 1
(exit 2 when PROGRAM cannot start): that record and the ones after it are unchanged,
the ones before stay reconciled. An answer is applied only to the record PROGRAM was
shown: one resolved and claimed again meanwhile is left alone. Ends with a summary
(--json: one object); a progress bar on a terminal.

Examples:
  idem reconcile --with ./ask-provider.sh
  idem reconcile --limit 100 --retention 7d --with ./ask-provider.sh -- --by-key")]
    Reconcile {
        /// The checker program.
        #[arg(long = "with", value_name = "PROGRAM", required = true)]
        with: OsString,
        /// Reconcile at most this many unknown records [default: all].
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// How long a settled outcome is replayed before the key may be swept
        /// [default: 24h].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        retention: Option<u64>,
        /// Arguments for the checker, after `--`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
    /// Run PROGRAM at most once per key; replay its stdout and exit status to every retry.
    #[command(after_help = "\
PROGRAM's stdout is captured and stored; its stderr passes through. Exit 0 settles the key
as succeeded, any other status as failed with that code. Exit 75 (EX_TEMPFAIL, a temporary
failure such as a network that is down) and the statuses of --retry-on settle nothing:
the key is released, said on stderr, and a retry runs PROGRAM again. A program killed by
a signal leaves the key unknown (exit 5). While PROGRAM runs, idem renews the lease.
A retry prints the stored stdout and exits with the stored status, without running PROGRAM.
Another exec holding the key: exit 4, or wait up to --wait for it to finish.
Conflict exits 3, unknown 5. --json does not change exec's stdout: it is the program's.

The fingerprint covers PROGRAM as written, its arguments and the payload (or the
--fingerprint given): the same key with another command line is a conflict (exit 3), never
a replay of another command's output. --fingerprint-args none leaves the arguments out,
for arguments that do not change the result (a log level, an output directory).
Fingerprints of exec before this rule covered the payload alone: a retry of such a key
answers conflict (exit 3) and does not run PROGRAM.

Examples:
  idem exec shop-7 nightly-report 2025-03-01 --wait 10m -- ./report.sh --date 2025-03-01
  idem exec shop-7 charge order-991 --retry-on 69,74 -- ./charge.sh 1250")]
    Exec {
        #[command(flatten)]
        id: IdArgs,
        #[command(flatten)]
        request: RequestArgs,
        /// How long a claim holds without renewal; idem renews it every third of it while
        /// PROGRAM runs [default: 30s].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        lease: Option<u64>,
        /// When another exec holds the key, wait up to this long for its outcome.
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        wait: Option<u64>,
        /// Exit statuses of PROGRAM that mean "try again later", besides 75: the key is
        /// released instead of settled (comma-separated, 1-255).
        #[arg(long, value_name = "CODES", value_delimiter = ',', value_parser = clap::value_parser!(i32).range(1..=255))]
        retry_on: Vec<i32>,
        /// Whether PROGRAM's arguments are part of the fingerprint: `all` (default) or
        /// `none` (PROGRAM and the payload only).
        #[arg(long, value_name = "WHICH", default_value = "all")]
        fingerprint_args: FingerprintArgs,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
        program: Vec<OsString>,
    },
    /// Show one record.
    #[command(after_help = "\
Exit status 7 when there is no record under the key.

JSON: tenant, operation, key, state (pending, succeeded, failed, unknown, forgotten),
generation, fingerprint, created_at, updated_at, and where they apply lease_until
(pending); expires_at, completed_at, code, outcome_b64 (succeeded, failed); verdict,
completed_at and expires_at, the end of the tombstone's time (forgotten: a tombstone,
what sweep keeps of an outcome past retention).

Example:
  idem get shop-7 charge order-991 --json")]
    Get {
        #[command(flatten)]
        id: IdArgs,
    },
    /// List records, filtered by state, tenant and operation.
    #[command(after_help = "\
Example:
  idem list --state pending --tenant shop-7 --limit 20")]
    List {
        /// Only records in this state.
        #[arg(long, value_name = "STATE", value_parser = parse_state)]
        state: Option<State>,
        /// Only records of this tenant.
        #[arg(long, value_name = "T")]
        tenant: Option<String>,
        /// Only records of this operation.
        #[arg(long, value_name = "O")]
        operation: Option<String>,
        /// At most this many records.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Move a business entity to another state, checked by a state machine and a version.
    #[command(after_help = "\
The machine is a JSON file: its states, the initial one, and the allowed moves:
  {\"states\": [\"created\", \"paid\", \"refunded\"], \"initial\": \"created\",
   \"moves\": [[\"created\", \"paid\"], [\"paid\", \"refunded\"]]}
An entity that does not exist yet starts in the initial state (version 1) or moves to a
state allowed from it. Prints the decision: applied (the new state and version),
already_there (a repeated move, harmless), illegal (the machine does not allow it) or
version_mismatch (--expected-version is not the entity's: someone moved it meanwhile).
Exit status: 0 applied or already there, 6 illegal or version mismatch, 2 a bad machine.
JSON: {\"decision\":\"applied\",\"state\":S,\"version\":N,\"updated_at\":MS},
{\"decision\":\"illegal\",\"from\":S,\"to\":S}, {\"decision\":\"version_mismatch\",\"expected\":N,\"current\":N}.

Example:
  idem transition shop-7 payment p-991 refunded --machine payment.json --expected-version 2")]
    Transition {
        /// Tenant: 1-255 bytes of UTF-8, no control characters.
        #[arg(value_name = "TENANT")]
        tenant: String,
        /// The kind of business object (payment, order): the rule of an operation.
        #[arg(value_name = "KIND")]
        kind: String,
        /// The object's id: the rule of a key.
        #[arg(value_name = "ID", allow_hyphen_values = true)]
        id: String,
        /// The state to move to.
        #[arg(value_name = "TO")]
        to: String,
        /// The machine, a JSON file (see below).
        #[arg(long, value_name = "FILE", required = true)]
        machine: PathBuf,
        /// The version the caller read; the move is refused if the entity's differs.
        #[arg(long, value_name = "N")]
        expected_version: Option<u64>,
    },
    /// Business entities moved by `idem transition`: show one, or list a kind.
    #[command(subcommand)]
    Entity(EntityCommand),
    /// One-time tokens: issue one, consume it (run a program at most once), show, sweep.
    #[command(subcommand)]
    Token(TokenCommand),
    /// The outbox's intents (what this terminal sends): list them, show one, resolve an
    /// expired one or one unknown at the receiver.
    #[command(subcommand)]
    Intents(IntentsCommand),
    /// Counts by state, expired leases, the oldest pending and unknown, file size.
    #[command(after_help = "\
Example:
  idem stats --json")]
    Stats,
    /// Prints the SQL of idem's schema on PostgreSQL (on MariaDB with --db mysql://...; the
    /// function library on Redis with --db redis://...), for a DBA who applies it by hand.
    #[command(after_help = "\
idem creates this schema itself the first time begin, exec or import connects to a database
without it, when its role may create tables. Where it may not, a DBA applies the SQL once;
every statement may run again. A newer idem's schema is refused, naming both versions.

Examples:
  idem schema | psql postgres://admin@db.internal/shop
  idem schema --db mysql://admin@db.internal/shop | mariadb -h db.internal shop")]
    Schema,
    /// Sweep settled records whose retention has ended, oldest first: each leaves a tombstone.
    #[command(after_help = "\
A settled record past its retention is replaced by its tombstone (fingerprint, generation,
verdict, completion time; not the output): until the tombstone's time ends, a retry of the
same request exits 13 (forgotten) and does not run again, and `idem get` shows the
tombstone. Tombstones past their time are deleted. Pending and unknown records are never
swept.

Example:
  idem sweep --limit 10000 --dry-run
  idem sweep --tombstones 0        # delete outright: a retry after retention runs again")]
    Sweep {
        /// At most this many records [default: all that expired].
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Count what would be swept, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// How long a tombstone is kept after the retention ends; 0 keeps none.
        #[arg(long, value_name = "DUR", default_value = "30d", value_parser = parse_tombstones)]
        tombstones: u64,
    },
    /// Verify the file: every table, record and index decodes and agrees.
    #[command(after_help = "\
Exit status 1 when a problem is found.

Needs the file writable: redb verifies every page under the write lock (other processes'
writes wait for it) and repairs what it can. After a crash it also recovers the file, so
that the read commands can open it again.

Example:
  idem check")]
    Check,
    /// Shrink the file by reclaiming free pages.
    #[command(after_help = "\
Example:
  idem compact")]
    Compact,
    /// Write the whole store as JSON lines, to --out FILE or stdout.
    #[command(after_help = "\
A header line, then every record (tombstones included), the outbox's intents, the
entities, the claimed business values and the issued one-time tokens: `idem import` on a
fresh file restores all of it, with the generation counter and the clock floor.

Example:
  idem export --out backup.jsonl")]
    Export {
        /// Where to write [default: stdout].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Read records written by export into the store.
    #[command(after_help = "\
Example:
  idem --db restored.redb import backup.jsonl")]
    Import {
        /// The export file, or - for stdin.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Play the end-to-end story on a fresh file in a temporary directory.
    #[command(after_help = "\
Touches neither --db nor any other file outside its temporary directory. Prints text
only; it ends with the counts of intents, effects and duplicates.

Example:
  idem demo")]
    Demo,
    /// Give any HTTP backend idempotency keys: a reverse proxy on the store.
    #[command(after_help = "\
A POST or PATCH with an Idempotency-Key header (\"key\", an RFC 8941 String, or a bare
token) is forwarded once; a retry gets the stored answer with Idempotent-Replayed: true,
a retry while it runs 409 with Retry-After (or, with --wait-in-flight, waits for the
outcome and gets the replay), the key with another request 422, a key
whose outcome is unknown 503, a key whose outcome is past its retention 410 (only its
tombstone is kept; the request does not run again). Other requests, and keyless ones
without --require-key, pass through. Answers of the proxy itself are application/problem+json.

The upstream's 2xx, 3xx and 4xx are kept (replayed); its 5xx releases the key. An
upstream that cannot be reached releases it (502); one that fails or times out after
the request was sent leaves it unknown (502 or 504): it may have acted; settle it with
idem resolve or idem reconcile. Ctrl-C or SIGTERM stops accepting, finishes the requests
in flight (those whose client hung up too) within --drain-timeout, and exits 0.

The tenant must come from your authentication, and the proxy does not start without it:
--tenant-header names the header a gateway in front sets (after removing the client's
own); --tenant fixes one tenant.

A fleet: with --db postgres://... or mysql://... (or IDEM_DB) any number of proxies share one database,
and a retry may reach any of them. The admin listener (--admin-listen, loopback by
default) answers GET /healthz, 200 while the store can take requests (503 otherwise and
while stopping), for a load balancer, and GET /metrics, Prometheus text
(idem_proxy_answers_total by answer, request, upstream and store latency, store
failures, unknown keys, waits by how they ended; on a file, its commits and group
commit batches). --access-log writes one JSON line per request. The operation a request
is recorded under, which idem resolve and idem list name, is its method and path: POST /orders.

A claim is extended every third of --lease while its request runs (the watchdog), so a
slow upstream keeps its key; a claim whose answer a database failover lost is given
back once the database answers, so a retry runs it.

Slow or hostile clients: a request head must arrive within --header-timeout, a keyed
body within --body-timeout (408), and at most --max-connections are open at once.

Routes with rules of their own (--routes FILE, TOML): per method and path pattern,
whether a key is required, which JSON fields count toward the fingerprint
(fingerprint.ignore or fingerprint.only, by JSON Pointer), which headers count, which
response headers are replayed, the lease and the retention; --check-config FILE checks
one and prints its routes.
The access log carries each request's trace_id and span_id (W3C traceparent); a build
with the otel feature exports a span per request to the collector the OTEL_* variables
name (OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318). docs/proxy.md has it all.

Examples:
  idem proxy --upstream http://127.0.0.1:8080 --tenant shop --replay-status 200
  idem proxy --db postgres://idem@db/shop --upstream http://app:8080 --tenant-header X-Tenant
  idem proxy --upstream http://127.0.0.1:8080 --tenant shop --lease 2m --wait-in-flight 10s \\
    --cors-origin https://shop.example
  idem proxy --db postgres://idem@db/shop --db-password-file /etc/idem/db-password \\
    --upstream http://app:8080 --tenant-header X-Tenant --routes /etc/idem/routes.toml
  idem proxy --check-config /etc/idem/routes.toml
  curl -X POST localhost:8480/orders -H 'Idempotency-Key: \"k-1\"' -d '{\"item\":\"tea\"}'")]
    Proxy(ProxyArgs),
    /// Measure throughput and latency on this machine, on a temporary file, then count
    /// the bytes written, write calls and syncs per commit of each write path.
    #[command(after_help = "\
Example:
  idem bench --ops 1000")]
    Bench {
        /// Calls per measurement (the pure core gets 1,000 times as many).
        #[arg(long, value_name = "N", default_value_t = 300)]
        ops: u32,
    },
}

/// `0` (no tombstones) or a duration.
fn parse_tombstones(text: &str) -> Result<u64, String> {
    if text == "0" {
        Ok(0)
    } else {
        parse_duration(text).map_err(|e| format!("{e}; or 0 to keep no tombstone"))
    }
}

fn parse_state(text: &str) -> Result<State, String> {
    State::from_name(text)
        .ok_or_else(|| "expected one of pending, succeeded, failed, unknown, forgotten".to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The JSON limits `--fingerprint`'s help states are the core's.
    #[test]
    fn the_help_states_the_json_limits_of_the_core() {
        use idem_core::fingerprint::{MAX_JSON_BYTES, MAX_JSON_DEPTH};
        let mut command = Cli::command();
        let help = command
            .find_subcommand_mut("begin")
            .expect("begin")
            .render_long_help()
            .to_string();
        assert_eq!(MAX_JSON_BYTES % (1 << 20), 0);
        let size = format!("at most {} MiB of UTF-8", MAX_JSON_BYTES >> 20);
        let depth = MAX_JSON_DEPTH.to_string();
        let (thousands, units) = depth.split_at(depth.len() - 3);
        let depth = format!("{thousands},{units} levels of nesting");
        for stated in [size, depth] {
            assert!(help.contains(&stated), "{stated:?} not in:\n{help}");
        }
    }
}
