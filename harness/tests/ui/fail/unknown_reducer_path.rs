use harness::HarnessState;
use serde::{Deserialize, Serialize};

mod reducers {}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(reduce = average)]
    mean: f64,
    #[field(reduce = reducers::concat)]
    text: String,
}

fn main() {}
