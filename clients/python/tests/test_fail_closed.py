# The client against daemons that misbehave (fake_daemon.py, real Unix sockets): every way of not
# getting a trustworthy verdict is a DENY with its fail_closed reason, and a guarded tool never runs.
from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import threading
import time
import unittest

from fake_daemon import KEY, KEY_ID, FakeDaemon, Signer, allow, daemon_envelope, verdict_for

from leash_client import LeashClient, LeashDenied, LeashError, LeashHitl, guard, pb
from leash_client.framing import encode_frame


def eventually(check, seconds: float = 5.0) -> None:
    """Waits until check() is true: a post_exec is a notification, the fake reads it when it reads it."""
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


def client(daemon: FakeDaemon, **extra) -> LeashClient:
    options = dict(
        socket_path=daemon.path,
        organization_id="acme",
        agent_id="research-bot",
        hmac_key=KEY,
        key_id=KEY_ID,
        timeout_ms=2000,
        control_timeout_ms=2000,
        heartbeat_interval_ms=0,
    )
    options.update(extra)
    return LeashClient(**options)


class FailClosed(unittest.TestCase):
    def setUp(self) -> None:
        self.daemons: list[FakeDaemon] = []
        self.clients: list[LeashClient] = []

    def tearDown(self) -> None:
        for c in self.clients:
            c.close()
        for d in self.daemons:
            d.close()

    def start(self, handler=allow, **extra) -> tuple[FakeDaemon, LeashClient]:
        d = FakeDaemon(handler)
        self.daemons.append(d)
        c = client(d, **extra)
        self.clients.append(c)
        return d, c

    def assert_denied(self, c: LeashClient, reason: str) -> None:
        runs: list[str] = []

        @guard(c, tool_name="web_search", estimate_usd="0.002", session_id="s_01")
        def web_search(query: str) -> str:
            runs.append(query)
            return query

        with self.assertRaises(LeashDenied) as caught:
            web_search("x")
        self.assertEqual(caught.exception.reason, reason, caught.exception.result.detail)
        self.assertTrue(caught.exception.result.fail_closed)
        self.assertIsNone(caught.exception.result.receipt)
        self.assertEqual(runs, [], "the guarded tool ran although the call was denied")

    def test_no_daemon_is_daemon_unavailable(self) -> None:
        c = LeashClient(
            socket_path="/nonexistent/leash.sock", organization_id="acme", agent_id="a", hmac_key=KEY, key_id=KEY_ID
        )
        self.clients.append(c)
        self.assert_denied(c, "fail_closed:daemon_unavailable")
        with self.assertRaises(LeashError) as caught:
            c.register()
        self.assertEqual(caught.exception.code, "daemon_unavailable")

    def test_silent_daemon_is_timeout(self) -> None:
        _, c = self.start(lambda env, d: b"", timeout_ms=100)
        self.assert_denied(c, "fail_closed:timeout")

    def test_daemon_that_stops_reading_is_timeout_not_a_hang(self) -> None:
        # Accepts and never reads: a big request fills the socket buffer, and the write must not block.
        d = FakeDaemon()
        self.daemons.append(d)
        d._running = False
        d._server.close()
        os.unlink(d.path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(d.path)
        server.listen(1)
        self.addCleanup(server.close)
        c = client(d, timeout_ms=200)
        self.clients.append(c)
        accepted = server.accept()[0]
        self.addCleanup(accepted.close)
        r = c.pre_exec("upload", {"blob": "x" * 900_000}, session_id="s_01")
        self.assertEqual(r.reason, "fail_closed:timeout", r.detail)

    def test_garbage_is_bad_response(self) -> None:
        _, c = self.start(lambda env, d: encode_frame(b"\xff\xff\xff garbage"))
        self.assert_denied(c, "fail_closed:bad_response")

    def test_oversize_frame_is_bad_response(self) -> None:
        _, c = self.start(lambda env, d: (2 * 1024 * 1024).to_bytes(4, "big"))
        self.assert_denied(c, "fail_closed:bad_response")

    def test_bad_hmac_is_bad_response(self) -> None:
        def forged(env, d):
            return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), env.message_id, key=b"\x07" * 32)

        _, c = self.start(forged)
        self.assert_denied(c, "fail_closed:bad_response")

    def test_answer_for_another_correlation_id_is_bad_response(self) -> None:
        def stray(env, d):
            return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), "0190aaaa-0000-7000-8000-000000000000")

        _, c = self.start(stray)
        self.assert_denied(c, "fail_closed:bad_response")

    def test_stale_timestamp_is_bad_response(self) -> None:
        def old(env, d):
            ts = time.time_ns() - 10 * 60 * 10**9
            return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), env.message_id, timestamp_ns=ts)

        _, c = self.start(old)
        self.assert_denied(c, "fail_closed:bad_response")

    def test_replayed_envelope_is_bad_response(self) -> None:
        # The daemon's first answer is replayed, verbatim, as the answer to the second call.
        sent: list[bytes] = []

        def replaying(env, d):
            if sent:
                return sent[0]
            sent.append(daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), env.message_id))
            return sent[0]

        _, c = self.start(replaying)
        self.assertEqual(c.pre_exec("web_search", {}, session_id="s_01").verdict, "ALLOW")
        self.assert_denied(c, "fail_closed:bad_response")

    def test_verdict_for_another_session_is_bad_response(self) -> None:
        def other(env, d):
            return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec, session_id="s_02"), env.message_id)

        _, c = self.start(other)
        self.assert_denied(c, "fail_closed:bad_response")

    def test_money_mismatch_is_bad_response(self) -> None:
        def mismatch(env, d):
            r = verdict_for(env.pre_exec, budget_remaining_usd=0.5, budget_remaining_usd_decimal="0.498")
            return daemon_envelope("pre_exec_response", r, env.message_id)

        _, c = self.start(mismatch)
        self.assert_denied(c, "fail_closed:bad_response")

    def test_sp1_error_is_daemon_error(self) -> None:
        def refuse(env, d):
            e = pb.Error(code=pb.SESSION_NOT_FOUND, detail="session_not_found", message="unknown session")
            return daemon_envelope("error", e, env.message_id)

        _, c = self.start(refuse)
        self.assert_denied(c, "fail_closed:daemon_error")
        with self.assertRaises(LeashError) as caught:
            c.get_session("s_01")
        self.assertEqual(caught.exception.code, "daemon_error")
        self.assertIn("SESSION_NOT_FOUND", str(caught.exception))

    def test_unknown_verdict_value_is_deny(self) -> None:
        def odd(env, d):
            return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec, verdict=7), env.message_id)

        _, c = self.start(odd)
        r = c.pre_exec("web_search", {}, session_id="s_01")
        self.assertEqual((r.verdict, r.fail_closed), ("DENY", False))

    def test_hitl_raises_leash_hitl_and_the_tool_does_not_run(self) -> None:
        def hitl(env, d):
            r = verdict_for(env.pre_exec, verdict=pb.HITL, deny_reason=pb.HITL_ALL_CALLS, reason="hitl_all_calls")
            return daemon_envelope("pre_exec_response", r, env.message_id)

        _, c = self.start(hitl)
        runs = []

        @guard(c, tool_name="deploy", session_id="s_01")
        def deploy() -> None:
            runs.append(1)

        with self.assertRaises(LeashHitl) as caught:
            deploy()
        self.assertEqual(caught.exception.reason, "hitl_all_calls")
        self.assertEqual(runs, [])

    def test_late_answer_is_ignored_and_the_next_call_is_served(self) -> None:
        calls = []

        def slow_first(env, d):
            calls.append(env)
            frame = daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), env.message_id)
            if len(calls) == 1:
                threading.Timer(0.3, lambda: d.connections[0].sendall(frame)).start()
                return b""
            return frame

        d, c = self.start(slow_first, timeout_ms=100)
        self.assertEqual(c.pre_exec("web_search", {}, session_id="s_01").reason, "fail_closed:timeout")
        time.sleep(0.5)  # the late answer arrives meanwhile; it must not poison the connection
        c._timeout_s = 2.0
        r = c.pre_exec("web_search", {}, session_id="s_01")
        self.assertEqual((r.verdict, r.reason), ("ALLOW", "within_thresholds"))
        self.assertEqual(len(d.connections), 1)

    def test_answers_are_paired_by_correlation_id_in_any_order(self) -> None:
        held: list = []
        lock = threading.Lock()

        def reversed_pair(env, d):
            with lock:
                held.append(env)
                if len(held) < 2:
                    return b""
            frames = [
                daemon_envelope("pre_exec_response", verdict_for(e.pre_exec, reason=e.pre_exec.tool_name), e.message_id)
                for e in reversed(held)
            ]
            return b"".join(frames)

        _, c = self.start(reversed_pair)
        results: dict[str, str] = {}

        def call(tool: str) -> None:
            results[tool] = c.pre_exec(tool, {}, session_id="s_01").reason

        threads = [threading.Thread(target=call, args=(t,)) for t in ("alpha", "beta")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, {"alpha": "alpha", "beta": "beta"})

    def test_what_goes_on_the_wire(self) -> None:
        d, c = self.start()
        c.pre_exec("web_search", {"q": "päris", "n": 10.0, "a": [1, None]}, estimated_cost_usd=0.002, nonce="abc", session_id="s_01")
        (env,) = d.requests()
        self.assertTrue(d.received[0][1], "the envelope's HMAC did not verify")
        self.assertEqual(env.key_id, KEY_ID)
        self.assertEqual(env.correlation_id, env.message_id)
        self.assertGreater(env.client_timestamp_ns, 0)
        p = env.pre_exec
        self.assertEqual(p.tool_params_json, '{"a":[1,null],"n":10.0,"q":"päris"}')
        self.assertEqual(p.tool_params_hash, hashlib.sha256(p.tool_params_json.encode()).digest())
        self.assertEqual((p.estimated_cost_usd, p.estimated_cost_usd_decimal), (0.002, "0.002"))
        self.assertEqual(p.nonce, (int.from_bytes(hashlib.sha256(b"abc").digest()[:8], "big") >> 12) + 1)
        self.assertEqual(p.call_number, 1)

    def test_unserializable_params_are_sent_so_the_daemon_refuses_them(self) -> None:
        d, c = self.start()
        c.pre_exec("t", {"x": float("nan")}, session_id="s_01")
        c.pre_exec("t", {1: "non-string key"}, session_id="s_01")
        c.pre_exec("t", {"s": {1, 2}}, session_id="s_01")
        for env in d.requests():
            self.assertEqual(env.pre_exec.tool_params_json, "<params without a JSON form>")
            self.assertEqual(env.pre_exec.tool_params_hash, b"")

    def test_bad_calls_are_bad_request_and_never_sent(self) -> None:
        d, c = self.start()
        self.assertEqual(c.pre_exec("t", {}).reason, "fail_closed:bad_request")  # no session yet
        self.assertEqual(c.pre_exec("", {}, session_id="s_01").reason, "fail_closed:bad_request")
        self.assertEqual(c.pre_exec("t", {}, session_id="s_01", estimated_cost_usd="1e3").reason, "fail_closed:bad_request")
        self.assertEqual(c.pre_exec("t", {}, session_id="s_01", nonce=0).reason, "fail_closed:bad_request")
        self.assertEqual(d.requests(), [])

    def test_daemon_goes_away_and_comes_back(self) -> None:
        d, c = self.start(reconnect={"initial_delay_ms": 20, "max_delay_ms": 50})
        self.assertEqual(c.pre_exec("t", {}, session_id="s_01").verdict, "ALLOW")
        path = d.path
        d.close()
        time.sleep(0.1)
        self.assertEqual(c.pre_exec("t", {}, session_id="s_01").reason, "fail_closed:daemon_unavailable")
        again = FakeDaemon(allow, path=path)
        self.daemons.append(again)
        deadline = time.monotonic() + 5
        r = c.pre_exec("t", {}, session_id="s_01")
        while r.verdict != "ALLOW" and time.monotonic() < deadline:
            time.sleep(0.05)
            r = c.pre_exec("t", {}, session_id="s_01")
        self.assertEqual((r.verdict, r.reason), ("ALLOW", "within_thresholds"))

    def test_guard_settles_what_the_tool_cost(self) -> None:
        d, c = self.start()

        @guard(c, tool_name="search", estimate_usd="0.002", cost_usd=lambda result, q: result["cost"], session_id="s_01")
        def search(q: str) -> dict:
            return {"cost": "0.0015"}

        @guard(c, tool_name="flaky", estimate_usd="0.002", cost_on_error_usd="0.0005", session_id="s_01")
        def flaky() -> None:
            raise RuntimeError("upstream 500")

        self.assertEqual(search("x"), {"cost": "0.0015"})
        with self.assertRaises(RuntimeError):
            flaky()
        eventually(lambda: len(d.requests("post_exec")) == 2)
        (first, second) = d.requests("pre_exec")
        self.assertEqual(first.pre_exec.tool_params_json, '{"q":"x"}')
        self.assertEqual(second.pre_exec.tool_params_json, "{}")
        settled = [(e.post_exec.call_number, e.post_exec.actual_cost_usd_decimal) for e in d.requests("post_exec")]
        self.assertEqual(settled, [(1, "0.0015"), (2, "0.0005")])

    def test_async_tools_are_guarded_too(self) -> None:
        d, c = self.start()
        runs: list[str] = []

        @guard(c, tool_name="fetch", estimate_usd=0.001, session_id="s_01")
        async def fetch(url: str) -> str:
            await asyncio.sleep(0)
            runs.append(url)
            return "page"

        self.assertEqual(asyncio.run(fetch("https://example.com")), "page")
        eventually(lambda: len(d.requests("post_exec")) == 1)
        self.assertEqual([e.post_exec.actual_cost_usd_decimal for e in d.requests("post_exec")], ["0.001"])
        d.handler = lambda env, daemon: daemon_envelope(
            "pre_exec_response",
            verdict_for(env.pre_exec, verdict=pb.DENY, deny_reason=pb.MAX_REPEAT_EXCEEDED, reason="max_repeat_exceeded"),
            env.message_id,
        )
        with self.assertRaises(LeashDenied) as denied:
            asyncio.run(fetch("https://example.com"))
        self.assertEqual(denied.exception.reason, "max_repeat_exceeded")
        self.assertEqual(runs, ["https://example.com"])

    def test_register_starts_the_heartbeat_loop(self) -> None:
        def answer(env, d):
            kind = env.WhichOneof("payload")
            if kind == "heartbeat":
                ack = pb.HeartbeatAck(session_id=env.heartbeat.session_id, daemon_budget_remaining_decimal="0.25")
                return daemon_envelope("heartbeat_ack", ack, env.message_id)
            return allow(env, d)

        d, c = self.start(answer, heartbeat_interval_ms=20)
        registered = c.register(framework="pytest", metadata={"team": "ml"})
        self.assertEqual(registered.session_id, "s_01")
        eventually(lambda: len(d.requests("heartbeat")) >= 2)
        self.assertGreaterEqual(len(d.requests("heartbeat")), 2)
        self.assertEqual(d.requests("heartbeat")[0].heartbeat.session_id, "s_01")
        (reg,) = d.requests("register")
        self.assertEqual((reg.register.agent_id, reg.register.framework, dict(reg.register.metadata)), ("research-bot", "pytest", {"team": "ml"}))
        self.assertTrue(reg.register.runtime.startswith("python "))
        self.assertEqual(c.heartbeat().daemon_budget_remaining_usd, "0.25")

    def test_bad_options_are_one_line_errors(self) -> None:
        cases = [
            dict(organization_id="acme", agent_id="a"),  # no transport
            dict(socket_path="/x", grpc_address="127.0.0.1:1", organization_id="acme", agent_id="a"),
            dict(socket_path="/x", organization_id="", agent_id="a", hmac_key=KEY, key_id="k"),
            dict(socket_path="/x", organization_id="acme", agent_id="a", hmac_key=b"short", key_id="k"),
            dict(socket_path="/x", organization_id="acme", agent_id="a", hmac_key="zz" * 32, key_id="k"),
            dict(socket_path="/x", organization_id="acme", agent_id="a", hmac_key=KEY),  # no key_id
            dict(socket_path="/x", organization_id="acme", agent_id="a", hmac_key=KEY, key_id="k", timeout_ms=0),
            dict(socket_path="/x", organization_id="acme", agent_id="a", hmac_key=KEY, key_id="k", daemon_public_key="ab"),
        ]
        for options in cases:
            with self.subTest(options=options), self.assertRaises(LeashError) as caught:
                LeashClient(**options)
            self.assertEqual(caught.exception.code, "invalid_argument")
            self.assertNotIn("\n", str(caught.exception))


class Receipts(unittest.TestCase):
    """With daemon_public_key, an ALLOW acts only on a receipt that verifies and binds this call."""

    def setUp(self) -> None:
        self.signer = Signer()
        self.daemon: FakeDaemon | None = None
        self.client: LeashClient | None = None

    def tearDown(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.daemon is not None:
            self.daemon.close()

    def run_with(self, change=lambda data: data, signer: Signer | None = None, key_id=None, no_receipt=False):
        def answer(env, d):
            p = env.pre_exec
            data = {
                "session_id": p.session_id,
                "call_number": p.call_number,
                "tool_name": p.tool_name,
                "params_hash": p.tool_params_hash.hex(),
                "nonce": p.nonce,
                "verdict": "ALLOW",
                "reason": "within_thresholds",
            }
            receipt, entry_hash = (signer or self.signer).receipt(p.call_number, change(data), key_id=key_id)
            r = verdict_for(p, receipt="" if no_receipt else receipt, entry_hash=entry_hash)
            return daemon_envelope("pre_exec_response", r, env.message_id)

        self.daemon = FakeDaemon(answer)
        self.client = client(self.daemon, daemon_public_key=self.signer.public_key_hex)
        runs = []

        @guard(self.client, tool_name="web_search", session_id="s_01", nonce=lambda: 42)
        def web_search(query: str) -> str:
            runs.append(query)
            return query

        try:
            web_search("x")
        except LeashDenied as denied:
            self.assertEqual(runs, [])
            return denied.result
        self.assertEqual(runs, ["x"])
        return None

    def test_a_receipt_that_verifies_and_binds_the_call_runs_the_tool(self) -> None:
        self.assertIsNone(self.run_with())

    def test_signed_by_another_key(self) -> None:
        r = self.run_with(signer=Signer(), key_id=self.signer.key_id)
        self.assertEqual(r.reason, "fail_closed:bad_receipt")
        self.assertIn("bad_signature", r.detail)

    def test_another_key_id(self) -> None:
        r = self.run_with(signer=Signer())
        self.assertEqual(r.reason, "fail_closed:bad_receipt")
        self.assertIn("kid_mismatch", r.detail)

    def test_no_receipt(self) -> None:
        self.assertEqual(self.run_with(no_receipt=True).reason, "fail_closed:bad_receipt")

    def test_a_genuine_receipt_of_another_decision(self) -> None:
        changes = {
            "session_id": "s_99",
            "call_number": 99,
            "tool_name": "rm_rf",
            "params_hash": "00" * 32,
            "nonce": 43,
            "verdict": "DENY",
            "reason": "max_repeat_exceeded",
        }
        for field, value in changes.items():
            with self.subTest(field=field):
                self.tearDown()
                r = self.run_with(lambda data: {**data, field: value})
                self.assertIsNotNone(r, f"a receipt with another {field} was accepted")
                self.assertEqual(r.reason, "fail_closed:bad_receipt")
                self.assertIn(field, r.detail)
                self.daemon = self.client = None


if __name__ == "__main__":
    unittest.main()
