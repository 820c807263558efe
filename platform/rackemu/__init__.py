"""rackemu's cluster launcher: boot clusters of emulated ARMv8 nodes linked by the fabric bridge.

Modules:
  config   -- the cluster's shape (TOML file + defaults), validation, paths of the build artefacts
  cluster  -- start, watch and stop the bridge and the QEMU nodes; the Python API used by the tests
  agent    -- the host side of the guest agent protocol (AgentClient)
  demo     -- `rackemu demo`: packets around a ring of nodes, round-trip times, bridge counters
  cli      -- the `rackemu` command line

Typical use from Python:

    from rackemu.config import load_config
    from rackemu.cluster import Cluster

    with Cluster(load_config(overrides={"nodes": 2})) as c:
        print(c.node(0).exec("uname -a").stdout)
"""

__version__ = "0.1.0"
