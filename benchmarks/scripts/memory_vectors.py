"""Makes the vectors of the memory benchmark, once: 100 000 generated notes
and 1 000 generated queries, embedded by all-MiniLM-L6-v2 (384 dimensions,
unit length) with the local embedder's own model code
(scripts/local_model/embed_serve.py, in the venv scripts/local-embedder
installs).

    target/local-embedder/venv/bin/python benchmarks/scripts/memory_vectors.py OUT ITEMS QUERIES

Writes OUT (little-endian float32, ITEMS then QUERIES rows of 384) and
OUT.txt (the texts, one a line, for a person to read). The texts come from a
fixed seed: the same file on every machine, for both sides of the
comparison (harness and LangGraph read this one file).
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "local_model"))
import embed_serve  # noqa: E402

PEOPLE = ["Ana", "Bo", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "June", "Kofi", "Lena",
          "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara"]
TOPICS = ["the database migration", "the quarterly budget", "a hiking trip", "the new espresso machine",
          "unit tests for the parser", "the garden's tomatoes", "a jazz concert", "the train schedule",
          "the office move", "a birthday dinner", "the security audit", "learning Japanese",
          "the kitchen renovation", "a marathon", "the customer's refund", "a broken laptop",
          "the team offsite", "dark mode in the editor", "the dentist appointment", "a chess tournament",
          "the cloud bill", "a vegetarian recipe", "the flight to Lisbon", "the API rate limits",
          "a bicycle repair", "the novel club", "the release notes", "a piano lesson", "tax forms",
          "the dog's vaccination", "solar panels", "the sprint retro", "a job interview", "the wifi router"]
VERBS = ["prefers", "asked about", "is worried about", "decided on", "forgot", "wants to postpone",
         "finished", "complained about", "recommended", "is excited about", "needs help with",
         "wrote a note on", "changed their mind about", "double-checked", "wants a summary of"]
WHEN = ["on Monday", "last week", "tomorrow morning", "in March", "before the deadline", "after lunch",
        "every Friday", "next year", "during the call", "at the weekend", "yesterday", "in two weeks"]
EXTRA = ["", "", "and it matters a lot", "but not urgently", "with some doubts", "for the second time",
         "after a long discussion", "according to the email", "as usual", "to everyone's surprise"]


def texts(n, rng, kind):
    out = []
    for _ in range(n):
        if kind == "query":
            out.append(f"what did {rng.choice(PEOPLE)} say about {rng.choice(TOPICS)}?")
        else:
            extra = rng.choice(EXTRA)
            out.append(" ".join(p for p in [rng.choice(PEOPLE), rng.choice(VERBS), rng.choice(TOPICS),
                                            rng.choice(WHEN), extra] if p) + ".")
    return out


def main():
    out, items, queries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(34)
    all_texts = texts(items, rng, "note") + texts(queries, rng, "query")
    model = embed_serve.MiniLM(embed_serve.model_dir())
    start = time.time()
    tmp = out + ".part"
    with open(tmp, "wb") as f:
        for at in range(0, len(all_texts), 1024):
            vectors, _ = model.embed(all_texts[at:at + 1024])
            f.write(vectors.astype("<f4").tobytes())
            done = at + len(vectors)
            print(f"memory_vectors: {done}/{len(all_texts)} in {time.time() - start:.0f} s",
                  file=sys.stderr, flush=True)
    with open(out + ".txt", "w") as f:
        f.write("\n".join(all_texts) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
