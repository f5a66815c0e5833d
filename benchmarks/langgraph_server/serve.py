"""LangGraph's server for `benchmarks/scripts/bench-server`: what `langgraph
dev --no-browser --no-reload --allow-blocking` does (langgraph-cli 0.4.40),
with its file persistence off.

    python serve.py PORT JOBS

`langgraph dev` reads `disable_persistence` from langgraph.json, but its
config validation drops that key, so the in-memory server would write its
threads and checkpoints to .langgraph_api/ in the working directory (tens
of MB of pickles, reloaded at the next start); this calls the same
`langgraph_api.cli.run_server` with `disable_persistence=True`, so that it
keeps its checkpoints in memory only, as harness's `MemoryStore` does. It
still writes its threads and runs to .langgraph_api/ in its working
directory (and reads them back at its next start), so bench-server starts
it in an empty directory each time. JOBS is `--n-jobs-per-worker`: how
many runs it runs at once.
"""

import os
import pathlib
import sys

import langgraph_cli.config
from langgraph_api.cli import run_server

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    port, jobs = int(sys.argv[1]), int(sys.argv[2])
    config = langgraph_cli.config.validate_config_file(pathlib.Path(HERE, "langgraph.json"))
    sys.path.append(HERE)
    # The graphs' files from here, so that the server can run in a working
    # directory of its own.
    graphs = {name: os.path.join(HERE, spec) for name, spec in config.get("graphs", {}).items()}
    run_server(
        "127.0.0.1",
        port,
        False,
        graphs,
        n_jobs_per_worker=jobs,
        open_browser=False,
        env=config.get("env"),
        store=config.get("store"),
        allow_blocking=True,
        disable_persistence=True,
        server_level="WARNING",
    )


if __name__ == "__main__":
    main()
