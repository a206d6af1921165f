"""`deskside doctor`: what holds a node's memory, whether the nodes match, and what can be
reclaimed safely (work in progress: the shared-memory scan)."""
