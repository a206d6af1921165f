"""The pure planner: vLLM's memory accounting, before anything starts."""
