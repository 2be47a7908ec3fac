"""toolcrib pack ``web``: download a URL into the workspace, refusing private addresses. See README.md."""

from __future__ import annotations

import http.client
import ipaddress
import os
import socket
import ssl
import time
from typing import Annotated, Any
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict, Field

import toolcrib
from toolcrib import Context, ToolError
from toolcrib.workspace import Root, display, parts_of

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

USER_AGENT = "toolcrib-web/0.1"
REDIRECTS = {301, 302, 303, 307, 308}


class Settings(BaseModel):
    """``[packs.web]``."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(50 * 1024 * 1024, gt=0, description="largest download")
    timeout: float = Field(60.0, gt=0, description="seconds for the whole download, redirects included")
    max_redirects: int = Field(5, ge=0)
    allow_private_networks: bool = Field(False, description="also fetch from private and loopback addresses")
    allowed_private_hosts: list[str] = Field(default_factory=list, description='"host:port" exceptions')


def _settings(ctx: Context) -> Settings:
    return ctx.settings if isinstance(ctx.settings, Settings) else Settings()


def _refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
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


class _Target:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ToolError(f"only http and https URLs can be downloaded, not {parts.scheme or 'a bare path'!r}")
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


def _address(target: _Target, settings: Settings, deadline: float) -> str:
    """The address to connect to: every address the name resolves to must be allowed (a name that also
    resolves to a private address is refused), and the first one is used, so no second lookup can differ."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve {target.host!r}: {exc.strerror}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    exempt = settings.allow_private_networks or f"{target.host}:{target.port}" in settings.allowed_private_hosts
    if not exempt:
        for address in addresses:
            why = _refusal(ipaddress.ip_address(address.split("%", 1)[0]))
            if why is not None:
                raise ToolError(f"{target.host} resolves to a {why} address; downloads from private networks are "
                                "refused (an operator can allow them in [packs.web])")
    if time.monotonic() > deadline:
        raise ToolError("the download ran out of time")
    return addresses[0]


def _connect(target: _Target, address: str, deadline: float) -> http.client.HTTPConnection:
    sock = socket.create_connection((address, target.port), timeout=max(0.1, deadline - time.monotonic()))
    peer = sock.getpeername()[0]
    if peer.split("%", 1)[0] != address.split("%", 1)[0]:  # pragma: no cover - the kernel connected elsewhere
        sock.close()
        raise ToolError("the connection went to another address than the one that was checked")
    if target.scheme == "https":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
    conn = http.client.HTTPConnection(target.host, target.port, timeout=max(0.1, deadline - time.monotonic()))
    conn.sock = sock  # already connected to the checked address: http.client will not resolve the name again
    return conn


@toolcrib.tool(annotations={"destructiveHint": True, "openWorldHint": True}, rule_subject=("url", "path"))
def download_file(
    url: Annotated[str, Field(max_length=8192, description="An http(s) URL")],
    path: Annotated[str, Field(max_length=4096, description="Destination, relative to the workspace root")],
    ctx: Context,
    overwrite: Annotated[bool, Field(strict=True, description="Replace an existing file at path")] = False,
) -> dict[str, Any]:
    """Download a URL into a file of the workspace. Private and loopback addresses are refused, every
    redirect is checked (addresses and the agent's URL rules), and size and time are capped; a failed download
    leaves no partial file."""
    settings = _settings(ctx)
    deadline = time.monotonic() + settings.timeout
    parts = parts_of(path, allow_root=False)
    root = Root(ctx.workspace)
    current = url
    for _hop in range(settings.max_redirects + 1):
        target = _Target(current)
        address = _address(target, settings, deadline)
        try:
            conn = _connect(target, address, deadline)
            conn.request("GET", target.path, headers={"Host": target.host_header, "User-Agent": USER_AGENT,
                                                      "Accept-Encoding": "identity"})
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise ToolError(f"cannot download {current}: {exc}") from None
        try:
            if response.status in REDIRECTS:
                location = response.getheader("Location")
                if not location:
                    raise ToolError(f"{current} redirected without a Location")
                current = urljoin(current, location)
                ctx.check_rules(url=current)  # the agent's URL rules hold for every hop, not just the first
                continue
            if response.status != 200:
                raise ToolError(f"{current} answered HTTP {response.status} {response.reason}")
            declared = response.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > settings.max_bytes:
                raise ToolError(f"{current} is {declared} bytes, more than the limit of {settings.max_bytes}")
            size = _save(response, root, parts, settings, deadline, overwrite)
        finally:
            conn.close()
        return {"url": current, "path": display(parts), "bytes": size,
                "content_type": response.getheader("Content-Type")}
    raise ToolError(f"more than {settings.max_redirects} redirects")


def _save(response: http.client.HTTPResponse, root: Root, parts: tuple[str, ...], settings: Settings,
          deadline: float, overwrite: bool) -> int:
    size = 0
    with root.atomic_writer(parts, create_parents=True, overwrite=overwrite) as (fd, _):
        while True:
            if time.monotonic() > deadline:
                raise ToolError(f"the download took longer than {settings.timeout:g} seconds; nothing was saved")
            try:
                chunk = response.read1(65536)
            except (OSError, http.client.HTTPException) as exc:
                raise ToolError(f"the download broke off ({exc}); nothing was saved") from None
            if not chunk:
                break
            size += len(chunk)
            if size > settings.max_bytes:
                raise ToolError(f"the download is larger than the limit of {settings.max_bytes} bytes; nothing was "
                                "saved")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
    return size


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [download_file]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings
