"""Latency of one guarded decision from Python: sequential pre_exec calls against a `leash serve` it
starts itself (memory store, throwaway key), over the Unix socket and gRPC, with and without receipt
verification. A measurement, not a test: run `pnpm build` first, then `python3 clients/python/bench/pre_exec.py`."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

from leash_client import LeashClient  # noqa: E402

CALLS = int(os.environ.get("CALLS", "2000"))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="leash-py-bench-"))
    key = os.urandom(32).hex()
    (tmp / "k1.hmac").write_text(key)
    (tmp / "k1.hmac").chmod(0o600)  # the daemon refuses a key file others can read
    config = {"organizations": {"acme": {"hmac_keys": {"k1": {"file": str(tmp / "k1.hmac")}}, "default_guard": {"budget_usd": 1_000_000}}}}
    (tmp / "daemon.json").write_text(json.dumps(config))
    socket_path = str(tmp / "leash.sock")
    daemon = subprocess.Popen(
        ["node", str(ROOT / "apps/cli/dist/bin.js"), "serve", "--config", str(tmp / "daemon.json"), "--store", "memory:",
         "--ephemeral-key", "--socket", socket_path, "--grpc", "127.0.0.1:0", "--grpc-insecure"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        listening = json.loads(daemon.stdout.readline())  # type: ignore[union-attr]
        print(f"{CALLS} sequential pre_exec calls per row, distinct params (no repeat limit), Python {sys.version.split()[0]}")
        for transport in ("socket", "grpc"):
            for verify in (False, True):
                where = dict(socket_path=socket_path, hmac_key=key, key_id="k1") if transport == "socket" else dict(grpc_address=listening["grpc"])
                with LeashClient(organization_id="acme", agent_id="bench", timeout_ms=5000, heartbeat_interval_ms=0,
                                 daemon_public_key=listening["public_key"] if verify else None, **where) as c:  # type: ignore[arg-type]
                    c.register()
                    for i in range(100):  # warm-up
                        c.pre_exec("warm", {"i": i})
                    took = []
                    for i in range(CALLS):
                        start = time.perf_counter()
                        r = c.pre_exec("search", {"i": i}, estimated_cost_usd="0.001")
                        took.append((time.perf_counter() - start) * 1000)
                        assert r.verdict == "ALLOW", r
                took.sort()
                p50, p99 = statistics.median(took), took[int(len(took) * 0.99)]
                print(f"{transport:6} receipts {'verified' if verify else 'not checked':11}  p50 {p50:.2f} ms  p99 {p99:.2f} ms  {CALLS / (sum(took) / 1000):,.0f} calls/s")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


if __name__ == "__main__":
    main()
