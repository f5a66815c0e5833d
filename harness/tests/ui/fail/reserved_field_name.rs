use harness::HarnessState;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    count: u32,
    new: bool,
    is_empty: bool,
}

fn main() {}
