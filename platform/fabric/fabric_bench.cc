// SPDX-License-Identifier: MIT
// rackemu-fabric-bench: host-side fabric figures, measured in one run so ratios are fair:
//   raw     shared-memory spin ping-pong between two processes (the floor)
//   bridge  echo round trip node0 -> bridge -> node1 -> bridge -> node0, each node and the
//           bridge in its own process, through the real port and bridge code, twice: the
//           requester drives its port while it waits (rk_fabric_port_drive, what a vCPU waiting
//           on a remote load does), and the requester blocks on a futex while its port thread
//           delivers the reply and wakes it
//   wakes   host wake-ups per round trip in each mode: futex wake-ups sent (both ports and the
//           bridge's router) and sleeps begun (both port threads and the router), from the
//           components' own counters; a regression to per-frame sleeping or polling shows here
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

#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
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
    std::atomic<uint32_t> seq{0}, sleeping{0}; // futex word for the blocking mode
    static void on_reply(void *o, const rkf_frame_hdr *, const void *)
    {
        auto *w = static_cast<Waiter *>(o);
        w->replies.fetch_add(1, std::memory_order_release);
        w->seq.fetch_add(1, std::memory_order_seq_cst);
        if (w->sleeping.load(std::memory_order_seq_cst)) futex_op(&w->seq, FUTEX_WAKE_PRIVATE, 1, nullptr);
    }
};

struct Want {
    Waiter *w;
    uint64_t n;
    static int done(void *o)
    {
        auto *c = static_cast<Want *>(o);
        return c->w->replies.load(std::memory_order_acquire) >= c->n;
    }
};

// Wake-up counters of the three components, summed.
struct Wakes {
    uint64_t wakeups = 0, sleeps = 0;
};

uint64_t json_u64(const std::string &j, const char *key)
{
    const std::string k = std::string("\"") + key + "\":";
    const size_t p = j.find(k);
    return p == std::string::npos ? 0 : strtoull(j.c_str() + p + k.size(), nullptr, 10);
}

// The bridge's stats over its control socket.
std::string bridge_stats(const std::string &dir)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/bridge.ctl", dir.c_str());
    std::string out;
    if (s >= 0 && connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0) {
        (void)!write(s, "stats\n", 6);
        char b[4096];
        ssize_t n;
        while ((n = read(s, b, sizeof b)) > 0)
            out.append(b, size_t(n));
    }
    if (s >= 0) close(s);
    return out;
}

Wakes wakes_now(RkFabricPort *p, int node1_ctl, const std::string &dir)
{
    Wakes w;
    rk_fabric_port_stats s{}, s1{};
    rk_fabric_port_get_stats(p, &s);
    char c = 's';
    if (write(node1_ctl, &c, 1) == 1 && read(node1_ctl, &s1, sizeof s1) != sizeof s1) s1 = {};
    const std::string j = bridge_stats(dir);
    w.wakeups = s.wakeups_sent + s1.wakeups_sent + json_u64(j, "router_wakeups");
    w.sleeps = s.sleeps + s1.sleeps + json_u64(j, "router_sleeps");
    return w;
}
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
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) return 1;
    pid_t npid = fork();
    if (npid == 0) { // node 1: its port thread answers echo requests; its counters on request
        close(ctl[0]);
        char err[256];
        RkFabricPort *p = rk_fabric_port_new(sock.c_str(), 1, 2, 0, 5000, err, sizeof err);
        if (!p) _exit(1);
        rk_fabric_port_start(p);
        char c;
        while (read(ctl[1], &c, 1) == 1) {
            rk_fabric_port_stats st{};
            rk_fabric_port_get_stats(p, &st);
            (void)!write(ctl[1], &st, sizeof st);
        }
        _exit(0);
    }
    close(ctl[1]);
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
    // With pairs on, the pair goes direct once both ports mapped it (RKF_PAIR_READY): measure
    // from then on (at most 2 s more; the path is printed below either way).
    for (int i = 0; i < 200 && !rk_fabric_port_pair_active(p, 1); i++) {
        const char *e = getenv("RACKEMU_FABRIC_PAIRS");
        if (e && std::strcmp(e, "0") == 0) break;
        usleep(10000);
    }
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
        Want c{&w, want};
        while (!rk_fabric_port_drive(p, Want::done, &c, 0)) {
        }
    }
    // One round trip at a time; `drive`: the requester drives its port while it waits, else it
    // blocks on a futex and the port thread wakes it.
    auto measure = [&](bool drive, Stats &st, double &wakeups, double &sleeps) {
        std::vector<double> rtt;
        rtt.reserve(iters);
        usleep(20000);
        const Wakes before = wakes_now(p, ctl[0], dir);
        for (unsigned i = 0; i < iters; i++) {
            Want want{&w, w.replies + 1};
            h.tag = i;
            const uint32_t seq = w.seq.load();
            uint64_t t0 = now_ns();
            if (rk_fabric_port_send(p, &h, payload)) {
                fprintf(stderr, "send failed\n");
                exit(1);
            }
            if (!drive || !rk_fabric_port_drive(p, Want::done, &want, 0)) {
                while (!Want::done(&want)) {
                    w.sleeping.store(1, std::memory_order_seq_cst);
                    if (w.seq.load(std::memory_order_seq_cst) == seq && !Want::done(&want)) {
                        timespec ts{1, 0};
                        futex_op(&w.seq, FUTEX_WAIT_PRIVATE, seq, &ts);
                    }
                    w.sleeping.store(0);
                }
            }
            rtt.push_back((now_ns() - t0) / 1000.0);
        }
        const Wakes after = wakes_now(p, ctl[0], dir);
        st = summarize(rtt);
        wakeups = double(after.wakeups - before.wakeups) / iters;
        sleeps = double(after.sleeps - before.sleeps) / iters;
    };
    Stats br, bs;
    double br_w, br_s, bs_w, bs_s;
    measure(true, br, br_w, br_s);
    measure(false, bs, bs_w, bs_s);
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
    const int direct = rk_fabric_port_pair_active(p, 1); // which path the figures above took

    rk_fabric_port_free(p);
    close(ctl[0]);
    kill(npid, SIGTERM);
    kill(bpid, SIGTERM);
    waitpid(npid, nullptr, 0);
    waitpid(bpid, nullptr, 0);
    std::system(("rm -rf " + dir).c_str());

    printf("%-52s %10s %10s %9s %9s\n", "measurement (64-byte frames, one run)", "median_us", "p99_us",
           "wakes/rt", "sleeps/rt");
    printf("%-52s %10.3f %10.3f\n", "raw shared-memory ping-pong (2 processes)", raw.median_us, raw.p99_us);
    printf("%-52s %10.3f %10.3f %9.2f %9.2f\n", "bridge echo round trip, requester drives its port",
           br.median_us, br.p99_us, br_w, br_s);
    printf("%-52s %10.3f %10.3f %9.2f %9.2f\n", "bridge echo round trip, requester blocks", bs.median_us,
           bs.p99_us, bs_w, bs_s);
    printf("%-52s %10.0f\n", "bridge echo frames/s (512 in flight)", fps);
    printf("bridge round trip (driving) / raw ping-pong: %.1fx; spin %llu us, drive %llu us\n",
           br.median_us / raw.median_us, (unsigned long long)(rk_fabric_spin_ns() / 1000),
           (unsigned long long)(rk_fabric_drive_ns() / 1000));
    // Direct node-to-node rings (docs/fabric.md): with a pair, the "bridge" figures above are
    // the one-hop path; RACKEMU_FABRIC_PAIRS=0 measures through the bridge.
    printf("path: %s\n", direct ? "direct pair ring (RACKEMU_FABRIC_PAIRS=0: through the bridge)"
                                : "through the bridge (no direct pair)");
    if (!csv.empty()) {
        FILE *f = fopen(csv.c_str(), "a");
        if (f) {
            fprintf(f, "fabric,raw_pingpong_median_us,%.3f\nfabric,raw_pingpong_p99_us,%.3f\n", raw.median_us,
                    raw.p99_us);
            fprintf(f, "fabric,bridge_rtt_median_us,%.3f\nfabric,bridge_rtt_p99_us,%.3f\n", br.median_us,
                    br.p99_us);
            fprintf(f, "fabric,bridge_rtt_wakeups_per_rt,%.3f\nfabric,bridge_rtt_sleeps_per_rt,%.3f\n", br_w,
                    br_s);
            fprintf(f, "fabric,bridge_rtt_blocking_median_us,%.3f\nfabric,bridge_rtt_blocking_p99_us,%.3f\n",
                    bs.median_us, bs.p99_us);
            fprintf(
                f,
                "fabric,bridge_rtt_blocking_wakeups_per_rt,%.3f\nfabric,bridge_rtt_blocking_sleeps_per_rt,%.3f\n",
                bs_w, bs_s);
            fprintf(f, "fabric,bridge_frames_per_s,%.0f\n", fps);
            fprintf(f, "fabric,direct_pair,%d\n", direct);
            fclose(f);
        }
    }
    return 0;
}
