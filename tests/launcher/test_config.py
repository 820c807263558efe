"""Configuration: defaults, the TOML file, overrides, and the error messages for bad values."""
import tomllib
from pathlib import Path

import pytest

from rackemu.config import (DEFAULTS, ConfigError, load_config, parse_memory, read_guest_env,
                            RUN_BASE)

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_cluster_toml_documents_exactly_the_builtin_defaults():
    with open(ROOT / "platform" / "cluster.toml", "rb") as f:
        doc = tomllib.load(f)
    assert doc == DEFAULTS


def test_defaults_give_two_small_nodes_in_tmp_rackemu_default():
    c = load_config()
    assert (c.nodes, c.memory, c.vcpus, c.cpu, c.machine) == (2, "256M", 1, "cortex-a57", "rackemu-node")
    assert c.run_dir == RUN_BASE / "default"
    assert c.fabric


def test_file_sets_some_keys_and_command_line_overrides_it(tmp_path):
    p = write(tmp_path, 'name = "rack1"\nnodes = 4\nmemory = "1G"\n')
    c = load_config(p, {"nodes": 3, "memory": None})
    assert (c.name, c.nodes, c.memory_mib) == ("rack1", 3, 1024)
    assert c.run_dir == RUN_BASE / "rack1"


def test_unknown_key_is_named_with_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'node'.*known keys:.*nodes"):
        load_config(write(tmp_path, "node = 3\n"))
    with pytest.raises(ConfigError, match=r"unknown key 'paths.kernal'"):
        load_config(write(tmp_path, '[paths]\nkernal = "/x"\n'))


@pytest.mark.parametrize("nodes", [0, 65, -1])
def test_nodes_out_of_range(tmp_path, nodes):
    with pytest.raises(ConfigError, match=r"nodes: .* out of range; a cluster has 1 to 64 nodes"):
        load_config(write(tmp_path, f"nodes = {nodes}\n"))


def test_nodes_must_be_an_integer(tmp_path):
    with pytest.raises(ConfigError, match="nodes: expected an integer"):
        load_config(write(tmp_path, "nodes = 2.5\n"))
    with pytest.raises(ConfigError, match="nodes: expected an integer"):
        load_config(write(tmp_path, "nodes = true\n"))


@pytest.mark.parametrize("value,mib", [("256M", 256), ("1G", 1024), ("1GiB", 1024), (512, 512),
                                       ("262144K", 256), ("2g", 2048), ("16G", 16384)])
def test_memory_sizes(value, mib):
    assert parse_memory(value) == mib


@pytest.mark.parametrize("value,msg", [("lots", "cannot read 'lots' as a size"),
                                       ("32M", "between 64 MiB and 16 GiB"),
                                       ("17G", "between 64 MiB and 16 GiB"),
                                       ("1.5G", "cannot read"),
                                       ("100000K", "not a whole number of MiB"),
                                       (True, "expected a size")])
def test_bad_memory_sizes(value, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_memory(value)


def test_other_bad_values(tmp_path):
    cases = {'vcpus = 0': "vcpus: 0 is out of range",
             'vcpus = 9': "vcpus: 9 is out of range",
             'cpu = "Cortex A57"': "cpu: 'Cortex A57' is not a QEMU CPU model name",
             'machine = "sbsa-ref"': "machine: 'sbsa-ref' is not supported",
             'name = "a b"': "name: 'a b' is not a usable cluster name",
             'kernel_cmdline = "rackemu.node=3"': "rackemu.node= is set by the launcher",
             'boot_timeout = 0': "boot_timeout: 0 is out of range",
             'qemu_args = "-d guest_errors"': "qemu_args: expected a list of strings",
             'run_dir = "/"': "cannot be a cluster's run directory",
             f'run_dir = "/tmp/{"x" * 120}"': "too long for UNIX socket paths"}
    for text, msg in cases.items():
        with pytest.raises(ConfigError, match=msg):
            load_config(write(tmp_path, text + "\n"))


def test_toml_syntax_error_names_the_file(tmp_path):
    p = write(tmp_path, "nodes = \n")
    with pytest.raises(ConfigError, match=f"{p} is not valid TOML"):
        load_config(p)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="config file /nonexistent.toml does not exist"):
        load_config("/nonexistent.toml")


def test_missing_artefacts_say_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("RACKEMU_BUILD", str(tmp_path / "nothing"))
    c = load_config()
    with pytest.raises(ConfigError) as e:
        c.check_artefacts()
    msg = str(e.value)
    assert "QEMU:" in msg and "fabric bridge:" in msg and "guest initramfs:" in msg
    assert "run `./rackemu setup` first" in msg


def test_virt_machine_needs_no_bridge(fake_build):
    (fake_build / "rackemu-bridge").unlink()
    c = load_config(overrides={"machine": "virt"})
    assert not c.fabric
    c.check_artefacts()


def test_guest_env_is_read_like_the_shell_would(tmp_path):
    p = tmp_path / "guest.env"
    p.write_text('# built by guest/build.sh\nKVER=6.1.0-27-arm64\n'
                 'KERNEL_IMAGE="/b/guest/vmlinuz-6.1.0-27-arm64"  # the image\n'
                 "export MODULES='a b'\n")
    assert read_guest_env(p) == {"KVER": "6.1.0-27-arm64",
                                 "KERNEL_IMAGE": "/b/guest/vmlinuz-6.1.0-27-arm64",
                                 "MODULES": "a b"}


def test_kernel_image_relative_to_guest_env(fake_build):
    (fake_build / "guest" / "guest.env").write_text("KERNEL_IMAGE=vmlinuz\n")
    assert load_config().kernel_image() == fake_build / "guest" / "vmlinuz"


def test_net_keys_are_checked_with_the_accepted_range(tmp_path):
    c = load_config(write(tmp_path, "net = false\nnet_mtu = 9000\n"))
    assert (c.net, c.net_mtu) == (False, 9000)
    assert (load_config().net, load_config().net_mtu) == (True, 1500)
    with pytest.raises(ConfigError, match=r"net_mtu: 9001 is out of range.*68 to 9000"):
        load_config(write(tmp_path, "net_mtu = 9001\n"))
    with pytest.raises(ConfigError, match=r"net_mtu: expected an integer"):
        load_config(write(tmp_path, 'net_mtu = "1500"\n'))
    with pytest.raises(ConfigError, match=r"net: expected true or false"):
        load_config(write(tmp_path, "net = 1\n"))


def test_rnic_key_and_its_properties_are_checked(tmp_path):
    """docs/launcher.md: rnic = true puts `-device rackemu-rnic` with rnic_props on every node."""
    assert (load_config().rnic, load_config().rnic_props, load_config().rnic_args()) == (False, {}, [])
    c = load_config(write(tmp_path, "rnic = true\nrnic_props = { mtu = 1024, link-mbps = 25000, hop-ns = 0 }\n"))
    assert (c.rnic, c.rnic_props) == (True, {"mtu": 1024, "link-mbps": 25000, "hop-ns": 0})
    assert c.rnic_args() == ["-device", "rackemu-rnic,hop-ns=0,link-mbps=25000,mtu=1024"]
    assert load_config(None, {"rnic": True}).rnic_args() == ["-device", "rackemu-rnic"]
    # the responder's rate ceilings (docs/rnic.md "Rate ceilings"): 0 turns one off
    c2 = load_config(write(tmp_path, "rnic = true\nrnic_props = { atomic-host-ns = 0, atomic-dm-ns = 100, "
                                     "qp-msg-ns = 50 }\n"))
    assert c2.rnic_args() == ["-device", "rackemu-rnic,atomic-dm-ns=100,atomic-host-ns=0,qp-msg-ns=50"]
    # the state file round trip keeps both
    from rackemu.config import ClusterConfig
    assert ClusterConfig.from_dict(c.to_dict()).rnic_args() == c.rnic_args()


@pytest.mark.parametrize("text,msg", [
    ('rnic = "yes"\n', r"rnic: expected true or false, got 'yes'"),
    ("rnic = true\nrnic_props = { mtu = 1500 }\n",
     r"rnic_props.mtu: 1500 is not a RoCE path MTU.*256, 512, 1024, 2048, 4096"),
    ("rnic = true\nrnic_props = { link-mbps = 0 }\n", r"rnic_props.link-mbps: 0 is out of range \(1 to 4294967295"),
    ("rnic = true\nrnic_props = { pcie-ns = 4294967296 }\n", r"rnic_props.pcie-ns: 4294967296 is out of range"),
    ("rnic = true\nrnic_props = { hop-ns = -1 }\n", r"rnic_props.hop-ns: -1 is out of range \(0 to"),
    ("rnic = true\nrnic_props = { atomic-host-ns = -5 }\n", r"rnic_props.atomic-host-ns: -5 is out of range \(0 to"),
    ("rnic = true\nrnic_props = { qp-msg-ns = 4294967296 }\n", r"rnic_props.qp-msg-ns: 4294967296 is out of range"),
    ("rnic = true\nrnic_props = { dm-size = 100 }\n", r"rnic_props.dm-size: 100 is not a multiple of 64"),
    ("rnic = true\nrnic_props = { ack-every = 0 }\n", r"rnic_props.ack-every: 0 is out of range \(1 to"),
    ("rnic = true\nrnic_props = { dm-size = 8388608 }\n", r"rnic_props.dm-size: 8388608 is not a multiple of 64 up to"),
    ("rnic = true\nrnic_props = { nic-mhz = 1.5 }\n", r"rnic_props.nic-mhz: expected an integer \(NIC pipeline clock"),
    ("rnic = true\nrnic_props = { link_mbps = 5 }\n", r"unknown property 'link_mbps' \(known: mtu .*link-mbps"),
    ("rnic = true\nrnic_props = 5\n", r"rnic_props must be a table"),
    ("rnic_props = { mtu = 1024 }\n", r"rnic_props: set, but rnic = false"),
    ('rnic = true\nmachine = "virt"\n', r"rnic: the RNIC is a rackemu device.*machine 'virt'"),
])
def test_bad_rnic_values_are_refused_with_the_reason(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(write(tmp_path, text))
