"""What deskside reads on a node, in the pyinfra shape: a `Fact` is a POSIX sh command plus
a pure parser of its output; `gather(transport, *facts)` reads any number of facts of one
node in one round trip. Imports only the transport, errors and units.

The package itself holds one name the pure core needs too (a rendered launch.sh sets it),
so importing it reaches nothing of a host: the run tag's environment variable."""

RUN_TAG = "DESKSIDE_RUN"
"""The environment variable that marks every process deskside started: its value is the
run tag `recipe/node/start time/what` of the start (see `deskside.facts.procs`)."""
