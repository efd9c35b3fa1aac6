"""Write the project's own small instruction data set in the Dolly-15k schema.

Fields: instruction, context, response, category. The rows are generated from templates about
fabrics and collectives, so the answers follow learnable rules and a tiny model's loss visibly falls.
Deterministic (seeded): re-running gives the same file.

    python tools/make_demo_data.py recipes/assets/fabric_dolly_mini.jsonl
"""
from __future__ import annotations

import json
import random
import sys

TRANSPORTS = {"InfiniBand": True, "RoCE": True, "TCP sockets": False, "GPUDirect RDMA": True,
              "shared memory": False, "NVLink P2P": False}
LOG_LINES = [
    ("NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>", "RoCE"),
    ("NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>", "InfiniBand"),
    ("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>", "TCP sockets"),
    ("NCCL INFO Using network Socket", "TCP sockets"),
    ("NCCL INFO Using network IB", "InfiniBand or RoCE"),
]


def row(rng: random.Random) -> dict:
    kind = rng.randrange(6)
    if kind == 0:
        gbit = rng.choice([10, 25, 40, 50, 100, 200, 400, 800])
        return dict(instruction=f"Convert {gbit} Gb/s to GB/s.", context="",
                    response=f"{gbit} Gb/s is {gbit / 8:g} GB/s.", category="open_qa")
    if kind == 1:
        n = rng.choice([2, 4, 8, 16, 32, 64])
        return dict(instruction=f"What is the all-reduce bus bandwidth factor for {n} ranks?", context="",
                    response=f"2(n-1)/n with n={n}, which is {2 * (n - 1) / n:.3f}.", category="open_qa")
    if kind == 2:
        nodes, gpus = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4, 8])
        return dict(instruction="How many GPUs does the cluster have?",
                    context=f"The cluster has {nodes} nodes with {gpus} GPUs each.",
                    response=f"It has {nodes * gpus} GPUs.", category="closed_qa")
    if kind == 3:
        name = rng.choice(sorted(TRANSPORTS))
        answer = "Yes" if TRANSPORTS[name] else "No"
        return dict(instruction=f"Is {name} an RDMA transport?", context="",
                    response=f"{answer}.", category="classification")
    if kind == 4:
        line, transport = rng.choice(LOG_LINES)
        return dict(instruction="Which network transport does this log line show?", context=line,
                    response=f"{transport}.", category="information_extraction")
    a, b = rng.sample(range(100, 1000, 10), 2)
    faster, diff = ("A", b - a) if a < b else ("B", a - b)
    return dict(instruction="Summarize which run was faster.",
                context=f"Run A took {a} ms per step and run B took {b} ms per step.",
                response=f"Run {faster} was faster by {diff} ms per step.", category="summarization")


def main(path: str, count: int = 800) -> None:
    rng = random.Random(1234)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            f.write(json.dumps(row(rng)) + "\n")
    print(f"wrote {count} rows to {path}")


def cli(argv: list[str] | None = None) -> int:
    """The command line: a bad output path is one `error:` line, exit 2, before anything is written."""
    from telemetry.errors import OneLineParser, output_file_problem, print_errors

    p = OneLineParser(prog="python -m tools.make_demo_data", description="Write the demo instruction data set.")
    p.add_argument("path", nargs="?", default="recipes/assets/fabric_dolly_mini.jsonl", help="the JSON-lines file")
    args = p.parse_args(argv)
    if problem := output_file_problem(args.path, "path"):
        return print_errors(problem)
    try:
        main(args.path)
    except OSError as exc:  # a full disk: an empty file fitted where the rows did not
        import contextlib
        import os

        if os.path.isfile(args.path):  # no half-written data set for a run to train on (a device stays)
            with contextlib.suppress(OSError):
                os.remove(args.path)
        return print_errors(f"path: {args.path!r} could not be written ({exc.strerror or exc}); allowed: a file on "
                            "a filesystem with free space that this user can write")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
