//! The examples of `examples/` run as tests, so they never rot: each checks its own output.
//! (`s3_table` needs a server: `tpch/tests/s3.rs` starts one and runs it.)

#[path = "../../examples/quickstart.rs"]
mod quickstart;

#[path = "../../examples/modes.rs"]
mod modes;

#[path = "../../examples/grown_table.rs"]
mod grown_table;

#[path = "../../examples/prepared_service.rs"]
mod prepared_service;

#[test]
fn quickstart_runs() {
    quickstart::main().unwrap();
}

#[test]
fn modes_runs() {
    modes::main().unwrap();
}

#[test]
fn grown_table_runs() {
    grown_table::main().unwrap();
}

#[test]
fn prepared_service_runs() {
    prepared_service::main().unwrap();
}
