"""A calculator tool for verl's ``tool_agent`` loop: ``calc(a, b, op)`` answers with the number.

verl loads it from ``tools.yaml`` (``actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml``): the
``class_name`` there is this module's class, imported from the current folder, and ``tool_schema`` is what the
model sees in its prompt. The model calls it as verl's hermes parser reads a call:
``<tool_call>{"name": "calc", "arguments": {"a": 2, "b": 3}}</tool_call>``.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

OPERATIONS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b}


class CalculatorTool(BaseTool):
    """``a op b`` for ``op`` in add (the default), subtract, multiply; an error text for anything else."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        op = parameters.get("op", "add")
        try:
            a, b = float(parameters["a"]), float(parameters["b"])
            value = OPERATIONS[op](a, b)
        except (KeyError, TypeError, ValueError):
            return ToolResponse(text=f"error: calc takes numbers a and b and op in {', '.join(OPERATIONS)}"), 0.0, {}
        return ToolResponse(text=f"{value:g}"), 0.0, {}
