"""Replica sets: several engine groups serving the same names behind one LiteLLM proxy.

A recipe with a `replicas` section is a set. Each group runs as an ordinary cluster of its
own, named `<recipe>-<group>` (`deskside.recipe.groups`): its own plan, launches, bundle,
run record, status, watcher and recovery. The set adds the proxy that spreads requests over
the groups (`proxy`) and the set's status (`status`); the set's record is kept by
`deskside.records.replica_set`.
"""
