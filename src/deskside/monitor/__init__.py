"""Watching a running cluster: `deskside monitor check` (does every dashboard panel and
alert rule find data in the live Prometheus, and if not, why) and `deskside top` (a live
terminal view of memory, GPU, fabric and the engine)."""
