// SPDX-License-Identifier: MIT
// rackemu-bridge: the fabric bridge daemon (docs/fabric.md).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "bridge.h"

namespace {
rackemu::fabric::Bridge *g_bridge;

void on_signal(int)
{
    if (g_bridge) g_bridge->stop();
}

void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rackemu-bridge --run-dir DIR [--max-nodes N] [--max-outstanding N] [--fault RULE]...\n"
        "                      [--fault-seed N] [--no-pairs] [--no-source-check] [--verbose]\n"
        "                      [--switch NAME [--switch-set KEY=VALUE]...]\n"
        "\n"
        "The rackemu fabric bridge: the rack switch that links the nodes of a cluster.\n"
        "Creates DIR/fabric.sock (nodes connect here: -M rackemu-node,fabric=DIR/fabric.sock)\n"
        "and DIR/bridge.ctl (control: 'stats' for JSON counters, 'shutdown' to stop, 'fault add RULE',\n"
        "'fault del ID|all', 'fault list', 'capture start OPTIONS', 'capture stop|status'; docs/fabric.md;\n"
        "'switch load NAME [KEY=VALUE]...', 'switch unload|stats|list'; docs/switch.md).\n"
        "Prints 'rackemu-bridge: ready' on stdout once it listens. SIGTERM/SIGINT stop it cleanly.\n"
        "\n"
        "  --run-dir DIR    directory for the sockets (created if missing)\n"
        "  --max-nodes N    node ids accepted are 0..N-1 (1..64, default 64)\n"
        "  --max-outstanding N\n"
        "                   requests one node may have unanswered; more are answered\n"
        "                   CONGESTED (1..1048576, default 65536)\n"
        "  --fault RULE     install a fault rule at start (repeatable; quote it), e.g.\n"
        "                   --fault 'drop prob=0.01 svc=eth kind=roce'; syntax:\n"
        "                   %s\n"
        "  --fault-seed N   default seed of fault rules (rule i: N + i; default 1)\n"
        "  --no-pairs       no direct node-to-node rings: every frame goes through the bridge\n"
        "                   (also RACKEMU_FABRIC_PAIRS=0 in the environment; docs/fabric.md)\n"
        "  --no-source-check  forward Ethernet frames whatever their source MAC and IPv4/ARP\n"
        "                   addresses (by default a node's frames must carry its own: others are\n"
        "                   dropped and counted as eth_spoofed; docs/fabric.md \"Source addresses\")\n"
        "  --switch NAME    load switch program NAME at start (docs/switch.md; `switch list` on\n"
        "                   the control socket lists them)\n"
        "  --switch-set KEY=VALUE\n"
        "                   a parameter of that program (repeatable)\n"
        "  --help           this text\n",
        rackemu::fabric::FaultEngine::help());
}
} // namespace

int main(int argc, char **argv)
{
    rackemu::fabric::Bridge::Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&](const char *name) -> const char * {
            if (i + 1 >= argc) {
                fprintf(stderr, "rackemu-bridge: %s needs a value (see --help)\n", name);
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--run-dir") {
            o.run_dir = value("--run-dir");
        } else if (a == "--max-nodes") {
            const char *v = value("--max-nodes");
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > RKF_MAX_NODES) {
                fprintf(stderr, "rackemu-bridge: --max-nodes %s: expected a number from 1 to %u\n", v,
                        RKF_MAX_NODES);
                return 2;
            }
            o.max_nodes = unsigned(n);
        } else if (a == "--max-outstanding") {
            const char *v = value("--max-outstanding");
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1048576) {
                fprintf(stderr, "rackemu-bridge: --max-outstanding %s: expected a number from 1 to 1048576\n",
                        v);
                return 2;
            }
            o.max_outstanding = size_t(n);
        } else if (a == "--fault") {
            const char *v = value("--fault");
            rackemu::fabric::FaultEngine check;
            std::string err;
            if (!check.add(v, err)) {
                fprintf(stderr, "rackemu-bridge: --fault '%s': %s\n", v, err.c_str());
                return 2;
            }
            o.faults.push_back(v);
        } else if (a == "--fault-seed") {
            const char *v = value("--fault-seed");
            char *end;
            errno = 0;
            const unsigned long long n = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') {
                fprintf(stderr, "rackemu-bridge: --fault-seed %s: expected an unsigned integer\n", v);
                return 2;
            }
            o.fault_seed = n;
        } else if (a == "--switch") {
            o.switch_program = value("--switch");
        } else if (a == "--switch-set") {
            o.switch_params.push_back(value("--switch-set"));
        } else if (a == "--no-pairs") {
            o.pairs = false;
        } else if (a == "--no-source-check") {
            o.eth_source_check = false;
        } else if (a == "--verbose") {
            o.verbose = true;
        } else if (a == "--help" || a == "-h") {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "rackemu-bridge: unknown argument '%s' (see --help)\n", a.c_str());
            return 2;
        }
    }
    if (!o.switch_params.empty() && o.switch_program.empty()) {
        fprintf(stderr, "rackemu-bridge: --switch-set needs --switch NAME (see --help)\n");
        return 2;
    }
    if (!o.switch_program.empty()) {
        rackemu::fabric::sw::Stage check;
        std::string err;
        if (!check.load(o.switch_program, o.switch_params, err)) {
            fprintf(stderr, "rackemu-bridge: --switch %s: %s\n", o.switch_program.c_str(), err.c_str());
            return 2;
        }
    }
    if (o.run_dir.empty()) {
        fprintf(stderr, "rackemu-bridge: --run-dir DIR is required (see --help)\n");
        return 2;
    }
    rackemu::fabric::Bridge b(o);
    std::string err;
    if (!b.start(err)) {
        fprintf(stderr, "rackemu-bridge: %s\n", err.c_str());
        return 1;
    }
    g_bridge = &b;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    printf("rackemu-bridge: ready (fabric %s, control %s, max %u nodes)\n", b.fabric_socket().c_str(),
           b.control_socket().c_str(), o.max_nodes);
    fflush(stdout);
    b.run();
    fprintf(stderr, "rackemu-bridge: final counters %s\n", b.stats_json().c_str());
    g_bridge = nullptr;
    return 0;
}
