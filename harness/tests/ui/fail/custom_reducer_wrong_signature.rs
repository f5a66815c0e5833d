use harness::HarnessState;
use serde::{Deserialize, Serialize};

fn merge(a: &mut Vec<u32>, b: Vec<u32>) {
    a.extend(b);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(reduce = merge)]
    count: u32,
}

fn main() {}
