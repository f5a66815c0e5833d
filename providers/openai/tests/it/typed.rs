//! Typed answers through `response_format` json_schema, strict.

use harness::llm::{LanguageModelExt, TypedAnswerError};

use super::*;

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Sky {
    Clear,
    Cloudy,
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Day {
    high: f64,
    sky: Sky,
}

/// A forecast.
#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    #[schemars(length(min = 1))]
    days: Vec<Day>,
    note: Option<String>,
}

const GOOD: &str = r#"{"city":"Paris","days":[{"high":21.5,"sky":"clear"}],"note":null}"#;

fn text_answer(text: &str, finish_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(completion(
        json!({ "role": "assistant", "content": text, "refusal": null }),
        finish_reason,
    ))
}

fn forecast_request() -> ModelRequest {
    ModelRequest::builder().user("Forecast for Paris").build()
}

#[tokio::test]
async fn the_answer_is_asked_for_as_a_strict_json_schema_and_parsed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(text_answer(GOOD, "stop"))
        .expect(1)
        .mount(&server)
        .await;
    // The mock stands in for OpenAI itself, whose strict mode the schema
    // is adapted to.
    let answer = model(&server)
        .strict_schema_adaptation(true)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(
        answer.value,
        Forecast {
            city: "Paris".into(),
            days: vec![Day {
                high: 21.5,
                sky: Sky::Clear
            }],
            note: None,
        }
    );
    assert_eq!((answer.attempts, answer.usage), (1, Usage::new(12, 5)));

    let body = &requests(&server).await[0];
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "Forecast");
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    assert!(schema.get("$schema").is_none(), "{schema}");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["city", "days", "note"]));
    assert_eq!(
        schema["properties"]["note"]["type"],
        json!(["string", "null"])
    );
    assert!(schema["properties"]["days"].get("minItems").is_some());
    let day = &schema["$defs"]["Day"];
    assert_eq!(day["additionalProperties"], false);
    assert_eq!(day["required"], json!(["high", "sky"]));
    assert_eq!(schema["$defs"]["Sky"]["enum"], json!(["clear", "cloudy"]));
}

#[tokio::test]
async fn a_bad_answer_gets_one_repair_turn() {
    let server = MockServer::start().await;
    let bad = r#"{"city":"Paris","days":[{"high":"warm","sky":"clear"}],"note":null}"#;
    Mock::given(method("POST"))
        .respond_with(text_answer(bad, "stop"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(text_answer(GOOD, "stop"))
        .mount(&server)
        .await;
    let answer = model(&server)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(answer.value.days[0].high, 21.5);
    assert_eq!((answer.attempts, answer.usage), (2, Usage::new(24, 10)));

    let bodies = requests(&server).await;
    assert_eq!(bodies.len(), 2);
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1], json!({ "role": "assistant", "content": bad }));
    assert_eq!(messages[2]["role"], "user");
    let repair = messages[2]["content"].as_str().unwrap();
    assert!(repair.contains("at `days[0].high`"), "{repair}");
    assert_eq!(bodies[1]["response_format"], bodies[0]["response_format"]);
}

/// `(answer, finish_reason, expected path, words of the reason)`.
const MALFORMED: &[(&str, &str, &str, &str)] = &[
    (
        r#"{"city":"Paris","days":[{"high":21,"sky":"foggy"}],"note":null}"#,
        "stop",
        "days[0].sky",
        "unknown variant `foggy`",
    ),
    (
        r#"{"city":"Paris","note":null}"#,
        "stop",
        ".",
        "missing field `days`",
    ),
    ("I cannot give a forecast.", "stop", ".", "not valid JSON"),
    (
        r#"{"city":"Paris","days":[{"high":21"#,
        "length",
        "days[0]",
        "cut off",
    ),
    (
        r#"{"forecast":{"city":"Paris","days":[],"note":null}}"#,
        "stop",
        ".",
        "missing field `city`",
    ),
    (
        r#"{"city":7,"days":[]}"#,
        "stop",
        "city",
        "invalid type: integer `7`",
    ),
];

#[tokio::test]
async fn answers_that_stay_malformed_end_in_a_typed_error() {
    for (raw, finish, at, reason) in MALFORMED {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(text_answer(raw, finish))
            .expect(2)
            .mount(&server)
            .await;
        let error = model(&server)
            .complete_typed::<Forecast>(&forecast_request())
            .await
            .unwrap_err();
        let TypedAnswerError::Mismatch {
            raw: got,
            mismatch,
            attempts,
            usage,
            ..
        } = &error
        else {
            panic!("{raw}: {error}");
        };
        assert_eq!((got.as_str(), *attempts), (*raw, 2), "{error}");
        assert_eq!(*usage, Usage::new(24, 10));
        assert_eq!(mismatch.path, *at, "{raw}: {error}");
        assert!(mismatch.reason.contains(reason), "{raw}: {error}");
        assert!(error.to_string().contains("Forecast"), "{error}");
        if *finish == "length" {
            let bodies = requests(&server).await;
            let repair = bodies[1]["messages"][2]["content"].as_str().unwrap();
            assert!(repair.contains("token limit"), "{repair}");
        }
    }
}

#[tokio::test]
async fn a_refusal_is_a_model_error_not_a_mismatch() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": null, "refusal": "I can't help with that." }),
            "stop",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let error = model(&server)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            TypedAnswerError::Model {
                source: ModelError::ContentFiltered { .. },
                ..
            }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_lax_format_sends_the_schema_unchanged() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer(GOOD, "stop"))
        .mount(&server)
        .await;
    let format = harness::llm::ResponseFormat::for_type::<Forecast>().with_strict(false);
    let request = ModelRequest::builder()
        .user("Forecast for Paris")
        .response_format(format.clone())
        .build();
    model(&server)
        .complete_typed::<Forecast>(&request)
        .await
        .unwrap();
    let body = &requests(&server).await[0];
    assert_eq!(body["response_format"]["json_schema"]["strict"], false);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"],
        format.schema
    );
}

#[tokio::test]
async fn an_answer_that_is_not_an_object_travels_wrapped_whole_or_streamed() {
    let server = MockServer::start().await;
    let wrapped = r#"{"value":[{"high":3.5,"sky":"cloudy"}]}"#;
    Mock::given(method("POST"))
        .respond_with(text_answer(wrapped, "stop"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(
                &[
                    chunk(
                        json!({ "role": "assistant", "content": "{\"value\":[{\"high\"" }),
                        Value::Null,
                    ),
                    chunk(json!({ "content": ":1,\"sky\":\"clear\"}]}" }), Value::Null),
                    chunk(json!({}), json!("stop")),
                ],
                true,
            ),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    let model = model(&server).strict_schema_adaptation(true);
    let answer = model
        .complete_typed::<Vec<Day>>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(
        answer.value,
        vec![Day {
            high: 3.5,
            sky: Sky::Cloudy
        }]
    );
    let body = &requests(&server).await[0];
    let schema = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "Array_of_Day"
    );
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["value"]));
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(
        schema["properties"]["value"]["items"]["$ref"],
        "#/$defs/Day"
    );
    assert_eq!(schema["$defs"]["Day"]["additionalProperties"], false);

    let request = ModelRequest::builder()
        .user("Forecast")
        .response_format(harness::llm::ResponseFormat::for_type::<Vec<Day>>())
        .build();
    let response = collect_stream(model.stream(&request).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        harness::llm::parse_answer::<Vec<Day>>(&response.text()).unwrap(),
        vec![Day {
            high: 1.0,
            sky: Sky::Clear
        }]
    );
}

/// Bounded, as a small model's answer should be.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Notes {
    #[schemars(length(max = 3), inner(length(max = 40)))]
    notes: Vec<String>,
}

#[tokio::test]
async fn a_compatible_server_gets_the_schema_whole_with_its_bounds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer(
            r#"{"notes": ["tides follow the moon"]}"#,
            "stop",
        ))
        .mount(&server)
        .await;
    let request = ModelRequest::builder().user("Notes on tides").build();
    let answer = model(&server)
        .complete_typed::<Notes>(&request)
        .await
        .unwrap();
    assert_eq!(answer.value.notes, ["tides follow the moon"]);
    model(&server)
        .strict_schema_adaptation(true)
        .complete_typed::<Notes>(&request)
        .await
        .unwrap();
    let bodies = requests(&server).await;
    let notes = |i: usize| {
        bodies[i]["response_format"]["json_schema"]["schema"]["properties"]["notes"].clone()
    };
    // llama.cpp, vLLM and the like make a grammar of the whole schema…
    assert_eq!(notes(0)["maxItems"], 3);
    assert_eq!(notes(0)["items"]["maxLength"], 40);
    // …OpenAI's strict mode refuses `maxLength`: adapted, it is dropped.
    assert!(notes(1)["items"].get("maxLength").is_none(), "{}", notes(1));
}
