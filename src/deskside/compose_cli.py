"""The Docker Compose command lines deskside runs on nodes and writes into systemd units,
for either Compose program a node may have (`runtime.compose`): the Docker CLI plugin
(`docker compose`, v2) or the standalone `docker-compose` (v1.29, as Debian ships it).

Both take the same verbs with the options used here, but two: logs since a time (v1.29's
`logs` has no `--since`), and listing running containers (v1.29's `ps --filter` does not
filter `--quiet` output). Whether a project runs is asked of Docker itself instead
(`docker ps` on the project label both programs set), the same for both."""

from __future__ import annotations

PROGRAMS: dict[str, tuple[str, ...]] = {
    "docker compose": ("docker", "compose"),
    "docker-compose": ("docker-compose",),
}
PROJECT_LABEL = "com.docker.compose.project"


def compose_argv(program: str, project: str, file: str, *verb: str) -> list[str]:
    """`program --project-name project --file file verb...` (the project name is always
    given: the files carry no top-level `name:`, which v1.29 refuses)."""
    return [*PROGRAMS[program], "--project-name", project, "--file", file, *verb]


def logs_argv(
    program: str, project: str, file: str, *, since: str | None, lines: int | None
) -> list[str]:
    """The project's container logs: the last `lines`, else since `since` (epoch seconds;
    v1.29 cannot limit by time and gives the whole log of the current containers)."""
    argv = compose_argv(program, project, file, "logs", "--no-color", "--no-log-prefix")
    if lines is not None:
        return [*argv, "--tail", str(lines)]
    if since is not None and program == "docker compose":
        return [*argv, "--since", since]
    return argv


def running_argv(project: str) -> list[str]:
    """Prints the ids of the project's running containers (nothing when none runs)."""
    return [
        "docker",
        "ps",
        "--quiet",
        "--filter",
        f"label={PROJECT_LABEL}={project}",
        "--filter",
        "status=running",
    ]
