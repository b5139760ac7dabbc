# The client against a real `leash serve` (started by packages/daemon/test/python-client.test.ts,
# which passes its addresses in LEASH_TEST_* variables): not discovered by `unittest discover`.
from __future__ import annotations

import json
import os
import threading
import time
import unittest
from typing import Any

from leash_client import LeashClient, LeashDenied, LeashError, PreExecResult, TailEntry, guard, verify_receipt

ENV = os.environ
TRANSPORTS = ENV.get("LEASH_TEST_TRANSPORTS", "socket,grpc").split(",")


def client(transport: str, agent_id: str = "research-bot", **extra: Any) -> LeashClient:
    where: dict[str, Any] = (
        dict(socket_path=ENV["LEASH_TEST_SOCKET"], hmac_key=ENV["LEASH_TEST_HMAC_HEX"], key_id=ENV["LEASH_TEST_KEY_ID"])
        if transport == "socket"
        else dict(grpc_address=ENV["LEASH_TEST_GRPC"])
    )
    options: dict[str, Any] = dict(
        organization_id="acme",
        agent_id=agent_id,
        daemon_public_key=ENV["LEASH_TEST_PUBLIC_KEY"],
        # SQLite commits (fsync) on a shared 2-core host: far above the 50 ms default at times.
        timeout_ms=5000,
        control_timeout_ms=5000,
        heartbeat_interval_ms=0,
    )
    options.update(where)
    options.update(extra)
    return LeashClient(**options)


def record(transport: str, test: str, decisions: list[PreExecResult]) -> None:
    """Appends the verdicts to LEASH_TEST_OUT, for vitest to check with @leash/receipts and the chain."""
    with open(ENV["LEASH_TEST_OUT"], "a", encoding="utf-8") as out:
        for d in decisions:
            row = {"transport": transport, "test": test, **d.__dict__}
            out.write(json.dumps(row) + "\n")


class AppendixA(unittest.TestCase):
    def test_appendix_a(self) -> None:
        for transport in TRANSPORTS:
            with self.subTest(transport=transport):
                self.appendix_a(transport)

    def appendix_a(self, transport: str) -> None:
        with client(transport) as c:
            registered = c.register(framework="crewai")
            # The policy is the daemon's for acme/research-bot; the agent sent none.
            self.assertEqual(registered.negotiated_protocol, "1.0.0")
            self.assertEqual(registered.active_config.budget_usd_decimal, "0.5")
            self.assertEqual(registered.active_config.max_repeat_calls, 3)

            runs: list[str] = []
            decisions: list[PreExecResult] = []

            @guard(c, tool_name="web_search", estimate_usd=0.002, cost_usd=lambda result, query: "0.0015", on_decision=decisions.append)
            def web_search(query: str) -> str:
                runs.append(query)
                return f"results for {query}"

            for _ in range(3):
                self.assertEqual(web_search("AI safety research papers 2024"), "results for AI safety research papers 2024")
            for reason in ("max_repeat_exceeded", "circuit_open"):
                with self.assertRaises(LeashDenied) as denied:
                    web_search("AI safety research papers 2024")
                self.assertEqual(denied.exception.reason, reason)
                self.assertFalse(denied.exception.result.fail_closed)
            self.assertEqual(len(runs), 3)  # neither denied call ran

            self.assertEqual(
                [(d.verdict, d.reason) for d in decisions],
                [("ALLOW", "within_thresholds")] * 3 + [("DENY", "max_repeat_exceeded"), ("DENY", "circuit_open")],
            )
            # Each settlement (0.0015) reached the daemon before the next call.
            self.assertEqual([d.budget_remaining_usd for d in decisions[:3]], ["0.498", "0.4965", "0.495"])
            self.assertEqual([d.call_number for d in decisions], [1, 2, 3, 4, 5])
            for d in decisions:  # the client verified each receipt before acting; check again here
                verified = verify_receipt(d.receipt, ENV["LEASH_TEST_PUBLIC_KEY"])
                self.assertEqual((verified.entry_hash, verified.seq), (d.entry_hash, d.entry_seq))
                self.assertEqual(verified.payload["data"]["session_id"], registered.session_id)

            state = c.get_session()
            self.assertEqual(state.budget_spent_usd_decimal, "0.0045")
            self.assertEqual(state.budget_remaining_usd_decimal, "0.4955")
            self.assertTrue(state.circuit_tripped)
            self.assertEqual(state.circuit_trip_reason, "max_repeat_exceeded")
            beat = c.heartbeat()
            self.assertEqual((beat.session_id, beat.daemon_budget_remaining_usd), (registered.session_id, "0.4955"))
            record(transport, "appendix_a", decisions)

    def test_params_hash_agrees_with_the_daemon(self) -> None:
        # Were Python's canonical digest not the daemon's, these would be params_hash_mismatch.
        params = [
            {"q": "päris", "n": 10.0, "big": 2**70, "e": 1e16, "z": -0.0, "nested": [[{"ü": None}], True]},
            {"émoji": "😀", "a": "\u2028", "ctl": "\x01\t", "B": 1, "b": 2},
            '{"raw": 1.50, "text": "sent as given", "x": 1E5}',
        ]
        for transport in TRANSPORTS:
            with client(transport, agent_id=f"params-{transport}") as c:
                c.register()
                for i, p in enumerate(params):
                    with self.subTest(transport=transport, params=p):
                        r = c.pre_exec(f"tool_{i}", p, estimated_cost_usd="0.001")
                        self.assertEqual((r.verdict, r.reason), ("ALLOW", "within_thresholds"), r.detail)
                        self.assertIsNotNone(r.params_hash)
                        record(transport, "params", [r])

    def test_another_daemon_key_is_bad_receipt_and_the_tool_never_runs(self) -> None:
        for transport in TRANSPORTS:
            with self.subTest(transport=transport), client(transport, agent_id="pinned", daemon_public_key="ab" * 32) as c:
                c.register()
                runs: list[int] = []

                @guard(c, tool_name="pay", estimate_usd="0.01")
                def pay() -> None:
                    runs.append(1)

                with self.assertRaises(LeashDenied) as denied:
                    pay()
                self.assertEqual(denied.exception.reason, "fail_closed:bad_receipt")
                self.assertIn("kid_mismatch", denied.exception.result.detail)
                self.assertEqual(runs, [])

    def test_a_wrong_hmac_key_says_so_first(self) -> None:
        if "socket" not in TRANSPORTS:
            return
        with client("socket") as good:
            session = good.register().session_id
        with client("socket", hmac_key="00" * 32) as c:
            with self.assertRaises(LeashError) as refused:
                c.register()
            self.assertEqual(refused.exception.code, "auth_failed")
            self.assertTrue(refused.exception.message.startswith("the daemon refused our key (bad_hmac)"), refused.exception.message)
        with client("socket", hmac_key="00" * 32) as c:
            r = c.pre_exec("web_search", {"q": "x"}, session_id=session)
            self.assertEqual((r.verdict, r.reason), ("DENY", "fail_closed:auth_failed"))
            self.assertTrue((r.detail or "").startswith("the daemon refused our key (bad_hmac)"), r.detail)

    def test_refusals(self) -> None:
        for transport in TRANSPORTS:
            background: list[BaseException] = []
            with self.subTest(transport=transport), client(transport, agent_id="refused", on_background_error=background.append) as c:
                c.register()
                with self.assertRaises(LeashError) as caught:
                    c.get_session("no-such-session")
                self.assertEqual(caught.exception.code, "daemon_error")
                self.assertIn("SESSION_NOT_FOUND", str(caught.exception))
                # A settlement for a call that holds no budget: refused now on both transports (the
                # socket's post_exec asks for its ack), and not kept for a re-send.
                with self.assertRaises(LeashError) as caught:
                    c.post_exec(999, "0.01")
                self.assertIn("reservation_not_found", str(caught.exception))
                self.assertEqual(c.pending_settlements, 0)
                self.assertEqual(background, [])


class MutualTls(unittest.TestCase):
    """gRPC with mTLS (a second daemon, LEASH_TEST_TLS_*): the organization is the client certificate's."""

    def tls_client(self, who: str | None, **extra: Any) -> LeashClient:
        import grpc

        tls = ENV["LEASH_TEST_TLS_DIR"]
        read = lambda name: open(os.path.join(tls, name), "rb").read()  # noqa: E731
        credentials = (
            grpc.ssl_channel_credentials(read("ca.pem"))
            if who is None
            else grpc.ssl_channel_credentials(read("ca.pem"), read(f"{who}.key"), read(f"{who}.pem"))
        )
        options: dict[str, Any] = dict(
            grpc_address=ENV["LEASH_TEST_TLS_GRPC"],
            grpc_credentials=credentials,
            organization_id="acme",
            agent_id="research-bot",
            daemon_public_key=ENV["LEASH_TEST_TLS_PUBLIC_KEY"],
            timeout_ms=5000,
            control_timeout_ms=5000,
            heartbeat_interval_ms=0,
        )
        options.update(extra)
        return LeashClient(**options)

    def test_a_certificate_of_a_configured_organization_is_served(self) -> None:
        with self.tls_client("acme") as c:
            registered = c.register()
            self.assertEqual(registered.active_config.max_repeat_calls, 3)
            r = c.pre_exec("web_search", {"query": "mtls"}, estimated_cost_usd="0.002")
            self.assertEqual((r.verdict, r.reason, r.budget_remaining_usd), ("ALLOW", "within_thresholds", "0.498"), r.detail)
            self.assertIsNotNone(r.receipt)  # verified against the daemon's key before it was returned

    def test_no_certificate_or_an_unknown_organization_fails_closed(self) -> None:
        for who, reason in ((None, "fail_closed:daemon_unavailable"), ("initech", "fail_closed:daemon_error")):
            with self.subTest(who=who), self.tls_client(who) as c:
                runs: list[int] = []

                @guard(c, tool_name="web_search", session_id="any")
                def web_search() -> None:
                    runs.append(1)

                with self.assertRaises(LeashDenied) as denied:
                    web_search()
                self.assertEqual(denied.exception.reason, reason, denied.exception.result.detail)
                self.assertEqual(runs, [])
                with self.assertRaises(LeashError):
                    c.register()


class Tail(unittest.TestCase):
    def test_tail_reads_the_decisions_and_follows(self) -> None:
        for transport in TRANSPORTS:
            with self.subTest(transport=transport):
                self.tail(transport)

    def tail(self, transport: str) -> None:
        with client(transport, agent_id=f"tail-{transport}") as c:
            session = c.register().session_id
            made = [c.pre_exec("lookup", {"n": n}, nonce=n) for n in (1, 2)]
            seen = list(c.tail(session_id=session, kinds=["decision"]))
            self.assertEqual(
                [(e.seq, e.entry_hash, e.tool_name, e.verdict, e.reason, e.call_number) for e in seen],
                [(d.entry_seq, d.entry_hash, "lookup", "ALLOW", "within_thresholds", d.call_number) for d in made],
            )
            self.assertEqual([e.seq for e in c.tail(session_id=session, kinds=["decision"], last=1)], [made[1].entry_seq])
            resumed = list(c.tail(session_id=session, after_seq=made[0].entry_seq, kinds=["decision"]))
            self.assertEqual([e.seq for e in resumed], [made[1].entry_seq])
            # follow: a decision made after the tail started arrives; stop ends it.
            stop = threading.Event()
            got: list[TailEntry] = []

            def follow() -> None:
                for e in c.tail(session_id=session, kinds=["decision"], last=0, follow=True, stop=stop):
                    got.append(e)
                    stop.set()

            reader = threading.Thread(target=follow)
            reader.start()
            time.sleep(0.3)
            late = c.pre_exec("late", {"n": 3}, nonce=3)
            reader.join(timeout=20)
            self.assertFalse(reader.is_alive())
            self.assertEqual([(e.seq, e.tool_name) for e in got], [(late.entry_seq, "late")])
            with self.assertRaises(LeashError) as bad:
                list(c.tail(after_seq=-2))
            self.assertEqual(bad.exception.code, "invalid_argument")
            with self.assertRaises(LeashError) as unknown:
                list(c.tail(session_id="no-such-session"))
            self.assertEqual(unknown.exception.code, "daemon_error")
            self.assertIn("SESSION_NOT_FOUND", str(unknown.exception))


class DaemonStopped(unittest.TestCase):
    """Run last: it stops the daemon (SIGTERM to LEASH_TEST_DAEMON_PID) and shows every call fails closed."""

    def test_fail_closed_with_the_daemon_stopped(self) -> None:
        clients = {t: client(t, agent_id="survivor") for t in TRANSPORTS}
        runs: list[str] = []
        tools = {}
        for transport, c in clients.items():
            c.register()

            @guard(c, tool_name="send_email", estimate_usd="0.001")
            def send_email(to: str, _t: str = transport) -> str:
                runs.append(_t)
                return "sent"

            tools[transport] = send_email
            self.assertEqual(send_email("ops@example.com"), "sent")
        self.assertEqual(sorted(runs), sorted(TRANSPORTS))

        os.kill(int(ENV["LEASH_TEST_DAEMON_PID"]), 15)
        self.wait_until_down()

        for transport, send_email in tools.items():
            with self.subTest(transport=transport):
                for _ in range(3):  # the first call finds the loss; later ones are refused in backoff
                    with self.assertRaises(LeashDenied) as denied:
                        send_email("ops@example.com")
                    self.assertEqual(denied.exception.reason, "fail_closed:daemon_unavailable", denied.exception.result.detail)
                    self.assertIsNone(denied.exception.result.receipt)
                c = clients[transport]
                with self.assertRaises(LeashError) as caught:
                    c.register()
                self.assertEqual(caught.exception.code, "daemon_unavailable")
                c.close()
                with client(transport, agent_id="latecomer") as fresh:
                    r = fresh.pre_exec("send_email", {"to": "ops@example.com"}, session_id="any")
                    self.assertEqual((r.verdict, r.reason, r.fail_closed), ("DENY", "fail_closed:daemon_unavailable", True))
        self.assertEqual(sorted(runs), sorted(TRANSPORTS), "a tool ran while the daemon was down")

    def wait_until_down(self) -> None:
        """Until the process has exited (a zombie counts: its parent, vitest, reaps it)."""
        pid = int(ENV["LEASH_TEST_DAEMON_PID"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return
            except FileNotFoundError:
                return
            time.sleep(0.05)
        self.fail("the daemon did not exit within 30 s")


if __name__ == "__main__":
    unittest.main()
