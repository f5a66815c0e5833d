use harness::HarnessState;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(reduce = append)]
    count: u32,
    #[field(reduce = add)]
    name: String,
}

fn main() {}
