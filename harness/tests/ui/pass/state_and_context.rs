use harness::{Context, HarnessState};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

fn keep_first(current: &mut Option<String>, new: Option<String>) {
    if current.is_none() {
        *current = new;
    }
}

mod reducers {
    pub fn concat(a: &mut String, b: String) {
        a.push_str(&b);
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
pub struct State {
    #[field(reduce = append)]
    pub items: Vec<u32>,
    #[field(reduce = extend)]
    pub map: HashMap<String, u32>,
    #[field(reduce = add)]
    pub total: f32,
    #[field(reduce = keep_first)]
    pub first: Option<String>,
    #[field(reduce = reducers::concat, default = String::from(">"))]
    pub text: String,
}

#[derive(Context)]
pub struct Deps {
    #[slot(fixed)]
    pub prompt: String,
    #[slot(agent)]
    pub client: Arc<str>,
    #[slot(run)]
    pub user: u64,
}

#[derive(Context)]
pub struct Nothing;

fn main() {
    let mut s = State::default();
    harness::HarnessState::apply(&mut s, StateUpdate::new().text("a").first(Some("x".into())));
    assert_eq!(s.text, ">a");
    let deps = <Deps as harness::Context>::assemble(
        &DepsFixed { prompt: "p".into() },
        &DepsAgent { client: Arc::from("c") },
        DepsRun { user: 7 },
    );
    assert_eq!((deps.prompt.as_str(), &*deps.client, deps.user), ("p", "c", 7));
    let _: Nothing = <Nothing as harness::Context>::assemble(&(), &(), ());
}
