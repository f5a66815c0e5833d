use harness::HarnessState;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct State {
    #[field(default = std::num::NonZeroU32::MIN)]
    given: std::num::NonZeroU32,
    n: std::num::NonZeroU32,
}

fn main() {}
