//! Typed answers through `responseMimeType` and `responseSchema`.

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
    days: Vec<Day>,
    note: Option<String>,
}

const GOOD: &str = r#"{"city": "Paris", "days": [{"high": 21.5, "sky": "clear"}]}"#;

fn text_answer(text: &str, finish_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": text }]), finish_reason))
}

fn forecast_request() -> ModelRequest {
    ModelRequest::builder().user("Forecast for Paris").build()
}

#[tokio::test]
async fn the_answer_is_asked_for_with_a_response_schema_in_gemini_s_subset() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(text_answer(GOOD, "STOP"))
        .expect(1)
        .mount(&server)
        .await;
    let answer = model(&server)
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
            note: None
        }
    );
    assert_eq!(answer.usage, Usage::new(11, 7).with_reasoning(3));

    let body = &requests(&server).await[0];
    let config = &body["generationConfig"];
    assert_eq!(config["responseMimeType"], "application/json");
    let schema = &config["responseSchema"];
    // `$ref`s inlined, `$defs` and `$schema` gone, `null` as `nullable`.
    assert!(schema.get("$defs").is_none(), "{schema}");
    assert!(schema.get("$schema").is_none(), "{schema}");
    assert_eq!(
        schema["properties"]["note"],
        json!({ "type": "string", "nullable": true })
    );
    let day = &schema["properties"]["days"]["items"];
    assert_eq!(
        day["properties"]["high"],
        json!({ "type": "number", "format": "double" })
    );
    assert_eq!(
        day["properties"]["sky"],
        json!({ "type": "string", "enum": ["clear", "cloudy"] })
    );
    assert_eq!(schema["required"], json!(["city", "days"]));
    assert!(body.get("tools").is_none());
}

#[tokio::test]
async fn a_bad_answer_gets_one_repair_turn() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer(
            r#"{"city": "Paris", "days": [{"high": 21.5}]}"#,
            "STOP",
        ))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(text_answer(GOOD, "STOP"))
        .mount(&server)
        .await;
    let answer = model(&server)
        .complete_typed::<Forecast>(&forecast_request())
        .await
        .unwrap();
    assert_eq!(answer.attempts, 2);
    let bodies = requests(&server).await;
    let contents = bodies[1]["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(
        contents[1],
        json!({ "role": "model", "parts": [{ "text": r#"{"city": "Paris", "days": [{"high": 21.5}]}"# }] })
    );
    let repair = contents[2]["parts"][0]["text"].as_str().unwrap();
    assert!(
        repair.contains("at `days[0]`") && repair.contains("missing field `sky`"),
        "{repair}"
    );
    assert_eq!(bodies[1]["generationConfig"], bodies[0]["generationConfig"]);
}

#[tokio::test]
async fn answers_that_stay_malformed_end_in_a_typed_error() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            r#"{"city": "Paris", "days": [{"high": 20, "sky": "rain"}]}"#,
            "STOP",
            "days[0].sky",
            "unknown variant `rain`",
        ),
        (r#"{"city": "Paris"}"#, "STOP", ".", "missing field `days`"),
        ("Sunny all week!", "STOP", ".", "not valid JSON"),
        (
            r#"{"city": "Paris", "days": [{"high": 2"#,
            "MAX_TOKENS",
            "days[0]",
            "cut off",
        ),
        (
            r#"[{"city": "Paris", "days": []}]"#,
            "STOP",
            // A struct also deserializes from an array of its fields.
            "[0]",
            "invalid type: map, expected a string",
        ),
        (
            r#"{"city": "Paris", "days": {}}"#,
            "STOP",
            "days",
            "invalid type: map",
        ),
    ];
    for (raw, finish, at, reason) in cases {
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
            ..
        } = &error
        else {
            panic!("{raw}: {error}");
        };
        assert_eq!((got.as_str(), *attempts), (*raw, 2));
        assert_eq!(mismatch.path, *at, "{raw}: {error}");
        assert!(mismatch.reason.contains(reason), "{raw}: {error}");
    }
}

#[tokio::test]
async fn a_safety_block_is_a_model_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "promptFeedback": { "blockReason": "SAFETY" }
        })))
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
async fn with_tools_the_schema_is_not_sent_since_gemini_refuses_both() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer(GOOD, "STOP"))
        .mount(&server)
        .await;
    let request = ModelRequest::builder()
        .user("Forecast for Paris")
        .tool(ToolSpec::new(
            "lookup",
            "Looks a city up",
            json!({ "type": "object", "properties": { "city": { "type": "string" } } }),
        ))
        .build();
    let answer = model(&server)
        .complete_typed::<Forecast>(&request)
        .await
        .unwrap();
    assert_eq!(answer.value.city, "Paris");
    let body = &requests(&server).await[0];
    // No schema (only the bound on the answer's length).
    assert_eq!(
        body["generationConfig"],
        json!({ "maxOutputTokens": harness_gemini::DEFAULT_MAX_TOKENS }),
        "{body}"
    );
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0]["name"],
        "lookup"
    );
}
