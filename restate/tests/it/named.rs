//! Two agents in one deployment, each a virtual object of its own name
//! (`agent_object!`), served in this process on the real server.

use std::sync::Arc;
use std::time::Duration;

use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use harness_restate::{
    Admin, AgentClient, Durable, Ingress, Reply, RestateError, RestateSessionReader, agent_object,
};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::var;

agent_object!(
    /// The orders agent.
    struct Orders = "HarnessTestOrders";
);
agent_object!(
    /// The refunds agent.
    struct Refunds = "HarnessTestRefunds"
);

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    #[field(reduce = append)]
    log: Vec<String>,
}

/// An agent whose one step journals an effect naming `what`.
fn desk(durable: &Durable, what: &'static str) -> harness::Agent<Desk> {
    let harness = Harness::<Desk>::builder()
        .step("work")
        .run(move |_: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx
                .once("work", async move { format!("{what} done") })
                .await?;
            Ok(DeskUpdate::new().log(vec![done]))
        })
        .end()
        .start("work")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent(what, &harness)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_are_served_side_by_side_as_objects_of_their_own_names() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let durable = Durable::new();
    let endpoint = Endpoint::builder()
        .bind(Orders(durable.object(desk(&durable, "order")).unwrap()))
        .bind(Refunds(durable.object(desk(&durable, "refund")).unwrap()))
        .build();
    let (mut services, port) = crate::serve_registered(&admin, endpoint).await;
    services.sort();
    assert_eq!(services, ["HarnessTestOrders", "HarnessTestRefunds"]);

    let orders = AgentClient::new(ingress.clone()).object("HarnessTestOrders");
    let refunds = AgentClient::new(ingress).object("HarnessTestRefunds");
    let session = SessionId::from(format!("named-{}-{port}", std::process::id()));
    // The same session id under each object: two sessions, one per agent.
    for (client, what) in [(&orders, "order"), (&refunds, "refund"), (&orders, "order")] {
        let reply = client.run(&session, &json!({})).await.unwrap();
        let Reply::Completed { state, .. } = &reply else {
            panic!("{reply:?}")
        };
        assert_eq!(
            state["log"].as_array().unwrap().last().unwrap(),
            &json!(format!("{what} done"))
        );
    }
    let agent_of = |client: &AgentClient| {
        let client = client.clone();
        let session = session.clone();
        async move {
            let snapshot = client.session(&session).await.unwrap().unwrap();
            snapshot.head.agent_id.clone()
        }
    };
    assert_eq!(agent_of(&orders).await, "order");
    assert_eq!(agent_of(&refunds).await, "refund");

    // Each object's sessions, read from the admin API, are its own.
    let reader = RestateSessionReader::new(admin.clone()).object("HarnessTestOrders");
    assert!(reader.sessions().await.unwrap().contains(&session));
    let head = reader.load(&session).await.unwrap().unwrap();
    assert_eq!(head.agent_id, "order");
    let checkpoints = reader.checkpoints(&session, 0).await.unwrap();
    let refund_checkpoints = RestateSessionReader::new(admin.clone())
        .object("HarnessTestRefunds")
        .checkpoints(&session, 0)
        .await
        .unwrap();
    assert!(
        checkpoints.len() > refund_checkpoints.len(),
        "two runs of orders, one of refunds: {} and {}",
        checkpoints.len(),
        refund_checkpoints.len()
    );
    // `HarnessAgent`'s sessions do not include it (on a server that has
    // `HarnessAgent`: another test registers it).
    match RestateSessionReader::new(admin.clone()).sessions().await {
        Ok(sessions) => assert!(!sessions.contains(&session)),
        Err(e) => assert!(
            e.to_string()
                .contains("no virtual object `HarnessAgent` is registered"),
            "{e}"
        ),
    }

    // A name the server has no virtual object for (a typo): not an object
    // without sessions, but an error naming it and those the server has.
    let typo = RestateSessionReader::new(admin.clone()).object("HarnessTestOrdres");
    let e = typo.snapshot(&session).await.unwrap_err();
    let RestateError::NoSuchObject {
        url,
        object,
        objects,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(url, admin.base());
    assert_eq!(object, "HarnessTestOrdres");
    assert_eq!(objects, &admin.virtual_objects().await.unwrap());
    for named in ["HarnessTestOrders", "HarnessTestRefunds"] {
        assert!(objects.iter().any(|o| o == named), "{objects:?}");
        assert!(e.to_string().contains(&format!("`{named}`")), "{e}");
    }
    for read in [
        typo.sessions().await.map(drop),
        typo.load(&session).await.map(drop),
        typo.checkpoints(&session, 0).await.map(drop),
    ] {
        let e = read.unwrap_err().to_string();
        assert!(
            e.contains("no virtual object `HarnessTestOrdres` is registered")
                && e.contains("`HarnessTestOrders`"),
            "{e}"
        );
    }
}
