"""deskside's Prometheus exporter: what no standard exporter reports about a node that
serves a recipe (memory headroom against the plan's floor, the RoCE GID index and its
drift, GPU readings or an explicit "no GPU here", engine progress, versions)."""
