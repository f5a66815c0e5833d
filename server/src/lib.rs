//! Serve harness agents over HTTP, speaking the Agent Protocol in the shape
//! the LangGraph SDK clients call (issue 33; under construction).
