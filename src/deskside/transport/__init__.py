"""Transports: the only way deskside touches a host (run, spawn, put, get): `base` (the
Protocol), `local` (this machine, or one of its network namespaces), `ssh`, `fake`."""
