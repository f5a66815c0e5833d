//! Which failures of an invocation [`Invocation::divergence`] calls a
//! divergence: Restate's journal mismatch (its code `RT0016`, its message
//! `[570 Journal mismatch] …`), and nothing else whatever its text holds.

use harness_restate::Invocation;

fn failed(text: &str, code: Option<&str>) -> Invocation {
    Invocation {
        id: "inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n".to_owned(),
        status: "backing-off".to_owned(),
        retry_count: 3,
        last_failure: Some(text.to_owned()),
        last_failure_code: code.map(str::to_owned),
        failed_call: None,
        journaled_call: None,
    }
}

#[test]
fn only_a_journal_mismatch_is_a_divergence() {
    // As the server reports them (RT0016): a single effect asked for in
    // another's place; a round of other effects; a replay that asks for
    // fewer effects than the journal holds (Restate names the commands'
    // types only).
    let mismatches = [
        "[570 Journal mismatch] Found a mismatch between the code paths taken during the \
         previous execution and the paths taken during this execution.\nThis typically happens \
         when some parts of the code are non-deterministic.\n- The mismatch happened while \
         executing 'run' (index '5')\n- Difference:\n   name: work#2.1:effect-0 != \
         work#2.1:v2-effect-0",
        "[570 Journal mismatch] Found a mismatch between the code paths taken during the \
         previous execution and the paths taken during this execution.\n- The mismatch happened \
         while executing 'run' (index '3')\n- Difference:\n   name: round of 3: \
         part#0/part#1.1:part-0-effect-0 … part#2/part#1.1:part-2-effect-0 #fd011e992ea2 != \
         round of 3: part#0/part#1.1:part-0-effect-0 … part#2/part#1.1:part-2-effect-0 \
         #e6f7d9c48e2d",
        "[570 Journal mismatch] Found a mismatch between the code paths taken during the \
         previous execution and the paths taken during this execution.\n - The previous \
         execution ran and recorded the following: 'run' (index '3')\n - The current execution \
         attempts to perform the following: 'set state'",
    ];
    for text in mismatches {
        assert_eq!(failed(text, Some("RT0016")).divergence(), Some(text));
        // A server that gives no code: the message's own.
        assert_eq!(failed(text, None).divergence(), Some(text));
    }
    // The code alone names it, whatever the message's wording.
    let reworded = "[570] journal differs at command 4";
    assert_eq!(
        failed(reworded, Some("RT0016")).divergence(),
        Some(reworded)
    );

    // Failures that hold `570` or `mismatch` and are none.
    let others = [
        (
            "[500 Internal] message encoding error: hit message size limit: 34557025 >= \
             33554432",
            Some("RT0003"),
        ),
        (
            "[500 Internal] step `pay` failed: the charge of 570 EUR was refused",
            Some("RT0007"),
        ),
        (
            "[500] tool `lookup` failed: schema mismatch: expected an object",
            None,
        ),
        ("effect big returned 35700000 bytes", None),
        ("Journal mismatch in a downstream service's answer", None),
        ("[5700 Other] unknown", None),
        (
            "[500 Internal] [570 Journal mismatch] quoted by a step",
            None,
        ),
    ];
    for (text, code) in others {
        assert_eq!(failed(text, code).divergence(), None, "{text}");
    }
    // No failure at all.
    let mut ok = failed("", None);
    ok.last_failure = None;
    ok.last_failure_code = Some("RT0016".to_owned());
    assert_eq!(ok.divergence(), None);
}
