"""What `deskside setup` wants on each node, as files and lines with their exact content.
Pure: the node's answers (`deskside.setup.seen.NodeSeen`) come in as values.

Per node with a fabric interface:
    the interface's address and MTU, persistent across reboots: a systemd-networkd
    `.network` file (and systemd-networkd enabled), or a netplan file where the node keeps
    its network in /etc/netplan (then `netplan apply`).
On the head (more than one node):
    a key pair of its own for the workers (made on the head by ssh-keygen: the private key
    never leaves it), the workers' host keys pinned in a known_hosts file of its own, read
    from each worker through deskside's own verified SSH connection (never scanned), and an
    ssh_config drop-in naming each worker (by name or fabric address) with that key, that
    known_hosts file, StrictHostKeyChecking yes and agent and X11 forwarding off.
On every worker:
    the head's public key as one line of the login's authorized_keys, with
    no-agent-forwarding and no-X11-forwarding.
With a GPU clock cap:
    a oneshot unit locking the GPUs' clocks at boot (`nvidia-smi --lock-gpu-clocks`),
    enabled.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address

from deskside.recipe.types import Node, Recipe

DEFAULT_MTU = 9000
DEFAULT_PREFIX = 24
NETWORKD_DIR = "/etc/systemd/network"
NETPLAN_DIR = "/etc/netplan"
SSH_CONFIG_DIR = "/etc/ssh/ssh_config.d"
UNIT_DIR = "/etc/systemd/system"
NETWORKD = "systemd-networkd.service"
GPU_CLOCK_UNIT = "deskside-gpu-clock.service"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
KEY_OPTIONS = "no-agent-forwarding,no-X11-forwarding"


@dataclass(frozen=True)
class Options:
    mtu: int = DEFAULT_MTU
    prefix_length: int = DEFAULT_PREFIX
    gpu_clock_mhz: int | None = None


@dataclass(frozen=True)
class WantFile:
    path: str
    text: str
    mode: int
    what: str


@dataclass(frozen=True)
class WantLine:
    path: str
    line: str
    what: str


@dataclass(frozen=True)
class WantKey:
    """An SSH key pair the node makes itself (the private key stays there)."""

    path: str  # the private key; `path`.pub the public one
    comment: str


@dataclass(frozen=True)
class NodeWants:
    node: str
    files: tuple[WantFile, ...] = ()
    lines: tuple[WantLine, ...] = ()
    key: WantKey | None = None
    units: tuple[str, ...] = ()  # enabled and started
    network: str | None = None  # "networkd" or "netplan": how the fabric file takes effect
    interface: str | None = None


def options_for(
    recipe: Recipe, mtu: int | None, prefix_length: int | None, gpu: int | None
) -> Options:
    """The MTU: the flag, else the recipe's cluster.fabric.mtu, else 9000."""
    return Options(
        mtu=mtu or recipe.cluster.fabric.mtu or DEFAULT_MTU,
        prefix_length=prefix_length or DEFAULT_PREFIX,
        gpu_clock_mhz=gpu,
    )


def key_path(home: str, recipe: str) -> str:
    return f"{home.rstrip('/')}/.ssh/deskside_{recipe}_ed25519"


def known_hosts_path(home: str, recipe: str) -> str:
    return f"{home.rstrip('/')}/.ssh/deskside_{recipe}_known_hosts"


def authorized_keys_path(home: str) -> str:
    return f"{home.rstrip('/')}/.ssh/authorized_keys"


def network_file(interface: str, netplan: bool) -> str:
    if netplan:
        return f"{NETPLAN_DIR}/60-deskside-{interface}.yaml"
    return f"{NETWORKD_DIR}/10-deskside-{interface}.network"


def _header(recipe: Recipe, node: Node, what: str, mark: str = "#") -> str:
    return (
        f"{mark} {what}: node {node.name}, written by `deskside setup {recipe.name}`.\n"
        f"{mark} `deskside setup {recipe.name} --undo` removes it while it is unchanged.\n"
    )


def networkd_text(
    recipe: Recipe, node: Node, interface: str, address: IPv4Address, o: Options
) -> str:
    return (
        _header(recipe, node, "The fabric link")
        + f"[Match]\nName={interface}\n\n"
        # a peer powered off must not hold the boot at network-online.target
        + f"[Link]\nMTUBytes={o.mtu}\nRequiredForOnline=no\n\n"
        + f"[Network]\nAddress={address}/{o.prefix_length}\n"
        + "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    )


def netplan_text(
    recipe: Recipe, node: Node, interface: str, address: IPv4Address, o: Options
) -> str:
    return (
        _header(recipe, node, "The fabric link")
        + "network:\n  version: 2\n  ethernets:\n"
        + f'    "{interface}":\n'
        + f'      addresses: ["{address}/{o.prefix_length}"]\n'
        + f"      mtu: {o.mtu}\n"
    )


def host_pattern(host: str, port: int) -> str:
    """How known_hosts names a host at a port."""
    return host if port == 22 else f"[{host}]:{port}"


def ssh_target(node: Node) -> str:
    """Where the head reaches a worker: its fabric address (the fast link), else its
    management address."""
    return str(node.fabric.address) if node.fabric else node.address


def known_hosts_text(recipe: Recipe, head: Node, workers: list[tuple[Node, str]]) -> str:
    """`workers`: each worker with its host public key ("ssh-ed25519 AAAA...")."""
    lines = [_header(recipe, head, "Host keys of the workers, read from each worker").rstrip()]
    for w, host_key in workers:
        port = w.ssh.port if w.ssh else 22
        names = dict.fromkeys([ssh_target(w), w.address, w.name])
        kind, text = host_key.split()[:2]
        pattern = ",".join(host_pattern(n, port) for n in names)
        lines.append(f"{pattern} {kind} {text}")
    return "\n".join(lines) + "\n"


def ssh_config_text(recipe: Recipe, head: Node, home: str, workers: list[Node]) -> str:
    out = [_header(recipe, head, "SSH from the head to the workers").rstrip()]
    for w in workers:
        target = ssh_target(w)
        port = w.ssh.port if w.ssh else 22
        user = w.ssh.user if w.ssh else "root"
        out += [
            f"Host {' '.join(dict.fromkeys([w.name, target]))}",
            f"    HostName {target}",
            f"    User {user}",
            f"    Port {port}",
            f"    IdentityFile {key_path(home, recipe.name)}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {known_hosts_path(home, recipe.name)}",
            "    StrictHostKeyChecking yes",
            "    HashKnownHosts no",
            "    ForwardAgent no",
            "    ForwardX11 no",
        ]
    return "\n".join(out) + "\n"


def ssh_config_path(recipe: Recipe) -> str:
    return f"{SSH_CONFIG_DIR}/60-deskside-{recipe.name}.conf"


def authorized_line(head_public_key: str) -> str:
    kind, text, *comment = head_public_key.split()
    return " ".join([KEY_OPTIONS, kind, text, *comment[:1]])


def gpu_clock_text(recipe: Recipe, node: Node, mhz: int) -> str:
    return (
        _header(recipe, node, "The GPU clock cap")
        + "[Unit]\nDescription=deskside: lock the GPU clocks at "
        + f"{mhz} MHz\nAfter=nvidia-persistenced.service\n\n"
        + "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        + f"ExecStart={NVIDIA_SMI} --lock-gpu-clocks=0,{mhz}\n"
        + f"ExecStop={NVIDIA_SMI} --reset-gpu-clocks\n\n"
        + "[Install]\nWantedBy=multi-user.target\n"
    )


@dataclass(frozen=True)
class Seen:
    """What planning needs from a node (see `deskside.setup.seen.NodeSeen`)."""

    home: str
    netplan: bool
    host_key: str | None  # "ssh-ed25519 AAAA..." of the node's sshd


def node_wants(
    recipe: Recipe,
    node: Node,
    seen: dict[str, Seen],
    o: Options,
    head_public_key: str | None,
    services: tuple[list[WantFile], list[str]] = ([], []),
) -> NodeWants:
    """What `node` should hold. `head_public_key`: None until the head made its key
    (workers then want a placeholder line, shown in a dry run, never written)."""
    me = seen[node.name]
    files: list[WantFile] = []
    lines: list[WantLine] = []
    units: list[str] = []
    network = interface = None
    key = None
    if node.fabric is not None:
        interface = node.fabric.interface
        path = network_file(interface, me.netplan)
        if me.netplan:
            text = netplan_text(recipe, node, interface, node.fabric.address, o)
            files.append(WantFile(path, text, 0o600, f"{interface}: address and MTU {o.mtu}"))
            network = "netplan"
        else:
            text = networkd_text(recipe, node, interface, node.fabric.address, o)
            files.append(WantFile(path, text, 0o644, f"{interface}: address and MTU {o.mtu}"))
            units.append(NETWORKD)
            network = "networkd"
    workers = [n for n in recipe.cluster.nodes if n.role == "worker"]
    if node.role == "head" and workers:
        key = WantKey(key_path(me.home, recipe.name), f"deskside-{recipe.name}@{node.name}")
        pinned = [(w, seen[w.name].host_key or "") for w in workers]
        files.append(
            WantFile(
                known_hosts_path(me.home, recipe.name),
                known_hosts_text(recipe, node, pinned),
                0o644,
                "the workers' host keys, pinned",
            )
        )
        files.append(
            WantFile(
                ssh_config_path(recipe),
                ssh_config_text(recipe, node, me.home, workers),
                0o644,
                "ssh to the workers: this key, pinned host keys, no agent forwarding",
            )
        )
    if node.role == "worker":
        head = next(n for n in recipe.cluster.nodes if n.role == "head")
        line = (
            authorized_line(head_public_key)
            if head_public_key
            else f"{KEY_OPTIONS} <the key setup makes on {head.name}>"  # shown, never written
        )
        lines.append(
            WantLine(
                authorized_keys_path(me.home),
                line,
                f"the head's key ({head.name}), agent forwarding off",
            )
        )
    files += services[0]
    units += services[1]
    if o.gpu_clock_mhz is not None:
        files.append(
            WantFile(
                f"{UNIT_DIR}/{GPU_CLOCK_UNIT}",
                gpu_clock_text(recipe, node, o.gpu_clock_mhz),
                0o644,
                f"GPU clocks locked at {o.gpu_clock_mhz} MHz at every boot",
            )
        )
        units.append(GPU_CLOCK_UNIT)
    return NodeWants(
        node.name,
        tuple(files),
        tuple(lines),
        key,
        tuple(units),
        network,
        interface,
    )
