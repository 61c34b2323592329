"""A function tool for verl's tool_agent in verl-rehearse's tests."""

from verl.tools.function_tool import function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first integer.
        b: the second integer.
    """
    return str(a + b)
