"""The pieces of `deskside.deploy`: on-node paths and the commands that act on them
(`commands`), preflight facts and checks (`preflight`), and how each runtime starts, stops,
watches and reads the logs of a node's engine (`control`). Commands are built purely here;
only the pipeline runs them, through a Transport."""
