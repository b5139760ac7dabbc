# A daemon that misbehaves on purpose, on a real Unix socket: it answers what each test tells it to,
# so the client's fail-closed rules can be shown one by one. Not a Leash daemon; the real one is live_daemon.py's.
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import tempfile
import threading
import time
from typing import Callable, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from leash_client import pb
from leash_client.envelope import split_hmac
from leash_client.framing import FrameDecoder, encode_frame
from leash_client.message_id import new_message_id
from leash_client.receipts import key_id_of

KEY = bytes(range(1, 33))
KEY_ID = "k1"

# Handler: the agent's envelope in, the raw bytes to write back out (b"" writes nothing).
Handler = Callable[[pb.Envelope, "FakeDaemon"], bytes]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class Signer:
    """An Ed25519 key that makes receipts the way @leash/chain does (compact JWS of an entry body)."""

    def __init__(self) -> None:
        self._key = Ed25519PrivateKey.generate()
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public_key_hex = raw.hex()
        self.key_id = key_id_of(raw)

    def receipt(self, seq: int, data: dict, kind: str = "decision", key_id: Optional[str] = None) -> tuple[str, str]:
        """(receipt, entry_hash) of an entry with `data`."""
        kid = key_id or self.key_id
        body = json.dumps(
            {
                "v": 1,
                "chain_id": "0190aaaa-0000-7000-8000-000000000000",
                "seq": seq,
                "entry_id": new_message_id(),
                "kind": kind,
                "timestamp_ns": str(time.time_ns()),
                "prev_hash": "00" * 32,
                "key_id": kid,
                "data": data,
            },
            separators=(",", ":"),
        ).encode("utf-8")
        signing_input = f"{b64(json.dumps({'alg': 'EdDSA', 'kid': kid}, separators=(',', ':')).encode())}.{b64(body)}"
        signature = self._key.sign(signing_input.encode("ascii"))
        return f"{signing_input}.{b64(signature)}", hashlib.sha256(body).hexdigest()


def daemon_envelope(
    payload: str,
    message,
    correlation_id: str,
    *,
    key: bytes = KEY,
    message_id: Optional[str] = None,
    timestamp_ns: Optional[int] = None,
) -> bytes:
    """A daemon's frame: envelope with server_timestamp_ns and the HMAC appended."""
    env = pb.Envelope(
        protocol_version="1.0.0",
        message_id=message_id or new_message_id(),
        correlation_id=correlation_id,
        server_timestamp_ns=time.time_ns() if timestamp_ns is None else timestamp_ns,
    )
    getattr(env, payload).CopyFrom(message)
    unsigned = env.SerializeToString()
    return encode_frame(unsigned + bytes([0x32, 32]) + hmac.new(key, unsigned, hashlib.sha256).digest())


def verdict_for(request: pb.PreExecRequest, **fields) -> pb.PreExecResponse:
    """An ALLOW within_thresholds for `request` (call number as asked), with `fields` overriding."""
    base = dict(
        session_id=request.session_id,
        call_number=request.call_number,
        verdict=pb.ALLOW,
        reason="within_thresholds",
        budget_remaining_usd=0.498,
        budget_remaining_usd_decimal="0.498",
        chain_seq=request.call_number,
        entry_hash="ab" * 32,
    )
    base.update(fields)
    return pb.PreExecResponse(**base)


def allow(env: pb.Envelope, _daemon: "FakeDaemon") -> bytes:
    if env.WhichOneof("payload") == "register":
        return daemon_envelope("register_response", pb.RegisterResponse(session_id="s_01", negotiated_protocol="1.0.0"), env.message_id)
    if env.WhichOneof("payload") != "pre_exec":
        return b""
    return daemon_envelope("pre_exec_response", verdict_for(env.pre_exec), env.message_id)


class FakeDaemon:
    def __init__(self, handler: Handler = allow, path: Optional[str] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="leash-py-fake-")
        self.path = path or os.path.join(self.dir, "leash.sock")
        self.handler = handler
        self.received: list[tuple[pb.Envelope, bool]] = []  # (envelope, its HMAC verified)
        self.connections: list[socket.socket] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(8)
        self._running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self._running:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            for body in decoder.push(chunk):
                env = pb.Envelope.FromString(body)
                unsigned, mac = split_hmac(body)
                ok = mac is not None and hmac.compare_digest(hmac.new(KEY, unsigned, hashlib.sha256).digest(), mac)
                self.received.append((env, ok))
                # As Leash's daemon does: a post_exec that asks for it is acknowledged (the handler
                # plays the rest of the daemon).
                if env.WhichOneof("payload") == "post_exec" and env.post_exec.ack_requested:
                    ack = pb.PostExecAck(session_id=env.post_exec.session_id, call_number=env.post_exec.call_number)
                    out = daemon_envelope("post_exec_ack", ack, env.message_id)
                else:
                    out = self.handler(env, self)
                if out:
                    try:
                        conn.sendall(out)
                    except OSError:
                        return

    def requests(self, payload: str = "pre_exec") -> list[pb.Envelope]:
        return [e for e, _ in self.received if e.WhichOneof("payload") == payload]

    def close(self) -> None:
        self._running = False
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._server.close()
        except OSError:
            pass
        for c in self.connections:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
