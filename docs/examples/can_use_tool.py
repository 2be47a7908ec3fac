"""canUseTool, as a toolcrib plugin: the Qoder / Claude Agent SDK callback's answers, one for one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import toolcrib


class OrdersOnly:
    """Let agents look orders up, refuse the rest, and stop the agent on anything that touches payments."""

    @toolcrib.hookimpl
    def toolcrib_pre_tool_use(self, tool: str, arguments: Mapping[str, Any], call_id: str) -> Any:
        # call_id is canUseTool's toolUseID: the same in the post hook and the audit record of this call
        if tool.startswith("payments__"):
            # { behavior: 'deny', message, interrupt: true }
            return toolcrib.Deny("Payments are handled by people; stop and tell the user.", interrupt=True)
        if tool != "shop__lookup_order":
            # { behavior: 'deny', message }
            return toolcrib.Deny("Only order lookup is allowed in this workflow.")
        if arguments["order_id"] != arguments["order_id"].strip().upper():
            # { behavior: 'allow', updatedInput }
            return toolcrib.Allow(updated_input={"order_id": arguments["order_id"].strip().upper()})
        if arguments["order_id"].startswith("O-9"):
            # toolcrib's extra answer: hold the call for a person's approval, as an ask rule would
            return toolcrib.Ask("orders from the 9000 range are archived")
        return None  # { behavior: 'allow' }
