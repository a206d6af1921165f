"""A folder the CPU launcher puts first on ``PYTHONPATH`` for vLLM's processes: its
``sitecustomize`` runs at the start of every Python process vLLM starts (spawned engine
cores and workers, and ``python -m ...`` subprocesses such as vLLM's model-registry
inspection), so each one gets the launcher's set-up before it imports vLLM."""
