"""The run's own secrets, gathered only to scrub them out of a bundle (never written):

- on this machine: the recipe's generated secrets in $DESKSIDE_HOME/secrets/<recipe>/ (the
  engine's API key file, the proxy master key; `deskside.secrets`), HF_TOKEN and the
  Hugging Face token files;
- on each node: the engine key file and the proxy master key under the node's layout
  (`R/N/secrets/`), the recipe's `proxy.master_key_file`, and the Hugging Face token files
  of the login's home and of `runtime.hf_cache`.

Each file is read only when it is a regular file (not a link) of at most 4 KiB. Nothing is
created: a recipe that never made a key has none to scrub.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from deskside.diagnose.scrub import secret_values
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.secrets import MAX_SECRET_BYTES, PROXY_MASTER_KEY, engine_env_path, secrets_dir
from deskside.smallfile import read_small_file

# "$@": files to read; the login's HF_TOKEN and Hugging Face token files are read too.
NODE_SECRETS_SH = r"""
max=$1; shift
hf=${HF_HOME:-${HOME:-/nonexistent}/.cache/huggingface}
for f in "$@" "${HF_TOKEN_PATH:-$hf/token}" "$hf/stored_tokens"; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  size=$(wc -c < "$f" 2>/dev/null) || continue
  [ "$size" -le "$max" ] || continue
  cat -- "$f" 2>/dev/null
  echo
done
if [ -n "${HF_TOKEN:-}" ]; then printf '%s\n' "$HF_TOKEN"; fi
"""


def node_secret_files(layout: NodeLayout, recipe: Recipe | None, head: bool) -> list[str]:
    """The secret files of the run on one node (see the module docstring)."""
    files = [layout.engine_env, str(PurePosixPath(layout.secrets) / PROXY_MASTER_KEY)]
    if recipe is not None:
        if head and recipe.proxy.master_key_file:
            files.append(recipe.proxy.master_key_file)
        hf_home = PurePosixPath(recipe.runtime.hf_cache)
        files += [str(hf_home / "token"), str(hf_home / "stored_tokens")]
    return files


def node_secrets_command(files: list[str]) -> list[str]:
    return ["sh", "-c", NODE_SECRETS_SH, "sh", str(MAX_SECRET_BYTES), *files]


def _read(path: Path) -> list[str]:
    try:
        return secret_values(read_small_file(str(path), MAX_SECRET_BYTES).decode(errors="replace"))
    except OSError:
        return []


def local_secrets(recipe_name: str, recipe: Recipe | None) -> list[str]:
    """The run's secrets kept on this machine (see the module docstring)."""
    from huggingface_hub import constants

    paths = [engine_env_path(recipe_name), secrets_dir(recipe_name) / PROXY_MASTER_KEY]
    if recipe is not None and recipe.proxy.master_key_file:
        paths.append(Path(recipe.proxy.master_key_file))
    paths += [Path(constants.HF_TOKEN_PATH), Path(constants.HF_STORED_TOKENS_PATH)]
    values = [v for p in paths if not p.is_symlink() for v in _read(p)]
    if os.environ.get("HF_TOKEN"):
        values.append(os.environ["HF_TOKEN"])
    return values
