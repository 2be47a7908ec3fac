"""The operator's TOML config as pydantic models. Every error names the file, the key path and the expectation.

Found as ``--config PATH``, else ``$TOOLCRIB_CONFIG``, else ``./toolcrib.toml``, else the built-in default
(``default.toml`` beside this module), which serves a ``default`` agent the first-party read-only tools.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from toolcrib import patterns
from toolcrib.consent import Consenting, vault_for
from toolcrib.delegation import Acting, exchanger_for
from toolcrib.errors import ConfigError, Problem
from toolcrib.governing import Found, Governs, Launch, governing
from toolcrib.limits import RateError, parse_rate
from toolcrib.names import RESERVED_NAMESPACE, SEPARATOR, agent_name_problem, namespace_problem, tool_name_problem
from toolcrib.strict import Strict
from toolcrib.supply.mcp.settings import McpConfig
from toolcrib.supply.mcp.settings import problems as mcp_problems
from toolcrib.supply.openapi.settings import OpenAPIConfig
from toolcrib.supply.openapi.settings import problems as openapi_problems
from toolcrib.tool import ANNOTATION_KEYS

CONFIG_ENV = "TOOLCRIB_CONFIG"
DEFAULT_FILE = "toolcrib.toml"
LOCK_FILE = "toolcrib.lock"  # beside the config: the definitions `toolcrib lock` recorded
BUILTIN_NAME = "<built-in default config>"

Mode = Literal["default", "plan", "acceptEdits", "dontAsk", "bypassPermissions"]
MODE_ALIASES = {"yolo": "bypassPermissions"}  # the agent SDKs' names for toolcrib's modes (docs/operators.md)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOOPBACK = re.compile(r"http://(127\.0\.0\.1|\[::1\]|localhost)(:\d+)?(/|$)")
CALLBACK_PATH = "/oauth/callback"  # where people's browsers come back with their grant (toolcrib.consent)
_CAPABILITY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


# toolcrib's own packs (plugins/ in its repository): what [host] isolate_packs = "third-party" keeps in the host
FIRST_PARTY = frozenset({"toolcrib-fs", "toolcrib-shell", "toolcrib-web", "toolcrib-media", "toolcrib-llm"})


class HostConfig(Strict):
    """``[host]``: where file tools work, auditing, and the limits every call runs under."""

    workspace: str = Field(".", description="root for file tools, relative to the config file")
    tool_dirs: Annotated[list[str], Governs("the tool folder {name!r}")] = Field(
        default_factory=list, description="folders whose Python files declare tools (@toolcrib.tool); each folder is "
        "a pack named after it; relative to the config file")
    audit_log: Annotated[str | None, Governs("the audit log")] = Field(
        None, description="JSON-lines file, one line per call decision; no audit when absent")
    audit_arguments: bool = Field(False, description="also write each call's arguments to the audit log")
    call_timeout: PositiveFloat = Field(60.0, description="seconds a call may run, unless its tool declares its own")
    max_argument_bytes: PositiveInt = Field(1_048_576, description="largest argument payload, in bytes of JSON")
    max_result_chars: PositiveInt = Field(100_000, description="longest result text; longer results are truncated")
    sync_workers: PositiveInt = Field(128, description="worker threads for sync handlers (calls beyond wait)")
    availability_timeout: PositiveFloat = Field(5.0, description="seconds a tool's availability check may take; a "
                                                "slower one hides its tool")
    shutdown_timeout: PositiveFloat = Field(10.0, description="seconds `serve` waits for calls and streams to end "
                                            "when stopped, before it closes them")
    http_session_idle: PositiveFloat = Field(1800.0, description="seconds an HTTP session may sit idle before it "
                                             "is closed")
    # the SDK's own default (each idle session holds about 40 KiB here: 10,000 are about 400 MiB)
    http_max_sessions: PositiveInt = Field(10_000, description="open HTTP sessions per agent; more are refused (503); "
                                           "with [cluster], in the whole fleet")
    http_stream_seconds: PositiveFloat | None = Field(None, description="close a 2025-11-25 call's SSE stream after "
                                                      "this many seconds while the call runs on: the client "
                                                      "reconnects with Last-Event-ID and gets the rest (SSE polling, "
                                                      "for proxies that cut long responses)")
    list_ttl: NonNegativeFloat = Field(60.0, description="seconds a 2026-07-28 client may keep an agent's lists of "
                                       "tools, resources, templates and prompts (ttlMs): they change only at a "
                                       "reload, which listening clients hear at once; 0 asks them to list each time")
    task_ttl: PositiveFloat = Field(3600.0, description="seconds an MCP task (a call a client that speaks tasks "
                                    "polls for) and its result are kept from its creation; one still working then is "
                                    "stopped")
    max_tasks: PositiveInt = Field(100, description="MCP tasks kept per agent; beyond it a call runs as a plain call, "
                                   "or, where its tool runs only as a task, is refused")
    metrics: bool = Field(False, description="serve Prometheus metrics at /metrics (serve --http; also --metrics)")
    metrics_token_env: str | None = Field(None, description="environment variable holding a bearer token that "
                                          "/metrics then requires")
    lock: Literal["changed", "strict"] = Field("changed", description="with a toolcrib.lock beside the config: "
                                               "\"changed\" holds back each tool whose definition differs from the "
                                               "lock; \"strict\" also each tool the lock does not know")
    isolate_packs: Literal["none", "third-party", "all"] = Field(
        "none", description="run packs in confined processes of their own: none (only those with isolate = true), "
        "third-party (every installed pack but toolcrib's own, and the llm pack, which runs llm plugins), or all; "
        "[packs.<name>] isolate = false keeps one in")
    allow_unconfined: bool = Field(False, description="on a kernel that cannot confine (no Landlock ABI 4), start "
                                   "confined servers and isolated packs unconfined rather than not at all")


class Rule(Strict):
    """One permission dimension: ``allow`` or ``deny``, a list of patterns; never both."""

    allow: list[str] | None = None
    deny: list[str] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Rule:
        if self.allow is not None and self.deny is not None:
            raise ValueError("has both allow and deny; use one: allow lists what is permitted, deny what is not")
        if self.allow is None and self.deny is None:
            raise ValueError("needs allow = [...] or deny = [...]")
        return self


class Permissions(Strict):
    """``[agents.<name>.permissions]``. A missing dimension denies everything of that dimension."""

    plugins: Rule | None = Field(None, description="tool packs, by namespace")
    mcps: Rule | None = Field(None, description="upstream MCP servers, by namespace")
    tools: Rule | None = Field(None, description="tools, by full name; may carry argument specifiers")
    resources: Rule | None = Field(None, description="resources and resource templates, by full name or URI")
    prompts: Rule | None = Field(None, description="prompts, by full name")
    skills: Rule | None = Field(None, description="skills, by name")
    subagents: Rule | None = Field(None, description="other agents offered as tools, by agent name")
    ask: list[str] = Field(default_factory=list, description="tool patterns whose calls need approval")
    approve: list[str] = Field(default_factory=list, description="tool patterns whose calls run without asking "
                               "although an ask rule selects them (pre-approved; deny still wins)")


class ScopeRights(Strict):
    """``[agents.<name>.identity.needs_scope."<scope>"]``: what only a token with the scope sees."""

    tools: list[str] = Field(default_factory=list, description="tool patterns, as in permissions")
    resources: list[str] = Field(default_factory=list, description="resource patterns (names or URIs)")
    prompts: list[str] = Field(default_factory=list, description="prompt patterns")


class IdentityConfig(Strict):
    """``[agents.<name>.identity]``: which OAuth access tokens (verified against ``[oauth]``) act as this agent."""

    claims: dict[str, str | list[str]] = Field(description="claim (a dotted path for nested ones) -> a glob or a "
                                               "list of globs; every claim named must match (for a list-valued "
                                               "claim such as groups, any of its values)")
    scopes: list[str] = Field(default_factory=list, description="scopes every token must carry (from its "
                              "`scope` or `scp` claim); a token without them is refused (403, insufficient_scope)")
    needs_scope: dict[str, ScopeRights] = Field(default_factory=dict, description="scope -> what a token without "
                                                "it does not see (tools, resources, prompts, as patterns)")


class LimitConfig(Strict):
    """A limit on calls: how many per period, and how many at once."""

    rate: str | None = Field(None, description="calls per period: \"60/minute\" (second, minute, hour, day)")
    in_flight: PositiveInt | None = Field(None, description="calls running at once; one more is refused")


class ToolSearchConfig(Strict):
    """``[agents.<name>.tool_search]``: list a few tools up front and let the agent search for the rest."""

    listed: list[str] = Field(default_factory=list, description="tool patterns (globs over full names) listed up "
                              "front; every other tool the agent sees is found by toolcrib__search_tools")
    when_more_than: int | None = Field(None, ge=0, description="search once the agent sees more tools than this")
    when_tokens_more_than: int | None = Field(None, ge=0, description="search once its tools' definitions pass "
                                              "this many tokens (estimated: 4 characters of JSON a token)")
    results: int = Field(5, ge=1, le=50, description="how many tools a search returns at most")


class LimitsConfig(LimitConfig):
    """``[agents.<name>.limits]``: limits on the agent's calls, all together and per tool (per replica)."""

    tools: dict[str, LimitConfig] = Field(default_factory=dict, description="tool pattern (a glob over full "
                                          "names) -> its own limit, counted over the calls it matches")


class AgentConfig(Strict):
    """``[agents.<name>]``: one agent, its model, its mode and what it may see."""

    model: str | None = Field(None, description="model id; its capabilities come from [models.<id>]")
    mode: Mode = Field("default", description="default | plan | acceptEdits | dontAsk | bypassPermissions (also "
                       "'yolo', the Qoder SDK's name for bypassPermissions)")
    description: str | None = Field(None, description="what the agent does, shown when offered as a sub-agent")
    prompt: str | None = Field(None, description="its system prompt when it runs as a sub-agent")
    max_turns: PositiveInt = Field(10, description="most model turns of one sub-agent run")
    runner: Literal["auto", "client", "llm"] = Field(
        "auto", description="how it runs as a sub-agent: on the calling client's model (\"client\": MCP sampling, "
        "deprecated as of 2026-07-28), on its own model through the llm library (\"llm\"), or \"auto\": on its "
        "own model where an installed llm plugin runs its model with a key at hand, else on the client's")
    max_run_tokens: PositiveInt | None = Field(None, description="most tokens (input and output, as the model "
                                               "counts them) one run on its own model may use")
    run_timeout: float = Field(900.0, gt=0, le=3600, description="seconds one sub-agent run may take")
    token_env: str | list[str] | None = Field(None, description="environment variable holding the agent's HTTP "
                                              "bearer token, or a list of them (each set one is accepted: rotation)")
    identity: IdentityConfig | None = Field(None, description="OAuth access tokens that act as this agent")
    limits: LimitsConfig | None = Field(None, description="rate and concurrency limits on its calls")
    tool_search: ToolSearchConfig | None = Field(None, description="list a few tools up front and let the agent "
                                                 "search for the rest (toolcrib__search_tools)")
    bare_names: bool = Field(False, description="serve tools and prompts without their '<namespace>__' where no "
                             "two share a name")
    approvals: Literal["client", "operator", "client-then-operator"] = Field(
        "client", description="who answers a call an ask rule holds: the agent's client (elicitation), an operator "
        "([operator]), or the client and, when it cannot answer, an operator")
    approval_timeout: float = Field(300.0, gt=0, le=86_400, description="seconds a call waits for an operator; "
                                    "then it is denied")
    allow_dangerously_skip_permissions: bool = Field(False, description="required beside mode = bypassPermissions")
    upstream_scopes: dict[str, list[str]] = Field(default_factory=dict, description="source namespace -> the most "
                                                  "scopes a token exchanged for this agent's calls there may carry "
                                                  "(as a sub-agent too: every agent of the chain narrows them)")
    permissions: Permissions | None = Field(None, description="missing: the agent sees nothing")

    @field_validator("mode", mode="before")
    @classmethod
    def _seed_mode_names(cls, value: Any) -> Any:
        return MODE_ALIASES.get(value, value) if isinstance(value, str) else value


class PackConfig(BaseModel):
    """``[packs.<namespace>]``: ``enabled``, and the pack's own settings (validated by the pack's model)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    enabled: bool = Field(True, description="false: the pack is never imported")
    isolate: bool = Field(False, description="run the pack in a confined process of its own, never imported by the "
                          "host: its tools are served to the host over MCP (toolcrib serve)")
    network: bool = Field(False, description="an isolated pack may use the network")

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class SkillConfig(Strict):
    """``[skills.<name>]``: a folder holding a SKILL.md."""

    path: Annotated[str, Governs("the folder of skill {key!r}")] = Field(
        description="folder with SKILL.md, relative to the config file")


# What a hook program gets of the host's environment, besides what its table names: never the host's secrets
# (tokens, TOOLCRIB_STATE_SECRET, cloud keys).
HOOK_BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class CommandHook(Strict):
    """``[[hooks.pre_tool_use]]``: a program that decides on matching calls before their handlers run."""

    command: list[str] = Field(description="the program and its arguments (no shell), relative to the config file")
    tools: list[str] = Field(default_factory=lambda: ["*"], description="the calls it sees, by full tool name")
    agents: list[str] = Field(default_factory=lambda: ["*"], description="the agents whose calls it sees")
    timeout: PositiveFloat = Field(10.0, description="seconds it may take; a hook that takes longer denies")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables to set for it")
    pass_env: list[str] = Field(default_factory=list, description="the host's environment variables it also gets "
                                "(besides PATH, HOME, USER, LOGNAME, LANG, LC_*, TZ and TMPDIR)")
    out_of_reach: bool = Field(False, description="the operator vouches that what the command runs is out of every "
                               "agent's reach: needed for a command whose code toolcrib cannot locate (a shell "
                               "string, python -c) while the hook's working directory lies in the workspace")
    process: Literal["per-call", "long-lived"] = Field(
        "per-call", description="per-call: the program runs once a call (the call on stdin, the answer on stdout and "
        "its exit status); long-lived: one process answers every call, the call as one JSON line on its stdin and "
        "the answer as one JSON line on its stdout, started again if it dies")

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """What the program gets of ``env`` (the host's): ``HOOK_BASE_ENV``, ``pass_env``, then its own ``env``."""
        return {**{k: env[k] for k in (*HOOK_BASE_ENV, *self.pass_env) if k in env}, **self.env}

    def launches(self, where: str, base_dir: Path, env: Mapping[str, str]) -> list[Launch]:
        """The program this hook runs, in the config's folder."""
        return [Launch(where, self.command, base_dir, self.environment(env))]


class HooksConfig(Strict):
    """``[hooks]``: policy hooks written as programs, for operators who write no Python."""

    pre_tool_use: list[CommandHook] = Field(default_factory=list, description="run in order before a call")
    post_tool_use: list[CommandHook] = Field(default_factory=list, description="run in order after a call, on its "
                                             "result")

    def programs(self) -> list[tuple[str, CommandHook]]:
        """Every hook with where it is written (``hooks.pre_tool_use[0]``)."""
        return [(f"hooks.{event}[{i}]", hook) for event in ("pre_tool_use", "post_tool_use")
                for i, hook in enumerate(getattr(self, event))]


class ArgumentCuration(Strict):
    """``[tools."<name>".arguments.<argument>]``: one argument of a curated tool."""

    value: Any = Field(None, description="always this value: the argument leaves the schema, and a call that gives "
                       "it is refused")
    default: Any = Field(None, description="the value when a call leaves the argument out (the schema shows it)")
    description: str | None = Field(None, description="what the schema says the argument is")

    @model_validator(mode="after")
    def _value_or_default(self) -> ArgumentCuration:
        if self.value is not None and (self.default is not None or self.description is not None):
            raise ValueError("a fixed value leaves the schema, so it takes no default or description")
        return self


class ToolCuration(Strict):
    """``[tools."<namespace>__<tool>"]``: how the host serves one tool of any source, as its source offers it."""

    name: str | None = Field(None, description="serve it as <namespace>__<name> (rules and the audit log use that)")
    title: str | None = Field(None, description="its title")
    description: str | None = Field(None, description="its description, replacing the source's")
    keywords: list[str] = Field(default_factory=list, description="more words tool search finds it by (beside "
                                "its pack's)")
    annotations: dict[str, Any] = Field(default_factory=dict, description="MCP annotations to set (readOnlyHint, "
                                        "destructiveHint, idempotentHint, openWorldHint, title); the operator vouches "
                                        "for them, so they count even for an untrusted server")
    arguments: dict[str, ArgumentCuration] = Field(default_factory=dict, description="per argument: a fixed "
                                                   "value, or a default, or a description")
    task: Literal["forbidden", "optional", "required"] | None = Field(None, description="whether it runs as an "
                                                                     "MCP task for a client that speaks them: "
                                                                     "never, when the client can, or only so")


class OAuthClientConfig(Strict):
    """``[oauth.client]``: toolcrib as a client of the issuer, to exchange a caller's access token for one an
    upstream source takes (RFC 8693; the sources whose table has ``exchange``)."""

    token_endpoint: str = Field(description="the issuer's token endpoint")
    id: str = Field(description="toolcrib's client id at the issuer")
    secret: str = Field(description="its client secret, usually ${A_VARIABLE} (sent as client_secret_basic; never "
                        "logged)")
    actor_key: str | None = Field(None, description="a PEM private key (RSA or EC), usually ${A_VARIABLE} (a file "
                                  "a tool might read is no place for it): each exchange then carries an actor token "
                                  "it signs, naming the agent that calls and the agents whose run it is in (RFC 8693 "
                                  "act)")
    actor_issuer: str | None = Field(None, description="the iss of actor tokens, as the issuer trusts it (default: "
                                     "[oauth] audience)")


class OAuthConfig(Strict):
    """``[oauth]``: ``serve --http`` as an OAuth 2.1 resource server: JWT access tokens from one issuer."""

    issuer: str = Field(description="the authorization server's issuer URL (the tokens' `iss`)")
    audience: str = Field(description="the `aud` tokens must carry: this server as a resource (RFC 8707)")
    jwks_url: str | None = Field(None, description="where the issuer's signing keys are; default: the jwks_uri of "
                                 "its metadata (/.well-known/openid-configuration or oauth-authorization-server)")
    jwks_file: Annotated[str | None, Governs("the JWKS file of [oauth]")] = Field(
        None, description="a JWKS file instead, relative to the config (air-gapped setups); read again when it changes")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                                           "ES256", "ES384", "ES512", "EdDSA"],
                                  description="signature algorithms accepted (asymmetric only)")
    leeway: NonNegativeFloat = Field(30.0, description="seconds of clock skew allowed on exp, nbf and iat")
    jwks_refresh: PositiveFloat = Field(600.0, description="seconds the keys are kept before they are fetched "
                                        "again; a token signed by an unknown key fetches them at once (at most "
                                        "every 30 s)")
    resource_url: str | None = Field(None, description="this server's public base URL, for the protected resource "
                                     "metadata (default: the URL the request came to)")
    scopes_supported: list[str] = Field(default_factory=list, description="scopes the metadata advertises")
    client: OAuthClientConfig | None = Field(None, description="toolcrib's own client at the issuer, for sources "
                                             "called as their caller (exchange)")


class ClusterConfig(Strict):
    """``[cluster]``: state every replica shares, on Redis (without it, each process keeps its own in memory)."""

    redis_url: str = Field(description="redis:// or rediss:// URL of the shared store; put its password in a "
                           "${VARIABLE} (expanded when serving starts, never logged)")
    key_prefix: str = Field("toolcrib:", description="prefix of every key toolcrib writes (several deployments may "
                            "share one Redis)")
    fail_open: bool = Field(False, description="while Redis is unreachable, let calls through uncounted by their "
                            "limits (default: refuse them, saying the limit store is unreachable)")
    required: bool = Field(False, description="/readyz answers 503 while Redis is unreachable")
    lease_seconds: PositiveFloat = Field(30.0, description="how long a running call's place in an in_flight limit, "
                                         "and a running MCP task's lease, hold without being renewed: a replica "
                                         "that dies gives its places back, and its tasks fail, within this time")
    timeout: PositiveFloat = Field(1.0, description="seconds to wait for Redis on each request before counting it "
                                   "unreachable")


class OperatorConfig(Strict):
    """``[operator]``: the operator endpoint of ``toolcrib serve --http``, where operators answer approvals."""

    token_env: str = Field(description="environment variable holding the operator's bearer token (no agent's)")
    url: str | None = Field(None, description="where operators reach the server (http(s)://host:port): the CLI's "
                            "default, and the base of the links a webhook is sent")
    webhook: str | None = Field(None, description="a URL POSTed a JSON description of each pending approval, with "
                                "signed one-time approve and deny links")
    console: bool = Field(False, description="serve the operator's console at /console/ (needs toolcrib[console])")
    identity: IdentityConfig | None = Field(None, description="OAuth access tokens (verified against [oauth]) that "
                                            "act as the operator, besides the operator token")


class PolicyConfig(Strict):
    """``[policy]``: policies as code, beside the rules (``toolcrib_policy``, Cedar)."""

    cedar: Annotated[str | None, Governs("the Cedar policies")] = Field(
        None, description="a file of Cedar policies (relative to the config file) that decide with the rules; needs "
        "pip install 'toolcrib[cedar]'")
    timeout: PositiveFloat = Field(1.0, description="seconds a policy may take to answer one request; one that "
                                   "takes longer denies it (fail closed)")


class CredentialsConfig(Strict):
    """``[credentials]``: how the grants people give sources (``consent``) are kept."""

    key: str = Field(description="the AES-256-GCM key they are sealed with: 32 bytes in base64, usually "
                     "${A_VARIABLE} (never logged)")


class Config(Strict):
    """The whole file."""

    host: HostConfig = HostConfig()
    models: dict[str, dict[str, bool]] = Field(default_factory=dict, description="capabilities per model id")
    packs: dict[str, PackConfig] = Field(default_factory=dict)
    mcps: dict[str, McpConfig] = Field(default_factory=dict)
    openapi: dict[str, OpenAPIConfig] = Field(default_factory=dict, description="OpenAPI documents, by namespace")
    skills: dict[str, SkillConfig] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    hooks: HooksConfig = HooksConfig()
    oauth: OAuthConfig | None = Field(None, description="OAuth 2.1 access tokens over HTTP")
    tools: dict[str, ToolCuration] = Field(default_factory=dict, description="curation of tools, by the full name "
                                           "their source serves them under")
    cluster: ClusterConfig | None = Field(None, description="state shared by replicas, on Redis")
    operator: OperatorConfig | None = Field(None, description="the operator endpoint (approvals out of band)")
    policy: PolicyConfig = PolicyConfig()
    credentials: CredentialsConfig | None = Field(None, description="how people's grants to sources are kept")


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from."""

    config: Config
    source: str  # the file's path, or BUILTIN_NAME
    base_dir: Path  # relative paths in the file are relative to this
    file: Path | None = None  # the file, resolved (None: BUILTIN_NAME, or text given to parse_config)
    written: Path | None = None  # the file as it was named (absolute, links kept): protected under that name too

    def resolve(self, path: str) -> Path:
        return (self.base_dir / os.path.expanduser(path)).resolve()

    def acting(self, source: McpConfig | OpenAPIConfig, what: str, where: str,
               env: Mapping[str, str] | None = None) -> Acting | Consenting | None:
        """How ``source`` (configured at ``where``, ``mcps.github``) is called as its caller: by a token exchange
        through ``[oauth.client]`` (``exchange``), with each person's own grant (``consent``), or not (None).
        Raises ``MissingVariable`` for a secret that names a variable that is not set, and ``ToolError`` for a
        ``[credentials] key`` that is no key."""
        client = self.config.oauth.client if self.config.oauth is not None else None
        if source.exchange is not None and client is not None:  # (the config checks keep either from lacking its
            secret = expand(client.secret, "oauth.client.secret", env)  # client or key)
            actor = None
            if client.actor_key is not None:
                assert self.config.oauth is not None
                actor = (expand(client.actor_key, "oauth.client.actor_key", env).encode(),
                         client.actor_issuer or self.config.oauth.audience)
            narrowing = {agent: config.upstream_scopes for agent, config in self.config.agents.items()
                         if config.upstream_scopes}
            return Acting(source.exchange, exchanger_for(client.token_endpoint, client.id, secret, actor), what,
                          where.partition(".")[2], narrowing)
        consent, kept = source.consent, self.config.credentials
        if consent is not None and kept is not None:
            given = expand(consent.client_secret, f"{where}.consent.client_secret", env) \
                if consent.client_secret is not None else None
            vault = vault_for(expand(kept.key, "credentials.key", env), "credentials.key")
            return Consenting(consent, given, vault, what, where)
        return None

    def consents(self, where: str) -> bool:
        """Whether the source configured at ``where`` (``mcps.github``) is called with each person's own grant."""
        table, _, name = where.partition(".")
        source: McpConfig | OpenAPIConfig | None = self.config.mcps.get(name) if table == "mcps" else \
            self.config.openapi.get(name) if table == "openapi" else None
        return source is not None and source.consent is not None and source.enabled

    @functools.cached_property
    def version(self) -> str:
        """A digest of what the config says (not of the file's bytes): replicas given one config agree on it, and
        an approval given under one version is refused under another."""
        return hashlib.sha256(self.config.model_dump_json().encode()).hexdigest()[:32]

    @property
    def path(self) -> Path | None:
        """The config file itself; None for the built-in default."""
        if self.source == BUILTIN_NAME:
            return None
        return self.file if self.file is not None else self.base_dir / Path(self.source).name

    def governing(self, env: Mapping[str, str] | None = None) -> dict[Path, str]:
        """The files the config makes govern the host (path -> what it is): the config itself (as named and as it
        is), the lock beside it, and every path a field marked ``Governs`` names or a program the config starts
        runs (``toolcrib.governing``). No tool may change any of them (``toolcrib.workspace.protect``). Folders
        Python imports modules from are in ``code_folders``."""
        found: dict[Path, str] = {}
        path = self.path
        if path is not None:
            for name in (path, self.written):
                if name is not None:
                    found.setdefault(name, f"the config file {path.name}")
            found[path.parent / LOCK_FILE] = f"the lock file {LOCK_FILE}"
        for item in self._found(env)[0]:
            if item.kind == "path":
                found.setdefault(item.path, item.what)
        return found

    def code_folders(self, env: Mapping[str, str] | None = None) -> dict[Path, str]:
        """Folders a program the config starts imports Python modules from (folder -> the program's key path)."""
        return {item.path: item.what for item in self._found(env)[0] if item.kind == "code"}

    def opaque_programs(self, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
        """Programs whose code cannot be located from their command line: (key path, why)."""
        return self._found(env)[1]

    def _found(self, env: Mapping[str, str] | None) -> tuple[list[Found], list[tuple[str, str]]]:
        return governing(self.config, self.base_dir, os.environ if env is None else env)

    @property
    def workspace(self) -> Path:
        return self.resolve(self.config.host.workspace)

    def disabled_packs(self) -> frozenset[str]:
        return frozenset(ns for ns, pack in self.config.packs.items() if not pack.enabled)

    @functools.cached_property
    def _isolated(self) -> frozenset[str]:
        packs = self.config.packs
        named = {ns for ns, pack in packs.items() if pack.enabled and pack.isolate}
        policy = self.config.host.isolate_packs
        if policy == "none":
            return frozenset(named)
        import importlib.metadata

        from toolcrib.dists import name_and_version

        for point in importlib.metadata.entry_points(group="toolcrib"):  # what is installed, none of it imported
            dist = name_and_version(point.dist)[0] if point.dist is not None else ""
            ours = dist in FIRST_PARTY and point.name != "llm"  # the llm pack runs llm plugins, others' code
            kept = point.name in packs and "isolate" in packs[point.name].model_fields_set and \
                not packs[point.name].isolate
            disabled = point.name in packs and not packs[point.name].enabled
            if (policy == "all" or not ours) and not kept and not disabled:
                named.add(point.name)
        return frozenset(named)

    def isolated_packs(self) -> frozenset[str]:
        """The packs run in a process of their own (``isolate = true``, or ``[host] isolate_packs``): never
        imported here."""
        return self._isolated

    def capabilities(self, model: str | None) -> frozenset[str]:
        if model is None:
            return frozenset()
        return frozenset(name for name, on in self.config.models.get(model, {}).items() if on)


# -- finding and loading -------------------------------------------------------------------------------------


def find_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to use: ``path``, else ``$TOOLCRIB_CONFIG``, else ``./toolcrib.toml``; None: built-in."""
    env = os.environ if env is None else env
    if path is not None:
        return Path(path)
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    local = Path(DEFAULT_FILE)
    return local if local.is_file() else None


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Find, read and validate the config; raise ``ConfigError`` listing every problem."""
    found = find_config(path, env)
    if found is None:
        text = resources.files("toolcrib").joinpath("default.toml").read_text(encoding="utf-8")
        return parse_config(text, BUILTIN_NAME, Path.cwd())
    try:
        text = found.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem("error", str(found), "config file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem("error", str(found), f"cannot read the config file: {exc}")]) from None
    loaded = parse_config(text, str(found), found.resolve().parent, file=found.resolve())
    return dataclasses.replace(loaded, written=Path(os.path.abspath(found)))


def parse_config(text: str, source: str, base_dir: Path, *, file: Path | None = None) -> LoadedConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([Problem("error", source, f"invalid TOML: {exc}")]) from None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(located(problems_from_validation(exc, source), text, source)) from None
    problems = check_config(config, source)
    if problems:
        raise ConfigError(located(problems, text, source))
    return LoadedConfig(config=config, source=source, base_dir=base_dir, file=file)


def check_config(config: Config, source: str) -> list[Problem]:
    """The rules a schema cannot say: names, patterns, references between tables."""
    problems: list[Problem] = []

    def error(path: tuple[Any, ...], message: str) -> None:
        problems.append(Problem("error", f"{source}: {key_path(path)}", message))

    for model, caps in config.models.items():
        for cap in caps:
            if _CAPABILITY.fullmatch(cap) is None:
                error(("models", model, cap), "capability names are letters, digits, '_' and '-', letter first")
    for table in ("packs", "mcps", "openapi"):
        for namespace in getattr(config, table):
            problem = namespace_problem(namespace)
            if problem is not None:
                error((table, namespace), f"invalid namespace: {problem}")
            elif namespace == RESERVED_NAMESPACE:
                error((table, namespace), f"the namespace {RESERVED_NAMESPACE!r} is reserved for the host's own tools "
                      f"({RESERVED_NAMESPACE}__load_skill, {RESERVED_NAMESPACE}__run_agent, ...); choose another name")
    named: dict[str, int] = {}
    for i, folder in enumerate(config.host.tool_dirs):
        name = Path(folder).name
        if not folder.strip() or not name:
            error(("host", "tool_dirs", i), "expected a folder, relative to the config file")
        elif name in named:
            error(("host", "tool_dirs", i), f"two tool folders are named {name!r} (tool_dirs[{named[name]}]); the "
                  "folder's name is its pack's namespace, so each needs its own")
        elif (problem := namespace_problem(name)) is not None:
            error(("host", "tool_dirs", i), f"the folder's name is its pack's namespace, and {name!r} is not one: "
                  f"{problem}")
        else:
            named[name] = i
    for namespace in sorted(set(config.packs) & set(config.mcps)):
        error(("mcps", namespace), f"namespace {namespace!r} is also a pack's ([packs.{namespace}]); two sources "
              "can never share a namespace")
    for namespace in sorted(set(config.openapi) & (set(config.packs) | set(config.mcps))):
        other = f"[mcps.{namespace}]" if namespace in config.mcps else f"[packs.{namespace}]"
        error(("openapi", namespace), f"namespace {namespace!r} is also {other}; two sources can never share a "
              "namespace")
    for name, api in config.openapi.items():  # each kind's own checks (toolcrib.supply.<kind>.settings)
        for path, message in openapi_problems(api):
            error(("openapi", name, *path), message)
    for name, mcp in config.mcps.items():
        for path, message in mcp_problems(mcp):
            error(("mcps", name, *path), message)
    client = config.oauth.client if config.oauth is not None else None
    acting: list[tuple[str, str, McpConfig | OpenAPIConfig]] = [("mcps", n, mcp) for n, mcp in config.mcps.items()]
    acting += [("openapi", n, api) for n, api in config.openapi.items()]
    for table, name, upstream in acting:
        if upstream.exchange is not None and client is None:
            error((table, name, "exchange"), "a token exchange needs [oauth] with [oauth.client] (toolcrib's client "
                  "at the issuer, which exchanges the caller's token)")
        if upstream.consent is None:
            continue
        if upstream.exchange is not None:
            error((table, name, "consent"), "give exchange or consent, not both: a call goes with one token")
        if config.oauth is None:
            error((table, name, "consent"), "each person's own grant needs [oauth]: the people who sign in there "
                  "are whom grants are kept for")
        if config.credentials is None:
            error((table, name, "consent"), "each person's own grant needs [credentials] (the key grants are kept "
                  "under)")
        for key in ("authorization_endpoint", "token_endpoint", "redirect_uri"):
            url = getattr(upstream.consent, key)
            if not (url.startswith("https://") or _LOOPBACK.match(url)):
                error((table, name, "consent", key), f"expected an https:// URL (http:// only on this machine: "
                      f"127.0.0.1, [::1] or localhost), got {url!r}")
        if not urlsplit(upstream.consent.redirect_uri).path.endswith(CALLBACK_PATH):
            error((table, name, "consent", "redirect_uri"), f"expected toolcrib's {CALLBACK_PATH} at the URL "
                  f"people's browsers reach it by, got {upstream.consent.redirect_uri!r}")
    for tool, curation in config.tools.items():
        namespace, separator, own = tool.partition(SEPARATOR)
        if not separator or namespace_problem(namespace) is not None or tool_name_problem(own) is not None:
            error(("tools", tool), "expected the full name of a tool, <namespace>__<tool>, as its source serves it")
        if curation.name is not None and tool_name_problem(curation.name) is not None:
            error(("tools", tool, "name"), f"{curation.name!r}: {tool_name_problem(curation.name)} (the namespace "
                  f"stays: name = \"calc\" serves it as {namespace}__calc)")
        for key, value in curation.annotations.items():
            expected = ANNOTATION_KEYS.get(key)
            if expected is None:
                error(("tools", tool, "annotations", key), f"not an MCP tool annotation; they are "
                      f"{', '.join(ANNOTATION_KEYS)}")
            elif not isinstance(value, expected):
                error(("tools", tool, "annotations", key), f"expected {expected.__name__}, got {value!r}")
    hooks = [(name, i, hook) for name in ("pre_tool_use", "post_tool_use")
             for i, hook in enumerate(getattr(config.hooks, name))]
    for name, i, hook in hooks:
        where = ("hooks", name, i)
        if not hook.command or not hook.command[0]:
            error((*where, "command"), "expected the program to run, then its arguments: [\"python3\", \"check.py\"]")
        for key, dimension in (("tools", "tools"), ("agents", "subagents")):
            for j, text in enumerate(getattr(hook, key)):
                try:
                    pattern = patterns.parse(dimension, text)
                except patterns.PatternError as exc:
                    error((*where, key, j), str(exc))
                    continue
                if pattern.specifier is not None:
                    error((*where, key, j), f"{text!r}: hooks match calls by tool name only; the hook's program "
                                            "sees the arguments and can check them itself")
    if config.oauth is not None:
        problems.extend(_oauth_problems(config.oauth, source))
    for name, agent in config.agents.items():
        problem = agent_name_problem(name)
        if problem is not None:
            error(("agents", name), f"invalid agent name: {problem}")
        if agent.model is not None and agent.model not in config.models:
            known = ", ".join(sorted(config.models)) or "none"
            error(("agents", name, "model"), f"model {agent.model!r} is not defined; add a [models.\"{agent.model}\"] "
                  f"table (defined: {known})")
        if agent.runner == "llm" and agent.model is None:
            error(("agents", name, "runner"), "runner = \"llm\" runs the agent on its own model: set model to an "
                  "llm model id (`llm models` lists them)")
        if agent.max_run_tokens is not None and agent.runner == "client":
            error(("agents", name, "max_run_tokens"), "a token budget applies to runs on the agent's own model "
                  "(runner = \"llm\", or \"auto\" where llm runs its model); on the client's model, the client "
                  "counts")
        if agent.mode == "bypassPermissions" and not agent.allow_dangerously_skip_permissions:
            error(("agents", name, "mode"), "bypassPermissions approves every asked call; it is accepted only with "
                  "allow_dangerously_skip_permissions = true beside it")
        variables = [agent.token_env] if isinstance(agent.token_env, str) else agent.token_env or []
        if isinstance(agent.token_env, list) and not agent.token_env:
            error(("agents", name, "token_env"), "expected one or more environment variable names, got []")
        for i, variable in enumerate(variables):
            if _ENV_NAME.fullmatch(variable) is None:
                at: tuple[Any, ...] = ("agents", name, "token_env")
                error((*at, i) if isinstance(agent.token_env, list) else at,
                      f"expected an environment variable name, got {variable!r}")
        if agent.identity is not None:
            problems.extend(_identity_problems(agent.identity, config.oauth is not None, source,
                                               ("agents", name, "identity")))
        if agent.limits is not None:
            problems.extend(_limits_problems(agent.limits, source, ("agents", name, "limits")))
        if agent.approvals != "client" and config.operator is None:
            error(("agents", name, "approvals"), f"approvals = {agent.approvals!r} needs an operator to answer: add "
                  "an [operator] table (its token_env), or use approvals = \"client\"")
        if agent.tool_search is not None:
            for i, text in enumerate(agent.tool_search.listed):
                try:
                    pattern = patterns.parse("tools", text)
                except patterns.PatternError as exc:
                    error(("agents", name, "tool_search", "listed", i), str(exc))
                    continue
                if pattern.specifier is not None:
                    error(("agents", name, "tool_search", "listed", i), f"{text!r}: a tool is listed up front "
                          "by its name; a specifier applies to calls")
        if agent.permissions is None:
            continue
        for dimension in patterns.DIMENSIONS:
            rule = getattr(agent.permissions, dimension)
            if rule is None:
                continue
            kind = "allow" if rule.allow is not None else "deny"
            for i, text in enumerate(getattr(rule, kind)):
                try:
                    patterns.parse(dimension, text)
                except patterns.PatternError as exc:
                    error(("agents", name, "permissions", dimension, kind, i), str(exc))
        for key in ("ask", "approve"):
            for i, text in enumerate(getattr(agent.permissions, key)):
                try:
                    patterns.parse("ask", text)
                except patterns.PatternError as exc:
                    error(("agents", name, "permissions", key, i), str(exc).replace("ask takes", f"{key} takes"))

    if config.cluster is not None:
        problems += _cluster_problems(config.cluster, source)
    if config.operator is not None:
        problems += _operator_problems(config.operator, source)
        if config.operator.identity is not None:
            problems.extend(_identity_problems(config.operator.identity, config.oauth is not None, source,
                                               ("operator", "identity")))
            if config.operator.identity.needs_scope:
                problems.append(Problem("error", f"{source}: operator.identity.needs_scope", "the operator sees "
                                        "everything the console shows: needs_scope is for agents"))
    return problems


def _operator_problems(operator: OperatorConfig, source: str) -> list[Problem]:
    problems = []
    if _ENV_NAME.fullmatch(operator.token_env) is None:
        problems.append(Problem("error", f"{source}: operator.token_env",
                                f"expected an environment variable name, got {operator.token_env!r}"))
    for key in ("url", "webhook"):
        value = getattr(operator, key)
        if value is not None and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s]*)?", value):
            problems.append(Problem("error", f"{source}: operator.{key}",
                                    f"expected an http:// or https:// URL, got {value!r}"))
    return problems


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingVariable(ValueError):
    """A ``${NAME}`` in the config whose environment variable is not set."""


def expand(value: str, where: str, env: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by the environment variable; ``MissingVariable`` names a missing one
    (never a value: these are often secrets)."""
    env = os.environ if env is None else env

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise MissingVariable(f"{where} names ${{{name}}}, which is not set")
        return env[name]

    return _VARIABLE.sub(one, value)


def _cluster_problems(cluster: ClusterConfig, source: str) -> list[Problem]:
    problems = []
    if not cluster.redis_url.startswith(("redis://", "rediss://", "unix://", "${")):
        problems.append(Problem("error", f"{source}: cluster.redis_url", "expected a redis://, rediss:// or unix:// "
                                "URL (or a ${VARIABLE} that holds one), "
                                f"got one starting {cluster.redis_url.split('://')[0][:20]!r} (the rest is not "
                                "shown: it may hold a password)"))
    elif "$" in _VARIABLE.sub("", cluster.redis_url):
        problems.append(Problem("error", f"{source}: cluster.redis_url", "a '$' that is not ${VARIABLE}: write each "
                                "environment variable as ${NAME}"))
    if not cluster.key_prefix or any(c.isspace() or c in "{}" for c in cluster.key_prefix):
        problems.append(Problem("error", f"{source}: cluster.key_prefix", "expected a non-empty prefix without "
                                "spaces or braces (braces are Redis Cluster hash tags), such as \"toolcrib:\""))
    return problems


ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES256K", "ES384", "ES512", "EdDSA")


def _oauth_problems(oauth: OAuthConfig, source: str) -> list[Problem]:
    problems = []

    def error(key: Any, message: str) -> None:
        path = ("oauth", *key) if isinstance(key, tuple) else ("oauth", key)
        problems.append(Problem("error", f"{source}: {key_path(path)}", message))

    for key in ("issuer", "jwks_url", "resource_url"):
        value = getattr(oauth, key)
        if value is not None and not value.startswith(("https://", "http://")):
            error(key, f"expected an https:// URL, got {value!r}")
    if oauth.client is not None and not oauth.client.token_endpoint.startswith(("https://", "http://")):
        error(("client", "token_endpoint"), f"expected an https:// URL, got {oauth.client.token_endpoint!r}")
    if not oauth.audience:
        error("audience", "expected the audience tokens are issued for: this server's URL as a resource")
    if oauth.jwks_url is not None and oauth.jwks_file is not None:
        error("jwks_file", "give jwks_url or jwks_file, not both")
    if not oauth.algorithms:
        error("algorithms", f"expected one or more of {', '.join(ASYMMETRIC)}")
    for i, algorithm in enumerate(oauth.algorithms):
        if algorithm not in ASYMMETRIC:
            error(("algorithms", i), f"{algorithm!r} is not accepted: only asymmetric signatures are ("
                  f"{', '.join(ASYMMETRIC)}); a shared secret or 'none' would let anyone who has it mint tokens")
    return problems


def _identity_problems(identity: IdentityConfig, oauth: bool, source: str, where: tuple[Any, ...]) -> list[Problem]:
    problems = []

    def error(path: tuple[Any, ...], message: str) -> None:
        problems.append(Problem("error", f"{source}: {key_path((*where, *path))}", message))

    if not oauth:
        error((), "needs an [oauth] table: the issuer whose tokens are verified")
    if not identity.claims:
        error(("claims",), "name at least one claim (sub, client_id, groups, ...): with none, every token the "
                           "issuer signs would act as this agent")
    for claim, globs in identity.claims.items():
        for i, glob in enumerate([globs] if isinstance(globs, str) else globs):
            if not glob:
                error(("claims", claim) if isinstance(globs, str) else ("claims", claim, i), "expected a value or "
                      "glob, got an empty string")
        if isinstance(globs, list) and not globs:
            error(("claims", claim), "expected one or more values or globs, got []")
    for scope, rights in identity.needs_scope.items():
        for dimension in ("tools", "resources", "prompts"):
            for i, text in enumerate(getattr(rights, dimension)):
                try:
                    pattern = patterns.parse(dimension, text)
                except patterns.PatternError as exc:
                    error(("needs_scope", scope, dimension, i), str(exc))
                    continue
                if pattern.specifier is not None:
                    error(("needs_scope", scope, dimension, i), f"{text!r}: a scope hides whole tools; argument "
                          "specifiers belong in permissions")
    return problems


def _limits_problems(limits: LimitsConfig, source: str, where: tuple[Any, ...]) -> list[Problem]:
    problems = []

    def error(path: tuple[Any, ...], message: str) -> None:
        problems.append(Problem("error", f"{source}: {key_path((*where, *path))}", message))

    for path, limit in [((), limits), *((("tools", glob), rule) for glob, rule in limits.tools.items())]:
        if limit.rate is None and limit.in_flight is None and (path or not limits.tools):
            error(path, "expected rate = \"N/minute\" or in_flight = N (or both)")
        if limit.rate is not None:
            try:
                parse_rate(limit.rate)
            except RateError as exc:
                error((*path, "rate"), str(exc))
    for glob in limits.tools:
        try:
            pattern = patterns.parse("tools", glob)
        except patterns.PatternError as exc:
            error(("tools", glob), str(exc))
            continue
        if pattern.specifier is not None:
            error(("tools", glob), "limits count calls by tool name only")
    return problems


# -- error messages ------------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_path(loc: tuple[Any, ...]) -> str:
    """A TOML-style key path: ``agents.reviewer.permissions.tools.deny[1]``, ``models."qwen-vl".vision``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if _BARE_KEY.fullmatch(part) else '"' + part.replace('"', '\\"') + '"'
            out += f".{key}" if out else key
    return out or "(top level)"


_TYPE_NAMES = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "a table",
}
_EXPECTED = {
    "string_type": "a string",
    "bool_type": "a boolean (true or false)",
    "int_type": "an integer",
    "float_type": "a number",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def _describe(value: Any) -> str:
    for kind, name in _TYPE_NAMES.items():
        if type(value) is kind:
            if kind in (dict, list):
                return name
            return f"{name} ({value!r})"
    return type(value).__name__


def problems_from_validation(
    exc: ValidationError, source: str, prefix: tuple[Any, ...] = (), root: type[BaseModel] | None = None
) -> list[Problem]:
    """One ``Problem`` per pydantic error, worded for a TOML author. ``root`` is the model validated at
    ``prefix`` (the whole ``Config`` by default)."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        kind = err["type"]
        value = err.get("input")
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1], root or Config)
            close = did_you_mean(str(loc[-1]), allowed)
            message = f"unknown key {loc[-1]!r}" + (f" (did you mean {close!r}?)" if close else "") + (
                f"; expected one of: {', '.join(allowed)}" if allowed else "")
        elif kind == "missing":
            message = "required key is missing"
        elif kind in _EXPECTED:
            message = f"expected {_EXPECTED[kind]}, got {_describe(value)}"
            rule = len(loc) == 4 and loc[0] == "agents" and loc[2] == "permissions" and loc[3] != "ask"
            if rule and kind in ("model_type", "dict_type") and isinstance(value, list):
                shown = ", ".join(json.dumps(v) for v in value)
                message += f"; a rule is a table: {loc[3]} = {{ allow = [{shown}] }} (or deny = [...])"
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", str(err["ctx"]["expected"]))
            close = did_you_mean(value, choices) if isinstance(value, str) else None
            message = f"expected one of {err['ctx']['expected']}, got {_describe(value)}" + (
                f"; did you mean {close!r}?" if close else "")
        elif kind == "value_error":
            message = str(err["msg"]).removeprefix("Value error, ")
        else:
            message = f"{err['msg']}, got {_describe(value)}"
        problems.append(Problem("error", f"{source}: {key_path(prefix + loc)}", message))
    return problems


def located(problems: list[Problem], text: str, source: str) -> list[Problem]:
    """The problems with the line of the file each key path is written on, where it can be found."""
    tables = _tables(text)
    found = []
    for problem in problems:
        prefix = f"{source}: "
        line = _line_of(_split_path(problem.where[len(prefix):]), tables, text) \
            if problem.where.startswith(prefix) else None
        found.append(dataclasses.replace(problem, line=line))
    return found


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_PART = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)')


def _split_path(path: str) -> list[str | int]:
    """``agents.a.permissions.tools.allow[0]`` -> ["agents", "a", "permissions", "tools", "allow", 0]."""
    parts: list[str | int] = []
    for match in re.finditer(r'"((?:[^"\\]|\\.)*)"|\[(\d+)\]|([^.\[\]"]+)', path):
        if match.group(2) is not None:
            parts.append(int(match.group(2)))
        else:
            parts.append(match.group(1) if match.group(1) is not None else match.group(3))
    return parts


def _keys(text: str) -> list[str]:
    return [next(g for g in m.groups() if g is not None) for m in _KEY_PART.finditer(text)]


def _tables(text: str) -> list[tuple[int, list[str], bool]]:
    """Each table header: (its line, its key path, whether it is an array of tables)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _HEADER.match(line)
        if match:
            found.append((number, _keys(match.group(2)), match.group(1) == "[["))
    return found


def _line_of(path: list[str | int], tables: list[tuple[int, list[str], bool]], text: str) -> int | None:
    """The line a key path is written on: the deepest table header it lies under (the n-th of an array of
    tables), then the key's own line in that table; the header's line for a path that ends at a table."""
    keys = [p for p in path if isinstance(p, str)]
    lines = text.splitlines()
    best: tuple[int, int] | None = None  # (header length, index into tables)
    for index, (_, header, is_array) in enumerate(tables):
        if header != keys[:len(header)]:
            continue
        if is_array:  # the n-th [[header]] is element n
            position = len(header)
            count = sum(1 for _, h, a in tables[:index] if a and h == header)
            wanted = path[position] if position < len(path) and isinstance(path[position], int) else None
            if wanted is not None and wanted != count:
                continue
        if best is None or len(header) > best[0]:
            best = (len(header), index)
    start, depth = (tables[best[1]][0], best[0]) if best is not None else (0, 0)
    rest = keys[depth:]
    if not rest:
        return start or None
    end = next((n for n, _, _ in tables if n > start), len(lines) + 1)
    for number in range(start + 1, end):
        key, sep, _ = lines[number - 1].partition("=")
        written = _keys(key) if sep else []
        if written and written[0] == rest[0]:
            return number
    return start or None


def did_you_mean(given: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The one of ``known`` that ``given`` nearly spells (a typo), if any; names that share a long prefix (tool
    names with their namespace) want a higher ``cutoff``."""
    import difflib  # only a mistake is looked up: no start pays for the import

    close = difflib.get_close_matches(given, list(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def _allowed_keys(loc: tuple[Any, ...], root: type[BaseModel]) -> list[str]:
    """The keys the table at ``loc`` takes, found by walking the models' annotations."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrap(annotation)
        if typing.get_origin(annotation) is list and isinstance(part, int):
            annotation = typing.get_args(annotation)[0]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part)
            if field is None:
                return []
            annotation = field.annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation
