"""The Transport of each node: SSH for `ssh:` nodes, this machine (in the node's network
namespace, when it has one) otherwise."""

from __future__ import annotations

from deskside.recipe.types import Node
from deskside.records.run import RunNode
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

HERE = "local"
"""The name of this machine's own (root namespace) transport in transcripts."""


def transport_for(node: Node | RunNode, known_hosts: str | None = None) -> Transport:
    if node.ssh is None:
        return LocalTransport(netns=node.netns)
    from deskside.transport.ssh import SshTarget, SshTransport  # asyncssh: only for ssh nodes

    return SshTransport(
        SshTarget(
            host=node.address,
            port=node.ssh.port,
            user=node.ssh.user,
            identity_file=node.ssh.identity_file,
            known_hosts=known_hosts,
        )
    )
