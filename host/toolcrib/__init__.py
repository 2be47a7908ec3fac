"""toolcrib: a plugin-based tool host for AI agents.

Tool packs are ordinary distributions found through the ``toolcrib`` entry-point group; each declares its
tools with ``@toolcrib.tool`` and returns them from a ``toolcrib_tools`` hook. Operators decide in one TOML
file which agent sees which tools; a denied tool is invisible. Importing this package discovers nothing.
"""

from toolcrib._version import __version__
from toolcrib.answers import Allow, Ask, Deny
from toolcrib.content import Audio, EmbeddedResource, Image, ResourceLink, Text, ToolResult
from toolcrib.context import AvailabilityContext, Context, Elicitation, Form, Roots, Sample
from toolcrib.declarations import (
    Message,
    catalog_changed,
    get_prompt,
    get_resource,
    prompt,
    resource,
    resource_updated,
)
from toolcrib.decorator import tool
from toolcrib.errors import (
    ConfigError,
    InvalidArgumentsError,
    Problem,
    ToolcribError,
    ToolDeclarationError,
    ToolError,
    UnknownAgentError,
    UnknownPromptError,
    UnknownResourceError,
    UnknownToolError,
)
from toolcrib.hookspecs import hookimpl, hookspec
from toolcrib.host import Host
from toolcrib.policy import PolicyRequest
from toolcrib.runner import Call, PythonRunner, Runner
from toolcrib.tool import Tool, Unserved, get_tool

__all__ = [
    "Allow",
    "Ask",
    "Audio",
    "AvailabilityContext",
    "Call",
    "ConfigError",
    "Context",
    "Deny",
    "Elicitation",
    "EmbeddedResource",
    "Form",
    "Host",
    "Image",
    "InvalidArgumentsError",
    "Message",
    "PolicyRequest",
    "Problem",
    "PythonRunner",
    "ResourceLink",
    "Roots",
    "Runner",
    "Sample",
    "Text",
    "Tool",
    "ToolDeclarationError",
    "ToolError",
    "ToolResult",
    "ToolcribError",
    "UnknownAgentError",
    "UnknownPromptError",
    "UnknownResourceError",
    "UnknownToolError",
    "Unserved",
    "__version__",
    "catalog_changed",
    "get_prompt",
    "get_resource",
    "get_tool",
    "hookimpl",
    "hookspec",
    "prompt",
    "resource",
    "resource_updated",
    "tool",
]
