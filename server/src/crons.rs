//! Crons: runs on a schedule, on a thread or each on a new thread.
//!
//! A cron is a record in the session store (beside the thread records).
//! Each server's scheduler looks at the crons every 250 ms (their ids
//! alone, `app::ids_under`, then each record); a tick is fired
//! by the one server that moves the cron's next time forward, with a
//! compare-and-set on the record: servers sharing a store fire each tick
//! once.

use crate::app::{Body, Path, Shared};
use crate::error::ApiError;
use crate::schedule::Schedule;
use crate::time::iso;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use harness::SessionId;
use harness::session::{
    Saved, StoreError, load_saved, load_value, now_millis, save_commit, save_value,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::time::Duration;

const OWNER: &str = "harness-server";
const PREFIX: &str = "harness-server/cron/";

fn key(id: &str) -> SessionId {
    SessionId::from(format!("{PREFIX}{id}"))
}

/// A cron as the store keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CronRecord {
    cron_id: String,
    assistant_id: String,
    thread_id: Option<String>,
    schedule: String,
    input: Option<Value>,
    metadata: Map<String, Value>,
    enabled: bool,
    /// No tick after this (ms since the epoch).
    end_time: Option<u64>,
    /// The next tick (ms since the epoch); `None` when there is none.
    next_run: Option<u64>,
    /// For a cron without a thread: whether each run's new thread is
    /// deleted once the run settles.
    on_run_completed: String,
    created_at: u64,
    updated_at: u64,
    #[serde(default)]
    deleted: bool,
    /// The IANA time zone the schedule reads in; UTC when `None`.
    #[serde(default)]
    timezone: Option<String>,
    /// The other fields of each tick's run body (`config`, `stream_mode`,
    /// `durability`, ...), as given and checked when the cron was made.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    run: Map<String, Value>,
}

/// The IANA time zone `name` (`timezone`), or a 422 naming the field.
fn read_zone(name: &str) -> Result<jiff::tz::TimeZone, ApiError> {
    if name.trim().is_empty() {
        return Err(ApiError::unprocessable(
            "timezone",
            "`timezone` is empty: give an IANA time zone such as `Europe/Paris`, or leave it \
             out for UTC",
        ));
    }
    jiff::tz::TimeZone::get(name).map_err(|e| {
        ApiError::unprocessable(
            "timezone",
            format!(
                "`{name}` is not an IANA time zone this server knows (such as `Europe/Paris`): {e}"
            ),
        )
    })
}

impl CronRecord {
    fn to_json(&self) -> Value {
        // The body of each tick's run, as LangGraph shows it.
        let mut payload = self.run.clone();
        payload.insert("input".into(), self.input.clone().unwrap_or(Value::Null));
        json!({
            "cron_id": self.cron_id,
            "assistant_id": self.assistant_id,
            "thread_id": self.thread_id,
            "schedule": self.schedule,
            "timezone": self.timezone.as_deref().unwrap_or("UTC"),
            "payload": payload,
            "metadata": self.metadata,
            "enabled": self.enabled,
            "end_time": self.end_time.map(iso),
            "next_run_date": self.next_run.map(iso),
            "on_run_completed": self.on_run_completed,
            "user_id": null,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        })
    }

    fn next_after(&self, now: u64) -> Option<u64> {
        let schedule = Schedule::parse(&self.schedule).ok()?;
        let next = match &self.timezone {
            None => schedule.next_after(now)?,
            Some(name) => match jiff::tz::TimeZone::get(name) {
                Ok(zone) => schedule.next_after_in(now, &zone)?,
                Err(e) => {
                    tracing::warn!(cron = %self.cron_id, zone = %name, error = %e,
                        "a cron's time zone is no longer known: it fires no more");
                    return None;
                }
            },
        };
        match self.end_time {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }
}

async fn save(app: &Shared, cron: &CronRecord) -> Result<(), ApiError> {
    let value = serde_json::to_value(cron).map_err(|e| ApiError::Internal(e.to_string()))?;
    save_value(&*app.store, OWNER, &key(&cron.cron_id), value).await?;
    Ok(())
}

async fn load(app: &Shared, id: &str) -> Result<Option<CronRecord>, ApiError> {
    let Some(value) = load_value(&*app.store, OWNER, &key(id)).await? else {
        return Ok(None);
    };
    let cron: CronRecord = serde_json::from_value(value)
        .map_err(|e| ApiError::Internal(format!("the record of cron {id} does not read: {e}")))?;
    Ok((!cron.deleted).then_some(cron))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CreateCron {
    assistant_id: String,
    schedule: String,
    input: Option<Value>,
    metadata: Option<Map<String, Value>>,
    enabled: Option<bool>,
    end_time: Option<String>,
    timezone: Option<String>,
    on_run_completed: Option<String>,
    /// Every other field: the body of each tick's run, read and checked as
    /// `runs.create` reads and checks a run's (what it refuses, a cron
    /// refuses; what it honours, each tick's run is given).
    #[serde(flatten)]
    run: Map<String, Value>,
}

/// Whether a value asks for something: present, and not null, false or
/// empty.
fn given(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// The run fields a cron refuses besides those a run refuses: what only a
/// client that follows its run could use, and what the cron sets itself.
fn refuse_for_crons(run: &Map<String, Value>) -> Result<(), ApiError> {
    for field in ["interrupt_before", "interrupt_after"] {
        if run.get(field).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::unprocessable(
                field,
                format!(
                    "`{field}` is not supported for crons: a breakpoint pauses a run for a \
                     client that follows it, and a cron's runs have none; give it to a run"
                ),
            ));
        }
    }
    if run.get("webhook").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::unprocessable(
            "webhook",
            "a cron's runs do not call webhooks on this server yet",
        ));
    }
    match run.get("multitask_strategy") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "enqueue" => {}
        Some(_) => {
            return Err(ApiError::unprocessable(
                "multitask_strategy",
                "a cron's runs are queued behind the thread's runs (`enqueue`)",
            ));
        }
    }
    let set_by_the_cron = [
        (
            "thread_id",
            "a cron's thread is the one of its path (`/threads/{thread_id}/runs/crons`); \
             `/runs/crons` runs each tick on a new thread",
        ),
        (
            "on_completion",
            "a cron says what becomes of each tick's thread with `on_run_completed`",
        ),
    ];
    for (field, why) in set_by_the_cron {
        // Any `thread_id` at all (an empty one would make each tick fail).
        let asked = match field {
            "thread_id" => run.get(field).is_some_and(|v| !v.is_null()),
            _ => given(run.get(field)),
        };
        if asked {
            return Err(ApiError::unprocessable(
                field,
                format!("`{field}` is not a cron field: {why}"),
            ));
        }
    }
    Ok(())
}

/// The body of a tick's run: the cron's run fields, its agent and input,
/// the cron named in the run's metadata, queued behind the thread's runs.
fn run_body(
    run: &Map<String, Value>,
    assistant_id: &str,
    input: Option<&Value>,
    cron_id: Option<&str>,
    on_completion: Option<&str>,
) -> Value {
    let mut body = run.clone();
    body.insert("assistant_id".into(), json!(assistant_id));
    body.insert("input".into(), input.cloned().unwrap_or(Value::Null));
    if let Some(id) = cron_id {
        body.insert("metadata".into(), json!({ "cron_id": id }));
    }
    body.insert("multitask_strategy".into(), json!("enqueue"));
    if let Some(c) = on_completion {
        body.insert("on_completion".into(), json!(c));
    }
    Value::Object(body)
}

/// An RFC 3339 time with its offset (`...Z`, `...+00:00`, `...+02:00`) as
/// ms since the epoch; a time before 1970 or past 9999, a field out of its
/// range or anything else is a 400 naming `field`.
fn read_time(text: &str, field: &str) -> Result<u64, ApiError> {
    let bad = |why: String| {
        ApiError::syntax(
            field,
            format!("`{text}` is not a time with its offset like 2030-01-31T12:00:00Z: {why}"),
        )
    };
    let time: jiff::Timestamp = text.parse().map_err(|e: jiff::Error| bad(e.to_string()))?;
    u64::try_from(time.as_millisecond()).map_err(|_| bad("it is before 1970".into()))
}

async fn create(app: &Shared, thread: Option<String>, body: CreateCron) -> Result<Value, ApiError> {
    app.agent(&body.assistant_id)?;
    Schedule::parse(&body.schedule).map_err(|e| ApiError::syntax("schedule", e))?;
    let timezone = match body.timezone.as_deref() {
        None => None,
        Some(name) => {
            let zone = read_zone(name)?;
            // Kept by its IANA name (`utc` reads as `UTC`).
            Some(zone.iana_name().unwrap_or(name).to_string())
        }
    };
    refuse_for_crons(&body.run)?;
    let on_run_completed = body.on_run_completed.unwrap_or_else(|| "delete".into());
    if !matches!(on_run_completed.as_str(), "delete" | "keep") {
        return Err(ApiError::bad(
            "on_run_completed",
            format!("`{on_run_completed}` is neither `delete` nor `keep`"),
        ));
    }
    // The run each tick makes, checked as `runs.create` checks it (its
    // fields named as in the cron's body): a field a run refuses is
    // refused here, never dropped.
    let mut tick = run_body(
        &body.run,
        &body.assistant_id,
        body.input.as_ref(),
        None,
        thread.is_none().then_some(on_run_completed.as_str()),
    );
    if let Some(m) = &body.metadata {
        tick["metadata"] = Value::Object(m.clone());
    }
    let tick = crate::app::parse(tick.to_string().as_bytes())?;
    crate::runs::check_body(app, tick, thread.is_none())?;
    if let Some(t) = &thread
        && crate::threads::find(app, t).await?.is_none()
    {
        return Err(ApiError::not_found("thread", t.clone()));
    }
    let end_time = body
        .end_time
        .as_deref()
        .map(|t| read_time(t, "end_time"))
        .transpose()?;
    let now = now_millis();
    let mut cron = CronRecord {
        cron_id: uuid::Uuid::new_v4().to_string(),
        assistant_id: body.assistant_id,
        thread_id: thread,
        schedule: body.schedule,
        input: body.input,
        metadata: body.metadata.unwrap_or_default(),
        enabled: body.enabled.unwrap_or(true),
        end_time,
        next_run: None,
        on_run_completed,
        created_at: now,
        updated_at: now,
        deleted: false,
        timezone,
        run: body.run,
    };
    cron.next_run = cron.next_after(now);
    save(app, &cron).await?;
    Ok(cron.to_json())
}

pub(crate) async fn create_for_thread(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<CreateCron>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(create(&app, Some(thread), body).await?))
}

pub(crate) async fn create_stateless(
    State(app): State<Shared>,
    Body(body): Body<CreateCron>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(create(&app, None, body).await?))
}

pub(crate) async fn delete(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut cron = load(&app, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("cron", id.clone()))?;
    cron.deleted = true;
    cron.enabled = false;
    cron.updated_at = now_millis();
    save(&app, &cron).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Deletes the crons of thread `thread`, as LangGraph does with the thread:
/// none fires on a thread created again under its id.
pub(crate) async fn delete_for_thread(app: &Shared, thread: &str) -> Result<(), ApiError> {
    for mut cron in all(app).await? {
        if cron.deleted || cron.thread_id.as_deref() != Some(thread) {
            continue;
        }
        cron.deleted = true;
        cron.enabled = false;
        cron.updated_at = now_millis();
        save(app, &cron).await?;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
pub(crate) struct SearchCrons {
    assistant_id: Option<String>,
    thread_id: Option<String>,
    enabled: Option<bool>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// Every cron in the store.
async fn all(app: &Shared) -> Result<Vec<CronRecord>, ApiError> {
    let mut out = Vec::new();
    for id in crate::app::ids_under(app.store.as_ref(), PREFIX).await? {
        if let Some(cron) = load(app, &id).await? {
            out.push(cron);
        }
    }
    out.sort_by_key(|c| c.created_at);
    Ok(out)
}

pub(crate) async fn search(
    State(app): State<Shared>,
    Body(body): Body<SearchCrons>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let list = all(&app)
        .await?
        .into_iter()
        .filter(|c| {
            body.assistant_id
                .as_ref()
                .is_none_or(|a| *a == c.assistant_id)
        })
        .filter(|c| body.thread_id.is_none() || body.thread_id == c.thread_id)
        .filter(|c| body.enabled.is_none_or(|e| e == c.enabled))
        .skip(body.offset.unwrap_or(0))
        .take(body.limit.unwrap_or(10).min(1000))
        .map(|c| c.to_json())
        .collect();
    Ok(Json(list))
}

/// Moves cron `id`'s next time past `now` if it is due, with a
/// compare-and-set on its record; the cron as it was when this server won
/// the tick, or `None` (not due, or another server fired it).
async fn claim(app: &Shared, id: &str, now: u64) -> Result<Option<CronRecord>, ApiError> {
    let session = key(id);
    let Some(Saved { head, value, .. }) = load_saved(&*app.store, OWNER, &session).await? else {
        return Ok(None);
    };
    let due: CronRecord = serde_json::from_value(value)
        .map_err(|e| ApiError::Internal(format!("the record of cron {id} does not read: {e}")))?;
    if due.deleted || !due.enabled || due.next_run.is_none_or(|t| t > now) {
        return Ok(None);
    }
    let mut moved = due.clone();
    moved.next_run = moved.next_after(now);
    moved.updated_at = now;
    let value = serde_json::to_value(&moved).map_err(|e| ApiError::Internal(e.to_string()))?;
    // Saved on the condition that nobody wrote the record since it was read.
    let commit = save_commit(Some(&head), OWNER, &session, value);
    match app.store.commit(&commit).await {
        Ok(()) => Ok(Some(due)),
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Starts the run of a tick.
async fn fire(app: &Shared, cron: &CronRecord) -> Result<(), ApiError> {
    let body = run_body(
        &cron.run,
        &cron.assistant_id,
        cron.input.as_ref(),
        Some(&cron.cron_id),
        cron.thread_id
            .is_none()
            .then_some(cron.on_run_completed.as_str()),
    );
    let body = crate::app::parse(body.to_string().as_bytes())?;
    crate::runs::start_for_cron(app, cron.thread_id.clone(), body).await
}

/// Fires the due ticks of every cron, until the server stops.
pub(crate) async fn scheduler(app: Shared) {
    let mut stopping = app.stopping.subscribe();
    loop {
        let now = now_millis();
        match all(&app).await {
            Ok(crons) => {
                for cron in crons
                    .iter()
                    .filter(|c| c.enabled && c.next_run.is_some_and(|t| t <= now))
                {
                    match claim(&app, &cron.cron_id, now).await {
                        Ok(Some(due)) => {
                            if let Err(e) = fire(&app, &due).await {
                                tracing::warn!(cron = %due.cron_id, error = %e, "a cron's run could not start");
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(cron = %cron.cron_id, error = %e, "cannot claim a cron's tick")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list the crons"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_time;
    use crate::error::ApiError;

    #[test]
    fn end_times_read_with_their_offset_and_bad_ones_refused() {
        assert_eq!(
            read_time("2024-02-29T12:34:56.789Z", "t").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(read_time("1970-01-01T00:00:00+00:00", "t").unwrap(), 0);
        assert_eq!(
            read_time("2024-02-29T14:34:56.789+02:00", "t").unwrap(),
            1_709_210_096_789
        );
        for bad in [
            "2024-02-29",
            "2024-02-29T12:34:56",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-01T24:00:01Z",
            "2024-01-01T99:99:99Z",
            "2030-01-01T00:00:00.\u{e9}\u{e9}Z",
            "2030-01-01T99999999999999999:00:00Z",
            "9000000000000000000-01-01T00:00:00Z",
            "-9000000000000000000-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "\u{1f600}",
            "",
            "x",
        ] {
            match read_time(bad, "end_time") {
                Err(ApiError::BadRequest { field, .. }) => assert_eq!(field, "end_time"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
