"""Plans under a VRAM budget: the planner, the cost model, how a plan becomes load parameters."""
