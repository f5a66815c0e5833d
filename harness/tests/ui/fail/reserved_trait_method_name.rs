use harness::HarnessState;
use serde::{Deserialize, Serialize};

// A setter named like a method the update type has (`Default::default`,
// `Clone::clone`) would hide it: `StateUpdate::default()` would not compile.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    default: bool,
    clone: u32,
    r#fmt: String,
}

fn main() {}
