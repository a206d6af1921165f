"""The guard: stops a node's engine when the node's available memory stays under the plan's
safety floor (recipe `guard.enforce`). `decide` is pure; `cgroup` reads the memory cgroup;
`act` stops the engine and records why; `watch` is the sampling loop."""
