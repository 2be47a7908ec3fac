"""``[mcps.<namespace>]``: what configures an upstream MCP server (read by ``toolcrib.config``), and the checks its
schema cannot say."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from toolcrib.delegation_settings import ConsentConfig, ExchangeConfig
from toolcrib.governing import Launch
from toolcrib.strict import Strict

# what an upstream server may send the agent's client during a call ([mcps.x] forward); all by default but
# url_elicitation (a page the user is sent to is the server's: a phishing path, to be let through knowingly)
Forwardable = Literal["progress", "log", "elicitation", "url_elicitation", "sampling"]
FORWARDABLE: tuple[Forwardable, ...] = get_args(Forwardable)
FORWARDED: tuple[Forwardable, ...] = tuple(what for what in FORWARDABLE if what != "url_elicitation")


class McpConfig(Strict):
    """``[mcps.<namespace>]``: an upstream MCP server, a stdio ``command`` or a streamable-HTTP ``url``."""

    command: str | None = Field(None, description="program to start (stdio)")
    args: list[str] = Field(default_factory=list, description="its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables to add")
    cwd: str | None = Field(None, description="its working directory, relative to the config file")
    url: str | None = Field(None, description="streamable-HTTP endpoint, instead of command")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers to send (url only)")
    exchange: ExchangeConfig | None = Field(None, description="call it as the caller (url only): each call with a "
                                            "token [oauth.client] exchanges the caller's access token for (RFC "
                                            "8693), in place of headers' Authorization")
    consent: ConsentConfig | None = Field(None, description="call it with each person's own grant (url only): "
                                          "OAuth authorization code with PKCE, asked of a person at their first "
                                          "call, kept under [credentials]")
    trusted: bool = Field(False, description="trust its tool annotations (readOnlyHint counts for plan mode), and "
                          "serve its redefined tools without a lock")
    follow_changes: bool = Field(False, description="without a toolcrib.lock, serve a tool it redefines at once "
                                 "(by default what toolcrib first saw is served until toolcrib lock accepts a "
                                 "change)")
    lazy: bool = Field(False, description="connect only when an agent loads it through the dynamic tools")
    enabled: bool = Field(True, description="false: never started")
    timeout: PositiveFloat = Field(30.0, description="seconds to connect and list its tools")
    forward: list[Forwardable] = Field(
        list(FORWARDED), description="what the server may send the agent's client "
        "during a call: its progress, its log messages, its questions to the user (forms), pages it sends the user "
        "to (url_elicitation: https only, never by default), its requests for a turn of the client's model; what "
        "is left out is refused to the server (or, for progress and logs, kept in the host's log)")
    confine: bool = Field(False, description="run the stdio server confined: it reads only the system's folders, "
                          "its own code and read, writes only a temporary folder of its own and write, has no network "
                          "unless network, and runs under the limits below (Linux: Landlock and seccomp)")
    read: list[str] = Field(default_factory=list, description="more folders or files a confined server may read, "
                            "relative to the config file")
    write: list[str] = Field(default_factory=list, description="folders a confined server may write in (and read), "
                             "relative to the config file")
    network: bool = Field(False, description="a confined server may use the network")
    memory_mb: PositiveInt | None = Field(4096, description="a confined server's address space, in MiB")
    cpu_seconds: PositiveInt | None = Field(None, description="a confined server's CPU time, in seconds")
    open_files: PositiveInt | None = Field(1024, description="files a confined server may have open")
    processes: PositiveInt | None = Field(None, description="processes its user may run at once, counted by the "
                                          "kernel per user (for root, not enforced)")

    @model_validator(mode="after")
    def _one_transport(self) -> McpConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and self.confine:
            raise ValueError("confine applies to a stdio server (command), not to a url: toolcrib runs only the former")
        return self

    def launches(self, where: str, base_dir: Path, env: Mapping[str, str]) -> list[Launch]:
        """The program this server is (its code governs the host: it runs as the host's user, unconfined)."""
        if self.command is None or not self.enabled:
            return []
        cwd = (base_dir / self.cwd) if self.cwd else Path.cwd()
        return [Launch(where, [self.command, *self.args], cwd, self.env)]


def problems(server: McpConfig) -> list[tuple[tuple[str, ...], str]]:
    """What is wrong with ``server`` beyond its schema: (key path within its table, message)."""
    found: list[tuple[tuple[str, ...], str]] = []
    if server.url is not None and not server.url.startswith(("http://", "https://")):
        found.append((("url",), f"expected an http:// or https:// URL, got {server.url!r}"))
    if server.command is not None and server.headers:
        found.append((("headers",), "headers apply to url servers only"))
    for key in ("exchange", "consent"):
        if server.command is not None and getattr(server, key) is not None:
            what = "a token exchange" if key == "exchange" else "a person's own grant"
            found.append(((key,), f"{what} applies to url servers only: a stdio server gets no caller's token"))
    return found


__all__ = ["FORWARDABLE", "FORWARDED", "McpConfig", "problems"]
