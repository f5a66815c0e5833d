//! `#[derive(HarnessState)]`: defaults, reducers, updates, serde and schema.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::HarnessState;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn longest(current: &mut String, new: String) {
    if new.len() > current.len() {
        *current = new;
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Everything {
    #[field(default = "gpt".to_string())]
    model: String,
    #[field(reduce = append)]
    log: Vec<String>,
    #[field(reduce = extend)]
    scores: BTreeMap<String, u32>,
    #[field(reduce = extend)]
    tags: BTreeSet<String>,
    #[field(reduce = add, default = 10)]
    budget: i64,
    #[field(reduce = max)]
    best: f64,
    #[field(reduce = min, default = u32::MAX)]
    fewest: u32,
    #[field(reduce = longest)]
    longest_word: String,
    #[field(reduce = replace)]
    done: bool,
}

#[test]
fn defaults_come_from_field_attributes() {
    let s = Everything::default();
    assert_eq!(s.model, "gpt");
    assert_eq!(s.budget, 10);
    assert_eq!(s.fewest, u32::MAX);
    assert!(s.log.is_empty());
    assert!(!s.done);
}

#[test]
fn each_reducer_merges_its_field() {
    let mut s = Everything::default();
    s.apply(
        EverythingUpdate::new()
            .model("claude")
            .log(vec!["a".into()])
            .scores(BTreeMap::from([("x".into(), 1)]))
            .tags(BTreeSet::from(["t1".into()]))
            .budget(-3)
            .best(0.5)
            .fewest(7)
            .longest_word("hi")
            .done(true),
    );
    s.apply(
        EverythingUpdate::new()
            .log(vec!["b".into(), "c".into()])
            .scores(BTreeMap::from([("x".into(), 2), ("y".into(), 3)]))
            .tags(BTreeSet::from(["t1".into(), "t2".into()]))
            .budget(-3)
            .best(0.25)
            .fewest(9)
            .longest_word("a"),
    );
    assert_eq!(s.model, "claude");
    assert_eq!(s.log, ["a", "b", "c"]);
    assert_eq!(s.scores, BTreeMap::from([("x".into(), 2), ("y".into(), 3)]));
    assert_eq!(s.tags.len(), 2);
    assert_eq!(s.budget, 4);
    assert_eq!(s.best, 0.5);
    assert_eq!(s.fewest, 7);
    assert_eq!(s.longest_word, "hi");
    assert!(s.done, "a field left out of an update is untouched");
}

#[test]
fn empty_update_changes_nothing() {
    let mut s = Everything::default();
    let before = s.clone();
    let u = Everything::update();
    assert!(u.is_empty());
    s.apply(u);
    assert_eq!(s, before);
}

#[test]
fn update_serializes_only_the_fields_it_sets() {
    let u = EverythingUpdate::new().budget(5).log(vec!["x".into()]);
    let json = serde_json::to_value(&u).unwrap();
    assert_eq!(json, serde_json::json!({"budget": 5, "log": ["x"]}));
    let back: EverythingUpdate = serde_json::from_value(json).unwrap();
    assert_eq!(back.budget, Some(5));
    assert!(back.model.is_none());
}

#[test]
fn update_with_an_unknown_field_is_rejected_by_name() {
    let err = serde_json::from_str::<EverythingUpdate>(r#"{"budgett": 5}"#).unwrap_err();
    assert!(err.to_string().contains("budgett"), "{err}");
}

#[test]
fn state_round_trips_through_json() {
    let mut s = Everything::default();
    s.apply(EverythingUpdate::new().log(vec!["x".into()]).best(1.5));
    let back: Everything = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn schemas_describe_state_and_update() {
    let state = serde_json::to_value(Everything::state_schema()).unwrap();
    let update = serde_json::to_value(Everything::update_schema()).unwrap();
    assert!(state["properties"]["budget"].is_object(), "{state}");
    assert!(update["properties"]["log"].is_object(), "{update}");
    let required = state["required"].as_array().map(Vec::len).unwrap_or(0);
    assert!(required > 0, "state fields are required: {state}");
    assert!(
        update.get("required").is_none(),
        "update fields are optional: {update}"
    );
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
#[harness(update = Delta)]
struct Renamed {
    #[field(reduce = add)]
    n: u8,
}

#[test]
fn update_type_can_be_renamed_and_add_saturates() {
    let mut r = Renamed::default();
    r.apply(Delta::new().n(200));
    r.apply(Delta::new().n(200));
    assert_eq!(r.n, u8::MAX);
}
