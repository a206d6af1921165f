"""One module per output format. Each takes a BenchResult and writes files; none prints.
`all.write_all` writes every one."""
