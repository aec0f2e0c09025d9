//! The example programs run as tests, so the code the README points to keeps working.

#[allow(dead_code, unreachable_pub)] // its `main` is the example's own entry point
#[path = "../../examples/vouchers.rs"]
mod vouchers;

#[test]
fn the_vouchers_example_runs() {
    vouchers::run().unwrap();
}

#[allow(dead_code, unreachable_pub)] // its `main` is the example's own entry point
#[path = "../../examples/terminal.rs"]
mod terminal;

#[test]
fn the_terminal_example_runs() {
    terminal::run().unwrap();
}

#[cfg(feature = "http")]
#[allow(dead_code, unreachable_pub)] // its `main` is the example's own entry point
#[path = "../../examples/axum.rs"]
mod axum_example;

#[cfg(feature = "http")]
#[test]
fn the_axum_example_runs_once_replays_and_refuses_a_reused_key() {
    assert_eq!(axum_example::run().unwrap(), [201, 201, 422]);
}
