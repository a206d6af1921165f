"""deskside: serve frontier LLMs across a few deskside GPU nodes with vLLM, and prove it."""

__version__ = "0.1.0"
