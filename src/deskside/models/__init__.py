"""Model delivery: pull, manifest, verify, sync."""
