"""Cluster configuration: TOML file + built-in defaults + command-line overrides, validated.

The keys are documented in platform/cluster.toml (which holds the defaults) and in
docs/launcher.md. Every error is a ConfigError whose message names the key, the value and
what would be accepted; the CLI prints it as is.

Paths of the build artefacts come from the environment:
  RACKEMU_ROOT   the checkout (default: two levels above this file)
  RACKEMU_BUILD  where setup puts binaries and the guest image (default $RACKEMU_ROOT/build)
  RACKEMU_CACHE  downloads and long builds (default ~/.cache/rackemu)
and can be overridden per cluster in the [paths] table.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

MAX_NODES = 64          # node ids live in global-address bits [39:34] (hw/include/rackemu/unimem_regs.h)
MIN_MEMORY_MIB = 64
MAX_MEMORY_MIB = 16 * 1024   # a node's local physical addresses are bits [33:0]: 16 GiB
MAX_VCPUS = 8
NET_MTU_MIN, NET_MTU_MAX = 68, 9000   # the machine's net-mtu range (hw/qemu/rackemu_net.h)
# The RNIC's properties the `rnic_props` key passes to `-device rackemu-rnic` (docs/rnic.md,
# "How a node gets one"): name -> (smallest value, what it means). Every value is a QEMU uint32.
RNIC_PROPS: dict[str, tuple[int, str]] = {
    "mtu": (256, "largest path MTU, 256, 512, 1024, 2048 or 4096 bytes"),
    "link-mbps": (1, "link bandwidth, Mbit/s"),
    "hop-ns": (0, "latency of one hop, ns"),
    "nic-mhz": (1, "NIC pipeline clock, MHz"),
    "pcie-ns": (0, "one-way PCIe latency, ns"),
    "pcie-mbps": (1, "PCIe bandwidth, MByte/s"),
    "atomic-host-ns": (0, "responder's service time of one atomic to host memory, serialized, ns (0: off)"),
    "atomic-dm-ns": (0, "responder's service time of one atomic to device memory, serialized, ns (0: off)"),
    "qp-msg-ns": (0, "time one request message occupies its QP's responder, ns (0: off)"),
    "dm-size": (0, "bytes of NIC device memory, a multiple of 64 up to 4194304 (0: none)"),
    "ack-every": (1, "responder ACK coalescing: ACK once this many AckReq packets are owed"),
    "ack-delay-ns": (0, "responder ACK coalescing: or once the first owed is this old, ns (0: no coalescing)"),
}
RNIC_MTUS = (256, 512, 1024, 2048, 4096)
RNIC_DM_SIZE_MAX = 4 << 20   # RNIC_DM_SIZE_MAX (rnic_regs.h)
# Persistent memory (docs/pmem.md): the persistence model's modes and the properties the
# `pmem_props` key passes to the machine as pmem-<name>: name -> (smallest, largest, meaning).
PMEM_MODES = ("none", "eadr", "adr", "adr-ddio")
PMEM_MAX_MIB = 64 * 1024        # the machine's pmem-size limit (hw/include/rackemu/board.h)
PMEM_PROPS: dict[str, tuple[int, int, str]] = {
    "nic-entries": (0, 1024, "NIC buffer entries, 0: no buffer (writes placed as acknowledged)"),
    "nic-delay-ns": (0, 0xFFFFFFFF, "ns from a NIC write's acknowledgement to its placement"),
    "llc-lines": (1, 65536, "pending 64-byte lines the modeled LLC holds before it evicts"),
    "seed": (0, 0xFFFFFFFF, "seed of the LLC's eviction victims"),
}

ROOT = Path(os.environ.get("RACKEMU_ROOT") or Path(__file__).resolve().parents[2])
DEFAULT_CONFIG_FILE = ROOT / "platform" / "cluster.toml"
RUN_BASE = Path("/tmp/rackemu")
SHM_BASE = Path("/dev/shm")      # default home of the guest RAM files (the `shm_dir` key)
SETUP_HINT = "run `./rackemu setup` first"


class ConfigError(Exception):
    """A configuration file, key or command-line value that cannot be used."""


def build_dir() -> Path:
    return Path(os.environ.get("RACKEMU_BUILD") or ROOT / "build")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("RACKEMU_CACHE") or Path(base) / "rackemu")


# The default kernel command line (after "console=ttyAMA0 rackemu.node=I"): what a node's boot
# and idle time cost under TCG that the guest image does not need. platform/cluster.toml says why
# each option is there and what it measured; bench/boot.py measures the whole.
GUEST_CMDLINE = " ".join((
    "kpti=0", "nokaslr", "cryptomgr.notests=1", "quiet", "init_on_alloc=0", "nowatchdog", "psi=0",
    "cgroup_disable=memory",
    "initcall_blacklist=crypto_kdf108_init,cubictcp_register,init_kprobe_trace,inet6_init,"
    "load_system_certificate_list,bpf_rstat_kfunc_init",
))

# Built-in defaults; platform/cluster.toml repeats them with comments (a test keeps both equal).
DEFAULTS: dict[str, Any] = {
    "name": "default",
    "nodes": 2,
    "memory": "256M",
    "vcpus": 1,
    "cpu": "cortex-a57",
    "machine": "rackemu-node",
    "kernel_cmdline": GUEST_CMDLINE,
    "boot_timeout": 300.0,
    "snapshot": "off",
    "insn_count": False,
    "net": True,
    "net_mtu": 1500,
    "stack_roce": "auto",
    "rnic": False,
    "rnic_props": {},
    "run_dir": "",
    "shm_dir": "",
    "qemu_args": [],
    "bridge_args": [],
    "faults": [],
    "fault_seed": 1,
    "switch": "",
    "switch_params": [],
    "pmem": "0",
    "pmem_dir": "",
    "pmem_mode": "adr",
    "pmem_props": {},
    "paths": {"qemu": "", "bridge": "", "kernel": "", "initrd": ""},
}

MACHINES = ("rackemu-node", "virt")
SNAPSHOT_MODES = ("auto", "off", "refresh")   # rackemu.snapcache
STACK_ROCE_MODES = ("auto", "on", "off")      # the machine's stack-roce (docs/networking.md)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_CPU_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_MEM_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_MEM_UNIT_MIB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory(value: Any, key: str = "memory") -> int:
    """Return a memory size in MiB. Accepts an integer (MiB) or "512M", "1G", "1GiB", "262144K"."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size like \"256M\" or \"1G\", got {value!r}")
    if isinstance(value, int):
        mib = float(value)
    elif isinstance(value, str):
        m = _MEM_RE.match(value)
        if not m:
            raise ConfigError(f"{key}: cannot read {value!r} as a size; use a number with a "
                              f"unit, like \"256M\" or \"1G\" (a bare number means MiB)")
        mib = int(m.group(1)) * _MEM_UNIT_MIB[m.group(2).upper()]
    else:
        raise ConfigError(f"{key}: expected a size like \"256M\" or \"1G\", got {value!r}")
    if mib != int(mib):
        raise ConfigError(f"{key}: {value!r} is not a whole number of MiB")
    mib = int(mib)
    if not MIN_MEMORY_MIB <= mib <= MAX_MEMORY_MIB:
        raise ConfigError(f"{key}: {value!r} is {mib} MiB; a node needs between "
                          f"{MIN_MEMORY_MIB} MiB and {MAX_MEMORY_MIB // 1024} GiB")
    return mib


def parse_pmem(value: Any) -> int:
    """The `pmem` key in MiB: 0 (or "0", absent) for none, else a size like "256M" or "1G"
    that is a multiple of 2 MiB up to 64 GiB."""
    if value in (0, "0", ""):
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"pmem: expected a size like \"256M\" or 0 for none, got {value!r}")
    if isinstance(value, int):
        mib = float(value)
    else:
        m = _MEM_RE.match(value)
        if not m:
            raise ConfigError(f"pmem: cannot read {value!r} as a size; use a number with a unit, like "
                              f"\"256M\" or \"1G\" (a bare number means MiB; 0: no persistent memory)")
        mib = int(m.group(1)) * _MEM_UNIT_MIB[m.group(2).upper()]
    if mib == 0:
        return 0
    if mib != int(mib) or int(mib) % 2 or not 0 < mib <= PMEM_MAX_MIB:
        raise ConfigError(f"pmem: {value!r} is not a multiple of 2 MiB from 2 MiB to "
                          f"{PMEM_MAX_MIB // 1024} GiB (0: no persistent memory)")
    return int(mib)


def format_mib(mib: int) -> str:
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


@dataclasses.dataclass
class ClusterConfig:
    """A validated cluster shape. Build one with load_config(); fields are plain values."""

    name: str = DEFAULTS["name"]
    nodes: int = DEFAULTS["nodes"]
    memory_mib: int = 256
    vcpus: int = DEFAULTS["vcpus"]
    cpu: str = DEFAULTS["cpu"]
    machine: str = DEFAULTS["machine"]
    kernel_cmdline: str = DEFAULTS["kernel_cmdline"]
    boot_timeout: float = DEFAULTS["boot_timeout"]
    snapshot: str = DEFAULTS["snapshot"]   # boot from cached snapshots: auto, off, refresh
    insn_count: bool = DEFAULTS["insn_count"]  # load the rk_insn TCG plugin (docs/insn-count.md)
    net: bool = DEFAULTS["net"]            # each node's virtio-net NIC on the fabric (docs/networking.md)
    net_mtu: int = DEFAULTS["net_mtu"]     # the MTU it advertises to the guest
    stack_roce: str = DEFAULTS["stack_roce"]  # RoCEv2 from the guest's stack: auto/on/off
    rnic: bool = DEFAULTS["rnic"]          # `-device rackemu-rnic` on every node (docs/rnic.md)
    rnic_props: dict[str, int] = dataclasses.field(default_factory=dict)  # its properties (RNIC_PROPS)
    run_dir: Path = RUN_BASE / "default"
    shm_dir: Path = SHM_BASE              # guest RAM files live in shm_dir/rackemu-UID-NAME-HASH
    qemu_args: list[str] = dataclasses.field(default_factory=list)
    bridge_args: list[str] = dataclasses.field(default_factory=list)
    faults: list[str] = dataclasses.field(default_factory=list)  # bridge fault rules (docs/fabric.md)
    fault_seed: int = DEFAULTS["fault_seed"]
    switch: str = ""  # the switch program the bridge loads at start (docs/switch.md); "" none
    switch_params: list[str] = dataclasses.field(default_factory=list)  # its key=value settings
    pmem_mib: int = 0                     # persistent memory per node (docs/pmem.md); 0: none
    pmem_dir: Path | None = None          # the durable images' directory; None: run_dir/pmem
    pmem_mode: str | list[str] = DEFAULTS["pmem_mode"]  # none, eadr, adr, adr-ddio; or one per node
    pmem_props: dict[str, int] = dataclasses.field(default_factory=dict)  # PMEM_PROPS
    qemu: Path = dataclasses.field(default_factory=lambda: build_dir() / "qemu" / "qemu-system-aarch64")
    bridge: Path = dataclasses.field(default_factory=lambda: default_bridge(build_dir()))
    kernel: Path | None = None          # None: KERNEL_IMAGE from $RACKEMU_BUILD/guest/guest.env
    initrd: Path = dataclasses.field(default_factory=lambda: build_dir() / "guest" / "initramfs.cpio")
    source: str = "built-in defaults"    # where the values came from, for messages

    @property
    def memory(self) -> str:
        return format_mib(self.memory_mib)

    def pmem_image(self, i: int) -> Path:
        """Node i's durable image of its persistent memory: it outlives the node's QEMU (a
        restart boots on it) and the cluster (`cluster up` reuses it)."""
        return (self.pmem_dir or self.run_dir / "pmem") / f"node{i}.pmem"

    def pmem_machine_props(self, i: int) -> str:
        """The machine's pmem-* properties for node i ("" without persistent memory)."""
        if not self.pmem_mib:
            return ""
        mode = self.pmem_mode if isinstance(self.pmem_mode, str) else self.pmem_mode[i]
        props = f",pmem-size={self.pmem_mib}M,pmem-mode={mode},pmem-image={self.pmem_image(i)}"
        return props + "".join(f",pmem-{k}={v}" for k, v in sorted(self.pmem_props.items()))

    def rnic_args(self) -> list[str]:
        """The nodes' RNIC on the QEMU command line: [] without `rnic`."""
        if not self.rnic:
            return []
        return ["-device", ",".join(["rackemu-rnic"] + [f"{k}={v}" for k, v in sorted(self.rnic_props.items())])]

    @property
    def fabric(self) -> bool:
        """Whether nodes join a fabric (and a bridge is started). `virt` is for development only."""
        return self.machine == "rackemu-node"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        d["memory"] = self.memory
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ClusterConfig":
        """Rebuild from to_dict() output (the run dir's state file)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        for k in ("run_dir", "shm_dir", "qemu", "bridge", "initrd", "pmem_dir"):
            if kw.get(k) is not None:
                kw[k] = Path(kw[k])
        if kw.get("kernel"):
            kw["kernel"] = Path(kw["kernel"])
        return cls(**kw)

    # ---- build artefacts ----

    def guest_env(self) -> dict[str, str]:
        return read_guest_env(self.initrd.parent / "guest.env")

    def kernel_image(self) -> Path:
        if self.kernel is not None:
            return self.kernel
        env_file = self.initrd.parent / "guest.env"
        env = read_guest_env(env_file)
        img = env.get("KERNEL_IMAGE")
        if not img:
            raise ConfigError(f"{env_file} has no KERNEL_IMAGE; {SETUP_HINT}")
        p = Path(img)
        return p if p.is_absolute() else env_file.parent / p

    def insn_plugin(self) -> Path:
        """The instruction-count TCG plugin, built beside QEMU by build-qemu.sh."""
        return self.qemu.parent / "rk_insn.so"

    def check_artefacts(self) -> None:
        """Raise ConfigError naming every missing binary or image, with the set-up hint."""
        missing = []

        def need(path: Path, what: str, exe: bool = False) -> None:
            if not path.is_file():
                missing.append(f"  {what}: {path} (missing)")
            elif exe and not os.access(path, os.X_OK):
                missing.append(f"  {what}: {path} (not executable)")

        need(self.qemu, "QEMU", exe=True)
        if self.insn_count:
            need(self.insn_plugin(), "instruction-count plugin (insn_count = true)")
        if self.fabric:
            need(self.bridge, "fabric bridge", exe=True)
        need(self.initrd, "guest initramfs")
        if self.kernel is not None:
            need(self.kernel, "guest kernel")
        else:
            env_file = self.initrd.parent / "guest.env"
            if not env_file.is_file():
                missing.append(f"  guest kernel: {env_file} (missing; it names KERNEL_IMAGE)")
            else:
                try:
                    need(self.kernel_image(), "guest kernel")
                except ConfigError as e:
                    missing.append(f"  guest kernel: {e}")
        if missing:
            raise ConfigError("build artefacts missing:\n" + "\n".join(missing) +
                              f"\n{SETUP_HINT} (or set RACKEMU_BUILD, or [paths] in the config)")


def default_bridge(build: Path) -> Path:
    """$RACKEMU_BUILD/rackemu-bridge; the meson build tree's build/host/rackemu-bridge when
    only that one exists (a checkout built with meson but not yet installed by setup)."""
    top = build / "rackemu-bridge"
    host = build / "host" / "rackemu-bridge"
    return host if not top.exists() and host.exists() else top


def read_guest_env(path: Path) -> dict[str, str]:
    """Read guest/build.sh's guest.env: shell assignments KEY=value (quotes allowed), comments."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}; {SETUP_HINT}") from None
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        key, sep, value = line.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            continue
        try:
            parts = shlex.split(value, comments=True)
        except ValueError:
            parts = [value]
        env[key] = " ".join(parts)
    return env


def _check_type(key: str, value: Any, types: tuple, what: str) -> None:
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{key}: expected {what}, got {value!r}")
    if not isinstance(value, types):
        raise ConfigError(f"{key}: expected {what}, got {value!r}")


PATH_KEYS = ("run_dir", "shm_dir", "pmem_dir")


def _relative_to(value: Any, base_dir: Path | None) -> Any:
    """A relative path written in a config file means relative to that file's directory (not
    to wherever the launcher happens to run); `~` is expanded first."""
    if base_dir is None or not isinstance(value, str) or not value:
        return value
    p = Path(value).expanduser()
    return value if p.is_absolute() else str(base_dir / p)


def _merge(base: dict[str, Any], layer: dict[str, Any], where: str,
           base_dir: Path | None = None) -> None:
    """Merge one TOML document or override dict into base, refusing unknown keys. Relative
    paths in a file layer (base_dir given) are made relative to base_dir."""
    for key, value in layer.items():
        if key not in DEFAULTS:
            known = ", ".join(sorted(DEFAULTS))
            raise ConfigError(f"{where}: unknown key {key!r} (known keys: {known})")
        if key == "paths":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: [paths] must be a table")
            for pk, pv in value.items():
                if pk not in DEFAULTS["paths"]:
                    known = ", ".join(sorted(DEFAULTS["paths"]))
                    raise ConfigError(f"{where}: unknown key 'paths.{pk}' (known: {known})")
                _check_type(f"paths.{pk}", pv, (str,), "a path string")
                base["paths"][pk] = _relative_to(pv, base_dir)
        elif key == "rnic_props":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: rnic_props must be a table, e.g. "
                                  f"rnic_props = {{ mtu = 1024, link-mbps = 25000 }}")
            base[key] = dict(value)
        elif key == "pmem_props":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: pmem_props must be a table, e.g. "
                                  f"pmem_props = {{ nic-entries = 16, llc-lines = 1024 }}")
            base[key] = dict(value)
        elif key in PATH_KEYS:
            base[key] = _relative_to(value, base_dir)
        else:
            base[key] = value


def load_config(path: str | os.PathLike | None = None,
                overrides: dict[str, Any] | None = None) -> ClusterConfig:
    """Built-in defaults (the values platform/cluster.toml documents), then the file at `path`
    if given (it may set only some keys), then `overrides` (command-line values; None entries
    are ignored). Returns a validated ClusterConfig or raises ConfigError."""
    raw = copy.deepcopy(DEFAULTS)
    source = "built-in defaults"
    if path is not None:
        p = Path(path)
        try:
            with open(p, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except OSError as e:
            raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p} is not valid TOML: {e}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {p} is not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                              f"at offset {e.start}); TOML files must be UTF-8") from None
        except ValueError as e:   # e.g. a directory given as the file, or a NUL in the path
            raise ConfigError(f"cannot read config file {p}: {e}") from None
        _merge(raw, doc, str(p), base_dir=Path(os.path.abspath(p)).parent)
        source = str(p)
    if overrides:
        _merge(raw, {k: v for k, v in overrides.items() if v is not None}, "command line")
    return _validate(raw, source)


def _validate(raw: dict[str, Any], source: str) -> ClusterConfig:
    name = raw["name"]
    _check_type("name", name, (str,), "a string")
    if not _NAME_RE.match(name):
        raise ConfigError(f"name: {name!r} is not a usable cluster name (letters, digits, "
                          f"'_', '.', '-', up to 40 characters, starting with a letter or digit)")

    nodes = raw["nodes"]
    if isinstance(nodes, str) and nodes.strip().isdigit():
        nodes = int(nodes)
    _check_type("nodes", nodes, (int,), "an integer")
    if not 1 <= nodes <= MAX_NODES:
        raise ConfigError(f"nodes: {nodes} is out of range; a cluster has 1 to {MAX_NODES} nodes")

    memory_mib = parse_memory(raw["memory"])

    vcpus = raw["vcpus"]
    _check_type("vcpus", vcpus, (int,), "an integer")
    if not 1 <= vcpus <= MAX_VCPUS:
        raise ConfigError(f"vcpus: {vcpus} is out of range; a node has 1 to {MAX_VCPUS} vCPUs")

    cpu = raw["cpu"]
    _check_type("cpu", cpu, (str,), "a QEMU CPU model name")
    if not _CPU_RE.match(cpu):
        raise ConfigError(f"cpu: {cpu!r} is not a QEMU CPU model name (e.g. \"cortex-a57\")")

    machine = raw["machine"]
    _check_type("machine", machine, (str,), "a string")
    if machine not in MACHINES:
        raise ConfigError(f"machine: {machine!r} is not supported (use one of: {', '.join(MACHINES)})")

    cmdline = raw["kernel_cmdline"]
    _check_type("kernel_cmdline", cmdline, (str,), "a string")
    if "\n" in cmdline:
        raise ConfigError("kernel_cmdline: must be one line")
    if re.search(r"(^|\s)rackemu\.node=", cmdline):
        raise ConfigError("kernel_cmdline: rackemu.node= is set by the launcher; remove it")

    boot_timeout = raw["boot_timeout"]
    _check_type("boot_timeout", boot_timeout, (int, float), "a number of seconds")
    if not 1 <= boot_timeout <= 24 * 3600:
        raise ConfigError(f"boot_timeout: {boot_timeout} is out of range (1 to 86400 seconds)")

    snapshot = raw["snapshot"]
    _check_type("snapshot", snapshot, (str,), "a string")
    if snapshot not in SNAPSHOT_MODES:
        raise ConfigError(f"snapshot: {snapshot!r} is not a mode (use one of: "
                          f"{', '.join(SNAPSHOT_MODES)})")

    insn_count = raw["insn_count"]
    _check_type("insn_count", insn_count, (bool,), "true or false")
    net = raw["net"]
    _check_type("net", net, (bool,), "true or false")
    net_mtu = raw["net_mtu"]
    _check_type("net_mtu", net_mtu, (int,), "an integer number of bytes")
    if not NET_MTU_MIN <= net_mtu <= NET_MTU_MAX:
        raise ConfigError(f"net_mtu: {net_mtu} is out of range; the fabric NIC's MTU is "
                          f"{NET_MTU_MIN} to {NET_MTU_MAX} bytes (1500: standard, 9000: jumbo frames)")

    stack_roce = raw["stack_roce"]
    _check_type("stack_roce", stack_roce, (str,), 'a string ("auto", "on" or "off")')
    if stack_roce not in STACK_ROCE_MODES:
        raise ConfigError(f"stack_roce: {stack_roce!r} is not one of {', '.join(STACK_ROCE_MODES)} "
                          f"(whether the guest's network stack may send RoCEv2; docs/networking.md)")

    rnic = raw["rnic"]
    _check_type("rnic", rnic, (bool,), "true or false")
    rnic_props = _rnic_props(raw["rnic_props"])
    if rnic and machine != "rackemu-node":
        raise ConfigError(f"rnic: the RNIC is a rackemu device and joins the node's fabric port; "
                          f"machine {machine!r} has neither (use machine = \"rackemu-node\" or rnic = false)")
    if rnic_props and not rnic:
        raise ConfigError("rnic_props: set, but rnic = false gives the nodes no RNIC to apply them to "
                          "(set rnic = true, or use `cluster up --rnic`)")

    run_dir = raw["run_dir"]
    _check_type("run_dir", run_dir, (str,), "a path string")
    run_dir_path = Path(run_dir).expanduser() if run_dir else RUN_BASE / name
    run_dir_path = Path(os.path.abspath(run_dir_path))
    if run_dir_path == Path("/") or run_dir_path == Path.home():
        raise ConfigError(f"run_dir: {run_dir_path} cannot be a cluster's run directory")
    # UNIX socket paths are limited to 107 bytes; the longest one is node63.agent/qmp.
    if len(os.fsencode(run_dir_path / "node63.agent")) > 100:
        raise ConfigError(f"run_dir: {run_dir_path} is too long for UNIX socket paths "
                          f"(keep it under ~85 characters)")

    shm_dir = raw["shm_dir"]
    _check_type("shm_dir", shm_dir, (str,), "a path string")
    shm_dir_path = Path(os.path.abspath(Path(shm_dir).expanduser())) if shm_dir else SHM_BASE

    lists = {}
    fault_seed = raw["fault_seed"]
    if not isinstance(fault_seed, int) or isinstance(fault_seed, bool) or not 0 <= fault_seed < 2**64:
        raise ConfigError(f"fault_seed: expected an integer from 0 to 2**64-1, got {fault_seed!r}")

    switch = raw["switch"]
    _check_type("switch", switch, (str,), 'a switch program\'s name (`rackemu switch list`), or ""')
    if switch and not all(c.isalnum() or c in "-_" for c in switch):
        raise ConfigError(f"switch: {switch!r} is not a switch program's name (`rackemu switch list`)")

    for key in ("qemu_args", "bridge_args", "faults", "switch_params"):
        v = raw[key]
        if not isinstance(v, list) or not all(isinstance(a, str) for a in v):
            raise ConfigError(f"{key}: expected a list of strings, got {v!r}")
        lists[key] = list(v)

    pmem_mib = parse_pmem(raw["pmem"])
    pmem_mode = raw["pmem_mode"]
    _check_type("pmem_mode", pmem_mode, (str, list), f"one of {', '.join(PMEM_MODES)}, or a list of "
                f"them with one per node")
    if isinstance(pmem_mode, list) and len(pmem_mode) != nodes:
        raise ConfigError(f"pmem_mode: a list of {len(pmem_mode)} modes for {nodes} node(s); give one "
                          f"per node, or one string for all")
    for m in [pmem_mode] if isinstance(pmem_mode, str) else pmem_mode:
        if m not in PMEM_MODES:
            raise ConfigError(f"pmem_mode: {m!r} is not one of {', '.join(PMEM_MODES)} "
                              f"(what a power cut keeps; docs/pmem.md)")
    pmem_props = _pmem_props(raw["pmem_props"])
    pmem_dir = raw["pmem_dir"]
    _check_type("pmem_dir", pmem_dir, (str,), "a path string")
    pmem_dir_path = Path(os.path.abspath(Path(pmem_dir).expanduser())) if pmem_dir else None
    if pmem_mib:
        if machine != "rackemu-node":
            raise ConfigError(f"pmem: persistent memory is a device of the rackemu-node machine; "
                              f"machine {machine!r} has none (use machine = \"rackemu-node\" or pmem = 0)")
        if snapshot != "off":
            raise ConfigError(f"snapshot: {snapshot!r} with pmem: a node must boot on its durable "
                              f"image, not on a cached boot snapshot; set snapshot = \"off\"")
        where = pmem_dir_path or run_dir_path / "pmem"
        if "," in str(where):
            raise ConfigError(f"pmem_dir: {str(where)!r} contains a comma, which QEMU's -machine "
                              f"option cannot carry; choose another directory")
    elif pmem_props:
        raise ConfigError("pmem_props: set, but pmem = 0 gives the nodes no persistent memory")

    paths = raw["paths"]
    b = build_dir()

    def pth(key: str, default: Path) -> Path:
        return Path(paths[key]).expanduser().absolute() if paths[key] else default

    return ClusterConfig(
        name=name, nodes=nodes, memory_mib=memory_mib, vcpus=vcpus, cpu=cpu, machine=machine,
        kernel_cmdline=cmdline.strip(), boot_timeout=float(boot_timeout), snapshot=snapshot,
        insn_count=insn_count,
        net=net, net_mtu=net_mtu, stack_roce=stack_roce, rnic=rnic, rnic_props=rnic_props,
        run_dir=run_dir_path,
        shm_dir=shm_dir_path,
        qemu_args=lists["qemu_args"], bridge_args=lists["bridge_args"],
        faults=lists["faults"], fault_seed=fault_seed,
        switch=switch, switch_params=lists["switch_params"],
        pmem_mib=pmem_mib, pmem_dir=pmem_dir_path, pmem_mode=pmem_mode, pmem_props=pmem_props,
        qemu=pth("qemu", b / "qemu" / "qemu-system-aarch64"),
        bridge=pth("bridge", default_bridge(b)),
        kernel=Path(paths["kernel"]).expanduser().absolute() if paths["kernel"] else None,
        initrd=pth("initrd", b / "guest" / "initramfs.cpio"),
        source=source,
    )


def _rnic_props(props: Any) -> dict[str, int]:
    """Validate the rnic_props table: known property names, integers in the device's range."""
    out = {}
    for k, v in props.items():
        if k not in RNIC_PROPS:
            known = ", ".join(f"{n} ({what})" for n, (_, what) in RNIC_PROPS.items())
            raise ConfigError(f"rnic_props: unknown property {k!r} (known: {known})")
        lo, what = RNIC_PROPS[k]
        _check_type(f"rnic_props.{k}", v, (int,), f"an integer ({what})")
        if k == "mtu" and v not in RNIC_MTUS:
            raise ConfigError(f"rnic_props.mtu: {v} is not a RoCE path MTU "
                              f"(use one of {', '.join(map(str, RNIC_MTUS))})")
        if k == "dm-size" and (v % 64 or v > RNIC_DM_SIZE_MAX):
            raise ConfigError(f"rnic_props.dm-size: {v} is not a multiple of 64 up to {RNIC_DM_SIZE_MAX} "
                              f"(bytes of device memory, docs/rnic.md \"Device memory\")")
        if not lo <= v <= 0xFFFFFFFF:
            raise ConfigError(f"rnic_props.{k}: {v} is out of range ({lo} to 4294967295; {what})")
        out[k] = v
    return out


def _pmem_props(props: Any) -> dict[str, int]:
    """Validate the pmem_props table: known names (PMEM_PROPS), integers in range."""
    out = {}
    for k, v in props.items():
        if k not in PMEM_PROPS:
            known = ", ".join(f"{n} ({what})" for n, (_, _, what) in PMEM_PROPS.items())
            raise ConfigError(f"pmem_props: unknown property {k!r} (known: {known})")
        lo, hi, what = PMEM_PROPS[k]
        _check_type(f"pmem_props.{k}", v, (int,), f"an integer ({what})")
        if not lo <= v <= hi:
            raise ConfigError(f"pmem_props.{k}: {v} is out of range ({lo} to {hi}; {what})")
        out[k] = v
    return out


def run_dir_for(name: str | None = None, run_dir: str | None = None,
                config: str | None = None) -> Path:
    """Where the cluster named on the command line lives (for status/exec/down)."""
    if run_dir:
        return Path(os.path.abspath(Path(run_dir).expanduser()))
    if config:
        return load_config(config, {"name": name}).run_dir
    if name is not None:
        if not _NAME_RE.match(name):
            raise ConfigError(f"--name: {name!r} is not a usable cluster name")
        return RUN_BASE / name
    return RUN_BASE / DEFAULTS["name"]
