use harness::HarnessState;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(reduce = apend)]
    items: Vec<u32>,
}

fn main() {}
