//! The examples run as tests, so they never rot: each checks its own output.

#[path = "../examples/quickstart.rs"]
mod quickstart;

#[path = "../examples/modes.rs"]
mod modes;

#[test]
fn quickstart_runs() {
    quickstart::main().unwrap();
}

#[test]
fn modes_runs() {
    modes::main().unwrap();
}
