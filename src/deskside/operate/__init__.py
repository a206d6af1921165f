"""Operating running clusters: their status and verdict (`status`, `set_status`, over the
series of looks in `looks` and `verdict`), the watcher that acts on a wedge (`watch`,
`restart`, by the pure policy of `deskside.survive`), and which runtime and status serve a
recipe or a record (`select`). Above the runtimes and replica sets; only the faces
(`deskside.cli`) and a diagnosis (`deskside.diagnose`, which bundles a status) import it."""
