//! Typed tools and ToolSet dispatch.
#![allow(clippy::unwrap_used, missing_docs)]

use async_trait::async_trait;
use harness::llm::{Tool, ToolCall, ToolError, ToolSet};
use serde_json::json;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;

#[async_trait]
impl Tool for Add {
    type Args = AddArgs;
    type Output = i64;
    type Error = String;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers"
    }
    async fn call(&self, args: AddArgs) -> Result<i64, String> {
        args.a
            .checked_add(args.b)
            .ok_or_else(|| "overflow".to_owned())
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    text: String,
}

#[derive(serde::Serialize)]
struct Echoed {
    echoed: String,
}

struct Echo(&'static str);

#[async_trait]
impl Tool for Echo {
    type Args = EchoArgs;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "Echoes"
    }
    async fn call(&self, args: EchoArgs) -> Result<serde_json::Value, Self::Error> {
        Ok(if self.0 == "echo_struct" {
            serde_json::to_value(Echoed { echoed: args.text }).unwrap()
        } else {
            serde_json::Value::String(args.text)
        })
    }
}

fn tools() -> ToolSet {
    ToolSet::new()
        .with(Add)
        .with(Echo("echo"))
        .with(Echo("echo_struct"))
}

#[tokio::test]
async fn dispatches_to_the_named_tool() {
    let result = tools()
        .dispatch(&ToolCall::new("c1", "add", json!({"a": 2, "b": 40})))
        .await
        .unwrap();
    assert_eq!(result.content, "42");
    assert_eq!(result.call_id, "c1");
    assert_eq!(result.name, "add");
    assert!(!result.is_error);
}

#[tokio::test]
async fn string_output_is_sent_as_is_and_structs_as_json() {
    let set = tools();
    let plain = set
        .dispatch(&ToolCall::new("c", "echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(plain.content, "hi");
    let structured = set
        .dispatch(&ToolCall::new("c", "echo_struct", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(structured.content, r#"{"echoed":"hi"}"#);
}

#[tokio::test]
async fn unknown_tool_is_a_typed_error_listing_the_tools() {
    let error = tools()
        .dispatch(&ToolCall::new("c1", "multiply", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ToolError::UnknownTool {
            name: "multiply".into(),
            available: vec!["add".into(), "echo".into(), "echo_struct".into()]
        }
    );
    assert_eq!(
        error.to_string(),
        "unknown tool `multiply`; the available tools are: add, echo, echo_struct"
    );
}

#[tokio::test]
async fn bad_arguments_are_a_typed_error() {
    let error = tools()
        .dispatch(&ToolCall::new("c1", "add", json!({"a": "two", "b": 1})))
        .await
        .unwrap_err();
    match &error {
        ToolError::InvalidArguments { tool, message } => {
            assert_eq!(tool, "add");
            assert!(message.contains("invalid type"), "{message}");
            assert!(
                message.starts_with("`a`: "),
                "names the argument: {message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn each_kind_of_bad_argument_is_named_for_the_model() {
    // (arguments, what the message must say): a field of the wrong type is
    // named by its path; a missing or unknown shape is named by serde.
    let cases = [
        (json!({"a": 1, "b": "x"}), "`b`: invalid type"),
        (json!({"a": 1.5, "b": 1}), "`a`: invalid type"),
        (json!({"a": 1}), "missing field `b`"),
        (json!({}), "missing field `a`"),
        (json!([1]), "invalid length 1"),
        (json!("{\"a\": 1"), "invalid type: string"),
        (json!(null), "invalid type: null"),
    ];
    for (arguments, expected) in cases {
        let call = ToolCall::new("c", "add", arguments.clone());
        match tools().dispatch(&call).await.unwrap_err() {
            ToolError::InvalidArguments { message, .. } => {
                assert!(message.contains(expected), "{arguments}: {message}");
            }
            other => panic!("{arguments}: {other:?}"),
        }
        // The same message when a step parses the call itself.
        match call.parse_arguments::<AddArgs>().unwrap_err() {
            ToolError::InvalidArguments { message, .. } => {
                assert!(message.contains(expected), "{arguments}: {message}");
            }
            other => panic!("{arguments}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn tool_failure_is_reported_to_the_model() {
    let set = tools();
    let call = ToolCall::new("c9", "add", json!({"a": i64::MAX, "b": 1}));
    let error = set.dispatch(&call).await.unwrap_err();
    assert_eq!(
        error,
        ToolError::Failed {
            tool: "add".into(),
            message: "overflow".into()
        }
    );
    let reported = set.dispatch_or_report(&call).await;
    assert!(reported.is_error);
    assert_eq!(reported.call_id, "c9");
    assert_eq!(reported.content, "tool `add` failed: overflow");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct HowArgs {
    how: String,
}

/// A tool that panics as its argument says.
struct Boom;

#[async_trait]
impl Tool for Boom {
    type Args = HowArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "boom"
    }
    fn description(&self) -> &str {
        "Panics"
    }
    async fn call(&self, args: HowArgs) -> Result<String, String> {
        tokio::task::yield_now().await;
        match args.how.as_str() {
            "literal" => panic!("boom tool exploded"),
            "formatted" => panic!("boom tool exploded after {} tries", 3),
            "any" => std::panic::panic_any(42_u32),
            "index" => Ok(Vec::<String>::new()[1].clone()),
            _ => Ok("no panic".into()),
        }
    }
}

#[tokio::test]
async fn a_tool_that_panics_fails_its_own_call_and_the_others_still_run() {
    let set = tools().with(Boom);
    for (how, says) in [
        ("literal", "the tool panicked: boom tool exploded"),
        (
            "formatted",
            "the tool panicked: boom tool exploded after 3 tries",
        ),
        ("any", "the tool panicked"),
        ("index", "the tool panicked: index out of bounds"),
    ] {
        let call = ToolCall::new("c1", "boom", json!({ "how": how }));
        let error = set.dispatch(&call).await.unwrap_err();
        let ToolError::Failed { tool, message } = &error else {
            panic!("{how}: {error:?}");
        };
        assert_eq!(tool, "boom");
        assert!(message.starts_with(says), "{how}: {message}");
        let reported = set.dispatch_or_report(&call).await;
        assert!(reported.is_error, "{how}");
        assert_eq!(reported.call_id, "c1");
        assert!(
            reported.content.contains("tool `boom` failed"),
            "{how}: {}",
            reported.content
        );
        // The set still serves every tool, the one that panicked too.
        let add = set
            .dispatch(&ToolCall::new("c2", "add", json!({"a": 1, "b": 2})))
            .await
            .unwrap();
        assert_eq!(add.content, "3");
        let calm = set
            .dispatch(&ToolCall::new("c3", "boom", json!({"how": "not"})))
            .await
            .unwrap();
        assert_eq!(calm.content, "no panic");
    }
}

#[test]
fn specs_follow_registration_order_and_replacing_keeps_the_place() {
    let mut set = tools();
    set.register(Add);
    let names: Vec<_> = set.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["add", "echo", "echo_struct"]);
    assert_eq!(set.len(), 3);
    assert!(set.contains("echo"));
    assert!(!set.is_empty());
    let spec = &set.specs()[0];
    assert_eq!(spec.description, "Adds two integers");
    assert_eq!(spec.parameters["required"], json!(["a", "b"]));
    assert_eq!(
        format!("{set:?}"),
        r#"ToolSet { tools: ["add", "echo", "echo_struct"] }"#
    );
}
