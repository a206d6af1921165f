"""Where a deployment lives on a node, and the commands (argv lists, POSIX sh for the
scripts) that change it. Pure: nothing here runs anything.

On every node, with `R/N` = `runtime.root`/recipe name (`deskside.render.context.Layout`):

    R/N/releases/<id>/     one release: the node's bundle folder (+ cluster/ on the head)
    R/N/releases/.partial-<id>/   a release being pushed (renamed into place when complete)
    R/N/current            relative link `releases/<id>`, switched atomically by rename
    R/N/state.json         what deskside started here: release, pid, log (RemoteNodeState)
    R/N/logs/<id>.<start>.log  the engine's output of release <id> started at <start>
                          (native runtime; <start> like 20260101T120000Z)
    R/N/models/<folder>/   a pushed local model folder (+ .deskside-manifest.json)
    R/N/secrets/           0700; the generated proxy master key (0600, head only)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from deskside.render.context import Layout

RELEASE_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}(?:-[0-9]+)?")
STATE_FILE = "state.json"
MANIFEST_FILE = ".deskside-manifest.json"


def stamp(when: datetime) -> str:
    return f"{when:%Y%m%dT%H%M%SZ}"


def release_id(when: datetime, lock_sha256: str) -> str:
    """`20260101T120000Z-1a2b3c4d`: sortable by time, names the bundle it holds."""
    return f"{stamp(when)}-{lock_sha256[:8]}"


@dataclass(frozen=True)
class NodePaths:
    """The paths of one recipe's deployment on a node."""

    recipe_dir: str  # R/N

    @classmethod
    def of(cls, layout: Layout) -> NodePaths:
        return cls(layout.recipe_dir)

    def _p(self, *parts: str) -> str:
        return str(PurePosixPath(self.recipe_dir, *parts))

    @property
    def releases(self) -> str:
        return self._p("releases")

    @property
    def current(self) -> str:
        return self._p("current")

    @property
    def state_file(self) -> str:
        return self._p(STATE_FILE)

    @property
    def logs(self) -> str:
        return self._p("logs")

    @property
    def models(self) -> str:
        return self._p("models")

    @property
    def secrets(self) -> str:
        return self._p("secrets")

    @property
    def cache(self) -> str:
        return self._p("cache")

    def release(self, rid: str) -> str:
        return self._p("releases", rid)

    def staging(self, rid: str) -> str:
        return self._p("releases", f".partial-{rid}")

    def engine_log(self, rid: str, started: str) -> str:
        """One file per start (a restarted release must not replay its old shutdown)."""
        return self._p("logs", f"{rid}.{started}.log")

    def proxy_log(self, rid: str, started: str) -> str:
        return self._p("logs", f"{rid}.{started}.proxy.log")


# --------------------------------------------------------------------------- releases


def prepare_dirs(paths: NodePaths, container: bool) -> list[str]:
    dirs = [paths.releases, paths.logs, *([paths.cache] if container else [])]
    return ["mkdir", "-p", "--", *dirs]


def clear_staging(paths: NodePaths, rid: str) -> list[str]:
    return ["rm", "-rf", "--", paths.staging(rid)]


def commit_release(paths: NodePaths, rid: str) -> list[str]:
    """Rename the complete staging folder to its release name (atomic; refuses to replace
    an existing release)."""
    return ["mv", "-T", "--", paths.staging(rid), paths.release(rid)]


def read_current(paths: NodePaths) -> list[str]:
    return ["readlink", "--", paths.current]


def parse_current(readlink_stdout: str) -> str | None:
    """The release id `current` points at (`releases/<id>`), or None."""
    target = readlink_stdout.strip()
    if not target:
        return None
    name = PurePosixPath(target).name
    return name if RELEASE_RE.fullmatch(name) else None


SWITCH_SH = 'ln -sfn -- "$1" "$2" && mv -Tf -- "$2" "$3"'


def switch_current(paths: NodePaths, rid: str) -> list[str]:
    """Point `current` at release `rid`: a new link under a temporary name, renamed over
    `current` (rename(2) is atomic: readers see the old or the new release, never none).
    The link is relative, so it resolves the same from a container or a bind mount."""
    tmp = paths._p(f".current-{rid}")
    return ["sh", "-c", SWITCH_SH, "sh", f"releases/{rid}", tmp, paths.current]


def remove_current(paths: NodePaths) -> list[str]:
    return ["rm", "-f", "--", paths.current]


def list_releases(paths: NodePaths) -> list[str]:
    return ["ls", "-1", "--", paths.releases]


def releases_to_prune(listing: str, keep: int, protect: set[str]) -> list[str]:
    """The oldest releases beyond `keep` (never one in `protect`)."""
    ids = sorted(n for n in listing.split() if RELEASE_RE.fullmatch(n))
    old = ids[:-keep] if keep > 0 else ids
    return [r for r in old if r not in protect]


def prune(paths: NodePaths, ids: list[str]) -> list[str]:
    return ["rm", "-rf", "--", *(paths.release(r) for r in ids)]


def file_exists(path: str) -> list[str]:
    return ["test", "-f", path]


# --------------------------------------------------------------------------- processes

# Members of session $sid (not zombies), from /proc (no ps needed). `read` is a builtin:
# no process per entry. The stat line is split after the last ") " (the command may hold
# spaces and parentheses); fields then are: state ppid pgrp session.
_MEMBERS_SH = r"""
members() {
  for f in /proc/[0-9]*/stat; do
    read -r st < "$f" 2>/dev/null || continue
    rest=${st##*) }
    set -- $rest
    [ "$4" = "$sid" ] || continue
    case $1 in Z|X) continue ;; esac
    p=${f#/proc/}
    echo "${p%/stat}"
  done
}
"""

STOP_SESSION_SH = (
    "sid=$1; grace=$2\n"
    + _MEMBERS_SH
    + r"""
signal_all() { for p in $(members); do kill "-$1" "$p" 2>/dev/null; done; }
[ -n "$(members)" ] || exit 0
signal_all TERM
i=0; ticks=$((grace * 5))
while [ "$i" -lt "$ticks" ]; do
  [ -n "$(members)" ] || exit 0
  sleep 0.2; i=$((i + 1))
done
signal_all KILL
i=0
while [ "$i" -lt 50 ]; do
  [ -n "$(members)" ] || exit 0
  sleep 0.1; i=$((i + 1))
done
echo "session $sid still has processes: $(members | tr '\n' ' ')" >&2
exit 1
"""
)


def stop_session(pid: int, grace: float) -> list[str]:
    """SIGTERM every process of session `pid`, SIGKILL what is left after `grace` seconds
    (the remote twin of `deskside.runtime.procs.stop_session`). Exit 0: nothing left."""
    return ["sh", "-c", STOP_SESSION_SH, "sh", str(pid), str(max(1, round(grace)))]


SESSION_STATS_SH = (
    "sid=$1\n"
    + _MEMBERS_SH
    + r"""
n=0; rss=0
for p in $(members); do
  n=$((n + 1))
  while read -r k v _; do
    if [ "$k" = "VmRSS:" ]; then rss=$((rss + v)); fi
  done < "/proc/$p/status" 2>/dev/null
done
echo "processes=$n rss_kib=$rss"
"""
)


def session_stats(pid: int) -> list[str]:
    return ["sh", "-c", SESSION_STATS_SH, "sh", str(pid)]


def parse_session_stats(stdout: str) -> tuple[int, int]:
    """(processes, rss bytes) from `session_stats` output."""
    values = dict(w.split("=", 1) for w in stdout.split() if "=" in w)
    try:
        return int(values.get("processes", 0)), int(values.get("rss_kib", 0)) * 1024
    except ValueError:
        return 0, 0


# Is the session leader $pid alive (not a zombie, still leading its session), and what
# did its log grow by since byte $off? One round trip per poll.
POLL_SH = r"""
pid=$1; log=$2; off=$3
alive=0
if read -r st < "/proc/$pid/stat" 2>/dev/null; then
  rest=${st##*) }
  set -- $rest
  case $1 in Z|X) ;; *) if [ "$4" = "$pid" ]; then alive=1; fi ;; esac
fi
size=0
if [ -f "$log" ]; then size=$(wc -c < "$log"); fi
size=$((size + 0))
echo "alive=$alive size=$size"
if [ "$size" -gt "$off" ]; then tail -c "+$((off + 1))" -- "$log" | head -c "$((size - off))"; fi
"""


def poll_process(pid: int, log: str, offset: int) -> list[str]:
    return ["sh", "-c", POLL_SH, "sh", str(pid), log, str(offset)]


def parse_poll(stdout: str) -> tuple[bool, int, bytes]:
    """(alive, log size, new log bytes) from `poll_process` output."""
    header, _, rest = stdout.partition("\n")
    values = dict(w.split("=", 1) for w in header.split() if "=" in w)
    try:
        size = int(values.get("size", "0"))
    except ValueError:
        size = 0
    return values.get("alive") == "1", size, rest.encode()


def tail_file(path: str, lines: int) -> list[str]:
    return ["tail", "-n", str(lines), "--", path]


# --------------------------------------------------------------------------- files


def private_dir(path: str) -> list[str]:
    """A folder only its owner can enter (for secrets)."""
    return ["sh", "-c", 'mkdir -p -- "$1" && chmod 700 -- "$1"', "sh", path]


MODEL_SWAP_SH = r"""
new=$1; target=$2; old=$3
rm -rf -- "$old"
if [ -e "$target" ]; then mv -T -- "$target" "$old"; fi
mv -T -- "$new" "$target"
rm -rf -- "$old"
"""


def swap_model_folder(staging: str, target: str) -> list[str]:
    """Put a completely uploaded model folder in place of the previous one."""
    old = f"{target}.old"
    return ["sh", "-c", MODEL_SWAP_SH, "sh", staging, target, old]
