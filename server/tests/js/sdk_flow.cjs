// The real JavaScript `@langchain/langgraph-sdk`, unmodified, against
// harness-server: one streaming-and-interrupt flow.
//
// Usage: NODE_PATH=<node_modules with the SDK> node sdk_flow.cjs URL
//
// Streams a run of the `ticket` agent (draft -> review, which asks a human)
// to its interrupt, reads the thread's state, resumes with a Command, and
// prints one JSON line of what it saw.
const { Client } = require("@langchain/langgraph-sdk");

async function main() {
  const client = new Client({ apiUrl: process.argv[2] });
  const thread = await client.threads.create({ metadata: { from: "js" } });
  const events = [];
  let interrupt = null;
  for await (const chunk of client.runs.stream(thread.thread_id, "ticket", {
    input: { log: ["from js"] },
    streamMode: ["values", "updates"],
  })) {
    events.push(chunk.event);
    if (chunk.event === "updates" && chunk.data.__interrupt__) {
      interrupt = chunk.data.__interrupt__[0];
    }
  }
  const paused = await client.threads.getState(thread.thread_id);
  const resumed = [];
  for await (const chunk of client.runs.stream(thread.thread_id, "ticket", {
    command: { resume: { [interrupt.id]: { approve: true } } },
    streamMode: "values",
  })) {
    resumed.push(chunk);
  }
  const values = resumed.filter((c) => c.event === "values");
  const status = (await client.threads.get(thread.thread_id)).status;
  console.log(
    JSON.stringify({
      events,
      interrupt: interrupt.value,
      paused_next: paused.next,
      paused_interrupt_matches: paused.interrupts[0].id === interrupt.id,
      final: values[values.length - 1].data,
      status,
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
