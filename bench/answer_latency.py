"""How long a function replica's answer takes to reach the job loop, once its work is done.

An epoch's answers come after seconds of silence on a kept-alive connection. The local
processor writes an answer's headers and body in two writes; with Nagle's algorithm on, the
body waited for the job loop's delayed ACK of the headers (40 ms on Linux), on every answer of
every epoch. Two replicas run side by side in this process, the processor as Coach runs it and
the same with Nagle's algorithm on, of a function whose events take `--work` seconds (a sleep:
the role processes are beside the point), each event sent once the last is answered.

    .venv/bin/python bench/answer_latency.py [--events 20] [--work 0.2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from coach.backends.local.processor import make_server

FUNCTION = """\
apiVersion: nuclio.io/v1beta1
kind: NuclioFunction
metadata:
  name: sleeper
spec:
  runtime: "python:3.11"
  handler: "main:handler"
"""
HANDLER = """\
import time

def handler(context, event):
    time.sleep(float(event.body))
    return "done"
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--work", type=float, default=0.2, help="seconds each event takes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        function = Path(folder)
        (function / "function.yaml").write_text(FUNCTION)
        (function / "main.py").write_text(HANDLER)
        servers = {label: make_server(function)[0] for label in ("coach", "nagle on")}   # the handler is imported
    for label, server in servers.items():
        server.RequestHandlerClass.disable_nagle_algorithm = label == "coach"
        threading.Thread(target=server.serve_forever, daemon=True).start()
    latency: dict[str, list[float]] = {label: [] for label in servers}

    def call(label: str) -> None:   # each event sent as its answer comes, as the job loop does
        with httpx.Client() as client:
            for _ in range(args.events):
                start = time.monotonic()
                r = client.post(f"http://127.0.0.1:{servers[label].server_address[1]}/", content=str(args.work))
                latency[label].append(time.monotonic() - start - args.work)
                assert r.status_code == 200 and r.text == "done", r.text

    try:   # side by side: a burst of load hits both
        callers = [threading.Thread(target=call, args=(label,)) for label in servers]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    finally:
        for server in servers.values():
            server.shutdown()
    medians = {label: statistics.median(xs) for label, xs in latency.items()}
    for label, xs in latency.items():
        print(f"{label:<9}: median {medians[label] * 1000:5.1f} ms, max {max(xs) * 1000:5.1f} ms "
              f"from the end of the work to the answer, {len(xs)} events of {args.work:g} s")
    print(f"ratio nagle on / coach: {medians['nagle on'] / medians['coach']:.1f}")
    print(json.dumps({"median_ms": {k: round(v * 1000, 2) for k, v in medians.items()}}))


if __name__ == "__main__":
    main()
