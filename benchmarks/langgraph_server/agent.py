"""LangGraph's side of `benchmarks/scripts/bench-server`: the agent that
harness-server serves as `benchmarks/src/bin/serve_agent.rs`, as a LangGraph
graph served by LangGraph's own server (as `langgraph dev` serves it, through
serve.py beside it, in memory).

Three steps: `plan` (a simulated model call: 30 ms), `act` (no model call)
and `answer` (a simulated model call: 30 ms); `steps` counts them and
`reply` is the last step's word. No field accumulates, so a thread's state
keeps its size however many runs it has had. The load generator sends
`{"input": "go", "steps": 0}` and checks that each run ended with
`steps == 3`.
"""

import asyncio
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

MODEL_LATENCY_S = 0.030


class Chat(TypedDict, total=False):
    input: str
    steps: int
    reply: str


async def plan(state: Chat) -> dict:
    await asyncio.sleep(MODEL_LATENCY_S)
    return {"steps": state.get("steps", 0) + 1, "reply": "plan"}


async def act(state: Chat) -> dict:
    return {"steps": state.get("steps", 0) + 1, "reply": "act"}


async def answer(state: Chat) -> dict:
    await asyncio.sleep(MODEL_LATENCY_S)
    return {"steps": state.get("steps", 0) + 1, "reply": "answer"}


builder = StateGraph(Chat)
builder.add_node("plan", plan)
builder.add_node("act", act)
builder.add_node("answer", answer)
builder.add_edge(START, "plan")
builder.add_edge("plan", "act")
builder.add_edge("act", "answer")
builder.add_edge("answer", END)
graph = builder.compile()
