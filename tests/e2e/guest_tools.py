"""Helpers for e2e tests that drive rackemu's guest tools (gas, mbox, cdma) on booted nodes."""
import time


def kv(text):
    """The tools' `key=value` lines, one dict per line."""
    out = []
    for line in text.decode().splitlines():
        d = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if d:
            out.append(d)
    return out


def run_kv(node, cmd, timeout=120):
    """Run cmd on node; the result and its key=value lines."""
    r = node.exec(cmd, timeout=timeout)
    return r, kv(r.stdout)


def stop_procs(node, *progs):
    """Kill the named programs on node and wait until they are gone."""
    names = " ".join(progs)
    node.exec(f"killall {names} 2>/dev/null; "
              f"for i in $(seq 100); do pidof {names} >/dev/null || break; sleep 0.05; done; true")


def detached(node, cmd, out, ready, fail=None, user=None, tries=300, delay=0.1):
    """Start shell command `cmd` on node detached (setsid: it outlives the agent's exec), as
    `user` (None: root), its output in file `out`, and wait until the output holds `ready`;
    returns the output. `fail` in the output, or no `ready` after `tries` polls, raises with it."""
    line = f"setsid {cmd} </dev/null >{out} 2>&1 &"
    node.sh(f"rm -f {out}")
    node.exec(["su", user, "-c", line]) if user else node.sh(line)
    for _ in range(tries):
        got = node.exec(f"cat {out}").stdout
        if ready in got:
            return got
        if fail is not None and fail in got:
            raise AssertionError(f"node {node.id}: `{cmd}`: {got!r}")
        time.sleep(delay)
    raise AssertionError(f"node {node.id}: `{cmd}` did not report {ready!r}: {got!r}")


def export(node, size, seed, tag):
    """Start `gas export` detached on node (it outlives the agent's exec); return (gaddr, local)."""
    out = f"/tmp/gas-export-{tag}"
    node.sh(f"rm -f {out}; setsid gas export --size {size} --seed {seed} --out {out} --hold 900 "
            f"</dev/null >/dev/null 2>&1 &")
    for _ in range(300):
        r = node.exec(f"cat {out}")
        if r.rc == 0 and b"gaddr=" in r.stdout:
            d = kv(r.stdout)[0]
            return int(d["gaddr"], 16), int(d["local"], 16)
        time.sleep(0.1)
    raise AssertionError(f"gas export on node {node.id} did not start")


def check(node, gaddr, length, seed, widths=None, poff=0):
    """`gas check` of [gaddr, gaddr + length) against pattern `seed` from index poff."""
    wopts = " ".join(f"--width {w}" for w in widths) if widths else ""
    r = node.exec(f"gas check --gaddr {gaddr:#x} --len {length} --seed {seed} --pattern-offset {poff} {wopts}",
                  timeout=120)
    return r, kv(r.stdout)


def rmc_hold(node, ctx, size, tag, key, *opts):
    """Register RMC context `ctx` (`size` bytes, access key `key`) on `node` in a detached
    `rmc ctx-hold`, and wait until it is registered; returns its key=value line as a dict."""
    got = detached(node, f"rmc ctx-hold --id {ctx} --size {size} --key {key} {' '.join(opts)}",
                   f"/tmp/rmc-hold-{tag}", b"ctx=", fail=b"rmc:")
    return kv(got)[0]


class RnicRelay:
    """Cross-node RC connections of the `rnic` tool with the parameters relayed by the caller
    (`--peer-file`, docs/rnic-verbs.md): the RDMA traffic crosses the fabric's Ethernet switch;
    no IP network is needed. Used by tests/e2e/test_rnic_cluster.py and bench/rnic.py."""

    def __init__(self, server, tag, clients, opts=""):
        self.server, self.tag, self.clients, self.n = server, f"/tmp/rnic-{tag}", clients, 0
        server.sh(f"rm -f {self.tag}*; setsid sh -c 'rnic bench --server --peer-file {self.tag} "
                  f"--clients {clients} {opts}; echo rc=$?' </dev/null >{self.tag}.out 2>&1 &")
        self.lines = self._wait(server, f"{self.tag}.out", "conn=", clients)

    @staticmethod
    def _wait(node, path, what, count=1, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = node.exec(f"cat {path}").stdout.decode()
            got = [ln for ln in out.splitlines() if ln.startswith(what)]
            if len(got) >= count:
                return got
            if "rc=" in out and what != "rc=":
                raise AssertionError(f"{path} on node {node.id}: {out}")
            time.sleep(0.2)
        raise AssertionError(f"no {what} in {path} on node {node.id} within {timeout} s")

    def client(self, node, cmd):
        """Start `rnic CMD --peer-file` on node as client i; returns the path of its output."""
        i = self.n
        self.n += 1
        f = f"{self.tag}-c{i}"
        node.sh(f"rm -f {f}*; echo '{self.lines[i]}' > {f}; setsid sh -c 'rnic {cmd} --peer-file {f}; "
                f"echo rc=$?' </dev/null >{f}.out 2>&1 &")
        mine = self._wait(node, f"{f}.out", "conn=")[0]
        self.server.sh(f"echo '{mine}' > {self.tag}.{i}")
        return node, f

    def go(self, *clients):
        self._wait(self.server, f"{self.tag}.out", "server=ready")
        for node, f in clients:
            node.sh(f"touch {f}.go")

    def result(self, client, timeout=300):
        node, f = client
        self._wait(node, f"{f}.out", "rc=", timeout=timeout)
        out = node.exec(f"cat {f}.out").stdout
        return int(kv(out)[-1]["rc"]), out

    def stop(self):
        self.server.sh(f"touch {self.tag}.stop")
        self._wait(self.server, f"{self.tag}.out", "rc=")
        return kv(self.server.exec(f"cat {self.tag}.out").stdout)

    @classmethod
    def faa_total(cls, server, clients, tag, count):
        """Each node of `clients` runs `rnic faa --count COUNT` against a server on `server` (a
        client on the server's own node loops back to its MAC); each must end without errors.
        Returns the server's counter when all hung up."""
        relay = cls(server, tag, len(clients))
        cl = [relay.client(n, f"faa --count {count}") for n in clients]
        relay.go(*cl)
        for c in cl:
            rc, out = relay.result(c)
            assert rc == 0 and kv(out)[-2]["errors"] == "0", out.decode()
        done = [x for x in relay.stop() if x.get("server") == "done"]
        assert done, done
        return int(done[0]["counter"])

    @classmethod
    def kill_server_under(cls, cluster, tag, client_cmd, opts="--timeout 10 --retry 3", run_s=3):
        """Node 1 runs `rnic CLIENT_CMD` against a server on node 0; after run_s seconds node 0's
        QEMU is killed. Returns the client's (rc, output, seconds from the kill to its end)."""
        relay = cls(cluster.node(0), tag, 1, opts)
        cl = relay.client(cluster.node(1), client_cmd)
        relay.go(cl)
        time.sleep(run_s)
        t0 = time.monotonic()
        cluster.kill_node(0)
        rc, out = relay.result(cl, timeout=120)
        return rc, out, time.monotonic() - t0


class SwordRelay(RnicRelay):
    """A `swordbox-wl server` on `server` and clients whose QP parameters are relayed through
    files (docs/swordbox-workloads.md): each client thread takes the next server conn= line;
    waiting, go and result are RnicRelay's. Used by tests/e2e/test_swordbox_workloads.py and
    bench/swordbox_workloads.py."""

    def __init__(self, server, tag, clients, opts):
        self.server, self.tag, self.n = server, f"/tmp/swl-{tag}", 0
        server.sh(f"rm -f {self.tag}*; setsid sh -c 'swordbox-wl server --peer-file {self.tag} --clients {clients} "
                  f"{opts}; echo rc=$?' </dev/null >{self.tag}.out 2>&1 &")
        self.lines = self._wait(server, f"{self.tag}.out", "conn=", clients)

    def client(self, node, cmd, threads=1):
        """Start `swordbox-wl CMD --threads T --peer-file` on node; returns (node, path)."""
        f = f"{self.tag}-c{self.n}"
        mine = self.lines[self.n:self.n + threads]
        first = self.n
        self.n += threads
        node.put(("\n".join(mine) + "\n").encode(), f + ".tmp")
        node.sh(f"rm -f {f}.go {f}.out; mv {f}.tmp {f}; setsid sh -c 'swordbox-wl {cmd} --threads {threads} "
                f"--peer-file {f}; echo rc=$?' </dev/null >{f}.out 2>&1 &")
        for i, line in enumerate(self._wait(node, f"{f}.out", "conn=", threads)):
            self.server.sh(f"echo '{line}' > {self.tag}.{first + i}")
        return node, f

    def stop(self):
        self.server.sh(f"touch {self.tag}.stop")
        self._wait(self.server, f"{self.tag}.out", "rc=")
        out = self.server.exec(f"cat {self.tag}.out").stdout
        return int(kv(out)[-1]["rc"]), kv(out), out
