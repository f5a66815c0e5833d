//! The process's secrets out of everything this crate keeps, saves or
//! prints.
//!
//! A report is a file that outlives the run and travels (CI artifacts,
//! bug reports), and any text in it may quote a key: a task's output, a
//! model's answer or error, a case name or metadata copied from an
//! environment. So every string a [`Report`] holds is redacted with the
//! process's secrets (see [`harness::secrets`]), object keys included, by
//! walking the typed values rather than by a round trip through JSON that
//! could fail.
//!
//! Redaction fails closed. A case's [`CaseRecord`] holds the types of
//! `harness::llm`, which may gain fields or variants this walk does not
//! know; so after the walk the record is serialized and searched once more.
//! If it still holds a secret, or cannot be serialized, its exchanges,
//! events and sessions are dropped and [`CaseRecord::withheld`] says why:
//! the report loses that case's record, never keeps the secret. The
//! metrics (numbers only) stay.
//!
//! Every function here returns at once when the process holds no secret
//! ([`harness::secrets::is_active`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use harness::llm::{
    ContentPart, Exchange, ImageSource, Message, ModelError, ModelRequest, ModelResponse, Outcome,
    ProviderSignature, Reasoning, ResponseFormat, StopReason, StreamEvent, ToolCall, ToolChoice,
    ToolResult, ToolSpec,
};
use harness::secrets;
use serde_json::{Map, Value};

use crate::compare::{CaseDelta, Comparison, MeanDelta};
use crate::dataset::Case;
use crate::evaluator::Score;
use crate::record::{CaseRecord, EventRecord, Metrics};
use crate::report::{CaseFailure, CaseReport, Report, Scored};

/// Why a record was withheld: it still held a secret after redaction.
const WITHHELD_SECRET: &str = "withheld: a secret was left in it after redaction (in a part \
     this crate does not know, or in a name such as a kind, which cannot be replaced without \
     breaking the format); its exchanges, events and sessions were dropped";

/// Why a record was withheld: it could not be serialized to be checked.
const WITHHELD_UNSERIALIZABLE: &str = "withheld: it could not be serialized to be checked for \
     secrets; its exchanges, events and sessions were dropped";

/// `text` with the process's secrets replaced; borrowed when it holds none.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    secrets::redact(text)
}

/// The path `path` as shown in an error, the process's secrets replaced (a
/// directory can be named after a key, or a token be in a path).
pub(crate) fn path(path: &std::path::Path) -> String {
    owned(path.display().to_string())
}

/// `error`'s message, the process's secrets replaced (an I/O error can
/// quote a path).
pub(crate) fn error(error: &dyn std::fmt::Display) -> String {
    owned(error.to_string())
}

/// `text` with the process's secrets replaced, owned.
pub(crate) fn owned(text: impl Into<String>) -> String {
    let mut text = text.into();
    secrets::redact_string(&mut text);
    text
}

/// Redacts a string in place; whether anything was replaced.
pub(crate) fn text(text: &mut String) -> bool {
    secrets::redact_string(text)
}

fn texts<'a>(texts: impl IntoIterator<Item = &'a mut String>) -> bool {
    texts
        .into_iter()
        .fold(false, |changed, t| text(t) | changed)
}

/// Redacts every string in `value` and every object key; whether anything
/// was replaced. A number whose digits hold a secret (a numeric password
/// copied into an output) becomes the string [`harness::secrets::REDACTED`]:
/// a number cannot be partly replaced.
fn json(value: &mut Value) -> bool {
    if !secrets::is_active() {
        return false;
    }
    let mut changed = false;
    // A stack rather than recursion: a value may nest deeper than the
    // thread's stack allows.
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) => changed |= text(s),
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(fields) => {
                changed |= object_keys(fields);
                stack.extend(fields.values_mut());
            }
            Value::Number(n) if secrets::contains_secret(&n.to_string()) => {
                *value = Value::String(secrets::REDACTED.to_owned());
                changed = true;
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    changed
}

/// Whether a string or an object key in `value` holds a secret. Numbers
/// are not searched: outside the JSON values [`json`] redacts, they are
/// measurements (times, tokens, costs), whose digits may match a numeric
/// secret by chance.
pub(crate) fn holds_secret(value: &Value) -> bool {
    if !secrets::is_active() {
        return false;
    }
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) if secrets::contains_secret(s) => return true,
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                if fields.keys().any(|k| secrets::contains_secret(k)) {
                    return true;
                }
                stack.extend(fields.values());
            }
            _ => {}
        }
    }
    false
}

/// Redacts every key and value of `fields`; whether anything was replaced.
fn object(fields: &mut Map<String, Value>) -> bool {
    if !secrets::is_active() {
        return false;
    }
    let mut changed = object_keys(fields);
    for value in fields.values_mut() {
        changed |= json(value);
    }
    changed
}

/// A key is data too (metadata keyed by a token, a map of outputs). Two
/// keys that redact alike keep the later value: both were secret-bearing,
/// and losing one is better than keeping either's name.
fn object_keys(fields: &mut Map<String, Value>) -> bool {
    if !fields.keys().any(|k| secrets::contains_secret(k)) {
        return false;
    }
    for (key, value) in std::mem::take(fields) {
        fields.insert(owned(key), value);
    }
    true
}

fn map_keys<V>(map: &mut BTreeMap<String, V>) -> bool {
    if !map.keys().any(|k| secrets::contains_secret(k)) {
        return false;
    }
    for (key, value) in std::mem::take(map) {
        map.insert(owned(key), value);
    }
    true
}

/// Redacts a whole report: its names and every case.
pub(crate) fn report(report: &mut Report) {
    if !secrets::is_active() {
        return;
    }
    // Destructured whole, so that a field added to the report must be
    // placed here (or named as carrying no text) before this compiles.
    let Report {
        version: _,
        experiment,
        dataset,
        provider,
        model,
        evaluators,
        started_ms: _,
        elapsed_ms: _,
        cases,
    } = report;
    texts([experiment, dataset]);
    texts(provider.iter_mut().chain(model.iter_mut()));
    texts(evaluators.iter_mut());
    let renamed: Vec<bool> = cases.iter_mut().map(self::case).collect();
    distinct_names(cases, &renamed);
}

/// Keeps apart the cases whose names redaction made equal (`with-{key}`
/// and `with-{token}` both become `with-[redacted]`): a name that held a
/// secret and is now the name of another case gets the suffix ` (2)`, or
/// ` (3)`, …: the smallest that no case of the report has. Names that held
/// no secret are kept as they are; the cases are taken in order, so the
/// first of them keeps the plain redacted name. The same dataset, run
/// again with the same secrets, gets the same names.
fn distinct_names(cases: &mut [CaseReport], renamed: &[bool]) {
    let mut taken: HashSet<String> = cases
        .iter()
        .zip(renamed)
        .filter(|(_, renamed)| !**renamed)
        .map(|(case, _)| case.name.clone())
        .collect();
    for (case, renamed) in cases.iter_mut().zip(renamed) {
        if !renamed {
            continue;
        }
        if taken.contains(&case.name) {
            let name = (2..)
                .map(|n| format!("{} ({n})", case.name))
                .find(|name| !taken.contains(name))
                .unwrap_or_default();
            case.name = name;
        }
        taken.insert(case.name.clone());
    }
}

/// Redacts a comparison's names.
pub(crate) fn comparison(comparison: &mut Comparison) {
    if !secrets::is_active() {
        return;
    }
    let Comparison {
        baseline,
        candidate,
        cases,
        means,
        missing_evaluators,
    } = comparison;
    texts(missing_evaluators.iter_mut().map(|(name, _)| name));
    texts([baseline, candidate]);
    for CaseDelta {
        name,
        change: _,
        scores,
    } in cases
    {
        text(name);
        texts(scores.iter_mut().map(|(evaluator, _, _)| evaluator));
    }
    texts(means.iter_mut().map(
        |MeanDelta {
             name,
             baseline: _,
             candidate: _,
         }| name,
    ));
}

/// Redacts a dataset's case, its input and expected output as JSON;
/// whether anything was replaced.
pub(crate) fn dataset_case(case: &mut Case<Value, Value>) -> bool {
    let Case {
        name,
        input,
        expected,
        metadata,
        tags,
    } = case;
    let mut changed = text(name) | texts(tags.iter_mut()) | object(metadata) | json(input);
    if let Some(expected) = expected {
        changed |= json(expected);
    }
    changed
}

/// Redacts a case report: name, tags, metadata, input, expected output,
/// output, failure, scores (their evaluators' names too) and record;
/// whether its name was changed.
fn case(case: &mut CaseReport) -> bool {
    if !secrets::is_active() {
        return false;
    }
    let CaseReport {
        name,
        tags,
        metadata,
        input,
        expected,
        output,
        failure,
        scores,
        record,
    } = case;
    let renamed = text(name);
    texts(tags.iter_mut());
    object(metadata);
    json(input);
    for value in expected.iter_mut().chain(output.iter_mut()) {
        json(value);
    }
    if let Some(failure) = failure {
        self::failure(failure);
    }
    map_keys(scores);
    for scored in scores.values_mut() {
        match scored {
            Scored::Score(Score {
                value: _,
                passed: _,
                reason,
            }) => text(reason),
            Scored::Error(message) => text(message),
        };
    }
    self::record(record);
    renamed
}

/// Redacts a case's failure message.
pub(crate) fn failure(failure: &mut CaseFailure) {
    match failure {
        CaseFailure::Error(m) | CaseFailure::Timeout(m) | CaseFailure::Diverged(m) => text(m),
    };
}

/// Redacts a record, then checks it: a record that still holds a secret,
/// or cannot be serialized, is withheld (see the module's docs).
fn record(record: &mut CaseRecord) {
    if !secrets::is_active() {
        return;
    }
    let CaseRecord {
        exchanges,
        judge_exchanges,
        events,
        sessions,
        metrics:
            Metrics {
                latency_ms: _,
                model_calls: _,
                usage: _,
                cost: _,
                attempts: _,
            },
        withheld,
    } = record;
    for e in exchanges.iter_mut().chain(judge_exchanges.iter_mut()) {
        exchange(e);
    }
    for e in events.iter_mut() {
        event(e);
    }
    texts(sessions.iter_mut().chain(withheld.iter_mut()));
    let verdict = match serde_json::to_value(&*record) {
        Ok(json) if !holds_secret(&json) && !streams_hold_secret(record) => return,
        Ok(_) => WITHHELD_SECRET,
        Err(_) => WITHHELD_UNSERIALIZABLE,
    };
    *record = CaseRecord {
        metrics: std::mem::take(&mut record.metrics),
        withheld: Some(verdict.to_owned()),
        ..CaseRecord::default()
    };
}

fn event(event: &mut EventRecord) {
    let EventRecord {
        kind,
        path,
        step,
        signal,
        elapsed_ms: _,
        error,
        payload,
    } = event;
    texts([kind, path]);
    texts(
        step.iter_mut()
            .chain(signal.iter_mut())
            .chain(error.iter_mut()),
    );
    if let Some(payload) = payload {
        json(payload);
    }
}

fn exchange(exchange: &mut Exchange) {
    let Exchange { request, outcome } = exchange;
    self::request(request);
    match outcome {
        Outcome::Response(r) => response(r),
        Outcome::Stream { events, error } => {
            // A secret split across deltas is in no one delta: the text of
            // each run of deltas is redacted as a whole first.
            stream_texts(events);
            events.iter_mut().for_each(stream_event);
            if let Some(error) = error {
                model_error(error);
            }
        }
        Outcome::Error(error) => model_error(error),
    }
}

fn request(request: &mut ModelRequest) {
    // `ModelRequest` may gain fields (it is non-exhaustive); one this walk
    // does not know is caught by the check after it.
    let ModelRequest {
        messages,
        tools,
        tool_choice,
        stop_sequences,
        response_format,
        extra,
        ..
    } = request;
    for Message { role: _, content } in messages {
        content.iter_mut().for_each(part);
    }
    for ToolSpec {
        name,
        description,
        parameters,
    } in tools
    {
        texts([name, description]);
        json(parameters);
    }
    if let ToolChoice::Tool(name) = tool_choice {
        text(name);
    }
    texts(stop_sequences.iter_mut());
    if let Some(ResponseFormat { name, schema, .. }) = response_format {
        text(name);
        json(schema);
    }
    object(extra);
}

fn response(response: &mut ModelResponse) {
    let ModelResponse {
        content,
        usage: _,
        stop_reason,
    } = response;
    content.iter_mut().for_each(part);
    if let StopReason::Other(reason) = stop_reason {
        text(reason);
    }
}

fn part(part: &mut ContentPart) {
    match part {
        ContentPart::Text { text: t } => {
            text(t);
        }
        ContentPart::Image(ImageSource::Url { url }) => {
            text(url);
        }
        ContentPart::Image(ImageSource::Base64 { media_type, data }) => {
            texts([media_type, data]);
        }
        ContentPart::ToolCall(call) => tool_call(call),
        ContentPart::ToolResult(ToolResult {
            call_id,
            name,
            content,
            is_error: _,
        }) => {
            texts([call_id, name, content]);
        }
        ContentPart::Reasoning(r) => reasoning(r),
        // A kind of part this crate does not know: the check after the walk
        // withholds the record if it holds a secret.
        _ => {}
    }
}

fn tool_call(call: &mut ToolCall) {
    let ToolCall {
        id,
        name,
        arguments,
        signature,
    } = call;
    texts([id, name]);
    json(arguments);
    if let Some(ProviderSignature { provider, value }) = signature {
        texts([provider, value]);
    }
}

fn reasoning(reasoning: &mut Reasoning) {
    let Reasoning {
        provider,
        text: t,
        signature,
        redacted,
    } = reasoning;
    texts([provider, t]);
    texts(signature.iter_mut().chain(redacted.iter_mut()));
}

fn stream_event(event: &mut StreamEvent) {
    match event {
        StreamEvent::TextDelta { text: t } | StreamEvent::ReasoningDelta { text: t } => {
            text(t);
        }
        StreamEvent::ToolCallStart { index: _, id, name } => {
            texts([id, name]);
        }
        StreamEvent::ToolCallDelta {
            index: _,
            arguments,
        } => {
            text(arguments);
        }
        StreamEvent::ToolCallEnd { index: _, call } => tool_call(call),
        StreamEvent::ReasoningEnd { reasoning: r } => reasoning(r),
        StreamEvent::Finish {
            stop_reason: StopReason::Other(reason),
        } => {
            text(reason);
        }
        // Usage and the known stop reasons are no text; an event this crate
        // does not know is left to the check after the walk.
        _ => {}
    }
}

/// Which text a stream event adds to, for the deltas: the answer's text,
/// the reasoning's text, or a tool call's arguments (by its index).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    Text,
    Reasoning,
    Arguments(usize),
}

/// The run `event` adds a delta to, and a handle on that delta.
fn delta(event: &mut StreamEvent) -> Option<(Run, &mut String)> {
    match event {
        StreamEvent::TextDelta { text } => Some((Run::Text, text)),
        StreamEvent::ReasoningDelta { text } => Some((Run::Reasoning, text)),
        StreamEvent::ToolCallDelta { index, arguments } => {
            Some((Run::Arguments(*index), arguments))
        }
        _ => None,
    }
}

/// Whether `event` ends `run`, as the stream's reader
/// ([`StreamCollector`](harness::llm::StreamCollector)) parts it: a text
/// goes on until a tool call starts, a reasoning part ends, or a call that
/// was not started ends (`open_calls`: those started and not ended); a
/// reasoning text until its part ends; a tool call's arguments until its
/// own end, whatever comes between.
fn ends_run(event: &StreamEvent, run: Run, open_calls: &HashSet<usize>) -> bool {
    match (event, run) {
        (StreamEvent::ToolCallStart { .. } | StreamEvent::ReasoningEnd { .. }, Run::Text) => true,
        (StreamEvent::ToolCallEnd { index, .. }, Run::Text) => !open_calls.contains(index),
        (StreamEvent::ReasoningEnd { .. }, Run::Reasoning) => true,
        (StreamEvent::ToolCallEnd { index, .. }, Run::Arguments(i)) => *index == i,
        _ => false,
    }
}

/// The runs of deltas of `events` that make one text each: their events'
/// positions, in order.
fn delta_runs(events: &mut [StreamEvent]) -> Vec<Vec<usize>> {
    let mut runs: Vec<(Run, Vec<usize>, bool)> = Vec::new();
    let mut open_calls = HashSet::new();
    for (i, event) in events.iter_mut().enumerate() {
        for (run, _, open) in runs.iter_mut().filter(|(_, _, open)| *open) {
            if ends_run(event, *run, &open_calls) {
                *open = false;
            }
        }
        match event {
            StreamEvent::ToolCallStart { index, .. } => {
                open_calls.insert(*index);
            }
            StreamEvent::ToolCallEnd { index, .. } => {
                open_calls.remove(index);
            }
            _ => {}
        }
        if let Some((run, _)) = delta(event) {
            match runs.iter_mut().find(|(r, _, open)| *open && *r == run) {
                Some((_, positions, _)) => positions.push(i),
                None => runs.push((run, vec![i], true)),
            }
        }
    }
    runs.into_iter()
        .map(|(_, positions, _)| positions)
        .collect()
}

/// The texts the deltas of `events` make when joined, run by run (see
/// [`delta_runs`]): what a reader of the stream sees, where a secret split
/// across deltas is whole again.
pub(crate) fn stream_texts_joined(events: &[StreamEvent]) -> Vec<String> {
    let mut events = events.to_vec();
    delta_runs(&mut events)
        .into_iter()
        .map(|positions| {
            positions
                .into_iter()
                .filter_map(|i| delta(&mut events[i]).map(|(_, t)| t.clone()))
                .collect()
        })
        .collect()
}

/// Redacts the text of every run of deltas of `events` as a whole, and
/// splits the redacted text over the run's events again: the deltas a run
/// begins and ends with that redaction left as they were are kept, and the
/// rest of the redacted text goes to the first delta that changed (the
/// deltas after it up to the kept ones become empty). The deltas still
/// join into the run's (redacted) text, so a replay answers the same.
fn stream_texts(events: &mut [StreamEvent]) {
    for positions in delta_runs(events) {
        let pieces: Vec<String> = positions
            .iter()
            .filter_map(|&i| delta(&mut events[i]).map(|(_, t)| t.clone()))
            .collect();
        let joined: String = pieces.concat();
        let redacted = match shown(&joined) {
            Cow::Borrowed(_) => continue,
            Cow::Owned(redacted) => redacted,
        };
        let mut rest = redacted.as_str();
        let mut first = 0;
        while first + 1 < pieces.len() && rest.starts_with(pieces[first].as_str()) {
            rest = &rest[pieces[first].len()..];
            first += 1;
        }
        let mut last = pieces.len();
        while last > first + 1 && rest.ends_with(pieces[last - 1].as_str()) {
            rest = &rest[..rest.len() - pieces[last - 1].len()];
            last -= 1;
        }
        for (n, &i) in positions.iter().enumerate().take(last).skip(first) {
            if let Some((_, t)) = delta(&mut events[i]) {
                *t = if n == first {
                    rest.to_owned()
                } else {
                    String::new()
                };
            }
        }
    }
}

/// Whether a stream of `record`'s exchanges holds a secret across its
/// deltas (which the check of each string alone does not see).
fn streams_hold_secret(record: &CaseRecord) -> bool {
    record
        .exchanges
        .iter()
        .chain(&record.judge_exchanges)
        .any(|exchange| match &exchange.outcome {
            Outcome::Stream { events, .. } => stream_texts_joined(events)
                .iter()
                .any(|t| secrets::contains_secret(t)),
            _ => false,
        })
}

fn model_error(error: &mut ModelError) {
    // `redacted` is the error type's own walk over its messages.
    let placeholder = ModelError::Other {
        message: String::new(),
    };
    *error = std::mem::replace(error, placeholder).redacted();
    if let ModelError::Recording { path, .. } = error
        && let Some(shown) = path.to_str()
        && secrets::contains_secret(shown)
    {
        *path = owned(shown).into();
    }
}
