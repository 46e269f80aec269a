"""The runtime: context, gateway, policy, tools, routing, replay, recovery."""
