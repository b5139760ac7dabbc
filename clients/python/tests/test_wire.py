# The client's wire pieces on their own: framing, envelopes and their HMAC, message ids, the replay
# window, money and params on the wire, nonces. Cross-language agreement is checked from vitest.
from __future__ import annotations

import hashlib
import hmac
import json
import time
import unittest
from decimal import Decimal

from leash_client import canonical_hash, pb
from leash_client.client import _nonce_of
from leash_client.envelope import open_daemon_envelope, seal_envelope, split_hmac
from leash_client.errors import WireError
from leash_client.framing import MAX_FRAME_BYTES, FrameDecoder, encode_frame
from leash_client.message_id import is_message_id, new_message_id
from leash_client.money import money_from_wire, money_to_wire
from leash_client.params import UNSERIALIZABLE_PARAMS, NotCanonical, canonical_json, params_on_wire
from leash_client.replay import ReplayWindow

KEY = bytes(range(1, 33))


class Framing(unittest.TestCase):
    def test_frames_cut_across_chunks(self) -> None:
        stream = encode_frame(b"one") + encode_frame(b"two!")
        decoder = FrameDecoder()
        got = []
        for i in range(len(stream)):
            got += decoder.push(stream[i : i + 1])
        self.assertEqual(got, [b"one", b"two!"])

    def test_zero_and_oversize_lengths_fail_the_decoder_for_good(self) -> None:
        for prefix, code in ((b"\0\0\0\0", "malformed_frame"), ((MAX_FRAME_BYTES + 1).to_bytes(4, "big"), "message_too_large")):
            decoder = FrameDecoder()
            with self.assertRaises(WireError) as caught:
                decoder.push(prefix)
            self.assertEqual(caught.exception.code, code)
            with self.assertRaises(WireError):
                decoder.push(encode_frame(b"ok"))
        with self.assertRaises(WireError):
            encode_frame(b"")


class Envelopes(unittest.TestCase):
    def daemon_copy(self, body: bytes) -> bytes:
        """Turns an agent envelope into a daemon one (server timestamp), re-MACed."""
        env = pb.Envelope.FromString(body)
        env.server_timestamp_ns, env.client_timestamp_ns = env.client_timestamp_ns, 0
        env.hmac = b""
        unsigned = env.SerializeToString()
        return unsigned + bytes([0x32, 32]) + hmac.new(KEY, unsigned, hashlib.sha256).digest()

    def test_seal_covers_everything_but_field_6(self) -> None:
        mid, body = seal_envelope("heartbeat", pb.Heartbeat(session_id="s", last_call_number=3), key=KEY, key_id="k1")
        env = pb.Envelope.FromString(body)
        self.assertEqual((env.message_id, env.correlation_id, env.key_id, env.protocol_version), (mid, mid, "k1", "1.0.0"))
        unsigned, mac = split_hmac(body)
        self.assertEqual(mac, hmac.new(KEY, unsigned, hashlib.sha256).digest())
        env.hmac = b""
        self.assertEqual(unsigned, env.SerializeToString())

    def test_open_accepts_a_good_envelope_once(self) -> None:
        _, body = seal_envelope("heartbeat", pb.Heartbeat(session_id="s"), key=KEY)
        daemon = self.daemon_copy(body)
        replay = ReplayWindow()
        self.assertEqual(open_daemon_envelope(daemon, key=KEY, replay=replay).heartbeat.session_id, "s")
        with self.assertRaises(WireError) as caught:
            open_daemon_envelope(daemon, key=KEY, replay=replay)
        self.assertEqual(caught.exception.code, "replayed_message")

    def test_open_refuses_tampering_and_bad_macs(self) -> None:
        _, body = seal_envelope("heartbeat", pb.Heartbeat(session_id="s"), key=KEY)
        daemon = self.daemon_copy(body)
        flipped = bytearray(daemon)
        flipped[daemon.index(b"s", 40)] ^= 1  # inside the payload, covered by the MAC
        cases = {
            "bad_hmac": [bytes(flipped), daemon[:-34], daemon + daemon[-34:]],
            "invalid_envelope": [b"\xff\xff", pb.Envelope(message_id="x").SerializeToString()],
        }
        for code, bodies in cases.items():
            for b in bodies:
                with self.subTest(code=code, body=b[:8]), self.assertRaises(WireError) as caught:
                    open_daemon_envelope(b, key=KEY, replay=ReplayWindow())
                self.assertEqual(caught.exception.code, code)
        with self.assertRaises(WireError):
            open_daemon_envelope(daemon, key=b"\x09" * 32, replay=ReplayWindow())

    def test_message_ids_are_uuid7_with_the_time(self) -> None:
        now_ms = time.time_ns() // 1_000_000
        mid = new_message_id(now_ms)
        self.assertTrue(is_message_id(mid))
        self.assertEqual(int(mid.replace("-", "")[:12], 16), now_ms)
        self.assertNotEqual(new_message_id(now_ms), mid)
        self.assertFalse(is_message_id(mid.upper()))
        self.assertFalse(is_message_id("01936f6e-7a5b-4c3d-9e8f-0123456789ab"))  # v4

    def test_replay_window_bounds_time(self) -> None:
        now = [10**18]
        window = ReplayWindow(window_ms=1000, clock_ns=lambda: now[0])
        for ts in (0, now[0] - 2 * 10**9, now[0] + 2 * 10**9):
            with self.assertRaises(WireError) as caught:
                window.admit("a", ts)
            self.assertEqual(caught.exception.code, "timestamp_out_of_window")
        window.admit("a", now[0])
        now[0] += 2 * 10**9  # the id expired: a copy is now refused by its timestamp instead
        window.admit("a", now[0])


class Money(unittest.TestCase):
    def test_to_wire(self) -> None:
        cases = [
            (0.002, "0.002"),
            (0.1, "0.1"),
            (123.0, "123"),
            (1e-7, "0.0000001"),
            (1e21, "1000000000000000000000"),
            (-0.0, "0"),
            (5, "5"),
            ("0.0015", "0.0015"),
            (Decimal("1.50"), "1.5"),
        ]
        for amount, decimal in cases:
            with self.subTest(amount=amount):
                self.assertEqual(money_to_wire(amount), (float(decimal), decimal))
        for bad in ("1e3", "+1", " 1", "01", float("nan"), float("inf"), True, None, "1" * 41):
            with self.subTest(bad=bad), self.assertRaises(WireError):
                money_to_wire(bad)  # type: ignore[arg-type]

    def test_from_wire(self) -> None:
        self.assertEqual(money_from_wire(0.498, "0.498", "f"), "0.498")
        self.assertEqual(money_from_wire(0, "0.498", "f"), "0.498")
        self.assertEqual(money_from_wire(0.25, "", "f"), "0.25")
        self.assertIsNone(money_from_wire(0, "", "f"))
        for double, decimal, code in ((0.5, "0.498", "money_mismatch"), (0, "1e3", "invalid_decimal"), (float("nan"), "", "invalid_decimal")):
            with self.assertRaises(WireError) as caught:
                money_from_wire(double, decimal, "f")
            self.assertEqual(caught.exception.code, code)


class Params(unittest.TestCase):
    def test_canonical_json_is_the_references(self) -> None:
        value = {"b": [1, 2.5, None, True], "a": {"é": "ü", "z": 10.0}, "big": 2**70, "e": 1e16}
        self.assertEqual(
            canonical_json(value), '{"a":{"z":10.0,"é":"ü"},"b":[1,2.5,null,true],"big":1180591620717411303424,"e":1e+16}'
        )
        self.assertEqual(canonical_hash({}), hashlib.sha256(b"{}").hexdigest())

    def test_structural_rejection(self) -> None:
        deep: dict = {}
        cursor = deep
        for _ in range(64):
            cursor["x"] = {}
            cursor = cursor["x"]
        canonical_json(deep)  # 64 nested levels pass
        cursor["x"] = {}
        cycle: dict = {}
        cycle["self"] = cycle
        cases = {
            "too_deep": [deep, cycle],
            "non_finite_number": [{"x": float("nan")}, {"x": [float("-inf")]}],
            "non_string_key": [{1: "a"}, {"x": {None: 1}}],
            "unsupported_type": [{"x": {1, 2}}, {"x": b"bytes"}, {"x": Decimal("1")}, {"x": object()}],
            "lone_surrogate": [{"x": "\ud800"}, {"\udc00": 1}],
        }
        for code, values in cases.items():
            for v in values:
                with self.subTest(code=code), self.assertRaises(NotCanonical) as caught:
                    canonical_json(v)
                self.assertEqual(caught.exception.code, code)

    def test_params_on_wire(self) -> None:
        self.assertEqual(params_on_wire(None), ("{}", hashlib.sha256(b"{}").hexdigest()))
        text = '{"q": "päris", "n": 10.0}'
        self.assertEqual(params_on_wire(text), (text, canonical_hash(json.loads(text))))
        for sent_as_is in ("[1]", "not json", '{"x": NaN}'):
            self.assertEqual(params_on_wire(sent_as_is), (sent_as_is, None))
        self.assertEqual(params_on_wire({"x": float("nan")}), (UNSERIALIZABLE_PARAMS, None))


class Nonces(unittest.TestCase):
    def test_nonce_forms(self) -> None:
        self.assertEqual(_nonce_of(7), 7)
        self.assertEqual(_nonce_of("18446744073709551615"), 2**64 - 1)
        text = _nonce_of("18446744073709551616")  # over uint64: hashed like any other text
        self.assertEqual(text, (int.from_bytes(hashlib.sha256(b"18446744073709551616").digest()[:8], "big") >> 12) + 1)
        self.assertLess(text, 2**52 + 2)
        randoms = {_nonce_of(None) for _ in range(100)}
        self.assertEqual(len(randoms), 100)
        self.assertTrue(all(1 <= n <= 2**53 for n in randoms))
        for bad in (0, -1, 2**64, "", True, 1.5):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                _nonce_of(bad)  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
