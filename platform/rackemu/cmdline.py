"""The command lines of a cluster's processes: the fabric bridge and each node's QEMU.

They follow from the configuration and the cluster's directories alone (docs/launcher.md, "cluster
up", shows a node's); the snapshot cache keys its entries on them (snapcache.normalized_argv).
"""

from __future__ import annotations

from pathlib import Path

from .config import ClusterConfig


def bridge_argv(config: ClusterConfig, run_dir: Path) -> list[str]:
    """The fabric bridge's command line."""
    faults = [a for rule in config.faults for a in ("--fault", rule)]
    switch = ["--switch", config.switch] if config.switch else []
    switch += [a for kv in config.switch_params for a in ("--switch-set", kv)] if config.switch else []
    return [str(config.bridge), "--run-dir", str(run_dir),
            "--max-nodes", str(config.nodes), "--fault-seed", str(config.fault_seed),
            *faults, *switch, *config.bridge_args]


def node_argv(c: ClusterConfig, d: Path, ram_dir: Path, i: int) -> list[str]:
    """Node i's QEMU command line (docs/launcher.md, \"cluster up\"); its guest RAM is
    ram_dir/nodeI.ram."""
    machine = c.machine + ",memory-backend=ram"
    if c.fabric:
        # ram-dir: one-sided accesses copy straight from/to a live peer's RAM file
        # (docs/fabric.md, "Direct path"); qemu_args "-machine ram-dir=" turns that off
        machine += (f",node-id={i},node-count={c.nodes},fabric={d / 'fabric.sock'}"
                    f",ram-dir={ram_dir}")
        # the node's virtio-net NIC on the fabric port (docs/networking.md)
        machine += (f",net=on,net-mtu={c.net_mtu},stack-roce={c.stack_roce}" if c.net
                    else ",net=off")
    # persistent memory and its durable image (docs/pmem.md)
    machine += c.pmem_machine_props(i)
    append = f"console=ttyAMA0 rackemu.node={i}"
    if c.kernel_cmdline:
        append += " " + c.kernel_cmdline
    return [str(c.qemu), "-M", machine, "-cpu", c.cpu, "-smp", str(c.vcpus),
            "-m", c.memory, "-nographic", "-monitor", "none",
            "-object", f"memory-backend-file,id=ram,size={c.memory},share=on,"
                       f"mem-path={ram_dir / f'node{i}.ram'}",
            "-nic", "none",  # virt's default NIC needs an option ROM the source package lacks
            "-name", f"rackemu-{c.name}-node{i}",
            "-serial", f"file:{d / f'node{i}.console'}",
            "-kernel", str(c.kernel_image()), "-initrd", str(c.initrd),
            "-append", append,
            "-chardev", f"socket,id=agent,path={d / f'node{i}.agent'},server=on,wait=off",
            "-device", "virtio-serial-device",
            "-device", "virtserialport,chardev=agent,name=rackemu.agent",
            "-qmp", f"unix:{d / f'node{i}.qmp'},server=on,wait=off",
            "-pidfile", str(d / f"node{i}.pid"),
            *insn_args(c, d, i),
            *c.rnic_args(),
            *c.qemu_args]


def insn_path(run_dir: Path, i: int) -> Path:
    """Where node i's instruction-count plugin writes its counters (docs/insn-count.md)."""
    return run_dir / f"node{i}.insn.json"


def insn_args(config: ClusterConfig, run_dir: Path, i: int) -> list[str]:
    if not config.insn_count:
        return []
    return ["-plugin", f"{config.insn_plugin()},out={insn_path(run_dir, i)}"]
