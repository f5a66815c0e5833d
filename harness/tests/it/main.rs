//! The core crate's integration tests, one binary: each module is one area.

mod answers;
mod calls;
mod deadline;
mod derive_fields;
mod derive_ui;
mod dispatch;
mod effects;
mod graph;
mod llm_record;
mod llm_scripted;
mod llm_stream;
mod llm_tools;
mod llm_types;
mod memory;
mod memory_index;
mod module_order;
mod parallel;
mod run;
mod secrets;
mod slots;
mod state;
mod step_cache;
mod sub_agents;
mod tracing_spans;
