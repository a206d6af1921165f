"""The POSIX sh snippet a node's launch script runs to resolve NCCL_IB_GID_INDEX at start-up.

It applies the rules of `deskside.fabric.gid.resolve_node` to the node's own `/sys`, so a
reboot or an address change between deploy and start cannot leave a stale index behind:

- every listed device (optionally `dev:port`) must exist, and each of its ports must be
  ACTIVE;
- per port, exactly one GID entry whose value is the IPv4-mapped fabric address, whose
  type is `RoCE v2` and whose netdev is the fabric interface;
- all ports must agree on the index.

Values are read like the Python reader reads them (`IFS=' <tab>' read -r`: first line,
blanks trimmed). On any failure the snippet prints what it found to stderr and exits 1:
it never exports an empty or guessed index. `DESKSIDE_SYSFS_ROOT` (default `/sys`) lets
tests run it against fixture trees.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from ipaddress import IPv4Address

from deskside.fabric.gid import ipv4_mapped_gid
from deskside.recipe.types import Node, Recipe

# The function is fixed text; only the call line carries the node's values.
GID_FUNCTION = r"""deskside_read() {
  _ds_v=
  { IFS=' 	' read -r _ds_v < "$1"; } 2>/dev/null || :
}
deskside_gid_index() {
  # usage: deskside_gid_index WANTED_GID NETDEV HCA[:PORT]...; prints the index
  _ds_root=${DESKSIDE_SYSFS_ROOT:-/sys}
  _ds_want=$1
  _ds_ndev=$2
  shift 2
  _ds_chosen=
  _ds_where=
  if [ "$#" -eq 0 ]; then
    echo "deskside: no_hcas: no RDMA devices listed for this node" >&2
    return 1
  fi
  for _ds_hca in "$@"; do
    _ds_dev=${_ds_hca%%:*}
    _ds_base=$_ds_root/class/infiniband/$_ds_dev
    if [ ! -d "$_ds_base" ]; then
      echo "deskside: no_device: RDMA device $_ds_dev not found in $_ds_root/class/infiniband" >&2
      return 1
    fi
    if [ "$_ds_dev" != "$_ds_hca" ]; then
      _ds_ports=${_ds_hca#*:}
      if [ ! -d "$_ds_base/ports/$_ds_ports" ]; then
        echo "deskside: no_port: $_ds_dev has no port $_ds_ports" >&2
        return 1
      fi
    else
      _ds_ports=
      for _ds_p in "$_ds_base"/ports/*; do
        [ -d "$_ds_p" ] || continue
        _ds_pn=${_ds_p##*/}
        case $_ds_pn in ''|*[!0-9]*) continue ;; esac
        _ds_ports="$_ds_ports $_ds_pn"
      done
      if [ -z "$_ds_ports" ]; then
        echo "deskside: no_port: $_ds_dev has no ports" >&2
        return 1
      fi
    fi
    for _ds_pn in $_ds_ports; do
      _ds_p=$_ds_base/ports/$_ds_pn
      deskside_read "$_ds_p/state"
      _ds_state=$_ds_v
      _ds_s=${_ds_state#*:}
      _ds_s=${_ds_s#"${_ds_s%%[! 	]*}"}
      if [ "$_ds_s" != ACTIVE ]; then
        echo "deskside: port_down: $_ds_dev port $_ds_pn is not ACTIVE" \
          "(state: ${_ds_state:-unreadable})" >&2
        return 1
      fi
      _ds_n=0
      _ds_idx=
      _ds_found=
      for _ds_g in "$_ds_p"/gids/*; do
        [ -f "$_ds_g" ] || continue
        _ds_i=${_ds_g##*/}
        case $_ds_i in ''|*[!0-9]*) continue ;; esac
        [ -r "$_ds_g" ] || continue
        deskside_read "$_ds_g"
        _ds_gid=$_ds_v
        case $_ds_gid in *[A-F]*) _ds_gid=$(printf '%s' "$_ds_gid" | tr 'A-F' 'a-f') ;; esac
        [ "$_ds_gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
        deskside_read "$_ds_p/gid_attrs/types/$_ds_i"
        _ds_type=$_ds_v
        deskside_read "$_ds_p/gid_attrs/ndevs/$_ds_i"
        _ds_nd=$_ds_v
        _ds_found="$_ds_found
  [$_ds_i] ${_ds_gid:-(empty)} ${_ds_type:-type unreadable} on ${_ds_nd:-netdev unreadable}"
        if [ "$_ds_gid" = "$_ds_want" ] && [ "$_ds_type" = "RoCE v2" ] \
          && [ "$_ds_nd" = "$_ds_ndev" ]; then
          _ds_n=$((_ds_n + 1))
          _ds_idx="$_ds_idx $_ds_i"
        fi
      done
      _ds_idx=${_ds_idx# }
      if [ "$_ds_n" -eq 0 ]; then
        echo "deskside: not_found: $_ds_dev port $_ds_pn: no RoCE v2 GID $_ds_want" \
          "on $_ds_ndev; found:${_ds_found:- nothing}" >&2
        return 1
      fi
      if [ "$_ds_n" -gt 1 ]; then
        echo "deskside: ambiguous: $_ds_dev port $_ds_pn: $_ds_n RoCE v2 GIDs" \
          "$_ds_want on $_ds_ndev (indexes $_ds_idx); found:$_ds_found" >&2
        return 1
      fi
      if [ -z "$_ds_chosen" ]; then
        _ds_chosen=$_ds_idx
        _ds_where="$_ds_dev:$_ds_pn"
      elif [ "$_ds_chosen" != "$_ds_idx" ]; then
        echo "deskside: disagree: $_ds_where needs GID index $_ds_chosen," \
          "$_ds_dev:$_ds_pn needs $_ds_idx; NCCL_IB_GID_INDEX is one number" >&2
        return 1
      fi
    done
  done
  printf '%s\n' "$_ds_chosen"
}
"""


def gid_call(address: IPv4Address | str, interface: str, hcas: Sequence[str]) -> str:
    """The snippet's resolve-and-export lines for one node (fails the script closed)."""
    args = " ".join(shlex.quote(a) for a in [ipv4_mapped_gid(address), interface, *hcas])
    return (
        f"# NCCL_IB_GID_INDEX: the RoCE v2 GID of {address} on {interface}, read from sysfs now\n"
        f"NCCL_IB_GID_INDEX=$(deskside_gid_index {args}) || {{\n"
        '  echo "deskside: refusing to start: NCCL_IB_GID_INDEX could not be resolved (an '
        'empty index would select GID 0, a link-local address, and NCCL would hang)" >&2\n'
        "  exit 1\n"
        "}\n"
        "case $NCCL_IB_GID_INDEX in\n"
        "  ''|*[!0-9]*)\n"
        "    echo \"deskside: refusing to start: bad NCCL_IB_GID_INDEX '$NCCL_IB_GID_INDEX'\" >&2\n"
        "    exit 1 ;;\n"
        "esac\n"
        "export NCCL_IB_GID_INDEX\n"
    )


def gid_snippet(address: IPv4Address | str, interface: str, hcas: Sequence[str]) -> str:
    """The whole snippet: function definitions, then the call for this node."""
    return GID_FUNCTION + gid_call(address, interface, hcas)


def node_gid_snippet(recipe: Recipe, node: Node) -> str | None:
    """The snippet for `node`, or None when the recipe's transport is not RoCE."""
    if recipe.cluster.fabric.transport != "roce" or node.fabric is None:
        return None
    return gid_snippet(node.fabric.address, node.fabric.interface, list(node.fabric.hcas))
