"""Plans under a VRAM budget: the planner, the cost model, and how a plan becomes load parameters."""
