"""Serves a GGUF model over llama.cpp's OpenAI-compatible HTTP API.

Started by scripts/local-model (read it first): the real-model tests and the
examples talk to this server through harness-openai, exactly as they would
to vLLM, Ollama or LM Studio. It runs llama.cpp in-process through the
`xllamacpp` wheel, so nothing is compiled on the machine.

    python serve.py --model M.gguf --template chat-template.jinja --port 58080

Settings chosen for a 2-core machine without a GPU: two parallel slots so
that two tests can talk to it at once (llama.cpp decodes both in one batch,
on --threads threads: scripts/local-model gives it every core), embeddings
on (the same model answers /v1/embeddings with mean pooling), and a low
default temperature so that runs vary little; no fixed seed, so that a retried request can come out
differently. A request's own settings win.
"""

import argparse
import os
import signal
import sys
import time

import xllamacpp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model name clients use")
    parser.add_argument("--template", required=True, help="a Jinja chat template")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=16384, help="context, shared by the slots")
    args = parser.parse_args()

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    # Tool calls need the Jinja template: llama.cpp reads from it how a
    # tool call is written, and parses the model's answers accordingly.
    params.use_jinja = True
    with open(args.template, encoding="utf-8") as f:
        params.chat_template = f.read()
    params.embedding = True
    params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    # /metrics: the server's busy time, which benchmarks/src/bin/real_turn.rs
    # reads to split a real turn between the model and the framework.
    params.endpoint_metrics = True
    # A low temperature, and no fixed seed: with one, every retry of a
    # request samples the same answer, and a retry after llama.cpp could
    # not parse a tool call (HTTP 500) fails the same way again.
    params.sampling.temp = 0.2
    # At most 1 024 tokens per answer: a small model can ramble until its
    # slot's context is full (thousands of tokens at ~9 a second here),
    # which once held the test suite for over 20 minutes. No test asks for
    # a longer answer; a cut one ends with `finish_reason: length`.
    params.n_predict = 1024

    server = xllamacpp.Server(params)
    print(f"serving {args.alias} on {server.listening_address}", flush=True)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    while not stop:
        time.sleep(0.5)
    print("stopping", flush=True)
    # The server's threads are not joinable from Python; leave at once.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
