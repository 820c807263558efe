// SPDX-License-Identifier: MIT
// rackemu-fabric-bench: host-side fabric figures, measured in one run so ratios are fair:
//   raw     shared-memory spin ping-pong between two processes (the floor)
//   bridge  echo round trip node0 -> bridge -> node1 -> bridge -> node0, each node and the
//           bridge in its own process, through the real port and bridge code
//   rate    frames per second of pipelined echo traffic through the bridge
// Prints a table; --csv FILE appends the figures as CSV.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bridge.h"
#include "rk_fabric_port.h"

using namespace rackemu::fabric;

namespace {
struct Stats {
    double median_us, p99_us;
};
Stats summarize(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v[std::min(v.size() - 1, size_t(v.size() * 0.99))]};
}

Stats raw_pingpong(unsigned iters)
{
    auto *w = static_cast<std::atomic<uint64_t> *>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    new (&w[0]) std::atomic<uint64_t>(0);
    new (&w[8]) std::atomic<uint64_t>(0);
    pid_t c = fork();
    if (c == 0) {
        for (uint64_t i = 1; i <= iters; i++) {
            while (w[0].load(std::memory_order_acquire) != i)
                cpu_relax();
            w[8].store(i, std::memory_order_release);
        }
        _exit(0);
    }
    std::vector<double> rtt;
    rtt.reserve(iters);
    for (uint64_t i = 1; i <= iters; i++) {
        uint64_t t0 = now_ns();
        w[0].store(i, std::memory_order_release);
        while (w[8].load(std::memory_order_acquire) != i)
            cpu_relax();
        rtt.push_back((now_ns() - t0) / 1000.0);
    }
    waitpid(c, nullptr, 0);
    munmap(w, 4096);
    return summarize(rtt);
}

struct Waiter {
    std::atomic<uint64_t> replies{0};
    static void on_reply(void *o, const rkf_frame_hdr *, const void *)
    {
        static_cast<Waiter *>(o)->replies.fetch_add(1, std::memory_order_release);
    }
};
} // namespace

int main(int argc, char **argv)
{
    unsigned iters = 20000;
    std::string csv;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--iters" && i + 1 < argc)
            iters = std::max(100, atoi(argv[++i]));
        else if (a == "--csv" && i + 1 < argc)
            csv = argv[++i];
        else {
            fprintf(stderr, "usage: rackemu-fabric-bench [--iters N] [--csv FILE]\n");
            return a == "--help" ? 0 : 2;
        }
    }
    char tmpl[] = "/tmp/rackemu-bench-XXXXXX";
    std::string dir = mkdtemp(tmpl);
    pid_t bpid = fork();
    if (bpid == 0) {
        Bridge::Options bo;
        bo.run_dir = dir;
        bo.max_nodes = 4;
        Bridge b(bo);
        std::string err;
        if (!b.start(err)) {
            fprintf(stderr, "bridge: %s\n", err.c_str());
            _exit(1);
        }
        b.run();
        _exit(0);
    }
    const std::string sock = dir + "/fabric.sock";
    usleep(200000);
    pid_t npid = fork();
    if (npid == 0) { // node 1: its port thread answers echo requests
        char err[256];
        RkFabricPort *p = rk_fabric_port_new(sock.c_str(), 1, 2, 0, 5000, err, sizeof err);
        if (!p) _exit(1);
        rk_fabric_port_start(p);
        pause();
        _exit(0);
    }
    char err[256];
    RkFabricPort *p = rk_fabric_port_new(sock.c_str(), 0, 2, 0, 5000, err, sizeof err);
    if (!p) {
        fprintf(stderr, "rackemu-fabric-bench: %s\n", err);
        return 1;
    }
    Waiter w;
    rk_fabric_port_register(p, RKF_SVC_ECHO, nullptr, Waiter::on_reply, nullptr, &w);
    rk_fabric_port_start(p);
    usleep(200000);
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_ECHO;
    h.dst = 1;
    h.len = 32;
    unsigned char payload[32] = {};
    // warm-up
    for (unsigned i = 0; i < 1000; i++) {
        uint64_t want = w.replies + 1;
        h.tag = i;
        if (rk_fabric_port_send(p, &h, payload)) break;
        while (w.replies.load(std::memory_order_acquire) < want)
            sched_yield();
    }
    std::vector<double> rtt;
    rtt.reserve(iters);
    for (unsigned i = 0; i < iters; i++) {
        uint64_t want = w.replies + 1;
        h.tag = i;
        uint64_t t0 = now_ns();
        if (rk_fabric_port_send(p, &h, payload)) {
            fprintf(stderr, "send failed\n");
            return 1;
        }
        while (w.replies.load(std::memory_order_acquire) < want)
            sched_yield();
        rtt.push_back((now_ns() - t0) / 1000.0);
    }
    Stats br = summarize(rtt);
    // Throughput: keep up to 512 requests in flight for ~1 s.
    const uint64_t base = w.replies, t0 = now_ns();
    uint64_t sent = 0;
    while (now_ns() - t0 < 1000000000ull) {
        if (sent - (w.replies - base) < 512) {
            h.tag = sent;
            if (rk_fabric_port_send(p, &h, payload) == 0) sent++;
        } else {
            cpu_relax();
        }
    }
    while (w.replies - base < sent && now_ns() - t0 < 5000000000ull)
        cpu_relax();
    const double secs = (now_ns() - t0) / 1e9;
    const double fps = (w.replies - base) / secs;
    Stats raw = raw_pingpong(iters);

    rk_fabric_port_free(p);
    kill(npid, SIGTERM);
    kill(bpid, SIGTERM);
    waitpid(npid, nullptr, 0);
    waitpid(bpid, nullptr, 0);
    std::system(("rm -rf " + dir).c_str());

    printf("%-44s %12s %12s\n", "measurement (64-byte frames, one run)", "median_us", "p99_us");
    printf("%-44s %12.3f %12.3f\n", "raw shared-memory ping-pong (2 processes)", raw.median_us, raw.p99_us);
    printf("%-44s %12.3f %12.3f\n", "bridge echo round trip (3 processes)", br.median_us, br.p99_us);
    printf("%-44s %12.0f\n", "bridge echo frames/s (512 in flight)", fps);
    printf("bridge round trip / raw ping-pong: %.1fx\n", br.median_us / raw.median_us);
    if (!csv.empty()) {
        FILE *f = fopen(csv.c_str(), "a");
        if (f) {
            fprintf(f, "fabric,raw_pingpong_median_us,%.3f\nfabric,raw_pingpong_p99_us,%.3f\n", raw.median_us,
                    raw.p99_us);
            fprintf(f, "fabric,bridge_rtt_median_us,%.3f\nfabric,bridge_rtt_p99_us,%.3f\n", br.median_us,
                    br.p99_us);
            fprintf(f, "fabric,bridge_frames_per_s,%.0f\n", fps);
            fclose(f);
        }
    }
    return 0;
}
