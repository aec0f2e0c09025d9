//! The `idem` command: inspect, resolve and sweep an idem store, and wrap scripts so they
//! run once per key.
//!
//! Every command checks all of its arguments before it opens the store, so bad input
//! never changes the file. Errors are one line on stderr, `idem: <message>`, and the exit
//! status follows the CLI contract (see `idem --help`).
#![forbid(unsafe_code)]

mod args;
mod bench;
mod demo;
mod entity;
mod exec;
mod exit;
mod input;
mod intents;
mod keyed;
mod maintain;
mod output;
mod progress;
mod proxy;
mod reconcile;
mod session;
mod time;
mod token;

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use clap::Parser;
use clap::error::ErrorKind;

use crate::args::{Cli, Command};
use crate::entity::EntityCommand;
use crate::exec::ExecRequest;
use crate::exit::{Ending, Exit, Failure, clap_line, quiet_redb_panics, redb_panicked};
use crate::intents::IntentsCommand;
use crate::keyed::Reconciled;
use crate::session::Session;
use crate::time::Clock;
use crate::token::TokenCommand;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!("idem: {}", clap_line(&e));
            std::process::exit(2);
        }
    };
    quiet_redb_panics();
    let ending = catch_unwind(AssertUnwindSafe(|| run(&cli))).unwrap_or_else(|panic| {
        if !redb_panicked() {
            resume_unwind(panic);
        }
        let db = input::db_path(cli.db.as_deref());
        Err(Failure::new(
            Exit::Runtime,
            format!(
                "{}: corrupt store file: redb could not read its structure (idem check verifies the file)",
                db.display()
            ),
        ))
    });
    let code = match ending {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("idem: {failure}");
            }
            failure.exit.code()
        }
    };
    std::process::exit(code);
}

fn run(cli: &Cli) -> Ending {
    let db = input::db_path(cli.db.as_deref());
    let session = Session {
        password_file: input::password_file(cli.db_password_file.as_deref(), &db),
        db,
        clock: Clock::new(cli.now),
        json: cli.json,
    };
    match &cli.command {
        Command::Begin { id, request, lease } => keyed::begin(&session, id, request, *lease),
        Command::Complete {
            id,
            generation,
            failed,
            code,
            outcome,
            retention,
        } => keyed::complete(
            &session,
            id,
            generation,
            *failed,
            (*code, outcome.as_deref()),
            *retention,
        ),
        Command::Release { id, generation } => keyed::release(&session, id, generation),
        Command::Heartbeat {
            id,
            generation,
            lease,
        } => keyed::heartbeat(&session, id, generation, *lease),
        Command::MarkUnknown { id, generation } => keyed::mark_unknown(&session, id, generation),
        Command::Resolve {
            id,
            succeeded,
            failed,
            not_executed: _,
            code,
            outcome,
            retention,
            force: _,
            generation,
        } => {
            let how = if *succeeded {
                Reconciled::Succeeded
            } else if *failed {
                Reconciled::Failed
            } else {
                Reconciled::NotExecuted
            };
            keyed::resolve(
                &session,
                id,
                how,
                (*code, outcome.as_deref()),
                *retention,
                *generation,
            )
        }
        Command::Exec {
            id,
            request,
            lease,
            wait,
            retry_on,
            fingerprint_args,
            program,
        } => exec::exec(
            &session,
            &ExecRequest {
                id,
                request,
                lease: *lease,
                wait: *wait,
                retry_on,
                fingerprint_args: *fingerprint_args,
                program,
            },
        ),
        Command::Get { id } => keyed::get(&session, id),
        Command::List {
            state,
            tenant,
            operation,
            limit,
        } => maintain::list(
            &session,
            idem_store::ListFilter {
                state: *state,
                tenant: tenant.clone(),
                operation: operation.clone(),
                limit: *limit,
            },
        ),
        Command::Stats => maintain::stats(&session),
        Command::Schema => maintain::schema(&session),
        Command::Transition {
            tenant,
            kind,
            id,
            to,
            machine,
            expected_version,
        } => entity::transition(&session, (tenant, kind, id), to, machine, *expected_version),
        Command::Entity(EntityCommand::Get { tenant, kind, id }) => {
            entity::get(&session, (tenant, kind, id))
        }
        Command::Entity(EntityCommand::List { kind, state, limit }) => {
            entity::list(&session, kind, state.as_deref(), *limit)
        }
        Command::Intents(IntentsCommand::List { state, limit }) => {
            intents::list(&session, *state, *limit)
        }
        Command::Intents(IntentsCommand::Get { key }) => intents::get(&session, key),
        Command::Intents(IntentsCommand::Resolve {
            key,
            resolved_as,
            reason,
        }) => intents::resolve(&session, key, *resolved_as, reason),
        Command::Token(TokenCommand::Issue {
            tenant,
            operation,
            ttl,
            intent,
        }) => token::issue(&session, tenant, operation, *ttl, intent.as_deref()),
        Command::Token(TokenCommand::Consume {
            id,
            request,
            lease,
            program,
        }) => token::consume(&session, id, request, *lease, program),
        Command::Token(TokenCommand::Get { id }) => token::get(&session, id),
        Command::Token(TokenCommand::Sweep { limit }) => token::sweep(&session, *limit),
        Command::Reconcile {
            with,
            limit,
            retention,
            args,
        } => reconcile::run(&session, with, args, *limit, *retention),
        Command::Sweep {
            limit,
            dry_run,
            tombstones,
        } => maintain::sweep(&session, *limit, *dry_run, *tombstones),
        Command::Check => maintain::check(&session),
        Command::Compact => maintain::compact(&session),
        Command::Export { out } => maintain::export(&session, out.as_deref()),
        Command::Import { file } => maintain::import(&session, file),
        Command::Demo => demo::run(&session),
        Command::Proxy(args) => proxy::run(&session, args),
        Command::Bench { ops } => bench::run(&session, *ops),
    }
}
