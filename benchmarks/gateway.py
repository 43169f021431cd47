"""The policy gateway's overhead per request, side by side with calling the backend in-process.

The same greedy turns both ways, alternating per repeat: **in-process** renders the conversation with the
policy's chat template, tokenizes it and calls ``policy.backend.generate`` (what the gateway does inside);
**gateway** sends the same conversation with the ``openai`` SDK to ``stratagym serve policy``'s app on
127.0.0.1 (served from a thread of this process: the HTTP, JSON, validation, batching and recording costs,
not a second copy of the model). The sampled ids must be equal; the overhead is
(gateway - in-process) / in-process per turn, reported per repeat and as the median (issue 51 target:
<= 5 % of a SmolLM2 turn).

Run: ``OMP_NUM_THREADS=1 python benchmarks/gateway.py [--model build/models/smollm2-135m-instruct-q4-1]
[--turns 8] [--max-new 32] [--repeats 3]``; ``--model tiny`` uses the bundled tiny model (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from openai import OpenAI  # noqa: E402

from stratagym.agents.gateway.server import create_app  # noqa: E402
from stratagym.agents.gateway.sessions import SessionStore  # noqa: E402
from stratagym.agents.generation import SamplingConfig  # noqa: E402
from stratagym.agents.llm import LLMConfig, LLMPolicy  # noqa: E402
from stratagym.serving import serve_in_thread  # noqa: E402

QUESTIONS = ["Who founded the Guild of Daetron?", "Where does the Pokynd River meet the sea?",
             "What is a sextant used for?", "Name a river in Kaekuthar.", "When was the guild founded?",
             "Who made the first sextant?", "What stands beside the river?", "Which city is the largest?"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="build/models/smollm2-135m-instruct-q4-1")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model = args.model
    if model == "tiny":
        from stratagym.agents.tiny_lm import tiny_lm_path

        model = str(tiny_lm_path())
    elif not Path(model).exists():
        print(f"{model} does not exist: run `stratagym models import` first, or pass --model tiny")
        return 2
    policy = LLMPolicy.from_config(LLMConfig(model=model, max_new_tokens=args.max_new))
    server = serve_in_thread(create_app(policy, store=SessionStore()))
    client = OpenAI(base_url=f"http://{server.host}:{server.port}/v1", api_key="bench", max_retries=0)
    convs = [[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}] for i in range(args.turns)]
    cfg = SamplingConfig(max_new_tokens=args.max_new)

    def in_process() -> tuple[float, list[list[int]]]:
        out, t0 = [], time.perf_counter()
        for msgs in convs:
            ids = policy.tokenizer(policy.render(msgs), add_special_tokens=False)["input_ids"]
            with policy.compute_context():
                (raw,) = policy.backend.generate([ids], (), cfg, greedy=True)
            out.append(raw.response_ids)
        return time.perf_counter() - t0, out

    def gateway() -> tuple[float, list[list[int]]]:
        out, t0 = [], time.perf_counter()
        for msgs in convs:
            r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=args.max_new,
                                               extra_body={"return_token_ids": True})
            out.append(r.choices[0].model_extra["token_ids"])
        return time.perf_counter() - t0, out

    try:
        in_process(), gateway()  # warm-up: first forward, first request
        rows, same = [], True
        for r in range(args.repeats):
            t_in, ids_in = in_process()
            t_gw, ids_gw = gateway()
            same = same and ids_in == ids_gw
            rows.append((t_in, t_gw))
            print(f"repeat {r}: in-process {t_in / args.turns * 1000:.1f} ms/turn, gateway {t_gw / args.turns * 1000:.1f} "
                  f"ms/turn, overhead {(t_gw - t_in) / t_in:+.1%}")
    finally:
        server.stop()
    over = statistics.median((g - i) / i for i, g in rows)
    print(f"model {Path(model).name}, {args.turns} greedy turns of up to {args.max_new} tokens, {args.repeats} repeats")
    print(f"median overhead {over:+.1%} per turn; sampled ids identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
