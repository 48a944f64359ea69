//! The sharded-table example of `examples/` runs as a test, so it never rots: it checks its
//! own output.

#[path = "../../examples/sharded_table.rs"]
mod sharded_table;

#[test]
fn sharded_table_runs() {
    sharded_table::main().unwrap();
}
