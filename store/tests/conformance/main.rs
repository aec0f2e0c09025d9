//! The conformance suite (docs/design.md §13): one set of behaviour tests, generic over
//! the seam (the receiver, [`idem_store::Receiver`], and the layers after the key,
//! [`idem_store::entity::Entities`] and [`idem_store::token::Tokens`]), run on every
//! engine under the same names:
//! `conformance::file::NAME` on the redb file, `conformance::postgres::NAME` on
//! PostgreSQL, `conformance::mariadb::NAME` on MariaDB (`--features mysql`),
//! `conformance::redis::NAME` on Redis (`--features redis`: all but the outbox's part,
//! since the engine keeps no intents).
//!
//! Each test is written once, as an async function generic over an [`Engine`] (the
//! harness: a fresh store of one engine, and the few things an engine differs in for a
//! test: how time passes, how the store restarts). [`suite!`] makes a test of it for each
//! engine. A test that only one engine can run (its clock rule) is listed in that
//! engine's module alone, with the rule in its name.
//!
//! A new engine's first test is this suite: give it an [`Engine`] and a module below.
//! The PostgreSQL tests start a throwaway server (`common/postgres.rs`), the MariaDB
//! tests one of theirs (`common/mariadb.rs`): without the server installed they fail,
//! never skip.

#[path = "../common/postgres.rs"]
mod server;

#[cfg(feature = "mysql")]
#[path = "../common/mariadb.rs"]
mod maria_server;

#[cfg(feature = "redis")]
#[path = "../common/redis.rs"]
mod redis_server;

#[path = "../common/machines.rs"]
mod machines;

mod clock;
mod engine;
mod entities;
mod fencing;
mod maintenance;
mod protocol;
mod races;
mod reconcile;
mod retention;
mod tokens;
mod transfer;
mod uniqueness;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, State, Timestamp, Verdict};
use idem_store::Receiver;

pub(crate) use engine::Engine;

/// One minute, one hour, one day, in ms.
pub(crate) const MINUTE: u64 = 60_000;
pub(crate) const HOUR: u64 = 60 * MINUTE;
pub(crate) const DAY: u64 = 24 * HOUR;

/// Makes a test of each listed generic test, on `$engine`: `family::name` becomes `name`
/// in the module this is called in, running `crate::family::name::<$engine>()`.
macro_rules! suite {
    ($engine:ty) => {
        receiver_suite!($engine);
        entity_suite!($engine);
        token_suite!($engine);
        outbox_suite!($engine);
    };
}

/// The receiver's part of [`suite!`]: the protocol, fencing, retention, maintenance,
/// reconcile, export and import, and the races; what every engine offers.
macro_rules! receiver_suite {
    ($engine:ty) => {
        each!($engine;
            protocol::a_fresh_key_is_claimed_and_a_second_begin_is_in_progress,
            protocol::a_settled_key_replays_its_outcome_byte_for_byte,
            protocol::a_failed_outcome_replays_as_failed,
            protocol::a_different_fingerprint_is_a_conflict_in_every_live_state,
            protocol::a_heartbeat_extends_the_lease,
            protocol::a_callers_terms_set_the_lease_and_the_retention,
            protocol::release_deletes_the_claim_and_a_retry_claims_a_newer_generation,
            protocol::mark_unknown_needs_reconciliation_until_resolved,
            protocol::resolve_not_executed_deletes_and_the_key_is_claimed_again,
            protocol::resolve_succeeded_settles_and_replays,
            protocol::resolve_failed_settles_and_replays,
            protocol::resolve_refuses_a_record_that_is_not_unknown,
            protocol::inputs_on_an_absent_key_are_not_found,
            protocol::an_outcome_over_the_limit_is_refused_and_writes_nothing,
            protocol::generations_rise_across_the_store_and_a_restart,
            protocol::an_expired_lease_turns_unknown_by_default,
            protocol::an_expired_lease_is_taken_over_under_takeover,
            protocol::give_up_releases_or_marks_unknown_in_the_background,
            protocol::a_begin_dropped_before_its_answer_gives_its_claim_back,
            fencing::a_stale_generation_cannot_heartbeat,
            fencing::a_stale_generation_cannot_complete,
            fencing::a_stale_generation_cannot_release,
            fencing::a_stale_generation_cannot_mark_unknown,
            fencing::a_late_executor_cannot_change_a_settled_outcome,
            fencing::a_stale_refusal_names_both_generations_and_writes_nothing,
            fencing::a_generation_from_before_a_sweep_stays_fenced,
            retention::past_retention_a_retry_is_forgotten_without_a_sweep,
            retention::past_the_tombstones_time_the_key_is_claimed_again,
            retention::without_tombstones_a_retry_after_retention_claims_again,
            retention::failed_outcomes_keep_their_own_retention,
            retention::a_tombstone_keeps_what_identifies_the_request_and_survives_a_restart,
            clock::a_clock_behind_the_stores_time_shortens_no_lease_or_retention,
            maintenance::sweep_tombstones_then_removes_in_bounded_batches,
            maintenance::a_dry_run_sweep_changes_nothing,
            maintenance::a_late_sweep_past_both_times_deletes_at_once,
            maintenance::sweep_takes_the_soonest_expiry_first,
            maintenance::pending_and_unknown_records_are_never_swept,
            maintenance::stats_count_every_state_and_age_the_oldest_pending_and_unknown,
            maintenance::list_gives_key_order_and_filters_by_tenant_operation_and_limit,
            maintenance::list_by_state_gives_the_oldest_first,
            maintenance::a_list_orders_ids_by_their_key_bytes,
            maintenance::a_list_filter_that_breaks_the_id_rules_is_refused,
            reconcile::a_checker_settles_what_it_can_tell_oldest_first,
            reconcile::a_limit_leaves_the_rest_and_says_so,
            reconcile::an_answer_is_not_applied_to_a_record_that_changed_meanwhile,
            reconcile::a_failing_checker_stops_the_run_and_reports_what_was_done_before_it,
            reconcile::the_oldest_claim_is_reconciled_first,
            reconcile::a_silent_claim_turns_unknown_and_a_live_one_stays,
            reconcile::under_takeover_a_silent_claim_is_left_for_the_next_begin,
            reconcile::a_claim_renewed_before_the_recovery_is_left_alone,
            reconcile::a_recovery_takes_at_most_its_limit_and_the_next_run_the_rest,
            reconcile::a_recovery_with_a_limit_of_zero_changes_nothing,
            transfer::export_then_import_is_lossless,
            transfer::importing_the_same_export_again_changes_nothing,
            transfer::a_bad_import_line_is_named_and_nothing_is_imported,
            transfer::tombstones_go_through_export_and_import,
            races::sixty_four_callers_on_a_fresh_key_claim_it_once,
            races::sixty_four_callers_on_an_expired_lease_take_it_over_once,
            races::sixty_four_callers_on_a_key_past_retention_claim_it_once,
            races::sweepers_racing_claimers_lose_no_claim_and_claim_no_key_twice,
        );
    };
}

/// The entities' part of [`suite!`]: entities moved by a machine, claimed values.
macro_rules! entity_suite {
    ($engine:ty) => {
        each!($engine;
            entities::a_move_the_machine_allows_is_applied_and_any_other_is_refused,
            entities::a_stale_expected_version_is_refused_and_writes_nothing,
            entities::callbacks_in_every_order_end_in_one_state_and_no_move_runs_twice,
            entities::a_list_by_state_gives_its_entities_of_the_kind_in_id_order,
            entities::a_list_without_a_state_groups_by_state_then_id,
            entities::a_list_orders_tenants_by_their_key_bytes,
            entities::entities_and_claimed_values_go_through_export_and_import,
            uniqueness::a_business_value_is_claimed_once_and_held_until_released,
            uniqueness::a_claimed_value_that_breaks_a_rule_is_refused_naming_the_field,
        );
    };
}

/// The tokens' part of [`suite!`]: one-time tokens.
macro_rules! token_suite {
    ($engine:ty) => {
        each!($engine;
            tokens::a_token_is_consumed_once_and_every_later_consume_answers_that_use,
            tokens::a_token_not_issued_for_its_key_or_expired_unused_is_refused_and_writes_nothing,
            tokens::a_released_consume_gives_the_token_back,
            tokens::of_a_hundred_concurrent_consumers_exactly_one_claims_the_token,
            tokens::an_intent_makes_issuing_idempotent_until_its_token_is_used,
            tokens::an_intents_token_expired_unused_is_replaced_and_swept,
            tokens::sixteen_issues_for_one_intent_at_once_answer_one_token,
            tokens::the_token_sweep_deletes_expired_tokens_in_batches_and_a_use_still_replays,
            tokens::bad_token_input_names_the_field_and_the_rule_and_writes_nothing,
            tokens::tokens_go_through_export_and_import,
        );
    };
}

/// The outbox's part of [`suite!`]: an import that holds records, the sender's intents
/// and entities together.
macro_rules! outbox_suite {
    ($engine:ty) => {
        each!($engine;
            transfer::an_import_refused_at_one_line_writes_nothing_of_the_others,
        );
    };
}

/// Makes a test of each `family::name` on `$engine`.
macro_rules! each {
    ($engine:ty; $($family:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                crate::$family::$name::<$engine>().await;
            }
        )*
    };
}

/// The suite on the redb file (`idem_store::Store`), each test on a file of its own.
mod file {
    suite!(crate::engine::File);

    /// The file's clock rule: a clock ahead is believed, a clock behind takes the floor,
    /// and the floor outlives a restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn clock_floor_a_clock_ahead_is_believed_one_behind_takes_the_floor() {
        crate::clock::clock_floor_a_clock_ahead_is_believed_one_behind_takes_the_floor().await;
    }
}

/// The suite on PostgreSQL (`idem_store::postgres::PgStore`), each test on a database of
/// its own.
mod postgres {
    suite!(crate::engine::Postgres);

    /// The database's clock rule: the caller's clock is not used, however far off.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn database_clock_decides_whatever_the_callers_clock_says() {
        crate::clock::database_clock_decides_whatever_the_callers_clock_says::<
            crate::engine::Postgres,
        >()
        .await;
    }
}

/// The suite on MariaDB (`idem_store::mysql::MySqlStore`, `--features mysql`), each test
/// on a database of its own.
#[cfg(feature = "mysql")]
mod mariadb {
    suite!(crate::engine::MariaDb);

    /// The database's clock rule: the caller's clock is not used, however far off.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn database_clock_decides_whatever_the_callers_clock_says() {
        crate::clock::database_clock_decides_whatever_the_callers_clock_says::<
            crate::engine::MariaDb,
        >()
        .await;
    }
}

/// The suite on Redis (`idem_store::redis::RedisStore`, `--features redis`) but for the
/// outbox's part (the engine keeps no intents), each test on a server of its own.
#[cfg(feature = "redis")]
mod redis {
    receiver_suite!(crate::engine::Redis);
    entity_suite!(crate::engine::Redis);
    token_suite!(crate::engine::Redis);

    /// The server's clock rule: the caller's clock is not used, however far off.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn database_clock_decides_whatever_the_callers_clock_says() {
        crate::clock::database_clock_decides_whatever_the_callers_clock_says::<
            crate::engine::Redis,
        >()
        .await;
    }
}

/// The id of `key` under one tenant and operation.
pub(crate) fn id(key: &str) -> RecordId {
    RecordId::new("shop", "charge", key).unwrap()
}

/// The fingerprint of `text`.
pub(crate) fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

/// The generation of a [`Decision::Claimed`]; panics on any other answer.
#[track_caller]
pub(crate) fn claimed(decision: Decision) -> Generation {
    match decision {
        Decision::Claimed { generation, .. } => generation,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// Claims `key` (with the fingerprint of its own name) at the harness's time.
pub(crate) async fn claim<E: Engine>(h: &E, key: &RecordId) -> Generation {
    claimed(h.store().begin(key, fp(key.key()), h.now()).await.unwrap())
}

/// Claims `key` and settles it with `verdict` and `outcome`; the settled record.
pub(crate) async fn settle<E: Engine>(
    h: &E,
    key: &RecordId,
    verdict: Verdict,
    outcome: Outcome,
) -> Record {
    let generation = claim(h, key).await;
    h.store()
        .complete(key, generation, verdict, outcome, h.now())
        .await
        .unwrap()
}

/// Claims `key` and marks it Unknown; the generation.
pub(crate) async fn unknown<E: Engine>(h: &E, key: &RecordId) -> Generation {
    let generation = claim(h, key).await;
    let record = h
        .store()
        .mark_unknown(key, generation, h.now())
        .await
        .unwrap();
    assert_eq!(record.state(), State::Unknown);
    generation
}

/// The state of `key`'s record, if it has one.
pub(crate) async fn state_of<E: Engine>(h: &E, key: &RecordId) -> Option<State> {
    h.store().get(key).await.unwrap().map(|r| r.state())
}

/// Asserts that `time` lies in `from..=to`: the engine's clock read before and after the
/// write (equal on an engine whose time is the caller's, so the check is exact there).
#[track_caller]
pub(crate) fn assert_within(time: Timestamp, from: Timestamp, to: Timestamp, what: &str) {
    assert!(
        (from..=to).contains(&time),
        "{what}: {time} is not within {from}..={to}"
    );
}

/// Asserts that `generation`, handed out after `previous` with no claim between them,
/// is above it: the next value exactly on an engine whose counter has no gaps
/// ([`Engine::GAPLESS_GENERATIONS`]).
#[track_caller]
pub(crate) fn assert_next_generation<E: Engine>(generation: Generation, previous: Generation) {
    if E::GAPLESS_GENERATIONS {
        assert_eq!(
            generation,
            Generation(previous.0 + 1),
            "the next generation"
        );
    } else {
        assert!(generation > previous, "{generation} after {previous}");
    }
}

/// `stats` without the ages, which move on with the database's clock between two reads
/// on PostgreSQL: what a read-only call must leave as it found.
pub(crate) fn without_ages(mut stats: idem_store::maintain::Stats) -> idem_store::maintain::Stats {
    stats.oldest_pending_age_ms = None;
    stats.oldest_unknown_age_ms = None;
    stats
}
