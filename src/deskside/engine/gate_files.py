"""The drain gate's files in its folder and how long it relays one request: written the
same by a replica set's gate (`deskside.replicas.gate`) and by a one-group recipe's
(`deskside.runtime.engine_gate`), and read by the gate itself (`deskside.replicas.gate_server`,
through its config)."""

from __future__ import annotations

GATE_SCRIPT = "gate.py"
GATE_CONFIG = "gate.json"
DRAIN_FILE = "drained"
GATE_TIMEOUT = 3600.0  # seconds a relayed request may take at most (a long generation)
