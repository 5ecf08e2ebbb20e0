//! `eptrace`: the command-line tool.
fn main() {}
