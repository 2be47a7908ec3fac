"""Fetching a URL for an agent, as every pack should (the ``web`` and ``media`` packs do): no private addresses,
every redirect hop checked, size and time capped.

- Every address a host name resolves to must be a public one (loopback, private, link-local where cloud metadata
  lives, CGNAT, multicast, unspecified and reserved ranges are refused, IPv4-mapped IPv6 included); the connection
  is made to the address that was checked, so no second DNS lookup can differ.
- Each redirect hop is checked again, addresses and the agent's argument rules both (``ctx.check_rules``).
- ``timeout`` is a deadline for the whole fetch, redirects included, held by closing the connection when it
  passes (a server that drips its status line, headers or body a byte at a time cannot keep a call, a thread or a
  socket past it); ``max_bytes`` caps the body and ``MAX_HEADER_BYTES`` the status line and headers. Content comes
  as sent (``Accept-Encoding: identity``: no decompression bombs). No credentials in URLs.

An operator may allow private networks, or some ``host:port``, per pack (an internal mirror).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from toolcrib.errors import ToolError

REDIRECTS = {301, 302, 303, 307, 308}
USER_AGENT = "toolcrib/0.1"
MAX_HEADER_BYTES = 64 * 1024  # the status line and every header of one answer, together


class _Deadline:
    """One deadline for a whole fetch: when it passes, the connection in use is shut down, which ends a read that
    is waiting on it (a socket timeout alone is per read, and a byte a second never trips it)."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.passed = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, at - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.passed:
                self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            if self._sock is not None:
                self._shut(self._sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class _HeaderBudget:
    """The response's file, counting what the status line and headers take (``HTTPException`` past the cap)."""

    def __init__(self, fp: Any, budget: int) -> None:
        self._fp = fp
        self.budget: int | None = budget

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self._fp.readline(limit)
        if self.budget is not None:
            self.budget -= len(line)
            if self.budget < 0:
                raise http.client.HTTPException(f"its headers are longer than {MAX_HEADER_BYTES} bytes")
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fp, name)


class _Response(http.client.HTTPResponse):
    def begin(self) -> None:
        budget = _HeaderBudget(self.fp, MAX_HEADER_BYTES)
        self.fp = budget  # type: ignore[assignment]
        try:
            super().begin()
        finally:
            budget.budget = None  # the body (chunk lines included) is max_bytes' to cap


@dataclass(frozen=True)
class WebLimits:
    """What a fetch may do: ``verb`` names it in messages ("download", "fetch"), ``where`` is the config table an
    operator relaxes it in."""

    max_bytes: int
    timeout: float
    max_redirects: int = 5
    allow_private_networks: bool = False
    allowed_private_hosts: tuple[str, ...] = ()
    verb: str = "fetch"
    where: str = "[packs.web]"
    user_agent: str = USER_AGENT
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    content_type: str | None
    body: bytes


def refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address may not be fetched from, or None when it is a public one."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_global:
        return None
    for kind, test in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local), ("private", ip.is_private),
                       ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified)):
        if test:
            return kind
    return "not a public address"


def _past(verb: str) -> str:
    return {"download": "downloaded", "fetch": "fetched", "search": "searched"}.get(verb, f"{verb}ed")


def _plural(verb: str) -> str:
    return {"fetch": "fetches", "search": "searches"}.get(verb, f"{verb}s")


class _Target:
    def __init__(self, url: str, verb: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ToolError(f"only http and https URLs can be {_past(verb)}, not {parts.scheme or 'a bare path'!r}")
        if parts.username is not None or parts.password is not None:
            raise ToolError("URLs with credentials (user:password@host) are not accepted")
        if not parts.hostname:
            raise ToolError(f"{url!r} has no host")
        self.url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        try:
            self.port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ToolError(f"{url!r} has an invalid port") from None
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self.host_header = self.host if default else f"{self.host}:{self.port}"
        if ":" in self.host and not default:
            self.host_header = f"[{self.host}]:{self.port}"


def _address(target: _Target, limits: WebLimits, deadline: float) -> str:
    """The address to connect to: every address the name resolves to must be allowed (a name that also
    resolves to a private address is refused), and the first one is used, so no second lookup can differ."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve {target.host!r}: {exc.strerror}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    exempt = limits.allow_private_networks or f"{target.host}:{target.port}" in limits.allowed_private_hosts
    if not exempt:
        for address in addresses:
            why = refusal(ipaddress.ip_address(address.split("%", 1)[0]))
            if why is not None:
                raise ToolError(f"{target.host} resolves to a {why} address; {_plural(limits.verb)} from private "
                                f"networks are refused (an operator can allow them in {limits.where})")
    if time.monotonic() > deadline:
        raise ToolError(f"the {limits.verb} ran out of time")
    return addresses[0]


def _connect(target: _Target, address: str, deadline: float, watch: _Deadline) -> http.client.HTTPConnection:
    sock = socket.create_connection((address, target.port), timeout=max(0.1, deadline - time.monotonic()))
    watch.watch(sock)
    peer = sock.getpeername()[0]
    if peer.split("%", 1)[0] != address.split("%", 1)[0]:  # pragma: no cover - the kernel connected elsewhere
        sock.close()
        raise ToolError("the connection went to another address than the one that was checked")
    if target.scheme == "https":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
    conn = http.client.HTTPConnection(target.host, target.port, timeout=max(0.1, deadline - time.monotonic()))
    conn.response_class = _Response
    conn.sock = sock  # already connected to the checked address: http.client will not resolve the name again
    return conn


@contextlib.contextmanager
def open_url(url: str, limits: WebLimits, check: Callable[[str], None] | None = None,
             deadline: float | None = None) -> Iterator[tuple[str, http.client.HTTPResponse]]:
    """Follow ``url`` to a 200 answer: (the URL it ended at, the response, whose body is the caller's to read).
    ``check`` sees every hop's URL after the first (``lambda u: ctx.check_rules(url=u)``)."""
    deadline = time.monotonic() + limits.timeout if deadline is None else deadline
    watch = _Deadline(deadline)
    try:
        yield from _follow(url, limits, check, deadline, watch)
    finally:
        watch.cancel()


def _follow(url: str, limits: WebLimits, check: Callable[[str], None] | None, deadline: float,
            watch: _Deadline, method: str = "GET", body: bytes | None = None, headers: Mapping[str, str] | None = None,
            any_status: bool = False) -> Generator[tuple[str, http.client.HTTPResponse], None, None]:
    current = url
    for _hop in range(limits.max_redirects + 1):
        target = _Target(current, limits.verb)
        address = _address(target, limits, deadline)
        try:
            conn = _connect(target, address, deadline, watch)
            conn.request(method, target.path, body=body, headers={
                "Host": target.host_header, "User-Agent": limits.user_agent, "Accept-Encoding": "identity",
                **dict(limits.headers), **(headers or {})})
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            if watch.passed:
                raise ToolError(f"the {limits.verb} took longer than {limits.timeout:g} seconds") from None
            raise ToolError(f"cannot {limits.verb} {current}: {exc}") from None
        try:
            if response.status in REDIRECTS:
                location = response.getheader("Location")
                if not location:
                    raise ToolError(f"{current} redirected without a Location")
                current = urljoin(current, location)
                if check is not None:
                    check(current)  # the agent's URL rules hold for every hop, not just the first
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method, body = ("HEAD" if method == "HEAD" else "GET"), None  # what browsers do, and RFC 9110
                continue
            if response.status != 200 and not any_status:
                raise ToolError(f"{current} answered HTTP {response.status} {response.reason}")
            declared = response.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes:
                raise ToolError(f"{current} is {declared} bytes, more than the limit of {limits.max_bytes}")
            yield current, response
            return
        finally:
            conn.close()
    raise ToolError(f"more than {limits.max_redirects} redirects")


def chunks(response: http.client.HTTPResponse, limits: WebLimits, deadline: float,
           nothing_kept: str = "") -> Iterator[bytes]:
    """The body in pieces, within the deadline and ``max_bytes`` (a ``ToolError`` past either; ``nothing_kept`` is
    added to its message: "; nothing was saved")."""
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise ToolError(f"the {limits.verb} took longer than {limits.timeout:g} seconds{nothing_kept}")
        try:
            chunk = response.read1(65536)
        except (OSError, http.client.HTTPException) as exc:
            late = time.monotonic() >= deadline
            why = f"took longer than {limits.timeout:g} seconds" if late else f"broke off ({exc})"
            raise ToolError(f"the {limits.verb} {why}{nothing_kept}") from None
        if not chunk:
            if time.monotonic() >= deadline:  # the connection was shut at the deadline: the body is not whole
                raise ToolError(f"the {limits.verb} took longer than {limits.timeout:g} seconds{nothing_kept}")
            return
        size += len(chunk)
        if size > limits.max_bytes:
            raise ToolError(f"the {limits.verb} is larger than the limit of {limits.max_bytes} bytes{nothing_kept}")
        yield chunk


@dataclass(frozen=True)
class Answer:
    """A whole answer of any status (``request``): where it ended after redirects, its status and reason, its
    headers (names in lower case; the last of a repeated one) and its body."""

    url: str
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")


def request(method: str, url: str, limits: WebLimits, *, body: bytes | None = None,
            headers: Mapping[str, str] | None = None, check: Callable[[str], None] | None = None) -> Answer:
    """One HTTP request of any method, checked as ``open_url`` (addresses, every redirect hop through ``check``,
    the deadline, ``max_bytes``), answered whatever its status: a 404 or a 500 is the caller's to report. A 303,
    or a 301/302 to a POST, is followed with a GET and no body; other redirects keep the method and body."""
    deadline = time.monotonic() + limits.timeout
    watch = _Deadline(deadline)
    hops = _follow(url, limits, check, deadline, watch, method.upper(), body, headers, any_status=True)
    try:
        final, response = next(hops)
        content = b"".join(chunks(response, limits, deadline))
        return Answer(final, response.status, response.reason, {k.lower(): v for k, v in response.getheaders()},
                      content)
    finally:
        hops.close()  # the connection
        watch.cancel()


def fetch(url: str, limits: WebLimits, check: Callable[[str], None] | None = None) -> Fetched:
    """The whole body of ``url`` in memory (at most ``max_bytes``), after redirects, checked as ``open_url``."""
    deadline = time.monotonic() + limits.timeout
    with open_url(url, limits, check, deadline) as (final, response):
        body = b"".join(chunks(response, limits, deadline))
        return Fetched(final, response.getheader("Content-Type"), body)


__all__ = ["Answer", "Fetched", "WebLimits", "chunks", "fetch", "open_url", "refusal", "request"]
