// SPDX-License-Identifier: MIT
// rackemu-bridge: the fabric bridge daemon (docs/fabric.md).
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
    fprintf(f,
            "usage: rackemu-bridge --run-dir DIR [--max-nodes N] [--max-outstanding N] [--verbose]\n"
            "\n"
            "The rackemu fabric bridge: the rack switch that links the nodes of a cluster.\n"
            "Creates DIR/fabric.sock (nodes connect here: -M rackemu-node,fabric=DIR/fabric.sock)\n"
            "and DIR/bridge.ctl (control: send 'stats' for JSON counters, 'shutdown' to stop).\n"
            "Prints 'rackemu-bridge: ready' on stdout once it listens. SIGTERM/SIGINT stop it cleanly.\n"
            "\n"
            "  --run-dir DIR    directory for the sockets (created if missing)\n"
            "  --max-nodes N    node ids accepted are 0..N-1 (1..64, default 64)\n"
            "  --max-outstanding N\n"
            "                   requests one node may have unanswered; more are answered\n"
            "                   CONGESTED (1..1048576, default 65536)\n"
            "  --help           this text\n");
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
