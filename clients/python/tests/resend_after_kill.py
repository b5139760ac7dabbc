"""Run by packages/daemon/test/python-client.test.ts (not by unittest discovery): a post_exec the
daemon never made durable is kept and sent again once the daemon is back.

The daemon (pid LEASH_TEST_DAEMON_PID) is SIGSTOPped after an ALLOW of 0.6; the post_exec gets no
ack. This prints "STOPPED <session>" and waits while the harness SIGKILLs, recovers and restarts the
daemon, then prints one JSON line: what the client saw after its kept settlement was confirmed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from leash_client import LeashClient, LeashError


def main() -> int:
    client = LeashClient(
        organization_id="acme",
        agent_id="resend-bot",
        socket_path=os.environ["LEASH_TEST_SOCKET"],
        hmac_key=os.environ["LEASH_TEST_HMAC_HEX"],
        key_id=os.environ["LEASH_TEST_KEY_ID"],
        timeout_ms=2000,
        control_timeout_ms=1000,
        heartbeat_interval_ms=0,
        reconnect={"initial_delay_ms": 20, "max_delay_ms": 200},
    )
    with client as c:
        session = c.register().session_id
        allowed = c.pre_exec("t", {}, estimated_cost_usd="0.6")
        assert (allowed.verdict, allowed.call_number) == ("ALLOW", 1), allowed
        os.kill(int(os.environ["LEASH_TEST_DAEMON_PID"]), signal.SIGSTOP)
        try:
            c.post_exec(1, "0.6")
            unacked = "resolved"
        except LeashError as error:
            unacked = error.code
        print(f"STOPPED {session} {unacked} {c.pending_settlements}", flush=True)
        # Any request reconnects; each new connection sends the kept settlement again.
        deadline = time.monotonic() + 60
        while c.pending_settlements > 0 and time.monotonic() < deadline:
            try:
                c.heartbeat()
            except LeashError:
                pass
            time.sleep(0.05)
        refused = c.pre_exec("u", {}, estimated_cost_usd="0.9")
        again = c.post_exec(1, "0.6")  # the caller retried: recorded once all the same
        print(
            json.dumps(
                {
                    "session_id": session,
                    "pending": c.pending_settlements,
                    "after": [refused.verdict, refused.fail_closed],
                    "spent": c.get_session().budget_spent_usd_decimal,
                    "again": again.call_number,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
