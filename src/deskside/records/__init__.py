"""What deskside remembers of what it started, kept in one store.

Every record has one place (`where`), is read through one reader (`read`: a regular file
only, never through a link, size-capped, JSON of bounded depth, parsed strictly into its
model; anything else is refused with what, where and how to fix it) and written through
one writer (`write`: an exclusive temporary file renamed into place, never through a link).

- `run`: a run on this machine (`RunRecord`: its nodes, how to reach them, its API);
- `node`: what deskside started on a node (`NodeState`: engine and services);
- `replica_set`: a replica set (`SetRecord`: its groups, its proxy process);
- `guard`, `survive`: the guard's last stop, the watcher's last look (pure models);
- `node_files`: those two records in a node's state folder, read and written;
- `looks`: the run's series of looks;
- `names`: the runs and sets there are, and which one a command means;
- `recipes`: the recipe a recorded run was started from.

This package imports nothing: import from its modules.
"""
