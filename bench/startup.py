"""Start-up cost of `aci serve`: spawn to first `tools/list` answer, against a minimal server from the
same SDK started the same way, in the same run. Target ratio <= 1.5. Last line: `ratio=X`."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

MINIMAL = """
from mcp.server import MCPServer
server = MCPServer("minimal")

@server.tool()
def ping() -> str:
    return "pong"

server.run()
"""


async def _time_to_tools(args: list[str], cwd: str) -> float:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=args, cwd=cwd, env=dict(os.environ))
    t0 = time.perf_counter()
    async with Client(params) as c:
        tools = (await c.list_tools()).tools
        elapsed = time.perf_counter() - t0
    assert tools
    return elapsed


def main(rounds: int = 7) -> None:
    with tempfile.TemporaryDirectory() as wd:
        script = os.path.join(wd, "minimal_server.py")
        with open(script, "w") as f:
            f.write(MINIMAL)
        ours, base = [], []
        asyncio.run(_time_to_tools([script], wd))  # warm the file cache for both
        asyncio.run(_time_to_tools(["-m", "aci.cli", "serve"], wd))
        for _ in range(rounds):  # interleaved, so machine load affects both alike
            base.append(asyncio.run(_time_to_tools([script], wd)))
            ours.append(asyncio.run(_time_to_tools(["-m", "aci.cli", "serve"], wd)))
    b, o = statistics.median(base), statistics.median(ours)
    print(f"minimal MCP server: median {b * 1000:.0f} ms over {rounds}")
    print(f"aci serve:          median {o * 1000:.0f} ms over {rounds}")
    print(f"ratio={o / b:.2f}")


if __name__ == "__main__":
    main()
