//! `#[derive(HarnessState)]` on fields that are unusual but valid: a type
//! naming `Self`, custom reducers whose names are close to a built-in's, and
//! raw identifiers.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::state::{FieldInfo, ReducerKind};
use harness::{Harness, HarnessState, create_agent};
use serde::{Deserialize, Serialize};

/// A recursive state: `Self` in a field's type is the state, also in the
/// generated update type and its setters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Tree {
    label: String,
    #[field(reduce = append)]
    children: Vec<Self>,
    #[field(reduce = keep_first)]
    parent: Option<Box<Self>>,
}

fn keep_first(current: &mut Option<Box<Tree>>, new: Option<Box<Tree>>) {
    if current.is_none() {
        *current = new;
    }
}

#[test]
fn self_in_a_field_type_is_the_state() {
    let leaf = |label: &str| Tree {
        label: label.into(),
        ..Tree::default()
    };
    let mut t = Tree::default();
    t.apply(TreeUpdate::new().children(vec![leaf("a")]));
    t.apply(
        TreeUpdate::new()
            .children(vec![leaf("b")])
            .parent(Some(Box::new(leaf("root")))),
    );
    t.apply(TreeUpdate::new().parent(Some(Box::new(leaf("other")))));
    let labels: Vec<&str> = t.children.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["a", "b"]);
    assert_eq!(t.parent.as_deref().map(|p| p.label.as_str()), Some("root"));
    let update: TreeUpdate = serde_json::from_value(serde_json::json!({
        "children": [{ "label": "c", "children": [], "parent": null }]
    }))
    .unwrap();
    t.apply(update);
    assert_eq!(t.children.len(), 3);
}

// Custom reducers whose names are within two edits of a built-in
// (`mul`/`max`, `avg`/`add`, `gcd`/`add`, `mix`/`min`, `map`/`max`,
// `and`/`add`, `any`/`add`): paths to functions in scope, not typos.
fn mul(current: &mut u64, new: u64) {
    *current *= new;
}
fn avg(current: &mut f64, new: f64) {
    *current = (*current + new) / 2.0;
}
fn gcd(current: &mut u64, mut b: u64) {
    let mut a = *current;
    while b != 0 {
        (a, b) = (b, a % b);
    }
    *current = a;
}
fn mix(current: &mut String, new: String) {
    *current = format!("{current}+{new}");
}
fn map(current: &mut Vec<u32>, new: Vec<u32>) {
    current.extend(new.into_iter().map(|n| n * 10));
}
fn and(current: &mut bool, new: bool) {
    *current = *current && new;
}
fn any(current: &mut bool, new: bool) {
    *current = *current || new;
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Custom {
    #[field(default = 1, reduce = mul)]
    product: u64,
    #[field(reduce = avg)]
    mean: f64,
    #[field(reduce = gcd)]
    g: u64,
    #[field(reduce = mix)]
    mixed: String,
    #[field(reduce = map)]
    mapped: Vec<u32>,
    #[field(default = true, reduce = and)]
    all: bool,
    #[field(reduce = any)]
    some: bool,
}

#[test]
fn custom_reducers_may_be_named_like_a_built_in() {
    let mut s = Custom::default();
    s.apply(
        CustomUpdate::new()
            .product(6)
            .mean(4.0)
            .g(12)
            .mixed("a")
            .mapped(vec![1])
            .all(true)
            .some(false),
    );
    s.apply(
        CustomUpdate::new()
            .product(7)
            .mean(2.0)
            .g(18)
            .mixed("b")
            .mapped(vec![2])
            .all(false)
            .some(true),
    );
    assert_eq!(s.product, 42);
    assert!((s.mean - 2.0).abs() < f64::EPSILON);
    assert_eq!(s.g, 6);
    assert_eq!(s.mixed, "+a+b");
    assert_eq!(s.mapped, [10, 20]);
    assert!(!s.all);
    assert!(s.some);
    assert!(
        Custom::fields()
            .unwrap()
            .iter()
            .all(|f| f.reducer == ReducerKind::Custom)
    );
}

/// Raw identifiers: the field's name is `type`, not `r#type`, as serde has it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Raw {
    r#type: String,
    #[field(reduce = add)]
    r#loop: u32,
}

#[test]
fn raw_field_names_are_named_without_r_hash() {
    assert_eq!(
        Raw::fields().unwrap(),
        [
            FieldInfo {
                name: "type",
                reducer: ReducerKind::Replace
            },
            FieldInfo {
                name: "loop",
                reducer: ReducerKind::Add
            },
        ]
    );
    let update = RawUpdate::new().r#type("t").r#loop(2);
    assert_eq!(Raw::written(&update), ["type", "loop"]);
    assert_eq!(
        serde_json::to_value(&update).unwrap(),
        serde_json::json!({ "type": "t", "loop": 2 })
    );
}

fn raw_loop(writes: &[&str]) -> Result<Harness<Raw>, harness::LoopValidationError> {
    Harness::<Raw>::builder()
        .step("a")
        .run(async || Ok(RawUpdate::new().r#type("x").r#loop(1)))
        .writes(writes.iter().copied())
        .end()
        .start("a")
        .build()
}

#[tokio::test]
async fn a_step_declares_it_writes_a_raw_field_by_its_name() {
    let harness = raw_loop(&["type", "loop"]).unwrap();
    let out = create_agent("raw", &harness)
        .run(Raw::default())
        .await
        .unwrap();
    assert_eq!((out.state.r#type.as_str(), out.state.r#loop), ("x", 1));
    assert!(
        raw_loop(&["r#type", "loop"]).is_err(),
        "`r#type` is not a field's name"
    );
}
