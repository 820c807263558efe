// Unit tests of the RC transport engine (hw/rnic/rc.cc): two engines joined by a seeded lossy wire
// (drop, duplicate, reorder, corrupt) with a fake clock, memory regions over plain vectors, and
// assertions on the data that arrives, the completions and the counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "atomic_unit.h" // amo_alu
#include "rc.h"
#include "wire.h"

using namespace rackemu::rnic;

namespace {

constexpr uint64_t kMem = 4 << 20;

struct Mr {
    uint64_t va, len;
    uint32_t access;
};

struct Node;

// The wire between the two nodes: frames in flight, faults by seeded draws.
struct Wire {
    struct Frame {
        int to;
        std::vector<uint8_t> bytes;
    };
    std::deque<Frame> q;
    std::mt19937_64 rng{1};
    double drop = 0, dup = 0, reorder = 0, corrupt = 0;
    bool down = false;
    std::function<bool(const Packet &)> drop_if; // a scripted drop (true: drop this frame)
    uint64_t dropped = 0, duplicated = 0, reordered = 0, corrupted = 0;

    bool draw(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; }
    void send(int to, const uint8_t *f, size_t n)
    {
        if (down) return void(dropped++);
        if (drop_if) {
            Packet p;
            if (parse_frame(f, n, p, true, true) == WireError::Ok && drop_if(p)) return void(dropped++);
        }
        if (draw(drop)) return void(dropped++);
        Frame fr{to, std::vector<uint8_t>(f, f + n)};
        if (draw(corrupt)) {
            corrupted++;
            const size_t i =
                ROCE_ETH_LEN + std::uniform_int_distribution<size_t>(0, n - ROCE_ETH_LEN - 1)(rng);
            fr.bytes[i] ^= uint8_t(1u << std::uniform_int_distribution<int>(0, 7)(rng));
        }
        if (draw(dup)) {
            duplicated++;
            q.push_back(fr);
        }
        if (draw(reorder) && !q.empty()) {
            reordered++;
            const size_t at = std::uniform_int_distribution<size_t>(0, q.size() - 1)(rng);
            q.insert(q.begin() + long(at), fr);
        } else {
            q.push_back(fr);
        }
    }
};

struct Node : RcEnv {
    int id;
    Wire &wire;
    uint64_t &clock;
    std::vector<uint8_t> mem = std::vector<uint8_t>(kMem);
    std::map<uint32_t, Mr> mrs;
    struct Rwqe {
        uint64_t addr, len;
    };
    std::deque<Rwqe> rq;
    std::vector<Completion> cq;
    std::vector<uint64_t> atomic_orig;           // per completed atomic WR: the original value it returned
    std::function<Remote(uint64_t va)> op_error; // remote operational error injection
    RcEngine eng;

    Node(int id, Wire &w, uint64_t &clock, RcConfig cfg = {}) : id(id), wire(w), clock(clock), eng(*this, cfg)
    {
    }

    uint64_t now_ns() override { return clock; }
    void send_frame(const uint8_t *f, size_t n) override { wire.send(1 - id, f, n); }
    bool link_ready = true; // false: the link pushes back (the engine paces READ responses)
    bool tx_ready() override { return link_ready; }
    WcStatus read_local(uint32_t, const SendWr &wr, uint64_t off, uint8_t *dst, uint32_t len) override
    {
        if (wr.local + off + len > kMem) return WcStatus::LocProtErr;
        std::memcpy(dst, &mem[wr.local + off], len);
        return WcStatus::Success;
    }
    WcStatus write_local(uint32_t, const SendWr &wr, uint64_t off, const uint8_t *src, uint32_t len) override
    {
        if (wr.local + off + len > kMem) return WcStatus::LocProtErr;
        std::memcpy(&mem[wr.local + off], src, len);
        return WcStatus::Success;
    }
    Remote check_remote(uint32_t, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access) override
    {
        auto it = mrs.find(rkey);
        if (it == mrs.end() || !(it->second.access & access) || va < it->second.va ||
            va + len > it->second.va + it->second.len || va + len < va)
            return Remote::AccessError;
        return Remote::Ok;
    }
    Remote write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const uint8_t *src, uint32_t len) override
    {
        if (Remote r = check_remote(qpn, rkey, va, len, RC_ACCESS_REMOTE_WRITE); r != Remote::Ok) return r;
        if (op_error && op_error(va) != Remote::Ok) return Remote::OpError;
        std::memcpy(&mem[va], src, len);
        return Remote::Ok;
    }
    Remote read_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint8_t *dst, uint32_t len) override
    {
        if (Remote r = check_remote(qpn, rkey, va, len, RC_ACCESS_REMOTE_READ); r != Remote::Ok) return r;
        std::memcpy(dst, &mem[va], len);
        return Remote::Ok;
    }
    Remote atomic_remote(uint32_t qpn, uint8_t op, uint32_t rkey, uint64_t va, uint64_t sa, uint64_t cmp,
                         uint64_t *orig) override
    {
        if (Remote r = check_remote(qpn, rkey, va, 8, RC_ACCESS_REMOTE_ATOMIC); r != Remote::Ok) return r;
        if (op_error && op_error(va) != Remote::Ok) return Remote::OpError;
        uint64_t v;
        std::memcpy(&v, &mem[va], 8);
        *orig = v;
        v = op == ROCE_OP_FETCH_ADD ? v + sa : (v == cmp ? sa : v);
        std::memcpy(&mem[va], &v, 8);
        return Remote::Ok;
    }
    Remote xatomic_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const XAtomicEth &x, bool,
                          uint64_t *orig) override
    {
        if (x.op >= ROCE_XOP_COUNT || (x.size != 4 && x.size != 8)) return Remote::InvalidRequest;
        if (Remote r = check_remote(qpn, rkey, va, x.size, RC_ACCESS_REMOTE_ATOMIC); r != Remote::Ok)
            return r;
        if (va & (x.size - 1u)) return Remote::InvalidRequest;
        xatomic_execs++;
        uint64_t v = 0;
        std::memcpy(&v, &mem[va], x.size);
        *orig = v;
        const uint64_t nv = amo_alu(x.op, x.size, v, x.operand, x.compare, x.mask);
        std::memcpy(&mem[va], &nv, x.size);
        return Remote::Ok;
    }
    unsigned xatomic_execs = 0;
    Remote atomic_write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t value) override
    {
        if (Remote r = check_remote(qpn, rkey, va, 8, RC_ACCESS_REMOTE_WRITE); r != Remote::Ok) return r;
        std::memcpy(&mem[va], &value, 8);
        return Remote::Ok;
    }
    Remote flush_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint8_t plt, uint8_t) override
    {
        return check_remote(qpn, rkey, va, len,
                            (plt & ROCE_FETH_PLT_PERSIST) ? RC_ACCESS_FLUSH_PERSIST : RC_ACCESS_FLUSH_GLOBAL);
    }
    bool recv_available(uint32_t) override { return !rq.empty(); }
    WcStatus recv_write(uint32_t, uint64_t off, const uint8_t *src, uint32_t len) override
    {
        if (rq.empty()) return WcStatus::LocQpOpErr;
        if (off + len > rq.front().len) return WcStatus::LocLenErr;
        std::memcpy(&mem[rq.front().addr + off], src, len);
        return WcStatus::Success;
    }
    void flush_recv(uint32_t qpn) override
    {
        while (!rq.empty()) {
            rq.pop_front();
            cq.push_back(Completion{qpn, 0, true, WcStatus::WrFlushErr});
        }
    }
    void complete(const Completion &c) override
    {
        if (c.recv && !rq.empty()) rq.pop_front();
        cq.push_back(c);
    }

    std::vector<Completion> take()
    {
        auto v = std::move(cq);
        cq.clear();
        return v;
    }
};

constexpr uint32_t kQa = 0x11, kQb = 0x22;
constexpr uint32_t kAll = RC_ACCESS_REMOTE_WRITE | RC_ACCESS_REMOTE_READ | RC_ACCESS_REMOTE_ATOMIC |
                          RC_ACCESS_FLUSH_GLOBAL | RC_ACCESS_FLUSH_PERSIST;

struct Rig {
    Wire wire;
    uint64_t clock = 1000;
    Node a, b;
    uint32_t mtu;

    explicit Rig(uint32_t mtu = 1024, uint32_t psn_a = 100, uint32_t psn_b = 5000, RcConfig cfg = {},
                 QpAttr tweak = {})
        : a(0, wire, clock, cfg), b(1, wire, clock, cfg), mtu(mtu)
    {
        connect(a, kQa, kQb, 0xC6120001, 0xC6120002, psn_a, psn_b, tweak);
        connect(b, kQb, kQa, 0xC6120002, 0xC6120001, psn_b, psn_a, tweak);
        // B exports [0x10000, +1 MiB) read/write/atomic as rkey 0x100 and a read-only MR as 0x200.
        b.mrs[0x100] = Mr{0x10000, 1 << 20, kAll};
        b.mrs[0x200] = Mr{0x180000, 4096, RC_ACCESS_REMOTE_READ};
        a.mrs[0x100] = Mr{0x10000, 1 << 20, kAll};
    }
    void connect(Node &n, uint32_t qpn, uint32_t dqpn, uint32_t me, uint32_t peer, uint32_t sq_psn,
                 uint32_t rq_psn, const QpAttr &tweak)
    {
        ASSERT_EQ(n.eng.create_qp(qpn), RcResult::Ok);
        QpAttr at = tweak;
        at.access = kAll;
        ASSERT_EQ(n.eng.modify_qp(qpn, QpState::Init, at), RcResult::Ok);
        at.path.src_ip = me;
        at.path.dst_ip = peer;
        at.dest_qpn = dqpn;
        at.path_mtu = mtu;
        at.rq_psn = rq_psn;
        ASSERT_EQ(n.eng.modify_qp(qpn, QpState::Rtr, at), RcResult::Ok);
        at.sq_psn = sq_psn;
        ASSERT_EQ(n.eng.modify_qp(qpn, QpState::Rts, at), RcResult::Ok);
    }
    // Deliver frames, flush ACKs, and advance the clock to the next timer when the wire is
    // quiet, until nothing is outstanding and the wire is empty (or `limit` steps).
    void run(int limit = 200000)
    {
        for (int i = 0; i < limit; i++) {
            if (!wire.q.empty()) {
                // Deliver a burst, then flush ACKs: the burst is what an RX poll would drain.
                for (int k = 0; k < 8 && !wire.q.empty(); k++) {
                    Wire::Frame f = std::move(wire.q.front());
                    wire.q.pop_front();
                    (f.to ? b : a).eng.receive(f.bytes.data(), f.bytes.size());
                }
                a.eng.flush_acks();
                b.eng.flush_acks();
                continue;
            }
            const uint64_t t = std::min(a.eng.next_deadline_ns(), b.eng.next_deadline_ns());
            if (t == UINT64_MAX) return;
            clock = std::max(clock, t);
            a.eng.poll();
            b.eng.poll();
        }
        ADD_FAILURE() << "the rig did not settle";
    }
    SendWr wr(WrOp op, uint64_t local, uint32_t len, uint64_t rva = 0, uint32_t rkey = 0x100)
    {
        SendWr w;
        static uint64_t id = 1;
        w.wr_id = id++;
        w.op = op;
        w.local = local;
        w.length = len;
        w.remote_va = rva;
        w.rkey = rkey;
        return w;
    }
};

void fill(std::vector<uint8_t> &m, uint64_t at, uint64_t n, uint32_t seed)
{
    for (uint64_t i = 0; i < n; i++)
        m[at + i] = uint8_t((i * 2654435761u + seed) >> 7);
}
bool same(const std::vector<uint8_t> &x, uint64_t xa, const std::vector<uint8_t> &y, uint64_t ya, uint64_t n)
{
    return std::memcmp(&x[xa], &y[ya], n) == 0;
}
uint64_t get64(const std::vector<uint8_t> &m, uint64_t at)
{
    uint64_t v;
    std::memcpy(&v, &m[at], 8);
    return v;
}

} // namespace

TEST(Rc, WriteReadSendAtBoundarySizes)
{
    for (uint32_t mtu : {256u, 1024u, 4096u}) {
        Rig r(mtu);
        for (uint32_t len : {1u, mtu - 1, mtu, mtu + 1, 3 * mtu + 5, 1u << 20}) {
            SCOPED_TRACE(testing::Message() << "mtu " << mtu << " len " << len);
            const uint64_t dst = 0x10000 + ((1u << 20) - len) / 2; // into the middle of the MR
            fill(r.a.mem, 0x1000, len, len);
            ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, len, dst)), RcResult::Ok);
            r.run();
            EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, dst, len));
            ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x130000, len, dst)), RcResult::Ok);
            r.run();
            EXPECT_TRUE(same(r.a.mem, 0x130000, r.b.mem, dst, len));
            r.b.rq.push_back({0x300000, 1u << 20});
            ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x1000, len)), RcResult::Ok);
            r.run();
            EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x300000, len));
            auto ca = r.a.take(), cb = r.b.take();
            ASSERT_EQ(ca.size(), 3u);
            for (auto &c : ca)
                EXPECT_EQ(c.status, WcStatus::Success);
            ASSERT_EQ(cb.size(), 1u);
            EXPECT_TRUE(cb[0].recv);
            EXPECT_EQ(cb[0].byte_len, len);
        }
        // The last byte of the MR, and one past it.
        r.a.mem[0x1000] = 0x77;
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 1, 0x10000 + (1 << 20) - 1)),
                  RcResult::Ok);
        r.run();
        EXPECT_EQ(r.b.mem[0x10000 + (1 << 20) - 1], 0x77);
        EXPECT_EQ(r.a.take().at(0).status, WcStatus::Success);
        EXPECT_EQ(r.a.eng.counters().retransmits, 0u);
    }
}

TEST(Rc, ImmediateDataAndWriteWithImmediateConsumeAReceive)
{
    Rig r;
    r.b.rq.push_back({0x1c0000, 64});
    r.b.rq.push_back({0x1c1000, 64});
    SendWr s = r.wr(WrOp::SendImm, 0x1000, 5);
    s.imm = 0xA1B2C3D4;
    s.solicited = true;
    SendWr w = r.wr(WrOp::WriteImm, 0x1000, 3000, 0x20000);
    w.imm = 42;
    ASSERT_EQ(r.a.eng.post_send(kQa, s), RcResult::Ok);
    ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
    r.run();
    auto cb = r.b.take();
    ASSERT_EQ(cb.size(), 2u);
    EXPECT_TRUE(cb[0].with_imm && cb[0].imm == 0xA1B2C3D4 && cb[0].solicited && cb[0].op == WrOp::Send);
    EXPECT_TRUE(cb[1].with_imm && cb[1].imm == 42u && cb[1].op == WrOp::WriteImm && cb[1].byte_len == 3000u);
    EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x20000, 3000));
}

TEST(Rc, UnsignaledWorkCompletesSilentlyErrorsAlwaysReport)
{
    Rig r;
    SendWr w = r.wr(WrOp::Write, 0x1000, 100, 0x20000);
    w.signaled = false;
    ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
    r.run();
    EXPECT_TRUE(r.a.take().empty());
    EXPECT_EQ(r.a.eng.counters().wr_completed, 1u);
    w = r.wr(WrOp::Write, 0x1000, 100, 0x20000, 0x999); // no such rkey
    w.signaled = false;
    ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
    r.run();
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::RemAccessErr);
}

// Loss, duplication, reordering and corruption at once, seeded: the data, the atomics and the
// completions come out exact, and the recovery machinery was exercised.
TEST(Rc, ExactDataUnderLossDuplicationReorderingAndCorruption)
{
    for (uint64_t seed = 1; seed <= 20; seed++) {
        SCOPED_TRACE(seed);
        Rig r(512);
        r.wire.rng.seed(seed);
        r.wire.drop = 0.05;
        r.wire.dup = 0.05;
        r.wire.reorder = 0.05;
        r.wire.corrupt = 0.03;
        std::mt19937 g{uint32_t(seed)};
        uint64_t adds = 0;
        unsigned n_wr = 0, n_fa = 0;
        struct Check {
            const std::vector<uint8_t> *x;
            uint64_t xa;
            const std::vector<uint8_t> *y;
            uint64_t ya, len;
        };
        std::vector<Check> checks;
        for (int i = 0; i < 60; i++) {
            const uint32_t len = 1 + g() % 5000;
            const uint64_t off = uint64_t(i) * 8192;
            fill(r.a.mem, 0x100000 + off % 0x80000, len, uint32_t(i));
            switch (i % 4) {
            case 0:
                ASSERT_EQ(
                    r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x100000 + off % 0x80000, len, 0x10000 + off)),
                    RcResult::Ok);
                checks.push_back({&r.a.mem, 0x100000 + off % 0x80000, &r.b.mem, 0x10000 + off, len});
                break;
            case 1: {
                fill(r.b.mem, 0x10000 + off, len, uint32_t(i) * 7);
                const uint64_t dst = 0x80000 + uint64_t(i / 4) * 8192;
                ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Read, dst, len, 0x10000 + off)), RcResult::Ok);
                checks.push_back({&r.a.mem, dst, &r.b.mem, 0x10000 + off, len});
                break;
            }
            case 2: {
                const uint64_t add = g() % 1000 + 1;
                adds += add;
                SendWr w = r.wr(WrOp::FetchAdd, 0x1f0000 + 8 * n_fa++, 8, 0x100000);
                w.swap_add = add;
                ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
                break;
            }
            default:
                r.b.rq.push_back({0x1c0000, 8192});
                ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x100000 + off % 0x80000, len)),
                          RcResult::Ok);
            }
            n_wr++;
            if (i % 10 == 9) r.run();
        }
        r.run();
        auto ca = r.a.take();
        ASSERT_EQ(ca.size(), n_wr);
        for (auto &c : ca)
            ASSERT_EQ(c.status, WcStatus::Success) << wc_status_name(c.status);
        for (const Check &k : checks)
            EXPECT_TRUE(same(*k.x, k.xa, *k.y, k.ya, k.len)) << "at " << k.ya;
        // FETCH_ADD: executed exactly once each: the counter is the exact sum, the originals
        // returned are distinct prefix sums.
        EXPECT_EQ(get64(r.b.mem, 0x100000), adds);
        std::vector<uint64_t> origs;
        for (unsigned k = 0; k < n_fa; k++)
            origs.push_back(get64(r.a.mem, 0x1f0000 + 8 * k));
        std::sort(origs.begin(), origs.end());
        EXPECT_TRUE(std::adjacent_find(origs.begin(), origs.end()) == origs.end());
        EXPECT_EQ(origs.front(), 0u);
        const RcCounters &ka = r.a.eng.counters(), &kb = r.b.eng.counters();
        EXPECT_GT(ka.retransmits, 0u);
        EXPECT_GT(kb.duplicates, 0u);
        EXPECT_GT(ka.rx_icrc_errors + kb.rx_icrc_errors + ka.rx_malformed + kb.rx_malformed, 0u);
        EXPECT_EQ(r.a.eng.qp_state(kQa), QpState::Rts);
        EXPECT_EQ(r.b.eng.qp_state(kQb), QpState::Rts);
    }
}

TEST(Rc, WritesAndReadsCarryExactPatternsUnderLoss)
{
    Rig r(256);
    r.wire.drop = 0.1;
    r.wire.reorder = 0.1;
    r.wire.rng.seed(9);
    fill(r.a.mem, 0x1000, 200000, 5);
    fill(r.b.mem, 0x90000, 150000, 6);
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 200000, 0x10000)), RcResult::Ok);
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x100000, 150000, 0x90000)), RcResult::Ok);
    r.run();
    EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x10000, 200000));
    EXPECT_TRUE(same(r.a.mem, 0x100000, r.b.mem, 0x90000, 150000));
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, WcStatus::Success);
    EXPECT_EQ(c[1].status, WcStatus::Success);
    EXPECT_GT(r.a.eng.counters().retransmits, 0u);
    EXPECT_GT(r.b.eng.counters().seq_naks_tx, 0u);
}

TEST(Rc, PsnWrapsAt2To24)
{
    for (double drop : {0.0, 0.1}) {
        Rig r(256, 0xFFFFF0, 0xFFFFFA);
        r.wire.drop = drop;
        fill(r.a.mem, 0x1000, 64 * 256, 1);
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 64 * 256, 0x20000)),
                  RcResult::Ok); // 0xFFFFF0..0x2F
        fill(r.a.mem, 0x40000, 40 * 256, 2);
        ASSERT_EQ(r.b.eng.post_send(kQb, r.wr(WrOp::Read, 0x50000, 40 * 256, 0x10000 + 0x30000, 0x100)),
                  RcResult::Ok);
        SendWr fa = r.wr(WrOp::FetchAdd, 0x60000, 8, 0x30000);
        fa.swap_add = 3;
        ASSERT_EQ(r.a.eng.post_send(kQa, fa), RcResult::Ok);
        r.run();
        EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x20000, 64 * 256));
        EXPECT_TRUE(same(r.a.mem, 0x40000, r.b.mem, 0x50000, 40 * 256));
        EXPECT_EQ(get64(r.b.mem, 0x30000), 3u);
        for (auto &c : r.a.take())
            EXPECT_EQ(c.status, WcStatus::Success);
        for (auto &c : r.b.take())
            EXPECT_EQ(c.status, WcStatus::Success);
    }
}

TEST(Rc, RetryExhaustionMovesToErrorAndFlushesEverything)
{
    QpAttr t;
    t.timeout = 10; // 4.19 ms
    t.retry_cnt = 3;
    Rig r(1024, 100, 5000, {}, t);
    r.wire.down = true;
    r.b.rq.push_back({0x1c0000, 64});
    const uint64_t t0 = r.clock;
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 3000, 0x20000)), RcResult::Ok);
    r.run();
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].status, WcStatus::RetryExcErr);
    EXPECT_EQ(c[1].status, WcStatus::WrFlushErr);
    EXPECT_EQ(c[2].status, WcStatus::WrFlushErr);
    EXPECT_EQ(r.a.eng.qp_state(kQa), QpState::Error);
    EXPECT_EQ(r.a.eng.counters().timeouts, 4u); // the first try and 3 retries
    EXPECT_EQ(r.a.eng.counters().retry_exhausted, 1u);
    EXPECT_EQ(r.clock - t0, 4 * roce_timeout_ns(10));
    // Posting to a QP in Error completes at once with a flush error.
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x1000, 1)), RcResult::Ok);
    c = r.a.take();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::WrFlushErr);
    // The responder is untouched: B's receive stays posted.
    EXPECT_EQ(r.b.rq.size(), 1u);
}

TEST(Rc, DuplicateAtomicIsAnsweredFromTheSavedValueNeverReExecuted)
{
    Rig r;
    int acks_dropped = 0;
    r.wire.drop_if = [&](const Packet &p) {
        return p.bth.opcode == ROCE_OP_ATOMIC_ACK && acks_dropped++ < 2;
    };
    uint64_t v = 40;
    std::memcpy(&r.b.mem[0x20000], &v, 8);
    SendWr w = r.wr(WrOp::FetchAdd, 0x3000, 8, 0x20000);
    w.swap_add = 2;
    SendWr cs = r.wr(WrOp::CmpSwap, 0x3008, 8, 0x20000);
    cs.compare = 42;
    cs.swap_add = 100;
    ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
    ASSERT_EQ(r.a.eng.post_send(kQa, cs), RcResult::Ok);
    r.run();
    EXPECT_EQ(get64(r.b.mem, 0x20000), 100u) << "40 + 2 once, then swapped for 100";
    EXPECT_EQ(get64(r.a.mem, 0x3000), 40u);
    EXPECT_EQ(get64(r.a.mem, 0x3008), 42u);
    EXPECT_EQ(r.b.eng.counters().executed, 2u);
    EXPECT_GE(r.b.eng.counters().dup_replays, 1u);
    for (auto &c : r.a.take())
        EXPECT_EQ(c.status, WcStatus::Success);
}

// The extended atomics (roce.h): every op at 32 and 64 bits, with and without the old value,
// through lost responses: a duplicated XATOMIC is answered from the responder resource, a
// duplicated XATOMIC_POST re-ACKed; neither is executed twice.
TEST(Rc, ExtendedAtomicsEveryOpBothSizesDuplicatesNeverReExecuted)
{
    RcConfig cfg;
    cfg.xatomic = true;
    Rig r(1024, 100, 5000, cfg);
    int xacks = 0, acks = 0; // the 2nd and 5th atomic ACK and the 1st and 3rd ACK are lost
    r.wire.drop_if = [&](const Packet &p) {
        if (p.bth.opcode == ROCE_OP_XATOMIC_ACK) return ++xacks == 2 || xacks == 5;
        if (p.bth.opcode == ROCE_OP_ACK) return ++acks == 1 || acks == 3;
        return false;
    };
    struct Want {
        uint64_t at, old;
        uint8_t size;
    };
    std::vector<Want> want;
    uint64_t ref[2] = {0x1111222233334444ull, 0x55556666ull}; // the 64-bit and the 32-bit word
    std::memcpy(&r.b.mem[0x20000], &ref[0], 8);
    std::memcpy(&r.b.mem[0x20008], &ref[1], 4);
    unsigned n = 0;
    for (uint8_t op = 0; op < ROCE_XOP_COUNT; op++)
        for (uint8_t size : {8, 4})
            for (bool fetch : {true, false}) {
                uint64_t &w = ref[size == 4];
                const uint64_t va = size == 8 ? 0x20000 : 0x20008;
                SendWr x =
                    r.wr(fetch ? WrOp::XAtomic : WrOp::XAtomicPost, 0x3000 + 8 * n, fetch ? size : 0, va);
                x.xop = op;
                x.xsize = size;
                x.swap_add = 0x0F0F0F0F0F0F0F0Full * (n + 1);
                x.compare = w;                  // MCSWAP: matches
                x.mask = 0x00FF00FF00FF00FFull; // only these bits change
                ASSERT_EQ(r.a.eng.post_send(kQa, x), RcResult::Ok);
                if (fetch) want.push_back({0x3000 + 8 * n, w, size});
                w = amo_alu(op, size, w, x.swap_add, x.compare, x.mask);
                n++;
            }
    r.run();
    EXPECT_EQ(get64(r.b.mem, 0x20000), ref[0]);
    uint32_t w32;
    std::memcpy(&w32, &r.b.mem[0x20008], 4);
    EXPECT_EQ(w32, uint32_t(ref[1]));
    for (const Want &w : want) {
        uint64_t v = 0;
        std::memcpy(&v, &r.a.mem[w.at], w.size);
        EXPECT_EQ(v, w.old) << "at 0x" << std::hex << w.at;
    }
    EXPECT_EQ(r.b.xatomic_execs, n) << "each executed exactly once";
    EXPECT_GE(r.b.eng.counters().duplicates, 1u);
    EXPECT_GE(r.b.eng.counters().dup_replays, 1u);
    auto c = r.a.take();
    ASSERT_EQ(c.size(), n);
    for (auto &e : c) {
        EXPECT_EQ(e.status, WcStatus::Success) << wc_status_name(e.status) << " wr " << e.wr_id;
        EXPECT_TRUE(e.op == WrOp::XAtomic || e.op == WrOp::XAtomicPost);
    }
}

// Refusals of the extended atomics: by the requester (bad op/size/length, or an engine without
// the unit), by the responder (an unknown op on the wire, unaligned, no atomic right): the
// spec's NAK, the requester's completion says which, the target word unchanged.
TEST(Rc, ExtendedAtomicRefusals)
{
    {
        Rig plain; // no atomic unit: the engine refuses to send them
        SendWr x = plain.wr(WrOp::XAtomic, 0x3000, 8, 0x20000);
        EXPECT_EQ(plain.a.eng.post_send(kQa, x), RcResult::BadWr);
    }
    RcConfig cfg;
    cfg.xatomic = true;
    struct Case {
        const char *what;
        uint8_t op, size;
        uint64_t va;
        uint32_t rkey;
        WcStatus st;
        uint8_t nak;
    };
    const Case cases[] = {
        {"unaligned 64-bit", ROCE_XOP_ADD, 8, 0x20004, 0x100, WcStatus::RemInvReqErr, ROCE_NAK_INVALID_REQ},
        {"unaligned 32-bit", ROCE_XOP_OR, 4, 0x20002, 0x100, WcStatus::RemInvReqErr, ROCE_NAK_INVALID_REQ},
        {"read-only MR", ROCE_XOP_XOR, 8, 0x180000, 0x200, WcStatus::RemAccessErr, ROCE_NAK_REMOTE_ACCESS},
        {"unknown rkey", ROCE_XOP_SWAP, 8, 0x20000, 0x999, WcStatus::RemAccessErr, ROCE_NAK_REMOTE_ACCESS},
        {"beyond the MR", ROCE_XOP_AND, 8, 0x10000 + (1 << 20), 0x100, WcStatus::RemAccessErr,
         ROCE_NAK_REMOTE_ACCESS},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Rig r(1024, 100, 5000, cfg);
        std::vector<uint8_t> before = r.b.mem;
        SendWr x = r.wr(WrOp::XAtomic, 0x3000, k.size, k.va, k.rkey);
        x.xop = k.op;
        x.xsize = k.size;
        x.swap_add = 1;
        ASSERT_EQ(r.a.eng.post_send(kQa, x), RcResult::Ok);
        r.run();
        auto c = r.a.take();
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, k.st);
        EXPECT_EQ(r.b.xatomic_execs, 0u);
        EXPECT_TRUE(r.b.mem == before) << "target memory changed";
        EXPECT_EQ(r.b.eng.counters().err_naks_tx, 1u);
        EXPECT_EQ(r.a.eng.qp_state(kQa), QpState::Error);
    }
    // the requester's own checks
    Rig r(1024, 100, 5000, cfg);
    SendWr x = r.wr(WrOp::XAtomic, 0x3000, 8, 0x20000);
    x.xop = ROCE_XOP_COUNT;
    EXPECT_EQ(r.a.eng.post_send(kQa, x), RcResult::BadWr);
    x.xop = ROCE_XOP_ADD;
    x.xsize = 2;
    EXPECT_EQ(r.a.eng.post_send(kQa, x), RcResult::BadWr);
    x.xsize = 4; // the length must be the size
    EXPECT_EQ(r.a.eng.post_send(kQa, x), RcResult::BadWr);
    x.op = WrOp::XAtomicPost; // no local buffer
    EXPECT_EQ(r.a.eng.post_send(kQa, x), RcResult::BadWr);
    // an unknown op on the wire (a requester that does not check): NAK invalid request
    Packet p;
    p.bth.opcode = ROCE_OP_XATOMIC;
    p.bth.dqpn = kQb;
    p.bth.psn = 100;
    p.l3.src_ip = 0xC6120001;
    p.xatomic = XAtomicEth{0x20000, 0x100, 9, 8, 1, 0, 0};
    std::vector<uint8_t> f(ROCE_FRAME_MAX);
    size_t len = 0;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &len), WireError::Ok);
    r.b.eng.receive(f.data(), len);
    ASSERT_EQ(r.wire.q.size(), 1u);
    Packet nak;
    ASSERT_EQ(parse_frame(r.wire.q.front().bytes.data(), r.wire.q.front().bytes.size(), nak), WireError::Ok);
    EXPECT_EQ(nak.aeth.syndrome, ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ));
    EXPECT_EQ(r.b.xatomic_execs, 0u);
}

TEST(Rc, LostReadResponsesAreReRequestedForTheRemainder)
{
    Rig r(256);
    int n = 0;
    r.wire.drop_if = [&](const Packet &p) { return p.bth.opcode == ROCE_OP_READ_RESP_MIDDLE && n++ == 1; };
    fill(r.b.mem, 0x20000, 2000, 3);
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x1000, 2000, 0x20000)), RcResult::Ok);
    r.run();
    EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x20000, 2000));
    EXPECT_EQ(r.a.eng.counters().implied_naks, 1u);
    EXPECT_EQ(r.b.eng.counters().dup_replays, 1u);
    EXPECT_EQ(r.b.eng.counters().executed, 1u);
    EXPECT_EQ(r.a.take().at(0).status, WcStatus::Success);
}

TEST(Rc, NakPsnSequenceErrorCarriesTheExpectedPsnAndIsSentOnce)
{
    Rig r(256);
    int n = 0;
    r.wire.drop_if = [&](const Packet &p) { return p.bth.opcode == ROCE_OP_WRITE_MIDDLE && n++ == 0; };
    fill(r.a.mem, 0x1000, 256 * 6, 1);
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 256 * 6, 0x20000)), RcResult::Ok);
    r.run();
    EXPECT_TRUE(same(r.a.mem, 0x1000, r.b.mem, 0x20000, 256 * 6));
    EXPECT_EQ(r.b.eng.counters().seq_naks_tx, 1u) << "one NAK for the gap, silence for the rest";
    EXPECT_EQ(r.b.eng.counters().out_of_seq, 4u);
    EXPECT_EQ(r.a.eng.counters().seq_naks_rx, 1u);
    EXPECT_EQ(r.a.eng.counters().timeouts, 0u);
    EXPECT_EQ(r.a.eng.counters().retransmits, 5u) << "go-back-N from the lost packet";
}

TEST(Rc, RnrNakWaitsTheTimerThenSucceedsOrExhausts)
{
    {
        Rig r;
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x1000, 10)), RcResult::Ok);
        // Deliver the SEND and the RNR NAK, then post the receive.
        for (int i = 0; i < 4 && !r.wire.q.empty(); i++) {
            auto f = std::move(r.wire.q.front());
            r.wire.q.pop_front();
            (f.to ? r.b : r.a).eng.receive(f.bytes.data(), f.bytes.size());
        }
        EXPECT_EQ(r.b.eng.counters().rnr_naks_tx, 1u);
        EXPECT_EQ(r.a.eng.counters().rnr_naks_rx, 1u);
        const uint64_t t0 = r.clock;
        EXPECT_EQ(r.a.eng.next_deadline_ns(), t0 + uint64_t(roce_rnr_timer_us(12)) * 1000);
        r.b.rq.push_back({0x1c0000, 64});
        r.run();
        EXPECT_EQ(r.a.take().at(0).status, WcStatus::Success);
        EXPECT_EQ(r.b.take().at(0).byte_len, 10u);
    }
    {
        QpAttr t;
        t.rnr_retry = 2;
        t.min_rnr_timer = 1;
        Rig r(1024, 100, 5000, {}, t);
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x1000, 10)), RcResult::Ok);
        r.run();
        auto c = r.a.take();
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, WcStatus::RnrRetryExcErr);
        EXPECT_EQ(r.b.eng.counters().rnr_naks_tx, 3u);
        EXPECT_EQ(r.a.eng.counters().rnr_exhausted, 1u);
        EXPECT_EQ(r.a.eng.qp_state(kQa), QpState::Error);
    }
}

// Remote access violations: the NAK the spec defines, the requester's status says which, and not
// one byte is written.
TEST(Rc, EveryAccessViolationIsNakedAndWritesNothing)
{
    struct Case {
        const char *what;
        WrOp op;
        uint64_t va;
        uint32_t rkey, len;
        WcStatus want;
    } cases[] = {
        {"unknown rkey", WrOp::Write, 0x20000, 0x999, 64, WcStatus::RemAccessErr},
        {"below the MR", WrOp::Write, 0xFFFF, 0x100, 64, WcStatus::RemAccessErr},
        {"beyond the MR's end", WrOp::Write, 0x10000 + (1 << 20) - 63, 0x100, 64, WcStatus::RemAccessErr},
        {"multi-packet beyond the end", WrOp::Write, 0x10000 + (1 << 20) - 2048, 0x100, 4096,
         WcStatus::RemAccessErr},
        {"write to a read-only MR", WrOp::Write, 0x180000, 0x200, 64, WcStatus::RemAccessErr},
        {"atomic on a read-only MR", WrOp::FetchAdd, 0x180000, 0x200, 8, WcStatus::RemAccessErr},
        {"read beyond the end", WrOp::Read, 0x180000 + 4000, 0x200, 200, WcStatus::RemAccessErr},
        {"misaligned atomic", WrOp::CmpSwap, 0x20004, 0x100, 8, WcStatus::RemInvReqErr},
        {"misaligned atomic write", WrOp::AtomicWrite, 0x20004, 0x100, 8, WcStatus::RemInvReqErr},
        {"flush on a read-only MR", WrOp::Flush, 0x180000, 0x200, 64, WcStatus::RemAccessErr},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Rig r;
        std::fill(r.a.mem.begin(), r.a.mem.begin() + 0x10000, 0xAB);
        const std::vector<uint8_t> before = r.b.mem;
        SendWr w = r.wr(k.op, 0x1000, k.len, k.va, k.rkey);
        w.swap_add = 0x5555;
        ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 8, 0x20000)), RcResult::Ok);
        r.run();
        auto c = r.a.take();
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].status, k.want) << wc_status_name(c[0].status);
        EXPECT_EQ(c[1].status, WcStatus::WrFlushErr);
        EXPECT_TRUE(r.b.mem == before) << "nothing written";
        EXPECT_EQ(r.a.eng.qp_state(kQa), QpState::Error);
        EXPECT_EQ(r.b.eng.qp_state(kQb), QpState::Error) << "class C: the responder QP too";
        EXPECT_EQ(r.b.eng.counters().err_naks_tx, 1u);
    }
}

TEST(Rc, RemoteOperationalErrorAndReceiveTooShort)
{
    {
        Rig r;
        r.b.op_error = [](uint64_t) { return Remote::OpError; };
        SendWr w = r.wr(WrOp::FetchAdd, 0x1000, 8, 0x20000);
        ASSERT_EQ(r.a.eng.post_send(kQa, w), RcResult::Ok);
        r.run();
        EXPECT_EQ(r.a.take().at(0).status, WcStatus::RemOpErr);
    }
    {
        Rig r;
        r.b.rq.push_back({0x1c0000, 100});
        r.b.rq.push_back({0x1c1000, 100});
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Send, 0x1000, 3000)), RcResult::Ok);
        r.run();
        EXPECT_EQ(r.a.take().at(0).status, WcStatus::RemInvReqErr);
        auto cb = r.b.take();
        ASSERT_EQ(cb.size(), 2u);
        EXPECT_EQ(cb[0].status, WcStatus::LocLenErr);
        EXPECT_EQ(cb[1].status, WcStatus::WrFlushErr);
    }
}

TEST(Rc, FlushAndAtomicWrite)
{
    Rig r;
    SendWr aw = r.wr(WrOp::AtomicWrite, 0, 8, 0x20008);
    aw.swap_add = 0x1122334455667788ull;
    SendWr fl = r.wr(WrOp::Flush, 0, 64, 0x20000);
    fl.flush_placement = ROCE_FETH_PLT_PERSIST;
    ASSERT_EQ(r.a.eng.post_send(kQa, aw), RcResult::Ok);
    ASSERT_EQ(r.a.eng.post_send(kQa, fl), RcResult::Ok);
    r.run();
    EXPECT_EQ(get64(r.b.mem, 0x20008), 0x1122334455667788ull);
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, WcStatus::Success);
    EXPECT_EQ(c[1].status, WcStatus::Success);
}

TEST(Rc, AcksAreCoalesced)
{
    RcConfig cfg;
    Rig r(1024, 100, 5000, cfg);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 100, 0x20000 + 128 * i)), RcResult::Ok);
    ASSERT_EQ(r.wire.q.size(), 8u);
    while (!r.wire.q.empty()) { // all eight arrive in one RX burst
        auto f = std::move(r.wire.q.front());
        r.wire.q.pop_front();
        r.b.eng.receive(f.bytes.data(), f.bytes.size());
    }
    r.b.eng.flush_acks();
    EXPECT_EQ(r.wire.q.size(), 1u);
    EXPECT_EQ(r.b.eng.counters().acks_tx, 1u);
    EXPECT_EQ(r.b.eng.counters().acks_coalesced, 7u);
    r.run();
    EXPECT_EQ(r.a.take().size(), 8u);
}

TEST(Rc, AckRequestedAtLeastEveryNPackets)
{
    RcConfig cfg;
    cfg.ack_req_every = 4;
    Rig r(256, 100, 5000, cfg);
    ASSERT_EQ(r.a.eng.post_send(kQa, r.wr(WrOp::Write, 0x1000, 256 * 10, 0x20000)), RcResult::Ok);
    unsigned ackreq = 0;
    for (auto &f : r.wire.q) {
        Packet p;
        ASSERT_EQ(parse_frame(f.bytes.data(), f.bytes.size(), p), WireError::Ok);
        ackreq += p.bth.ackreq;
    }
    EXPECT_EQ(ackreq, 3u); // packets 4, 8 and the last (10)
    r.run();
}

TEST(Rc, BadFramesAreCountedAndDropped)
{
    Rig r;
    std::vector<uint8_t> junk(100, 0x5A);
    r.b.eng.receive(junk.data(), junk.size());
    r.b.eng.receive(junk.data(), 3);
    r.b.eng.receive(nullptr, 0);
    EXPECT_EQ(r.b.eng.counters().rx_malformed, 3u);
    // A valid frame for a QP that does not exist, and one from a stranger's address.
    Packet p;
    p.bth.opcode = ROCE_OP_SEND_ONLY;
    p.bth.dqpn = 0x777;
    p.l3.src_ip = 0xC6120001;
    std::vector<uint8_t> f(ROCE_FRAME_MAX);
    size_t n = 0;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    r.b.eng.receive(f.data(), n);
    EXPECT_EQ(r.b.eng.counters().rx_unknown_qp, 1u);
    p.bth.dqpn = kQb;
    p.l3.src_ip = 0x0A000001;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    r.b.eng.receive(f.data(), n);
    EXPECT_EQ(r.b.eng.counters().rx_bad_state, 1u);
    EXPECT_TRUE(r.wire.q.empty()) << "no answer to any of them";
    // An unsupported (manufacturer-reserved) opcode at the expected PSN: NAK invalid request.
    p.l3.src_ip = 0xC6120001;
    p.bth.psn = 100;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    f[ROCE_ETH_LEN + ROCE_IPV4_LEN + ROCE_UDP_LEN] = ROCE_OP_XATOMIC_REQ_FIRST;
    const uint32_t c = icrc(f.data() + ROCE_ETH_LEN, n - ROCE_ETH_LEN - 4);
    std::memcpy(&f[n - 4], &c, 4); // little-endian host
    const RcCounters before = r.b.eng.counters();
    r.b.eng.receive(f.data(), n);
    // counted once (it was counted as malformed and again as unknown QP or bad state)
    const RcCounters after = r.b.eng.counters();
    EXPECT_EQ(after.rx_malformed, before.rx_malformed + 1);
    EXPECT_EQ(after.rx_unknown_qp, before.rx_unknown_qp);
    EXPECT_EQ(after.rx_bad_state, before.rx_bad_state);
    EXPECT_EQ(after.rx_icrc_errors, before.rx_icrc_errors);
    // the same opcode for a QP that does not exist: rx_unknown_qp alone
    f[ROCE_ETH_LEN + ROCE_IPV4_LEN + ROCE_UDP_LEN + 5] ^= 0x40; // BTH destination QP
    const uint32_t c2 = icrc(f.data() + ROCE_ETH_LEN, n - ROCE_ETH_LEN - 4);
    std::memcpy(&f[n - 4], &c2, 4);
    r.b.eng.receive(f.data(), n);
    const RcCounters stray = r.b.eng.counters();
    EXPECT_EQ(stray.rx_unknown_qp, after.rx_unknown_qp + 1);
    EXPECT_EQ(stray.rx_malformed, after.rx_malformed);
    ASSERT_EQ(r.wire.q.size(), 1u);
    Packet nak;
    ASSERT_EQ(parse_frame(r.wire.q.front().bytes.data(), r.wire.q.front().bytes.size(), nak), WireError::Ok);
    EXPECT_EQ(nak.aeth.syndrome, ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ));
    EXPECT_EQ(nak.bth.psn, 100u);
    EXPECT_EQ(r.b.eng.qp_state(kQb), QpState::Error);
}

// The backlogs of all QPs together hold at most RcConfig::max_backlog_bytes (the engine's heap
// is bounded per device, not only per QP): what does not fit is dropped, counted and resent, and
// the bytes are given back as the backlog drains.
TEST(Rc, RequestBacklogsAreBoundedInBytesPerDevice)
{
    RcConfig cfg;
    cfg.max_backlog_bytes = 64 * 1024;
    Rig r(256, 100, 5000, cfg);
    constexpr uint64_t kDst = 0x200000, kLen = 256 * 1024;
    r.b.mrs[0x300] = Mr{kDst, kLen, kAll};
    fill(r.b.mem, 0x10000, 4096, 5);
    fill(r.a.mem, kDst, kLen, 6);
    r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x100000, 4096, 0x10000));
    r.a.eng.post_send(kQa, r.wr(WrOp::Write, kDst, uint32_t(kLen), kDst, 0x300)); // 1024 packets
    r.b.link_ready = false;
    size_t frame = 0;
    while (!r.wire.q.empty()) {
        Wire::Frame f = std::move(r.wire.q.front());
        r.wire.q.pop_front();
        if (f.to) frame = std::max(frame, f.bytes.size());
        (f.to ? r.b : r.a).eng.receive(f.bytes.data(), f.bytes.size());
        EXPECT_LE(r.b.eng.backlog_bytes(), cfg.max_backlog_bytes);
    }
    // far below the per-QP frame limit (RC_MAX_BACKLOG), the byte bound dropped the rest
    const uint64_t kept = 1024u - r.b.eng.counters().rx_backlog_drops;
    EXPECT_GE(kept, cfg.max_backlog_bytes / frame);
    EXPECT_LE(kept, cfg.max_backlog_bytes / (frame - 16)); // (only the first packet has a RETH)
    EXPECT_GT(r.b.eng.backlog_bytes() + frame, cfg.max_backlog_bytes);
    r.b.link_ready = true;
    r.b.eng.resume_tx();
    r.run();
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 2u);
    for (const Completion &x : c)
        EXPECT_EQ(x.status, WcStatus::Success);
    EXPECT_TRUE(same(r.b.mem, kDst, r.a.mem, kDst, kLen));
    EXPECT_EQ(r.b.eng.backlog_bytes(), 0u);
    // an error flushes a backlog and gives its bytes back too
    r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x100000, 4096, 0x10000));
    r.a.eng.post_send(kQa, r.wr(WrOp::Write, kDst, 4096, kDst, 0x300));
    r.b.link_ready = false;
    while (!r.wire.q.empty()) {
        Wire::Frame f = std::move(r.wire.q.front());
        r.wire.q.pop_front();
        (f.to ? r.b : r.a).eng.receive(f.bytes.data(), f.bytes.size());
    }
    EXPECT_GT(r.b.eng.backlog_bytes(), 0u);
    ASSERT_EQ(r.b.eng.modify_qp(kQb, QpState::Error, QpAttr{}), RcResult::Ok);
    EXPECT_EQ(r.b.eng.backlog_bytes(), 0u);
}

TEST(Rc, QpStateTransitionsAreValidated)
{
    Wire w;
    uint64_t clock = 0;
    Node n(0, w, clock);
    EXPECT_EQ(n.eng.create_qp(1), RcResult::BadAttr);
    ASSERT_EQ(n.eng.create_qp(5), RcResult::Ok);
    EXPECT_EQ(n.eng.create_qp(5), RcResult::Exists);
    QpAttr a;
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rtr, a), RcResult::BadState);
    EXPECT_EQ(n.eng.post_send(5, SendWr{}), RcResult::BadState);
    ASSERT_EQ(n.eng.modify_qp(5, QpState::Init, a), RcResult::Ok);
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rts, a), RcResult::BadState);
    a.path_mtu = 1000;
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rtr, a), RcResult::BadAttr);
    a.path_mtu = 2048;
    a.max_dest_rd_atomic = 0;
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rtr, a), RcResult::BadAttr);
    a.max_dest_rd_atomic = 4;
    a.rq_psn = 1u << 24;
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rtr, a), RcResult::BadAttr);
    a.rq_psn = 0;
    ASSERT_EQ(n.eng.modify_qp(5, QpState::Rtr, a), RcResult::Ok);
    a.retry_cnt = 8;
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Rts, a), RcResult::BadAttr);
    a.retry_cnt = 7;
    SendWr bad;
    bad.op = WrOp::FetchAdd;
    bad.length = 4;
    EXPECT_EQ(n.eng.post_send(5, bad), RcResult::BadWr);
    ASSERT_EQ(n.eng.modify_qp(5, QpState::Rts, a), RcResult::Ok);
    EXPECT_EQ(n.eng.qp_state(5), QpState::Rts);
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Error, a), RcResult::Ok);
    EXPECT_EQ(n.eng.modify_qp(5, QpState::Reset, a), RcResult::Ok);
    EXPECT_EQ(n.eng.qp_state(5), QpState::Reset);
    EXPECT_EQ(n.eng.destroy_qp(5), RcResult::Ok);
    EXPECT_EQ(n.eng.destroy_qp(5), RcResult::NoQp);
}

// The responder's request backlog (RC_MAX_BACKLOG frames behind paused READ responses): a
// requester allowed more PSNs in flight than the backlog holds overflows it while the link
// pushes back. The overflow is dropped and counted as rx_backlog_drops (not rx_bad_state), and
// go-back-N resends it: every byte arrives exactly.
TEST(Rc, RequestBacklogOverflowIsCountedAndRecoveredByRetransmission)
{
    RcConfig cfg;
    cfg.max_inflight_psn = 16384; // more than the responder's backlog, so the limit is reachable
    Rig r(256, 100, 5000, cfg);
    constexpr uint64_t kDst = 0x200000, kLen = 1 << 20; // B: a second 2 MiB MR, rkey 0x300
    r.b.mrs[0x300] = Mr{kDst, 2 * kLen, kAll};
    fill(r.b.mem, 0x10000, 4096, 5);
    fill(r.a.mem, kDst, 2 * kLen, 6);
    // A READ whose responses the link refuses: B pauses it (rd_out) and backlogs what follows
    r.a.eng.post_send(kQa, r.wr(WrOp::Read, 0x100000, 4096, 0x10000));
    // 2 MiB of WRITEs at MTU 256: 8192 request packets behind the READ, then 1024 more
    for (uint64_t off = 0; off < 2 * kLen + 256 * 1024; off += kLen / 4) {
        const uint64_t n = std::min<uint64_t>(kLen / 4, 2 * kLen + 256 * 1024 - off);
        const uint64_t src = off < 2 * kLen ? kDst + off : kDst + (off - 2 * kLen);
        const uint64_t dst = off < 2 * kLen ? kDst + off : 0x10000 + 8192 + (off - 2 * kLen);
        r.a.eng.post_send(kQa, r.wr(WrOp::Write, src, uint32_t(n), dst, off < 2 * kLen ? 0x300 : 0x100));
    }
    ASSERT_EQ(r.wire.q.size(), 1u + 8192u + 1024u); // every packet went out: the window allows it
    r.b.link_ready = false;
    while (!r.wire.q.empty()) {
        Wire::Frame f = std::move(r.wire.q.front());
        r.wire.q.pop_front();
        (f.to ? r.b : r.a).eng.receive(f.bytes.data(), f.bytes.size());
    }
    EXPECT_EQ(r.b.eng.counters().rx_backlog_drops, 1024u); // exactly what did not fit
    EXPECT_EQ(r.b.eng.counters().rx_bad_state, 0u);
    EXPECT_EQ(r.b.eng.counters().executed, 1u); // the READ; nothing behind it ran yet
    EXPECT_TRUE(r.b.cq.empty());
    // the link has room again: the READ's responses, then the backlog in order, then the resends
    r.b.link_ready = true;
    r.b.eng.resume_tx();
    r.run();
    auto c = r.a.take();
    ASSERT_EQ(c.size(), 1u + 9u);
    for (const Completion &x : c)
        EXPECT_EQ(x.status, WcStatus::Success);
    EXPECT_TRUE(same(r.a.mem, 0x100000, r.b.mem, 0x10000, 4096)); // READ before the WRITEs landed
    EXPECT_TRUE(same(r.b.mem, kDst, r.a.mem, kDst, 2 * kLen));
    EXPECT_TRUE(same(r.b.mem, 0x10000 + 8192, r.a.mem, kDst, 256 * 1024));
    EXPECT_GE(r.a.eng.counters().retransmits, 1024u);
    EXPECT_EQ(r.b.eng.counters().rx_backlog_drops, 1024u);
}
