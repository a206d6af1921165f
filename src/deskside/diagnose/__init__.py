"""`deskside diagnose`: one tar.gz of everything needed to tell why a run misbehaves (logs,
process trees with states, stacks, metrics, status, plan, lock, fabric, doctor), with the
run's secrets scrubbed out. The entry point is `deskside.diagnose.bundle.write_bundle`."""
