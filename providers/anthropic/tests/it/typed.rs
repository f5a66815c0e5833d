//! Typed answers through a forced answer tool.

use harness::llm::{LanguageModelExt, ResponseFormat, TypedAnswerError};

use super::*;

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Day {
    high: f64,
    sky: String,
}

/// A forecast.
#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    days: Vec<Day>,
    note: Option<String>,
}

fn answer_tool(input: Value) -> ResponseTemplate {
    ok(message(
        json!([{ "type": "tool_use", "id": "toolu_ans", "name": "Forecast", "input": input }]),
        "tool_use",
    ))
}

fn good() -> Value {
    json!({ "city": "Paris", "days": [{ "high": 21.5, "sky": "clear" }] })
}

fn forecast_request() -> ModelRequest {
    ModelRequest::builder().user("Forecast for Paris").build()
}

/// The request `complete_typed::<Forecast>` sends, for `complete` and `stream`.
fn formatted_request() -> ModelRequest {
    ModelRequest::builder()
        .user("Forecast for Paris")
        .response_format(ResponseFormat::for_type::<Forecast>())
        .build()
}

#[tokio::test]
async fn the_answer_is_a_forced_tool_call_whose_input_is_parsed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(answer_tool(good()))
        .expect(1)
        .mount(&server)
        .await;
    let answer = model(&server)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(answer.value.city, "Paris");
    assert_eq!(answer.value.days[0].high, 21.5);
    assert_eq!(answer.value.note, None);
    assert_eq!(answer.attempts, 1);

    let body = &requests(&server).await[0];
    assert_eq!(
        body["tool_choice"],
        json!({ "type": "tool", "name": "Forecast" })
    );
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "Forecast");
    let schema = &tools[0]["input_schema"];
    assert_eq!(schema["type"], "object");
    assert!(schema.get("$schema").is_none(), "{schema}");
    assert_eq!(schema["required"], json!(["city", "days"]));
    assert_eq!(
        schema["$defs"]["Day"]["properties"]["high"]["type"],
        "number"
    );
}

#[tokio::test]
async fn the_answer_tool_becomes_text_so_the_conversation_has_no_dangling_call() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer_tool(good()))
        .mount(&server)
        .await;
    let mut request = formatted_request();
    let response = model(&server).complete(&request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert!(!response.has_tool_calls());
    assert_eq!(
        serde_json::from_str::<Value>(&response.text()).unwrap(),
        good()
    );

    // With tools of its own, the model must call one of them or the answer tool.
    request.tools.push(ToolSpec::from_args::<WeatherArgs>(
        "get_weather",
        "Weather in a city",
    ));
    model(&server).complete(&request).await.unwrap();
    let body = &requests(&server).await[1];
    assert_eq!(body["tool_choice"], json!({ "type": "any" }));
    let names: Vec<_> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("get_weather"), json!("Forecast")]);
}

#[tokio::test]
async fn a_streamed_answer_tool_becomes_text() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("tool_use");
    let json_delta = |fragment: &str| {
        json!({ "type": "content_block_delta", "index": 0,
                "delta": { "type": "input_json_delta", "partial_json": fragment } })
    };
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block":
                    { "type": "tool_use", "id": "toolu_ans", "name": "Forecast", "input": {} } }),
            json_delta("{\"city\": \"Paris\", \"days\": [{\"high\": 2"),
            json_delta("1.5, \"sky\": \"clear\"}]}"),
            json!({ "type": "content_block_stop", "index": 0 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let request = formatted_request();
    let stream = model(&server).stream(&request).await.unwrap();
    let response = collect_stream(stream).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert!(!response.has_tool_calls());
    assert_eq!(
        serde_json::from_str::<Value>(&response.text()).unwrap(),
        good()
    );
}

#[tokio::test]
async fn an_answer_that_is_not_an_object_travels_wrapped() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "tool_use", "id": "toolu_ans", "name": "Array_of_Day",
                     "input": { "value": [{ "high": 3.0, "sky": "snow" }] } }]),
            "tool_use",
        )))
        .mount(&server)
        .await;
    let answer = model(&server)
        .complete_typed::<Vec<Day>>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(
        answer.value,
        vec![Day {
            high: 3.0,
            sky: "snow".into()
        }]
    );
    let body = &requests(&server).await[0];
    let schema = &body["tools"][0]["input_schema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["value"]));
    assert_eq!(schema["properties"]["value"]["type"], "array");
    assert_eq!(
        schema["properties"]["value"]["items"]["$ref"],
        "#/$defs/Day"
    );
    assert!(schema["$defs"]["Day"].is_object(), "{schema}");
}

#[tokio::test]
async fn a_bad_answer_gets_one_repair_turn() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer_tool(json!({ "city": "Paris", "days": "sunny" })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(answer_tool(good()))
        .mount(&server)
        .await;
    let answer = model(&server)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(answer.attempts, 2);
    assert_eq!(answer.usage, Usage::new(48, 12).with_cache_read(8));
    let bodies = requests(&server).await;
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        serde_json::from_str::<Value>(messages[1]["content"][0]["text"].as_str().unwrap()).unwrap(),
        json!({ "city": "Paris", "days": "sunny" })
    );
    let repair = messages[2]["content"][0]["text"].as_str().unwrap();
    assert!(repair.contains("at `days`"), "{repair}");
    assert_eq!(bodies[1]["tool_choice"], bodies[0]["tool_choice"]);
}

#[tokio::test]
async fn answers_that_stay_malformed_end_in_a_typed_error() {
    let text = |t: &str| ok(message(json!([{ "type": "text", "text": t }]), "end_turn"));
    let cases: Vec<(ResponseTemplate, &str, &str)> = vec![
        (
            answer_tool(json!({ "city": "Paris", "days": [{ "high": "hot", "sky": "clear" }] })),
            "days[0].high",
            "invalid type: string \"hot\", expected f64",
        ),
        (
            answer_tool(json!({ "days": [] })),
            ".",
            "missing field `city`",
        ),
        (text("Paris will be sunny."), ".", "not valid JSON"),
        (
            answer_tool(json!({ "forecast": good() })),
            ".",
            "missing field `city`",
        ),
        (
            answer_tool(json!({ "city": ["Paris"], "days": [] })),
            "city",
            "invalid type: sequence",
        ),
    ];
    for (response, at, reason) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(response)
            .expect(2)
            .mount(&server)
            .await;
        let error = model(&server)
            .complete_typed::<Forecast>(&forecast_request())
            .await
            .unwrap_err();
        let TypedAnswerError::Mismatch {
            mismatch, attempts, ..
        } = &error
        else {
            panic!("{error}");
        };
        assert_eq!(*attempts, 2);
        assert_eq!(mismatch.path, at, "{error}");
        assert!(mismatch.reason.contains(reason), "{error}");
    }
}

#[tokio::test]
async fn a_streamed_answer_cut_off_at_the_token_limit_is_reported_as_cut_off() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("max_tokens");
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block":
                    { "type": "tool_use", "id": "toolu_ans", "name": "Forecast", "input": {} } }),
            json!({ "type": "content_block_delta", "index": 0,
                    "delta": { "type": "input_json_delta", "partial_json": "{\"city\": \"Par" } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let request = formatted_request();
    let response = collect_stream(model(&server).stream(&request).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    let mismatch = harness::llm::parse_answer::<Forecast>(&response.text()).unwrap_err();
    assert_eq!(mismatch.path, "city");
    assert!(mismatch.reason.contains("cut off"), "{mismatch}");
}
