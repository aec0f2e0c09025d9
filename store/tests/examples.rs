//! The example programs run as tests, so the code the README points to keeps working.

#[allow(dead_code, unreachable_pub)] // its `main` is the example's own entry point
#[path = "../examples/vouchers.rs"]
mod vouchers;

#[test]
fn the_vouchers_example_runs() {
    vouchers::run().unwrap();
}
