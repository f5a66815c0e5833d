"""pydantic-evals' side of benchmarks/scripts/bench-evals: the framework's
own time per case over a dataset of trivial cases with three evaluators.

    python evals_pydantic.py CASES REPEAT

Prints `RESULT name value` lines: the best of REPEAT runs of
`Dataset.evaluate` (all cases at once, no progress bar), the best of REPEAT
runs of the task alone on every case, and their difference per case (the
framework's overhead), in microseconds.
"""

import asyncio
import re
import sys
import time
from dataclasses import dataclass

from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Contains, EqualsExpected, Evaluator, EvaluatorContext


@dataclass
class MatchesRegex(Evaluator):
    """The third evaluator: pydantic-evals has no regex evaluator built in."""

    pattern: str

    def evaluate(self, ctx: EvaluatorContext) -> bool:
        return re.search(self.pattern, str(ctx.output)) is not None


async def task(inputs: str) -> str:
    """The trivial agent: one step that upper-cases its input."""
    return inputs.upper()


async def main(n: int, repeat: int) -> None:
    dataset = Dataset(
        name="trivial",
        cases=[Case(name=f"case-{i}", inputs=f"case {i}", expected_output=f"CASE {i}") for i in range(n)],
        evaluators=[EqualsExpected(), Contains(value="CASE"), MatchesRegex(pattern=r"^CASE \d+$")],
    )
    best_eval = best_bare = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        await asyncio.gather(*(task(c.inputs) for c in dataset.cases))
        best_bare = min(best_bare, time.perf_counter() - began)
        began = time.perf_counter()
        report = await dataset.evaluate(task, progress=False)
        best_eval = min(best_eval, time.perf_counter() - began)
        passed = sum(1 for c in report.cases if all(a.value for a in c.assertions.values()))
        assert passed == n, f"{passed} of {n} cases passed"
    print(f"RESULT pydantic_evaluate_us_per_case {best_eval / n * 1e6:.3f}")
    print(f"RESULT pydantic_task_us_per_case {best_bare / n * 1e6:.3f}")
    print(f"RESULT pydantic_overhead_us_per_case {(best_eval - best_bare) / n * 1e6:.3f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
