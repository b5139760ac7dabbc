"""Times the reference Python decide (SHACKLE's shackle/conformance.py, checked out by the user) over
the vectors `leash bench decide --reference` wrote, and checks its answers against ours. Our own code:
it imports the reference from the given path and copies none of it. Prints one JSON line.

usage: python3 reference-decide.py REFERENCE_PATH CORPUS_JSON
REFERENCE_PATH: a checkout of the reference repository, its shackle/ directory, or conformance.py itself.
CORPUS_JSON: {"warmup": s, "seconds": s, "corpora": {name: [{"config", "state", "call", "verdict",
"reason", "label"}]}} -- verdict/reason are ours; each corpus is timed round-robin in CPU seconds.
"""

import hashlib
import importlib.util
import json
import os
import platform
import sys
import time

MAX_MISMATCHES_SHOWN = 5


def fail(message):
    print(f"reference-decide: {message}", file=sys.stderr)
    sys.exit(2)


def module_file(path):
    for candidate in (path, os.path.join(path, "shackle", "conformance.py"), os.path.join(path, "conformance.py")):
        if os.path.isfile(candidate):
            return candidate
    fail(f"{path}: no shackle/conformance.py, conformance.py or file there")


def load_reference(path):
    file = module_file(path)
    # Loaded by file, not as the `shackle` package: its __init__ pulls in the runtime shim, which
    # decide does not need.
    spec = importlib.util.spec_from_file_location("shackle_reference_conformance", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken checkout is bad input, not a crash
        fail(f"{file}: cannot import: {type(exc).__name__}: {exc}")
    if not callable(getattr(module, "decide", None)):
        fail(f"{file}: has no decide function")
    return file, module.decide


def sha256_of(file):
    """Names the exact reference measured (a checkout's commit is not always at hand)."""
    with open(file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def answer(decide, case):
    try:
        verdict, reason = decide(case["config"], case["state"], case["call"])
        return verdict, reason
    except Exception as exc:  # reported as a disagreement: ours is total, the reference should be too
        return "RAISED", f"{type(exc).__name__}: {exc}"


def mismatches(decide, cases):
    found = []
    for index, case in enumerate(cases):
        verdict, reason = answer(decide, case)
        if verdict != case["verdict"] or reason != case["reason"]:
            found.append({
                "index": index,
                "label": case.get("label"),
                "ours": f"{case['verdict']} {case['reason']}",
                "reference": f"{verdict} {reason}",
            })
    return found


def spin(decide, inputs, seconds):
    """Round-robin calls for `seconds` of this process's CPU time; the clock is read once per 64 calls."""
    count = len(inputs)
    done = 0
    at = 0
    start = time.process_time()
    elapsed = 0.0
    while elapsed < seconds:
        for _ in range(64):
            config, state, call = inputs[at]
            at = at + 1 if at + 1 < count else 0
            try:
                decide(config, state, call)
            except Exception:
                pass
        done += 64
        elapsed = time.process_time() - start
    return done, elapsed


def main(argv):
    if len(argv) != 3:
        fail("usage: reference-decide.py REFERENCE_PATH CORPUS_JSON")
    file, decide = load_reference(argv[1])
    with open(argv[2], encoding="utf-8") as f:
        spec = json.load(f)
    report = {
        "implementation": "SHACKLE shackle/conformance.py decide",
        "file": os.path.abspath(file),
        "sha256": sha256_of(file),
        "python": platform.python_version(),
    }
    for name, cases in spec["corpora"].items():
        wrong = mismatches(decide, cases)
        inputs = [(c["config"], c["state"], c["call"]) for c in cases]
        if spec["warmup"] > 0:
            spin(decide, inputs, spec["warmup"])
        done, cpu = spin(decide, inputs, spec["seconds"])
        report[name] = {
            "vectors": len(cases),
            "decisions": done,
            "cpu_seconds": round(cpu, 3),
            "decisions_per_cpu_sec": round(done / cpu),
            "mismatches": len(wrong),
            "first_mismatches": wrong[:MAX_MISMATCHES_SHOWN],
        }
    print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv)
