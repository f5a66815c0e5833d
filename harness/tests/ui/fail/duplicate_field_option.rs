use harness::HarnessState;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(reduce = add)]
    #[field(reduce = max)]
    a: u32,
    #[field(reduce = add, reduce = min)]
    b: u32,
    #[field(default = 1, default = 2)]
    c: u32,
}

fn main() {}
