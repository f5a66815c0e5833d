//! Sessions with parallel branches, a fan-out and a sub-agent: the graph's
//! forks, joins and sub-agent boxes (declared and observed), each
//! record's task path, the branches' own changes, the steps under way by
//! path, and an interrupt inside the sub-agent answered through the API.

use crate::support::{TripWorld, eventually, get, post};
use serde_json::{Value, json};

fn edge<'a>(g: &'a Value, from: &str, to: &str) -> &'a Value {
    g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["from"] == from && e["to"] == to)
        .unwrap_or_else(|| panic!("no edge {from} -> {to}: {g}"))
}

fn node<'a>(g: &'a Value, id: &str) -> &'a Value {
    g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no node {id}: {g}"))
}

/// What both graphs, declared and observed, show of the trip so far.
fn assert_composed(g: &Value) {
    assert_eq!(edge(g, "plan", "left")["kind"], "branch", "{g}");
    assert_eq!(edge(g, "plan", "right")["kind"], "branch");
    let join = edge(g, "plan", "merge");
    assert_eq!(
        (&join["kind"], &join["label"]),
        (&json!("join"), &json!("join"))
    );
    let each = edge(g, "merge", "square");
    assert_eq!(
        (&each["kind"], &each["label"]),
        (&json!("each"), &json!("each"))
    );
    assert_eq!(edge(g, "merge", "sum")["kind"], "join");
    assert_eq!(edge(g, "left", "merge")["kind"], "next");
    assert_eq!(edge(g, "review", "review/note")["kind"], "enter");
    assert_eq!(edge(g, "review/note", "review/ask")["kind"], "next");
    assert_eq!(
        g["clusters"],
        json!([{"id": "review", "label": "review (sub-agent)"}])
    );
    assert_eq!(node(g, "review")["kind"], "sub-agent");
    let ask = node(g, "review/ask");
    assert_eq!(
        (&ask["label"], &ask["parent"]),
        (&json!("ask"), &json!("review"))
    );
    assert!(node(g, "plan").get("parent").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_fan_outs_and_sub_agents_are_drawn_declared_and_observed() {
    let w = TripWorld::new("composed-graph").await;
    let s = w.studio().await;
    let ro = w.read_only().await;
    for (studio, source) in [(&s, "declared"), (&ro, "observed")] {
        let d = get(studio, &format!("/api/sessions/{}", w.waiting))
            .await
            .json();
        let g = &d["graph"];
        assert_eq!(g["source"], source);
        assert_composed(g);
        // Every step the records show, in branches and the sub-agent too.
        assert_eq!(
            d["visited"],
            json!([
                "plan",
                "left",
                "right",
                "merge",
                "square",
                "sum",
                "review/note"
            ]),
            "{source}"
        );
        let taken: Vec<String> = d["taken"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{}>{}", e[0].as_str().unwrap(), e[1].as_str().unwrap()))
            .collect();
        for e in [
            "plan>left",
            "plan>right",
            "merge>square",
            "square>sum",
            "review>review/note",
        ] {
            assert!(taken.contains(&e.to_owned()), "{source} {e}: {taken:?}");
        }
        // Under way: the loop's step `review`, and inside its sub-agent
        // the step `ask`, waiting.
        assert_eq!(
            d["positions"],
            json!([
                {"path": "", "step": "review", "node": "review", "waiting": false},
                {"path": "review", "step": "ask", "node": "review/ask", "waiting": true},
            ]),
            "{source}"
        );
        assert_eq!(d["interrupt"]["path"], "review");
        assert_eq!(d["interrupt"]["step"], "ask");
        assert_eq!(d["interrupt_node"], "review/ask");
    }
    // Only the declared graph knows what is still ahead.
    let d = get(&s, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert_eq!(
        edge(&d["graph"], "review/ask", "review/$end")["kind"],
        "next"
    );
    assert_eq!(node(&d["graph"], "review/$end")["kind"], "end");
    let d = get(&ro, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert!(
        !d["graph"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == "publish"),
        "observed: nothing of what has not run"
    );
    ro.shutdown().await.unwrap();
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_record_has_its_path_and_branches_show_their_own_changes() {
    let w = TripWorld::new("composed-timeline").await;
    let s = w.studio().await;
    let t = get(&s, &format!("/api/sessions/{}/timeline", w.waiting))
        .await
        .json();
    assert_eq!(t["merged"], true);
    assert_eq!(
        t["paths"],
        json!([
            "", "left", "right", "square#0", "square#1", "square#2", "review"
        ])
    );
    let entries = t["entries"].as_array().unwrap();
    let rows: Vec<String> = entries
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["kind"].as_str().unwrap(),
                e["step"].as_str().unwrap(),
                e["path"].as_str().unwrap(),
                e["task"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "snapshot $start  root",
            "update plan  root",
            "fork plan  root",
            "branch left left branch",
            "branch right right branch",
            "join merge  root",
            "update merge  root",
            "fork merge  root",
            "branch square square#0 branch",
            "branch square square#1 branch",
            "branch square square#2 branch",
            "join sum  root",
            "update sum  root",
            "update note review sub-agent",
        ]
    );
    let at = |seq: u64| entries.iter().find(|e| e["seq"] == seq).unwrap();
    // A fork lists its branches (a fan-out's with their inputs) and its
    // join; a join, the branches it merged in order.
    assert_eq!(
        at(2)["branches"],
        json!([{"path": "left", "step": "left"}, {"path": "right", "step": "right"}])
    );
    assert_eq!(at(2)["join"], "merge");
    assert_eq!(
        at(7)["branches"],
        json!([
            {"path": "square#0", "step": "square", "input": 1},
            {"path": "square#1", "step": "square", "input": 2},
            {"path": "square#2", "step": "square", "input": 3},
        ])
    );
    assert_eq!(
        at(11)["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["path"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["square#0", "square#1", "square#2"]
    );
    // A branch's step changes the branch's own state: its total starts
    // at the fork's (1, from `right`), not at zero, and not at its
    // siblings'.
    assert_eq!(at(9)["changes_of"], "branch");
    assert_eq!(
        at(9)["changes"],
        json!([
            {"path": "/log", "op": "appended", "after": ["2²"]},
            {"path": "/total", "op": "changed", "before": 1, "after": 5},
        ])
    );
    assert_eq!(at(9)["node"], "square");
    // The run's state changes at the join, in branch order.
    assert_eq!(at(11)["changes_of"], "run");
    assert_eq!(
        at(11)["changes"],
        json!([
            {"path": "/log", "op": "appended", "after": ["1²", "2²", "3²"]},
            {"path": "/total", "op": "changed", "before": 1, "after": 15},
        ])
    );
    assert_eq!(at(7)["changes"], json!([]), "a fork changes nothing");
    // The sub-agent's record: its own update, its next step, no diff of
    // the run's state.
    let note = at(13);
    assert_eq!(note["sub_agent"], "review");
    assert_eq!(note["node"], "review/note");
    assert_eq!(note["next"], "ask");
    assert_eq!(note["value"], json!({"notes": ["checked total 15"]}));
    assert!(note["changes"].is_null());

    // The state at a branch's step: the branch's own, and the run's.
    let st = get(&s, &format!("/api/sessions/{}/state?seq=9", w.waiting))
        .await
        .json();
    assert_eq!(st["path"], "square#1");
    assert_eq!(st["task_state"]["total"], 5);
    assert_eq!(st["state"]["total"], 1);
    let st = get(&s, &format!("/api/sessions/{}/state?seq=13", w.waiting))
        .await
        .json();
    assert_eq!(
        (&st["path"], &st["sub_agent"]),
        (&json!("review"), &json!("review"))
    );
    assert!(st["task_state"].is_null());

    // Filtered by path: a task and what is inside it; empty: the root.
    for (path, expected) in [
        ("review", vec![13]),
        ("square%231", vec![9]),
        ("left", vec![3]),
        ("", vec![0, 1, 2, 5, 6, 7, 11, 12]),
        ("nowhere", vec![]),
    ] {
        let t = get(
            &s,
            &format!("/api/sessions/{}/timeline?path={path}", w.waiting),
        )
        .await
        .json();
        let seqs: Vec<u64> = t["entries"]
            .as_array()
            .unwrap_or_else(|| panic!("{path}: {t}"))
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, expected, "{path}");
    }
    for bad in ["a//b", "%2Freview", "review%2F", "%20"] {
        let r = get(
            &s,
            &format!("/api/sessions/{}/timeline?path={bad}", w.waiting),
        )
        .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.error().contains("task's path"), "{bad}: {}", r.body);
    }
    let r = get(&s, &format!("/api/sessions/{}/timeline?task=x", w.waiting)).await;
    assert_eq!(r.status, 400, "{}", r.body);

    // Read-only: the same paths, the records as stored.
    let ro = w.read_only().await;
    let t = get(&ro, &format!("/api/sessions/{}/timeline", w.waiting))
        .await
        .json();
    assert_eq!(t["merged"], false);
    assert_eq!(t["entries"][9]["path"], "square#1");
    assert_eq!(t["entries"][9]["value"], json!({"log": ["2²"], "total": 4}));
    assert_eq!(t["entries"][13]["node"], "review/note");
    ro.shutdown().await.unwrap();
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_inside_a_sub_agent_is_answered_by_its_path_and_the_run_completes() {
    let w = TripWorld::new("composed-answer").await;
    let s = w.studio().await;
    let d = get(&s, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    // The answer declared for `review/ask` is the sub-agent's step's.
    assert_eq!(d["answer_shape"]["type"], "Verdict");
    let path = format!("/api/sessions/{}/answer", w.waiting);
    for bad in [json!(true), json!({"ok": "yes"}), json!({})] {
        let r = post(
            &s,
            &path,
            &json!({"interrupt": w.interrupt, "answer": bad}).to_string(),
        )
        .await;
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
        assert!(
            r.error().contains("review/ask") && r.error().contains("Verdict"),
            "{}",
            r.body
        );
    }
    let r = post(
        &s,
        &path,
        &json!({"interrupt": w.interrupt, "answer": {"ok": true}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let d = eventually("the run to end", || {
        let s = &s;
        let id = w.waiting.clone();
        async move {
            let d = get(s, &format!("/api/sessions/{id}")).await.json();
            (d["summary"]["phase"] == "done").then_some(d)
        }
    })
    .await;
    assert_eq!(d["positions"], json!([]));
    assert!(
        d["visited"]
            .as_array()
            .unwrap()
            .contains(&json!("review/ask"))
    );
    let t = get(&s, &format!("/api/sessions/{}/timeline", w.waiting))
        .await
        .json();
    let tail: Vec<(Value, Value, Value)> = t["entries"].as_array().unwrap()[13..]
        .iter()
        .map(|e| (e["step"].clone(), e["path"].clone(), e["signal"].clone()))
        .collect();
    assert_eq!(
        tail,
        [
            (json!("note"), json!("review"), Value::Null),
            (json!("ask"), json!("review"), json!("$end")),
            (json!("review"), json!(""), Value::Null),
            (json!("publish"), json!(""), Value::Null),
        ]
    );
    let st = get(&s, &format!("/api/sessions/{}/state", w.waiting))
        .await
        .json();
    assert_eq!(st["state"]["verdict"], "Some(true) ($end)");
    assert_eq!(st["state"]["total"], 15);
    // Observed, once done: the sub-agent's end, and the loop's.
    let ro = w.read_only().await;
    let d = get(&ro, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert_eq!(
        edge(&d["graph"], "review/ask", "review/$end")["kind"],
        "next"
    );
    assert_eq!(edge(&d["graph"], "review", "publish")["kind"], "next");
    assert_eq!(edge(&d["graph"], "publish", "$end")["kind"], "next");
    ro.shutdown().await.unwrap();
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_inside_a_branch_shows_its_path_and_is_answered_there() {
    use crate::support::{TempDir, Trip, TripUpdate, temp_dir};
    use harness::session::SessionStore;
    use harness::{Cx, Harness, create_agent};
    use harness_stores::SledStore;
    use std::sync::Arc;

    let dir = temp_dir("composed-branch");
    let _keep = TempDir(dir.clone());
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let h = Harness::<Trip>::builder()
        .step("plan")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["plan".into()])))
        .fork(["ask", "other"])
        .join("join")
        .step("ask")
        .run(async |cx: Cx<()>| {
            let name: String = cx.interrupt("name?")?;
            Ok(TripUpdate::new().log(vec![format!("answer {name}")]))
        })
        .writes(["log"])
        .next("join")
        .step("other")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["other".into()])))
        .writes(["log"])
        .next("join")
        .step("join")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["join".into()])))
        .end()
        .start("plan")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let agent = create_agent("asks", &h);
    let out = agent.run(Trip::default()).await.unwrap();
    let interrupt = out.interrupt.unwrap();
    let id = out.session_id.to_string();
    let s = harness_studio::Studio::for_agent(&agent, &h, Arc::clone(&store))
        .unwrap()
        .expect_answer::<String>("ask")
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let d = get(&s, &format!("/api/sessions/{id}")).await.json();
    // Only the branch waits: the loop waits for its branches, `other` has
    // reached the join.
    assert_eq!(
        d["positions"],
        json!([{"path": "ask", "step": "ask", "node": "ask", "waiting": true}])
    );
    assert_eq!(d["interrupt"]["path"], "ask");
    assert_eq!(d["interrupt_node"], "ask");
    assert!(
        d["answer_shape"]["type"]
            .as_str()
            .unwrap()
            .contains("String")
    );
    let path = format!("/api/sessions/{id}/answer");
    let r = post(
        &s,
        &path,
        &json!({"interrupt": interrupt.id, "answer": 42}).to_string(),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = post(
        &s,
        &path,
        &json!({"interrupt": interrupt.id, "answer": "Ada"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let st = eventually("the run to end", || {
        let s = &s;
        let id = id.clone();
        async move {
            let d = get(s, &format!("/api/sessions/{id}")).await.json();
            (d["summary"]["phase"] == "done").then_some(())?;
            Some(get(s, &format!("/api/sessions/{id}/state")).await.json())
        }
    })
    .await;
    assert_eq!(
        st["state"]["log"],
        json!(["plan", "answer Ada", "other", "join"])
    );
    let t = get(&s, &format!("/api/sessions/{id}/timeline?path=ask"))
        .await
        .json();
    let ask: Vec<_> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["step"].clone(), e["changes"].clone()))
        .collect();
    assert_eq!(
        ask,
        [(
            json!("ask"),
            json!([{"path": "/log", "op": "appended", "after": ["answer Ada"]}])
        )]
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_inside_a_branch_is_found_by_its_path_and_answered() {
    use crate::support::{Check, TempDir, Trip, TripUpdate, Verdict, checker, temp_dir};
    use harness::session::SessionStore;
    use harness::{Harness, SubAgent, create_agent};
    use harness_stores::SledStore;
    use std::sync::Arc;

    let dir = temp_dir("composed-sub-in-branch");
    let _keep = TempDir(dir.clone());
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    // The branch `study` starts at the step `study`, which runs the
    // sub-agent: its path is `study/study`.
    let h = Harness::<Trip>::builder()
        .step("plan")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["plan".into()])))
        .fork(["study", "other"])
        .join("write")
        .step("study")
        .sub_agent(SubAgent::new(
            &checker(),
            |_: &Trip| Check {
                question: "q".into(),
                notes: vec![],
                ok: None,
            },
            |_: &Trip, done| TripUpdate::new().log(vec![format!("ok {:?}", done.state.ok)]),
        ))
        .writes(["log"])
        .next("write")
        .step("other")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["other".into()])))
        .writes(["log"])
        .next("write")
        .step("write")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["write".into()])))
        .end()
        .start("plan")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let agent = create_agent("studies", &h);
    let out = agent.run(Trip::default()).await.unwrap();
    let interrupt = out.interrupt.unwrap();
    assert_eq!(interrupt.path.as_str(), "study/study");
    let id = out.session_id.to_string();
    let s = harness_studio::Studio::for_agent(&agent, &h, Arc::clone(&store))
        .unwrap()
        .expect_answer::<Verdict>("study/ask")
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let ro = harness_studio::Studio::read_only(Arc::clone(&store))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    for studio in [&s, &ro] {
        let d = get(studio, &format!("/api/sessions/{id}")).await.json();
        assert_eq!(
            d["positions"],
            json!([
                {"path": "study", "step": "study", "node": "study", "waiting": false},
                {"path": "study/study", "step": "ask", "node": "study/ask", "waiting": true},
            ]),
            "{}",
            d["graph"]["source"]
        );
        assert_eq!(d["interrupt_node"], "study/ask");
        assert_eq!(edge(&d["graph"], "plan", "study")["kind"], "branch");
        assert_eq!(edge(&d["graph"], "study", "study/note")["kind"], "enter");
        let t = get(studio, &format!("/api/sessions/{id}/timeline?path=study"))
            .await
            .json();
        let rows: Vec<(Value, Value, Value)> = t["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["step"].clone(), e["path"].clone(), e["node"].clone()))
            .collect();
        assert_eq!(
            rows,
            [(json!("note"), json!("study/study"), json!("study/note"))]
        );
    }
    ro.shutdown().await.unwrap();
    let d = get(&s, &format!("/api/sessions/{id}")).await.json();
    assert_eq!(d["answer_shape"]["type"], "Verdict");
    let r = post(
        &s,
        &format!("/api/sessions/{id}/answer"),
        &json!({"interrupt": interrupt.id, "answer": {"ok": false}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let st = eventually("the run to end", || {
        let s = &s;
        let id = id.clone();
        async move {
            let d = get(s, &format!("/api/sessions/{id}")).await.json();
            (d["summary"]["phase"] == "done").then_some(())?;
            Some(get(s, &format!("/api/sessions/{id}/state")).await.json())
        }
    })
    .await;
    assert_eq!(
        st["state"]["log"],
        json!(["plan", "ok Some(false)", "other", "write"])
    );
    s.shutdown().await.unwrap();
}
