//! Evals for harness agents (issue 36; under construction).
