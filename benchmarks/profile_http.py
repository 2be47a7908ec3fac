"""Where the server's time goes in one HTTP call: toolcrib's ASGI app driven in process (no sockets, no client),
the bench pack's ``add`` called again and again, the heap frozen as the benchmarks freeze it.

    python benchmarks/profile_http.py [--era modern|legacy] [--oauth] [--calls N] [--profile cumulative|tottime]

Prints microseconds per request (the best and the median of five batches), and with ``--profile`` cProfile's
top functions. A developer's tool for finding what to cut, not a benchmark: ``benchmarks/run.py`` measures the
real thing, over loopback, beside the peers.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.update({"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "math=bench_pack:PACK",
                   "BENCH_TOOLS": "10", "BENCH_TOKEN": "bench-token-0123456789"})

import peers  # noqa: E402

from toolcrib.mcp.http import HttpApp, HttpOptions  # noqa: E402
from toolcrib.mcp.state import serving_state  # noqa: E402

HEADERS = [(b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer bench-token-0123456789"),
           (b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "profile", "version": "1"}}


async def post(app: Any, message: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """One POST into the app; what it sent back (the client leaves once the answer is whole)."""
    body = json.dumps(message).encode()
    given = {name for name, _ in headers}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": f"/agents/{peers.AGENT}/mcp", "raw_path": b"", "query_string": b"", "root_path": "",
             "headers": [*(h for h in HEADERS if h[0] not in given), *headers,
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
    sent: list[dict[str, Any]] = []
    read = False
    answered = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await app(scope, receive, send)
    return sent


async def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp())
    config = folder / "toolcrib.toml"
    config.write_text(peers.CONFIG.replace(f"[agents.{peers.AGENT}]\n",
                                           f'[agents.{peers.AGENT}]\ntoken_env = "BENCH_TOKEN"\n'))
    call: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "math__add", "arguments": {"a": 2, "b": 3}}}
    bearer = [(b"authorization", f"Bearer {_oauth(folder, config)}".encode())] if args.oauth else []
    async with serving_state(config) as state:
        app = HttpApp(state, HttpOptions())
        async with app.app.router.lifespan_context(app.app):
            if args.era == "modern":
                call["params"]["_meta"] = META
                headers = [*bearer, (b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"tools/call"),
                           (b"mcp-name", b"math__add")]
            else:
                opened = await post(app, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "profile", "version": "1"}}}, [*bearer, (b"mcp-protocol-version",
                                                                                      b"2025-11-25")])
                session = dict(opened[0]["headers"])[b"mcp-session-id"]
                headers = [*bearer, (b"mcp-session-id", session), (b"mcp-protocol-version", b"2025-11-25")]
                await post(app, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
            answer = b"".join(m.get("body", b"") for m in await post(app, call, headers))
            assert b'\\"result\\":5' in answer, answer[:300]
            gc.collect()
            gc.freeze()
            batches = []
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(args.calls // 5):
                    await post(app, call, headers)
                batches.append((time.perf_counter() - started) / (args.calls // 5) * 1e6)
            print(f"{args.era}{' (OAuth)' if args.oauth else ''}: {min(batches):.1f} us per request (best of 5 "
                  f"batches), median {statistics.median(batches):.1f}")
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.calls):
                    await post(app, call, headers)
                profile.disable()
                pstats.Stats(profile).sort_stats(args.profile).print_stats(40)


def _oauth(folder: Path, config: Path) -> str:
    """``config`` made an OAuth resource server (an RS256 key of its own, in a JWKS file) whose identity takes the
    agent; an access token it accepts (as benchmarks/run.py's OAuth row)."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "bench", "use": "sig", "alg": "RS256"}
    issuer, audience = "https://issuer.bench.example", "https://toolcrib.bench.example"
    (folder / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    config.write_text(f'[oauth]\nissuer = "{issuer}"\naudience = "{audience}"\njwks_file = "jwks.json"\n'
                      + config.read_text() + f'\n[agents.{peers.AGENT}.identity]\nclaims = {{ sub = "bench-*" }}\n')
    return jwt.encode({"iss": issuer, "aud": audience, "sub": "bench-client", "exp": int(time.time()) + 3600},
                      key, algorithm="RS256", headers={"kid": "bench"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["modern", "legacy"], default="modern",
                        help="modern: 2026-07-28 (no session); legacy: 2025-11-25 (one session)")
    parser.add_argument("--oauth", action="store_true",
                        help="an OAuth access token (RS256, the keys in a JWKS file) instead of the static token")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--profile", choices=["cumulative", "tottime"], help="print cProfile's top functions")
    asyncio.run(main(parser.parse_args()))
