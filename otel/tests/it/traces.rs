//! A run with model calls, tool calls and an interrupt, exported to a real
//! OTLP/HTTP receiver: the span tree and the GenAI attributes.

use crate::collector::{Collector, int, strings, text};
use harness::llm::{
    Expect, Message, ModelError, ModelRequest, ModelResponse, ScriptedModel, Tool, ToolCall,
    ToolSet, Usage,
};
use harness::{Cx, Harness, HarnessState, Signal, create_agent};
use harness_otel::OtelConfig;
use opentelemetry::trace::{SpanKind as ApiKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::{Arc, Mutex};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Task {
    calls: Vec<ToolCall>,
    #[field(reduce = append)]
    log: Vec<String>,
}

struct Add;

#[derive(Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[async_trait::async_trait]
impl Tool for Add {
    type Args = AddArgs;
    type Output = i64;
    type Error = String;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "adds two integers"
    }
    async fn call(&self, args: AddArgs) -> Result<i64, String> {
        Ok(args.a + args.b)
    }
}

const QUESTION: &str = "Add 2 and 3, and add x.";
const SYSTEM: &str = "Be exact.";

/// think (a model call asking for two tool calls) → act (runs them) →
/// approve (asks a human) → answer (a second model call).
fn calculator(model: Arc<ScriptedModel>) -> Harness<Task> {
    let think_model = Arc::clone(&model);
    Harness::<Task>::builder()
        .step("think")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&think_model);
            async move {
                let request = ModelRequest::builder()
                    .system(SYSTEM)
                    .message(Message::user(QUESTION))
                    .tools(ToolSet::new().with(Add).specs())
                    .build();
                let answer = cx.complete(&*model, &request).await?;
                Ok(TaskUpdate::new().calls(answer.tool_calls().cloned().collect::<Vec<_>>()))
            }
        })
        .next("act")
        .step("act")
        .run(|task: Arc<Task>, cx: Cx<()>| async move {
            // A user's own span in a step, recording what an HTTP
            // instrumentation might: it must not leak its credentials.
            let lookup = tracing::info_span!(
                "lookup",
                http.request.header.authorization = "Bearer sk-user-secret",
                api_key = "sk-user-secret",
                lookup.kind = "cache",
            );
            let tools = ToolSet::new().with(Add);
            let log = async {
                let mut log = Vec::new();
                for call in &task.calls {
                    log.push(cx.call_tool(&tools, call).await.content);
                }
                log
            }
            .instrument(lookup)
            .await;
            Ok(TaskUpdate::new().log(log))
        })
        .next("approve")
        .step("approve")
        .run(|cx: Cx<()>| async move {
            let ok: bool = cx.interrupt("send the answer?")?;
            Ok(TaskUpdate::new().log(vec![format!("approved {ok}")]))
        })
        .next("answer")
        .step("answer")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&model);
            async move {
                let answer = cx
                    .complete(&*model, &ModelRequest::builder().user("Sum?").build())
                    .await?;
                Ok(TaskUpdate::new().log(vec![answer.text()]))
            }
        })
        .end()
        .start("think")
        .build()
        .unwrap()
}

fn script() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new([
        Expect::any().reply(
            ModelResponse::from_tool_calls([
                ToolCall::new("call-7", "add", serde_json::json!({ "a": 2, "b": 3 })),
                ToolCall::new("call-8", "add", serde_json::json!({ "a": "x" })),
            ])
            .with_usage(Usage::new(31, 12).with_cache_read(20).with_reasoning(5)),
        ),
        Expect::any()
            .reply(ModelResponse::from_text("The sum is 5.").with_usage(Usage::new(40, 6))),
    ]))
}

/// Runs `body` on a runtime of this thread, traced by a harness-otel layer
/// configured with `config`; flushes what it exported before returning.
pub(crate) fn traced<F, R>(config: OtelConfig, body: impl FnOnce() -> F) -> R
where
    F: Future<Output = R>,
{
    let _serial = crate::serial();
    let (layer, guard) = harness_otel::layer(config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let out = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(body())
    });
    guard.flush().unwrap();
    guard.shutdown().unwrap();
    out
}

/// Runs the calculator to its interrupt, then resumes it to its end.
async fn interrupted_and_resumed() -> (String, String) {
    let agent = create_agent("calculator", &calculator(script()));
    let mut run = agent.run(Task::default());
    let first = (&mut run).await.unwrap();
    assert_eq!(first.signal, Signal::INTERRUPT);
    let asked = first.interrupt.clone().unwrap();
    run.resume(true, &asked.id).unwrap();
    let done = (&mut run).await.unwrap();
    assert_eq!(done.state.log[0], "5");
    assert_eq!(done.state.log[2..], ["approved true", "The sum is 5."]);
    (done.session_id.to_string(), done.run_id.to_string())
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span: {:?}", names(spans));
    found[0]
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

/// The spans whose parent is `parent`, by name.
fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a str> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id && s.trace_id == parent.trace_id)
        .map(|s| s.name.as_str())
        .collect()
}

pub(crate) fn spans_of(collector: &Collector) -> Vec<Span> {
    collector.spans().into_iter().map(|(_, s)| s).collect()
}

#[test]
fn a_run_with_tool_calls_and_an_interrupt_is_exported_as_genai_spans() {
    let collector = Collector::start();
    let (session, _run) = traced(
        OtelConfig::new(&collector.endpoint).service_name("calc-service"),
        interrupted_and_resumed,
    );
    let all = collector.spans();
    assert!(all.iter().all(|(service, _)| service == "calc-service"));
    let spans: Vec<Span> = all.into_iter().map(|(_, s)| s).collect();

    // Two invocations of the agent (the run and its resume): two traces,
    // one conversation.
    let runs = named(&spans, "invoke_agent calculator");
    assert_eq!(runs.len(), 2, "{:?}", names(&spans));
    assert_ne!(runs[0].trace_id, runs[1].trace_id);
    for run in &runs {
        assert_eq!(run.kind, SpanKind::Internal as i32);
        assert!(run.parent_span_id.is_empty(), "a run is a root span");
        assert_eq!(
            text(&run.attributes, "gen_ai.operation.name").as_deref(),
            Some("invoke_agent")
        );
        assert_eq!(
            text(&run.attributes, "gen_ai.agent.name").as_deref(),
            Some("calculator")
        );
        assert_eq!(
            text(&run.attributes, "gen_ai.conversation.id").as_deref(),
            Some(session.as_str())
        );
    }
    let (first, second) = if children(&spans, runs[0]).contains(&"step think") {
        (runs[0], runs[1])
    } else {
        (runs[1], runs[0])
    };
    assert_eq!(
        children(&spans, first),
        ["step think", "step act", "step approve"],
        "the first run's steps, in order, up to the interrupt"
    );
    assert_eq!(
        children(&spans, second),
        ["step approve", "step answer"],
        "the resumed run starts again at the interrupted step"
    );
    for step in named(&spans, "step approve") {
        assert_eq!(step.kind, SpanKind::Internal as i32);
        assert_eq!(text(&step.attributes, "step").as_deref(), Some("approve"));
        assert_eq!(int(&step.attributes, "index"), Some(2));
        assert_eq!(
            text(&step.attributes, "gen_ai.conversation.id").as_deref(),
            Some(session.as_str())
        );
        assert!(children(&spans, step).is_empty());
    }

    // The model call is under the step that made it.
    let think = one(&spans, "step think");
    assert_eq!(children(&spans, think), ["chat scripted"]);
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2);
    let chat = chats
        .iter()
        .find(|c| c.parent_span_id == think.span_id)
        .unwrap();
    assert_eq!(chat.kind, SpanKind::Client as i32);
    assert_eq!(
        text(&chat.attributes, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        text(&chat.attributes, "gen_ai.provider.name").as_deref(),
        Some("scripted")
    );
    assert_eq!(
        text(&chat.attributes, "gen_ai.request.model").as_deref(),
        Some("scripted")
    );
    assert_eq!(
        text(&chat.attributes, "gen_ai.conversation.id").as_deref(),
        Some(session.as_str())
    );
    assert_eq!(int(&chat.attributes, "gen_ai.usage.input_tokens"), Some(31));
    assert_eq!(
        int(&chat.attributes, "gen_ai.usage.output_tokens"),
        Some(12)
    );
    assert_eq!(
        int(&chat.attributes, "gen_ai.usage.cache_read.input_tokens"),
        Some(20)
    );
    assert_eq!(
        int(&chat.attributes, "gen_ai.usage.reasoning.output_tokens"),
        Some(5)
    );
    assert!(int(&chat.attributes, "gen_ai.usage.cache_creation.input_tokens").is_none());
    assert_eq!(
        strings(&chat.attributes, "gen_ai.response.finish_reasons"),
        Some(vec!["tool_call".to_owned()])
    );
    assert!(text(&chat.attributes, "error.type").is_none());

    let answer = one(&spans, "step answer");
    assert_eq!(children(&spans, answer), ["chat scripted"]);
    let last = chats
        .iter()
        .find(|c| c.parent_span_id == answer.span_id)
        .unwrap();
    assert_eq!(int(&last.attributes, "gen_ai.usage.input_tokens"), Some(40));
    assert_eq!(int(&last.attributes, "gen_ai.usage.output_tokens"), Some(6));
    assert_eq!(
        strings(&last.attributes, "gen_ai.response.finish_reasons"),
        Some(vec!["stop".to_owned()])
    );

    // The tool calls are under the step that ran them (inside the user's
    // own span there), with their call ids; the failed one says so.
    let act = one(&spans, "step act");
    assert_eq!(children(&spans, act), ["lookup"]);
    let lookup = one(&spans, "lookup");
    let tools = named(&spans, "execute_tool add");
    assert_eq!(tools.len(), 2);
    let mut ids = Vec::new();
    for tool in &tools {
        assert_eq!(tool.parent_span_id, lookup.span_id);
        assert_eq!(tool.trace_id, first.trace_id);
        assert_eq!(tool.kind, SpanKind::Internal as i32);
        assert_eq!(
            text(&tool.attributes, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        assert_eq!(
            text(&tool.attributes, "gen_ai.tool.name").as_deref(),
            Some("add")
        );
        assert_eq!(
            text(&tool.attributes, "gen_ai.tool.type").as_deref(),
            Some("function")
        );
        ids.push(text(&tool.attributes, "gen_ai.tool.call.id").unwrap());
    }
    ids.sort();
    assert_eq!(ids, ["call-7", "call-8"]);
    let failed = tools
        .iter()
        .find(|t| text(&t.attributes, "gen_ai.tool.call.id").as_deref() == Some("call-8"))
        .unwrap();
    assert_eq!(
        text(&failed.attributes, "error.type").as_deref(),
        Some("tool_error")
    );
    assert_eq!(
        failed.status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );

    // By default, no content at all: not the question, not the system
    // prompt, not the answer, not tool arguments or results.
    let everything = format!("{:?}", collector.requests());
    for content in [
        QUESTION,
        SYSTEM,
        "The sum is 5.",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "harness.gen_ai.content",
    ] {
        assert!(!everything.contains(content), "`{content}` was exported");
    }
    // Nor credentials, whoever recorded them.
    assert!(!everything.contains("sk-user-secret"));
    assert!(!everything.to_ascii_lowercase().contains("authorization"));
    assert_eq!(
        text(&lookup.attributes, "lookup.kind").as_deref(),
        Some("cache")
    );
}

#[test]
fn contents_are_exported_in_the_conventions_shapes_when_the_user_opts_in() {
    let collector = Collector::start();
    traced(
        OtelConfig::new(&collector.endpoint).capture_content(true),
        interrupted_and_resumed,
    );
    let spans = spans_of(&collector);
    let think = one(&spans, "step think");
    let chat = spans
        .iter()
        .find(|s| s.name == "chat scripted" && s.parent_span_id == think.span_id)
        .unwrap();
    let json = |key: &str| -> serde_json::Value {
        serde_json::from_str(&text(&chat.attributes, key).unwrap_or_else(|| panic!("{key}")))
            .unwrap()
    };
    assert_eq!(
        json("gen_ai.input.messages"),
        serde_json::json!([{ "role": "user", "parts": [{ "type": "text", "content": QUESTION }] }])
    );
    assert_eq!(
        json("gen_ai.system_instructions"),
        serde_json::json!([{ "type": "text", "content": SYSTEM }])
    );
    assert_eq!(
        json("gen_ai.output.messages"),
        serde_json::json!([{
            "role": "assistant",
            "parts": [
                { "type": "tool_call", "id": "call-7", "name": "add", "arguments": { "a": 2, "b": 3 } },
                { "type": "tool_call", "id": "call-8", "name": "add", "arguments": { "a": "x" } },
            ],
            "finish_reason": "tool_call",
        }])
    );
    assert!(
        chat.events
            .iter()
            .all(|e| e.name != "harness.gen_ai.content")
    );

    let tool = spans
        .iter()
        .find(|s| text(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some("call-7"))
        .unwrap();
    assert_eq!(
        text(&tool.attributes, "gen_ai.tool.call.arguments").as_deref(),
        Some(r#"{"a":2,"b":3}"#)
    );
    assert_eq!(
        text(&tool.attributes, "gen_ai.tool.call.result").as_deref(),
        Some("5")
    );

    let answer = one(&spans, "step answer");
    let last = spans
        .iter()
        .find(|s| s.name == "chat scripted" && s.parent_span_id == answer.span_id)
        .unwrap();
    let output = text(&last.attributes, "gen_ai.output.messages").unwrap();
    assert!(output.contains("The sum is 5."), "{output}");
    assert!(text(&last.attributes, "gen_ai.system_instructions").is_none());
    // Credentials stay out with contents in.
    assert!(!format!("{:?}", collector.requests()).contains("sk-user-secret"));
}

#[test]
fn a_failing_model_call_records_its_error_type_and_status() {
    let collector = Collector::start();
    let model = Arc::new(ScriptedModel::new([Expect::any().fail(
        ModelError::RateLimited {
            retry_after: None,
            message: "slow down".into(),
        },
    )]));
    let result = traced(OtelConfig::new(&collector.endpoint), || async move {
        let agent = create_agent("calculator", &calculator(model));
        agent.run(Task::default()).await
    });
    assert!(result.is_err());
    let spans = spans_of(&collector);
    let chat = one(&spans, "chat scripted");
    assert_eq!(
        text(&chat.attributes, "error.type").as_deref(),
        Some("rate_limited")
    );
    let status = chat.status.as_ref().unwrap();
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(status.message.contains("slow down"), "{status:?}");
    assert!(int(&chat.attributes, "gen_ai.usage.input_tokens").is_none());
    let think = one(&spans, "step think");
    assert_eq!(chat.parent_span_id, think.span_id);
    let run = one(&spans, "invoke_agent calculator");
    assert_eq!(think.parent_span_id, run.span_id);
}

#[test]
fn collector_headers_reach_the_collector_and_never_a_span() {
    let collector = Collector::start();
    traced(
        OtelConfig::new(&collector.endpoint).header("x-collector-key", "ck-12345"),
        interrupted_and_resumed,
    );
    let headers = collector.headers();
    assert!(!headers.is_empty());
    assert!(
        headers
            .iter()
            .all(|h| h.get("x-collector-key").is_some_and(|v| v == "ck-12345"))
    );
    assert!(!format!("{:?}", collector.requests()).contains("ck-12345"));
}

/// A span's name and its attributes when it started.
type Started = (String, Vec<KeyValue>);

/// Records the attributes each span had when it started, and drops the
/// traces of one agent (children follow their parent's decision).
#[derive(Clone, Debug, Default)]
struct Recording {
    seen: Arc<Mutex<Vec<Started>>>,
    drop_agent: Option<String>,
}

impl ShouldSample for Recording {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        _: TraceId,
        name: &str,
        _: &ApiKind,
        attributes: &[KeyValue],
        _: &[opentelemetry::trace::Link],
    ) -> SamplingResult {
        self.seen
            .lock()
            .unwrap()
            .push((name.to_owned(), attributes.to_vec()));
        let parent_sampled = parent
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().is_sampled());
        let dropped = parent_sampled == Some(false)
            || self.drop_agent.as_ref().is_some_and(|agent| {
                attributes.iter().any(|kv| {
                    kv.key.as_str() == "gen_ai.agent.name" && kv.value.as_str() == agent.as_str()
                })
            });
        SamplingResult {
            decision: if dropped {
                SamplingDecision::Drop
            } else {
                SamplingDecision::RecordAndSample
            },
            attributes: Vec::new(),
            trace_state: Default::default(),
        }
    }
}

#[test]
fn samplers_see_the_genai_attributes_when_spans_start_and_can_drop_an_agent() {
    let collector = Collector::start();
    let sampler = Recording {
        drop_agent: Some("secret-agent".into()),
        ..Recording::default()
    };
    let seen = Arc::clone(&sampler.seen);
    traced(
        OtelConfig::new(&collector.endpoint).sampler(sampler),
        || async {
            interrupted_and_resumed().await;
            let model = Arc::new(ScriptedModel::new([
                Expect::any().fail(ModelError::other("no"))
            ]));
            let hidden = create_agent("secret-agent", &calculator(model));
            assert!(hidden.run(Task::default()).await.is_err());
        },
    );
    let seen = seen.lock().unwrap().clone();
    let at_start = |name: &str, key: &str| -> Option<String> {
        seen.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, attrs)| attrs.iter().find(|kv| kv.key.as_str() == key))
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(
        at_start("invoke_agent calculator", "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        at_start("invoke_agent calculator", "gen_ai.agent.name").as_deref(),
        Some("calculator")
    );
    assert!(at_start("invoke_agent calculator", "gen_ai.conversation.id").is_some());
    assert_eq!(
        at_start("chat scripted", "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        at_start("chat scripted", "gen_ai.provider.name").as_deref(),
        Some("scripted")
    );
    assert_eq!(
        at_start("chat scripted", "gen_ai.request.model").as_deref(),
        Some("scripted")
    );
    assert_eq!(
        at_start("execute_tool add", "gen_ai.tool.name").as_deref(),
        Some("add")
    );
    assert_eq!(
        at_start("execute_tool add", "gen_ai.tool.call.id").as_deref(),
        Some("call-7")
    );

    let spans = spans_of(&collector);
    assert_eq!(named(&spans, "invoke_agent calculator").len(), 2);
    assert!(named(&spans, "invoke_agent secret-agent").is_empty());
    let calculator_traces: Vec<_> = named(&spans, "invoke_agent calculator")
        .iter()
        .map(|s| s.trace_id.clone())
        .collect();
    assert!(
        spans
            .iter()
            .all(|s| calculator_traces.contains(&s.trace_id)),
        "nothing of the dropped agent's trace is exported"
    );
}

#[test]
fn the_content_target_is_enabled_only_with_the_opt_in() {
    let _serial = crate::serial();
    for capture in [false, true] {
        let (layer, guard) =
            harness_otel::layer(OtelConfig::new("http://127.0.0.1:9").capture_content(capture))
                .unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        let enabled = tracing::subscriber::with_default(
            subscriber,
            || tracing::enabled!(target: harness_otel::CONTENT_TARGET, tracing::Level::TRACE),
        );
        assert_eq!(enabled, capture);
        guard.shutdown().unwrap();
    }
}

#[test]
fn dropping_the_guard_inside_a_runtime_flushes_what_is_left() {
    let _serial = crate::serial();
    let collector = Collector::start();
    let (layer, guard) = harness_otel::layer(OtelConfig::new(&collector.endpoint)).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let _default = tracing::subscriber::set_default(subscriber);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            interrupted_and_resumed().await;
            // No flush: the batch processor holds the spans until its delay
            // is up (seconds); dropping the guard, here inside the runtime,
            // sends them.
            drop(guard);
        });
    let spans = spans_of(&collector);
    assert_eq!(named(&spans, "invoke_agent calculator").len(), 2);
    assert_eq!(named(&spans, "execute_tool add").len(), 2);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    #[field(reduce = append)]
    log: Vec<String>,
}

#[test]
fn a_sub_agents_steps_and_calls_nest_under_the_step_that_runs_it() {
    let collector = Collector::start();
    let session = traced(OtelConfig::new(&collector.endpoint), || async {
        let desk = Harness::<Desk>::builder()
            .step("delegate")
            .sub_agent(harness::SubAgent::new(
                &calculator(script()),
                |_: &Desk| Task::default(),
                |_: &Desk, done| DeskUpdate::new().log(done.state.log.clone()),
            ))
            .end()
            .start("delegate")
            .build()
            .unwrap();
        let agent = create_agent("desk", &desk);
        let mut run = agent.run(Desk::default());
        let first = (&mut run).await.unwrap();
        let asked = first.interrupt.clone().unwrap();
        run.resume(true, &asked.id).unwrap();
        let done = (&mut run).await.unwrap();
        assert_eq!(
            done.state.log.last().map(String::as_str),
            Some("The sum is 5.")
        );
        done.session_id.to_string()
    });
    let spans = spans_of(&collector);
    let runs = named(&spans, "invoke_agent desk");
    assert_eq!(runs.len(), 2, "{:?}", names(&spans));
    let delegates = named(&spans, "step delegate");
    assert_eq!(delegates.len(), 2);
    // Each visit of the step runs the sub-agent as an agent of its own,
    // whose steps nest under it.
    let inner: Vec<_> = named(&spans, "invoke_agent delegate");
    assert_eq!(inner.len(), 2, "{:?}", names(&spans));
    for d in &delegates {
        assert_eq!(children(&spans, d), ["invoke_agent delegate"]);
    }
    let sub_of = |d: &Span| -> &Span {
        inner
            .iter()
            .find(|s| s.parent_span_id == d.span_id)
            .copied()
            .unwrap()
    };
    let first = delegates
        .iter()
        .find(|d| children(&spans, sub_of(d)).contains(&"step think"))
        .unwrap();
    assert_eq!(
        children(&spans, sub_of(first)),
        ["step think", "step act", "step approve"]
    );
    let think = one(&spans, "step think");
    assert_eq!(text(&think.attributes, "path").as_deref(), Some("delegate"));
    assert_eq!(
        text(&think.attributes, "gen_ai.conversation.id").as_deref(),
        Some(session.as_str())
    );
    let chat = spans
        .iter()
        .find(|s| s.name == "chat scripted" && s.parent_span_id == think.span_id)
        .unwrap();
    assert_eq!(
        text(&chat.attributes, "harness.path").as_deref(),
        Some("delegate")
    );
    assert_eq!(
        text(&chat.attributes, "gen_ai.conversation.id").as_deref(),
        Some(session.as_str())
    );
    assert_eq!(named(&spans, "execute_tool add").len(), 2);
    let second = delegates
        .iter()
        .find(|d| d.span_id != first.span_id)
        .unwrap();
    assert_eq!(
        children(&spans, sub_of(second)),
        ["step approve", "step answer"]
    );
}

/// Drops the spans that carry `gen_ai.agent.name` = `hidden`, and looks at
/// nothing else: not at the parent.
#[derive(Clone, Debug)]
struct ByAgentName;

impl ShouldSample for ByAgentName {
    fn should_sample(
        &self,
        _: Option<&Context>,
        _: TraceId,
        _: &str,
        _: &ApiKind,
        attributes: &[KeyValue],
        _: &[opentelemetry::trace::Link],
    ) -> SamplingResult {
        let hidden = attributes
            .iter()
            .any(|kv| kv.key.as_str() == "gen_ai.agent.name" && kv.value.as_str() == "hidden");
        SamplingResult {
            decision: if hidden {
                SamplingDecision::Drop
            } else {
                SamplingDecision::RecordAndSample
            },
            attributes: Vec::new(),
            trace_state: Default::default(),
        }
    }
}

/// The spans whose parent was not exported.
fn orphans(spans: &[Span]) -> Vec<&str> {
    spans
        .iter()
        .filter(|s| {
            !s.parent_span_id.is_empty() && !spans.iter().any(|p| p.span_id == s.parent_span_id)
        })
        .map(|s| s.name.as_str())
        .collect()
}

/// What `OtelConfig::sampler` documents: a sampler used as it is decides
/// each span alone, so dropping an agent's root leaves its steps and calls
/// as an orphan trace; wrapped in `Sampler::ParentBased`, the whole run
/// goes.
#[test]
fn a_sampler_dropping_a_root_orphans_its_children_unless_wrapped_in_parent_based() {
    use opentelemetry_sdk::trace::Sampler;
    for wrapped in [false, true] {
        let collector = Collector::start();
        let config = OtelConfig::new(&collector.endpoint);
        let config = if wrapped {
            config.sampler(Sampler::ParentBased(Box::new(ByAgentName)))
        } else {
            config.sampler(ByAgentName)
        };
        traced(config, || async {
            let model = Arc::new(ScriptedModel::new([Expect::any().reply(
                ModelResponse::from_tool_call(ToolCall::new(
                    "c1",
                    "add",
                    serde_json::json!({ "a": 1, "b": 2 }),
                )),
            )]));
            let agent = Harness::<Task>::builder()
                .step("think")
                .run(move |cx: Cx<()>| {
                    let model = Arc::clone(&model);
                    async move {
                        let answer = cx
                            .complete(&*model, &ModelRequest::builder().user("1+2").build())
                            .await?;
                        let tools = ToolSet::new().with(Add);
                        let mut log = Vec::new();
                        for call in answer.tool_calls() {
                            log.push(cx.call_tool(&tools, call).await.content);
                        }
                        Ok(TaskUpdate::new().log(log))
                    }
                })
                .end()
                .start("think")
                .build()
                .unwrap();
            create_agent("hidden", &agent)
                .run(Task::default())
                .await
                .unwrap();
        });
        let spans = spans_of(&collector);
        assert!(named(&spans, "invoke_agent hidden").is_empty());
        if wrapped {
            assert!(spans.is_empty(), "{:?}", names(&spans));
        } else {
            assert_eq!(orphans(&spans), ["step think"], "{:?}", names(&spans));
            assert_eq!(named(&spans, "chat scripted").len(), 1);
            assert_eq!(named(&spans, "execute_tool add").len(), 1);
        }
    }
}

/// What `OtelConfig::level` documents: a step's failed attempts are DEBUG
/// events on its one span, exported only from DEBUG on.
#[test]
fn a_retried_steps_failed_attempts_are_debug_events_on_its_span() {
    use std::sync::atomic::{AtomicU32, Ordering};
    for level in [tracing::Level::INFO, tracing::Level::DEBUG] {
        let collector = Collector::start();
        let tries = Arc::new(AtomicU32::new(0));
        traced(OtelConfig::new(&collector.endpoint).level(level), || {
            let tries = Arc::clone(&tries);
            async move {
                let flaky = Harness::<Task>::builder()
                    .step("flaky")
                    .run(move |_cx: Cx<()>| {
                        let tries = Arc::clone(&tries);
                        async move {
                            if tries.fetch_add(1, Ordering::SeqCst) < 2 {
                                return Err(harness::StepError::msg("not yet"));
                            }
                            Ok(TaskUpdate::new())
                        }
                    })
                    .retry(harness::RetryPolicy::attempts(3))
                    .end()
                    .start("flaky")
                    .build()
                    .unwrap();
                create_agent("flaky", &flaky)
                    .run(Task::default())
                    .await
                    .unwrap();
            }
        });
        let spans = spans_of(&collector);
        let step = one(&spans, "step flaky");
        let failed: Vec<_> = step
            .events
            .iter()
            .filter(|e| e.name == "step attempt failed")
            .collect();
        if level == tracing::Level::INFO {
            assert!(failed.is_empty(), "{:?}", step.events);
        } else {
            assert_eq!(failed.len(), 2, "{:?}", step.events);
            // tracing-opentelemetry records an event's unsigned integers as
            // text.
            assert_eq!(text(&failed[0].attributes, "attempt").as_deref(), Some("1"));
            assert_eq!(
                text(&failed[1].attributes, "error").as_deref(),
                Some("not yet")
            );
        }
    }
}

/// A tool that fails quoting what it read.
struct Records;

#[async_trait::async_trait]
impl Tool for Records {
    type Args = AddArgs;
    type Output = i64;
    type Error = String;
    fn name(&self) -> &str {
        "records"
    }
    fn description(&self) -> &str {
        "reads a record"
    }
    async fn call(&self, _args: AddArgs) -> Result<i64, String> {
        Err("PATIENT-RECORD Jane Roe, diagnosis X".into())
    }
}

/// With contents off, neither a failed tool's text (its output, which the
/// model is told), nor an invalid argument the model wrote, nor what the
/// MCP SDK logs of a server's messages reaches the collector, even at
/// DEBUG; with contents on, they do. (A tool's name, even one the model
/// made up, is no content: it names the `execute_tool` span.)
#[test]
fn a_failed_tools_text_and_the_mcp_sdks_payloads_are_content() {
    let markers = ["PATIENT-RECORD", "ARG-MARKER", "SDK-MARKER"];
    for capture in [false, true] {
        let collector = Collector::start();
        traced(
            OtelConfig::new(&collector.endpoint)
                .level(tracing::Level::DEBUG)
                .capture_content(capture),
            || async {
                let agent = Harness::<Task>::builder()
                    .step("act")
                    .run(|cx: Cx<()>| async move {
                        let tools = ToolSet::new().with(Records);
                        let calls = [
                            ToolCall::new("c1", "records", serde_json::json!({"a": 1, "b": 2})),
                            ToolCall::new("c2", "records", serde_json::json!({"a": "ARG-MARKER"})),
                            ToolCall::new("c3", "no_such_tool", serde_json::json!({})),
                        ];
                        let mut log = Vec::new();
                        for call in &calls {
                            log.push(cx.call_tool(&tools, call).await.content);
                        }
                        tracing::info!(
                            target: "rmcp::service",
                            notification = "SDK-MARKER from the server",
                            "received notification"
                        );
                        tracing::warn!(target: "rmcp::service::client", "unexpected SDK-MARKER");
                        Ok(TaskUpdate::new().log(log))
                    })
                    .end()
                    .start("act")
                    .build()
                    .unwrap();
                let done = create_agent("records", &agent)
                    .run(Task::default())
                    .await
                    .unwrap();
                // The model is told each failure whole, whatever traces do.
                let told = done.state.log.join("\n");
                for marker in &markers[..2] {
                    assert!(told.contains(marker), "{told}");
                }
            },
        );
        let spans = spans_of(&collector);
        let exported = format!("{spans:?}");
        for marker in markers {
            assert_eq!(
                exported.contains(marker),
                capture,
                "capture {capture}: {marker} exported"
            );
        }
        // The failures are still seen, by kind.
        let failed: Vec<String> = spans
            .iter()
            .flat_map(|s| &s.events)
            .filter(|e| e.name == "tool call failed")
            .filter_map(|e| text(&e.attributes, "reason"))
            .collect();
        assert_eq!(failed, ["failed", "invalid_arguments", "unknown_tool"]);
    }
}
