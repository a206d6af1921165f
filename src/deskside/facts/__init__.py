"""What deskside reads on a node, in the pyinfra shape: a `Fact` is a POSIX sh command plus
a pure parser of its output; `gather(transport, *facts)` reads any number of facts of one
node in one round trip. Imports only the transport, errors and units."""
