// Unit tests of the RNIC device core (hw/rnic/rnic.cc): two cores on TestHosts, back to back over
// an in-process Ethernet link with seeded loss, duplication, reordering and corruption, and a
// fake clock. A small driver in the test does what the kernel driver does: command blocks,
// rings in guest RAM, WQEs, doorbells, CQ polling. Assertions are on the bytes in guest RAM, the
// CQEs, the registers and the counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <atomic>
#include <mutex>
#include <vector>
#include <string>
#include <tuple>

#include "rackemu/fabric_proto.h"
#include "rackemu/rnic_regs.h"
#include "rnic.h"
#include "test_host.h"
#include "wire.h"

using namespace rackemu;
using namespace rackemu::rnic;
using rackemu::test::TestHost;

namespace {

constexpr uint64_t kBase = 0x40000000;
constexpr uint64_t kRam = 24 << 20;

struct Link {
    struct Frame {
        unsigned to;
        std::vector<uint8_t> bytes;
    };
    std::deque<Frame> q;
    std::mt19937_64 rng{7};
    double drop = 0, dup = 0, reorder = 0, corrupt = 0;
    bool down = false;
    uint64_t dropped = 0, duplicated = 0, reordered = 0, corrupted = 0, sent = 0;

    // A port ring per sending node: at most `ring` of its frames wait in q (0: unbounded); a
    // send beyond that is refused (LinkTx::Busy), as rk_fabric_port_eth_send's -EAGAIN.
    unsigned ring = 0;
    unsigned queued[2] = {};
    bool blocked[2] = {}; // this node's port refuses every frame (LinkTx::Busy) until cleared
    uint64_t refused = 0;

    bool draw(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; }
    std::mutex mu; // the threaded test sends from two threads
    LinkTx send(const uint8_t *f, size_t n)
    {
        std::lock_guard lk(mu);
        if (n < 14) return LinkTx::Dropped;
        const unsigned from = f[11] & 1; // source MAC 02:52:4b:00:00:<node>
        if ((ring && queued[from] >= ring) || blocked[from]) return refused++, LinkTx::Busy;
        sent++;
        const unsigned to = f[5]; // 02:52:4b:00:00:<node>
        if (down || draw(drop)) return dropped++, LinkTx::Sent;
        Frame fr{to, std::vector<uint8_t>(f, f + n)};
        queued[from]++;
        if (draw(corrupt)) {
            corrupted++;
            const size_t i = 14 + std::uniform_int_distribution<size_t>(0, n - 15)(rng);
            fr.bytes[i] ^= uint8_t(1u << std::uniform_int_distribution<int>(0, 7)(rng));
        }
        if (draw(dup)) duplicated++, queued[from]++, q.push_back(fr);
        if (draw(reorder) && !q.empty()) {
            reordered++;
            q.insert(q.begin() + long(std::uniform_int_distribution<size_t>(0, q.size() - 1)(rng)), fr);
        } else {
            q.push_back(fr);
        }
        return LinkTx::Sent;
    }
    // The frame at the head leaves its sender's ring.
    Frame pop()
    {
        Frame f = std::move(q.front());
        q.pop_front();
        const unsigned from = f.bytes.size() > 11 ? f.bytes[11] & 1 : 0;
        if (queued[from]) queued[from]--;
        return f;
    }
};

// One node: its RAM, its RNIC and a driver's view of it.
struct Node {
    unsigned id;
    TestHost host{kRam, kBase};
    std::unique_ptr<Rnic> nic;
    uint64_t brk = kBase + 0x100000; // bump allocator over guest RAM
    uint64_t cmd_at = kBase;
    bool tx_waiting = false; // the core asked for tx_resume() (the link pushed back)
    uint64_t tx_wait_calls = 0;

    Node(unsigned node_id, Link &link, RnicConfig cfg = {}) : id(node_id)
    {
        rnic_default_peer_addr(id, cfg.mac, &cfg.ip);
        nic = std::make_unique<Rnic>(
            host.host(nullptr, nullptr, id, 2), cfg,
            [&link](const uint8_t *f, size_t n) { return link.send(f, n); }, Rnic::TimerFn{},
            [this] { tx_waiting = true, tx_wait_calls++; });
        nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE, 4);
    }
    uint8_t *mem(uint64_t a) { return host.ram.data() + (a - kBase); }
    uint64_t alloc(uint64_t n, uint64_t align = 4096)
    {
        brk = (brk + align - 1) & ~(align - 1);
        const uint64_t a = brk;
        brk += n;
        EXPECT_LE(brk, kBase + kRam);
        return a;
    }
    uint32_t reg(uint32_t off) { return uint32_t(nic->ctrl_read(off, 4)); }
    uint64_t counter(unsigned idx) { return nic->ctrl_read(RNIC_REG_COUNTERS + 8 * idx, 8); }

    uint16_t cmd(struct rnic_cmd &c)
    {
        std::memcpy(mem(cmd_at), &c, sizeof(c));
        nic->ctrl_write(RNIC_REG_CMD_ADDR_LO, uint32_t(cmd_at), 4);
        nic->ctrl_write(RNIC_REG_CMD_ADDR_HI, uint32_t(cmd_at >> 32), 4);
        nic->ctrl_write(RNIC_REG_CMD_EXEC, RNIC_CMD_EXEC_GO, 4);
        std::memcpy(&c, mem(cmd_at), sizeof(c));
        EXPECT_EQ(c.status, reg(RNIC_REG_CMD_STATUS));
        return c.status;
    }
    uint32_t create_pd()
    {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_CREATE_PD;
        EXPECT_EQ(cmd(c), RNIC_CMD_ST_OK);
        return c.handle;
    }
    uint16_t reg_mr_phys(uint32_t pd, uint64_t addr, uint64_t len, uint32_t access, uint32_t *key)
    {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_REG_MR;
        c.handle = pd;
        c.params.mr.iova = addr;
        c.params.mr.length = len;
        c.params.mr.access = access;
        c.params.mr.flags = RNIC_MR_F_PHYS;
        const uint16_t st = cmd(c);
        if (key) *key = c.out0;
        if (st == RNIC_CMD_ST_OK) {
            EXPECT_EQ(c.out0, c.out1);
        }
        return st;
    }
    uint32_t mr(uint32_t pd, uint64_t addr, uint64_t len, uint32_t access = RNIC_ACCESS_ALL)
    {
        uint32_t key = 0;
        EXPECT_EQ(reg_mr_phys(pd, addr, len, access, &key), RNIC_CMD_ST_OK);
        return key;
    }

    struct Cq {
        uint32_t cqn;
        uint64_t ring;
        uint8_t log2;
        uint32_t ci = 0;
    };
    Cq create_cq(uint8_t log2 = 10, uint8_t vector = 1)
    {
        Cq q{0, alloc(64ull << log2), log2};
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_CREATE_CQ;
        c.params.cq.ring = q.ring;
        c.params.cq.depth_log2 = log2;
        c.params.cq.vector = vector;
        EXPECT_EQ(cmd(c), RNIC_CMD_ST_OK);
        q.cqn = c.handle;
        return q;
    }
    // The CQEs written since the last call (consumer index advanced, written back).
    std::vector<struct rnic_cqe> poll(Cq &q)
    {
        std::vector<struct rnic_cqe> out;
        for (;;) {
            struct rnic_cqe e;
            const uint64_t at = q.ring + uint64_t(q.ci & ((1u << q.log2) - 1)) * 64;
            // as a CPU polls: the owner byte (written last by the device) first, then the entry
            const uint8_t owner = std::atomic_ref<uint8_t>(*mem(at + offsetof(struct rnic_cqe, owner)))
                                      .load(std::memory_order_acquire);
            if ((owner & 1) != (((q.ci >> q.log2) & 1) ^ 1)) break;
            uint8_t *b = reinterpret_cast<uint8_t *>(&e);
            for (unsigned i = 0; i < 64; i++)
                b[i] = std::atomic_ref<uint8_t>(*mem(at + i)).load(std::memory_order_relaxed);
            out.push_back(e);
            q.ci++;
        }
        if (!out.empty()) nic->db_write(RNIC_DB_CQ(q.cqn) + RNIC_CQ_DB_CI, q.ci, 4);
        return out;
    }

    struct Qp {
        uint32_t qpn;
        uint64_t sq, rq;
        uint8_t sq_log2, rq_log2;
        uint32_t sq_pi = 0, rq_pi = 0;
        uint32_t index() const { return RNIC_QP_INDEX(qpn); }
    };
    Qp create_qp(uint32_t pd, const Cq &scq, const Cq &rcq, uint8_t log2 = 8)
    {
        Qp q{0, alloc(128ull << log2), alloc(64ull << log2), log2, log2};
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_CREATE_QP;
        c.handle = pd;
        c.params.qp.sq_ring = q.sq;
        c.params.qp.rq_ring = q.rq;
        c.params.qp.send_cqn = scq.cqn;
        c.params.qp.recv_cqn = rcq.cqn;
        c.params.qp.sq_depth_log2 = log2;
        c.params.qp.rq_depth_log2 = log2;
        EXPECT_EQ(cmd(c), RNIC_CMD_ST_OK);
        q.qpn = c.handle;
        return q;
    }
    uint16_t modify(uint32_t qpn, const struct rnic_cmd_modify_qp &m)
    {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_MODIFY_QP;
        c.handle = qpn;
        c.params.modify = m;
        return cmd(c);
    }
    // RESET -> INIT -> RTR -> RTS toward (peer_node, peer_qpn).
    void connect(const Qp &q, unsigned peer_node, uint32_t peer_qpn, uint16_t mtu = 1024,
                 uint8_t timeout = 10, uint8_t retry = 7,
                 uint32_t access = RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, uint8_t upto = RNIC_QPS_RTS,
                 uint32_t psn = 0xfffff0) // both directions' first PSN (close to the wrap)
    {
        struct rnic_cmd_modify_qp m = {};
        m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS;
        m.state = RNIC_QPS_INIT;
        m.access = access;
        ASSERT_EQ(modify(q.qpn, m), RNIC_CMD_ST_OK);
        m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_PATH_MTU | RNIC_QP_ATTR_DEST_QPN |
                      RNIC_QP_ATTR_RQ_PSN | RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC | RNIC_QP_ATTR_MIN_RNR_TIMER |
                      RNIC_QP_ATTR_AV;
        m.state = RNIC_QPS_RTR;
        m.path_mtu = mtu;
        m.dest_qpn = peer_qpn;
        m.rq_psn = psn;
        m.max_dest_rd_atomic = 16;
        m.min_rnr_timer = 1;
        m.dest_node = peer_node;
        ASSERT_EQ(modify(q.qpn, m), RNIC_CMD_ST_OK);
        if (upto == RNIC_QPS_RTR) return;
        m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_TIMEOUT |
                      RNIC_QP_ATTR_RETRY_CNT | RNIC_QP_ATTR_RNR_RETRY | RNIC_QP_ATTR_MAX_QP_RD_ATOMIC;
        m.state = RNIC_QPS_RTS;
        m.sq_psn = psn;
        m.timeout = timeout;
        m.retry_cnt = retry;
        m.rnr_retry = 7;
        m.max_rd_atomic = 16;
        ASSERT_EQ(modify(q.qpn, m), RNIC_CMD_ST_OK);
    }
    void post_send(Qp &q, const struct rnic_send_wqe &w)
    {
        std::memcpy(mem(q.sq + uint64_t(q.sq_pi & ((1u << q.sq_log2) - 1)) * 128), &w, 128);
        q.sq_pi++;
        nic->db_write(RNIC_DB_QP(q.index()) + RNIC_QP_DB_SQ_PI, q.sq_pi, 4);
    }
    void post_recv(Qp &q, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
    {
        struct rnic_recv_wqe w = {};
        w.wr_id = wr_id;
        w.num_sge = len ? 1 : 0;
        w.sge[0] = {addr, len, lkey};
        std::memcpy(mem(q.rq + uint64_t(q.rq_pi & ((1u << q.rq_log2) - 1)) * 64), &w, 64);
        q.rq_pi++;
        nic->db_write(RNIC_DB_QP(q.index()) + RNIC_QP_DB_RQ_PI, q.rq_pi, 4);
    }
};

// The async event queue, as the driver runs it: a ring in guest RAM, consumed by the owner bit.
struct Eq {
    Node &n;
    uint64_t ring;
    uint8_t log2;
    uint32_t ci = 0;
    Eq(Node &node, uint8_t depth_log2 = 4, uint8_t vector = 0)
        : n(node), ring(node.alloc(32ull << depth_log2)), log2(depth_log2)
    {
        n.nic->ctrl_write(RNIC_REG_EQ_BASE_LO, uint32_t(ring), 4);
        n.nic->ctrl_write(RNIC_REG_EQ_BASE_HI, uint32_t(ring >> 32), 4);
        n.nic->ctrl_write(RNIC_REG_EQ_CTRL,
                          RNIC_EQ_CTRL_ENABLE | uint32_t(log2) << RNIC_EQ_CTRL_DEPTH_SHIFT |
                              uint32_t(vector) << RNIC_EQ_CTRL_VECTOR_SHIFT,
                          4);
        EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_ENABLE, RNIC_EQ_CTRL_ENABLE);
    }
    // The events written since the last call (EQ_CI written back).
    std::vector<struct rnic_eqe> poll()
    {
        std::vector<struct rnic_eqe> out;
        for (;;) {
            const uint64_t at = ring + uint64_t(ci & ((1u << log2) - 1)) * 32;
            const uint8_t owner = std::atomic_ref<uint8_t>(*n.mem(at + offsetof(struct rnic_eqe, owner)))
                                      .load(std::memory_order_acquire);
            if ((owner & 1) != (((ci >> log2) & 1) ^ 1)) break;
            struct rnic_eqe e;
            std::memcpy(&e, n.mem(at), sizeof(e));
            out.push_back(e);
            ci++;
        }
        if (!out.empty()) n.nic->ctrl_write(RNIC_REG_EQ_CI, ci, 4);
        return out;
    }
};

struct Rig {
    Link link;
    Node a, b;
    uint64_t clock = 0;

    explicit Rig(RnicConfig ca = {}, RnicConfig cb = {})
        : a(0, link, std::move(ca)), b(1, link, std::move(cb))
    {
    }

    Node &node(unsigned i) { return i ? b : a; }
    void set_clock(uint64_t t)
    {
        clock = t;
        a.host.clock_ns = t;
        b.host.clock_ns = t;
    }
    // Deliver frames and fire timers until `done` or nothing is left to do.
    bool run(const std::function<bool()> &done, unsigned max_steps = 2000000)
    {
        for (unsigned s = 0; s < max_steps; s++) {
            if (done()) return true;
            if (!link.q.empty()) {
                Link::Frame f = link.pop();
                if (f.to < 2) node(f.to).nic->on_frame(f.bytes.data(), f.bytes.size());
                // The ring has room again: what the port's futex wake does for the glue's thread.
                for (Node *n : {&a, &b})
                    if (n->tx_waiting) n->tx_waiting = n->nic->tx_resume();
                continue;
            }
            const uint64_t d = std::min(a.nic->next_deadline_ns(), b.nic->next_deadline_ns());
            if (d == UINT64_MAX) return done();
            set_clock(std::max(clock + 1, d));
            a.nic->poll();
            b.nic->poll();
        }
        return done();
    }
};

// A connected pair of QPs with one big MR each (all access rights) and a CQ each.
struct Pair : Rig {
    uint32_t pda, pdb;
    Node::Cq cqa, cqb;
    Node::Qp qa, qb;
    uint64_t bufa, bufb;
    uint32_t keya, keyb;
    static constexpr uint64_t kBuf = 4 << 20;
    std::vector<struct rnic_cqe> got_a, got_b;

    // b_access, b_upto: B's QP accepts these remote accesses and stops in this state (RTR: a
    // responder only)
    explicit Pair(uint16_t mtu = 1024, uint8_t timeout = 10, uint8_t retry = 7,
                  uint32_t b_access = RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE,
                  uint8_t b_upto = RNIC_QPS_RTS, RnicConfig ca = {}, RnicConfig cb = {})
        : Rig(std::move(ca), std::move(cb))
    {
        pda = a.create_pd();
        pdb = b.create_pd();
        cqa = a.create_cq();
        cqb = b.create_cq();
        qa = a.create_qp(pda, cqa, cqa);
        qb = b.create_qp(pdb, cqb, cqb);
        bufa = a.alloc(kBuf);
        bufb = b.alloc(kBuf);
        keya = a.mr(pda, bufa, kBuf);
        keyb = b.mr(pdb, bufb, kBuf);
        a.connect(qa, 1, qb.qpn, mtu, timeout, retry);
        b.connect(qb, 0, qa.qpn, mtu, timeout, retry, b_access, b_upto);
    }
    // Wait for n CQEs on a's CQ (and collect b's).
    std::vector<struct rnic_cqe> wait_a(size_t n)
    {
        run([&] {
            auto v = a.poll(cqa);
            got_a.insert(got_a.end(), v.begin(), v.end());
            auto w = b.poll(cqb);
            got_b.insert(got_b.end(), w.begin(), w.end());
            return got_a.size() >= n;
        });
        std::vector<struct rnic_cqe> out;
        out.swap(got_a);
        return out;
    }
    std::vector<struct rnic_cqe> wait_b(size_t n)
    {
        run([&] {
            auto v = a.poll(cqa);
            got_a.insert(got_a.end(), v.begin(), v.end());
            auto w = b.poll(cqb);
            got_b.insert(got_b.end(), w.begin(), w.end());
            return got_b.size() >= n;
        });
        std::vector<struct rnic_cqe> out;
        out.swap(got_b);
        return out;
    }
};

struct rnic_send_wqe wqe(uint8_t op, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey,
                         uint64_t raddr = 0, uint32_t rkey = 0)
{
    struct rnic_send_wqe w = {};
    w.wr_id = wr_id;
    w.opcode = op;
    w.flags = RNIC_WQE_F_SIGNALED;
    w.num_sge = 1;
    w.sge[0] = {laddr, len, lkey};
    w.remote_addr = raddr;
    w.rkey = rkey;
    return w;
}

void fill(uint8_t *p, size_t n, uint32_t seed)
{
    std::mt19937 r(seed);
    for (size_t i = 0; i < n; i++)
        p[i] = uint8_t(r());
}

// ---- registers ----

TEST(Rnic, IdentityRegistersAndReadOnlyWrites)
{
    Link l;
    Node n(3, l);
    EXPECT_EQ(n.reg(RNIC_REG_ID), RNIC_ID_VALUE);
    EXPECT_EQ(n.reg(RNIC_REG_VERSION), RNIC_VERSION_VALUE);
    EXPECT_EQ(n.reg(RNIC_REG_CAPS),
              RNIC_CAP_FLUSH | RNIC_CAP_ATOMIC_WRITE | RNIC_CAP_XATOMIC | RNIC_CAP_EQ | RNIC_CAP_LINK);
    EXPECT_EQ(n.reg(RNIC_REG_NODE_ID), 3u);
    EXPECT_EQ(n.reg(RNIC_REG_MAX_QP), RNIC_MAX_QP);
    EXPECT_EQ(n.reg(RNIC_REG_MAX_MR), RNIC_MAX_MR);
    EXPECT_EQ(n.reg(RNIC_REG_MAC_HI), 0x0252u);
    EXPECT_EQ(n.reg(RNIC_REG_MAC_LO), 0x4b000003u);
    EXPECT_EQ(n.reg(RNIC_REG_IPV4), 0xC6120004u);
    EXPECT_EQ(n.reg(RNIC_REG_MAX_MTU), 4096u);
    EXPECT_EQ(n.reg(RNIC_REG_LINK_MBPS), 100000u);
    const size_t e0 = n.host.guest_errors().size();
    n.nic->ctrl_write(RNIC_REG_ID, 0, 4);
    n.nic->ctrl_write(0xff0, 0, 4);             // nothing there
    (void)n.nic->ctrl_read(RNIC_REG_ID + 1, 4); // unaligned
    EXPECT_EQ(n.host.guest_errors().size(), e0 + 3);
    EXPECT_EQ(n.reg(RNIC_REG_ID), RNIC_ID_VALUE);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 3u);
    n.nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE | RNIC_CTRL_CNT_CLEAR, 4);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 0u);
    EXPECT_EQ(n.reg(RNIC_REG_CTRL), RNIC_CTRL_ENABLE);
}

// ---- commands ----

TEST(Rnic, CommandRefusals)
{
    Link l;
    Node n(0, l);
    struct rnic_cmd c = {};
    c.opcode = 99;
    EXPECT_EQ(n.cmd(c), RNIC_CMD_ST_BAD_OPCODE);
    const uint32_t pd = n.create_pd();
    const uint64_t buf = n.alloc(1 << 16);
    uint32_t key = 0;
    EXPECT_EQ(n.reg_mr_phys(pd + 7, buf, 4096, RNIC_ACCESS_LOCAL_WRITE, &key), RNIC_CMD_ST_BAD_PD);
    EXPECT_EQ(n.reg_mr_phys(0, buf, 4096, RNIC_ACCESS_LOCAL_WRITE, &key), RNIC_CMD_ST_BAD_PD);
    // remote write without local write (IBA 10.6.3.1), unknown flags
    EXPECT_EQ(n.reg_mr_phys(pd, buf, 4096, RNIC_ACCESS_REMOTE_WRITE, &key), RNIC_CMD_ST_BAD_ACCESS);
    EXPECT_EQ(n.reg_mr_phys(pd, buf, 4096, 1u << 20, &key), RNIC_CMD_ST_BAD_ACCESS);
    EXPECT_EQ(n.reg_mr_phys(pd, buf, 0, 0, &key), RNIC_CMD_ST_BAD_PARAM);
    // a range outside RAM
    EXPECT_EQ(n.reg_mr_phys(pd, kBase + kRam - 4096, 8192, 0, &key), RNIC_CMD_ST_BAD_ADDR);
    EXPECT_EQ(n.reg_mr_phys(pd, 0x1000, 4096, 0, &key), RNIC_CMD_ST_BAD_ADDR);
    // page lists: misaligned page, a page outside RAM, wrong count, misaligned list, bad shift
    const uint64_t list = n.alloc(64);
    auto reg_pages = [&](std::vector<uint64_t> pages, uint64_t iova, uint64_t len, uint8_t shift,
                         uint64_t at) {
        std::memcpy(n.mem(list), pages.data(), pages.size() * 8);
        struct rnic_cmd m = {};
        m.opcode = RNIC_CMD_REG_MR;
        m.handle = pd;
        m.params.mr = {iova, len, at, uint32_t(pages.size()), RNIC_ACCESS_LOCAL_WRITE, shift, 0, 0, 0};
        return n.cmd(m);
    };
    EXPECT_EQ(reg_pages({buf + 8}, 0x10000, 4096, 12, list), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(reg_pages({0x2000}, 0x10000, 4096, 12, list), RNIC_CMD_ST_BAD_ADDR);
    EXPECT_EQ(reg_pages({buf}, 0x10000, 8192, 12, list), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(reg_pages({buf}, 0x10000, 4096, 12, list + 4), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(reg_pages({buf}, 0x10000, 4096, 11, list), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(reg_pages({buf}, 0x10000, 4096, 12, 0x3000), RNIC_CMD_ST_BAD_ADDR);
    EXPECT_EQ(reg_pages({buf, buf + 8192}, 0x10800, 4096, 12, list), RNIC_CMD_ST_OK);
    // keys: deregistered and stale keys are refused
    key = n.mr(pd, buf, 4096);
    struct rnic_cmd d = {};
    d.opcode = RNIC_CMD_DEREG_MR;
    d.handle = key;
    EXPECT_EQ(n.cmd(d), RNIC_CMD_ST_OK);
    d.handle = key;
    EXPECT_EQ(n.cmd(d), RNIC_CMD_ST_BAD_MR);
    const uint32_t key2 = n.mr(pd, buf, 4096);
    EXPECT_EQ(RNIC_KEY_INDEX(key2), RNIC_KEY_INDEX(key));
    EXPECT_NE(key2, key); // the index is reused with a new key byte
    d.handle = key;
    EXPECT_EQ(n.cmd(d), RNIC_CMD_ST_BAD_MR);
    // PD busy while an MR uses it
    struct rnic_cmd p = {};
    p.opcode = RNIC_CMD_DESTROY_PD;
    p.handle = pd;
    EXPECT_EQ(n.cmd(p), RNIC_CMD_ST_BUSY);
    // CQs: depth, vector, alignment, ring outside RAM
    struct rnic_cmd q = {};
    q.opcode = RNIC_CMD_CREATE_CQ;
    q.params.cq = {buf, 13, 0, 0, 0};
    EXPECT_EQ(n.cmd(q), RNIC_CMD_ST_BAD_PARAM);
    q.params.cq = {buf, 4, RNIC_MSIX_VECTORS, 0, 0};
    EXPECT_EQ(n.cmd(q), RNIC_CMD_ST_BAD_PARAM);
    q.params.cq = {buf + 32, 4, 0, 0, 0};
    EXPECT_EQ(n.cmd(q), RNIC_CMD_ST_BAD_PARAM);
    q.params.cq = {kBase + kRam - 512, 4, 0, 0, 0};
    EXPECT_EQ(n.cmd(q), RNIC_CMD_ST_BAD_ADDR);
    Node::Cq cq = n.create_cq(4);
    // QPs: bad PD, bad CQ, bad ring
    struct rnic_cmd cq_ = {};
    cq_.opcode = RNIC_CMD_CREATE_QP;
    cq_.handle = pd;
    cq_.params.qp = {buf, buf, cq.cqn + 1, cq.cqn, 4, 4, 0, 0};
    EXPECT_EQ(n.cmd(cq_), RNIC_CMD_ST_BAD_CQ);
    cq_.handle = 77;
    cq_.params.qp = {buf, buf, cq.cqn, cq.cqn, 4, 4, 0, 0};
    EXPECT_EQ(n.cmd(cq_), RNIC_CMD_ST_BAD_PD);
    cq_.handle = pd;
    cq_.params.qp = {kBase + kRam - 64, buf, cq.cqn, cq.cqn, 4, 4, 0, 0};
    EXPECT_EQ(n.cmd(cq_), RNIC_CMD_ST_BAD_ADDR);
    Node::Qp qp = n.create_qp(pd, cq, cq, 4);
    EXPECT_EQ(qp.qpn, RNIC_QPN(0));
    // CQ busy while a QP uses it
    struct rnic_cmd dc = {};
    dc.opcode = RNIC_CMD_DESTROY_CQ;
    dc.handle = cq.cqn;
    EXPECT_EQ(n.cmd(dc), RNIC_CMD_ST_BUSY);
    // modify: wrong transition, missing attributes, bad MTU, bad QP, no STATE bit
    struct rnic_cmd_modify_qp m = {};
    m.attr_mask = RNIC_QP_ATTR_STATE;
    m.state = RNIC_QPS_RTS;
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_STATE);
    m.state = RNIC_QPS_INIT; // ACCESS_FLAGS missing
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_ATTR);
    m.attr_mask = RNIC_QP_ATTR_ACCESS_FLAGS;
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_ATTR);
    m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS;
    EXPECT_EQ(n.modify(qp.qpn + 1, m), RNIC_CMD_ST_BAD_QP);
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_OK);
    m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_PATH_MTU | RNIC_QP_ATTR_DEST_QPN | RNIC_QP_ATTR_RQ_PSN |
                  RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC | RNIC_QP_ATTR_MIN_RNR_TIMER | RNIC_QP_ATTR_AV;
    m.state = RNIC_QPS_RTR;
    m.path_mtu = 1000;
    m.max_dest_rd_atomic = 4;
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_ATTR);
    m.path_mtu = 1024;
    m.dest_node = 999; // no such node under the fabric's rule
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_ATTR);
    m.dest_node = 1;
    m.max_dest_rd_atomic = 0;
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_BAD_ATTR);
    m.max_dest_rd_atomic = 4;
    EXPECT_EQ(n.modify(qp.qpn, m), RNIC_CMD_ST_OK);
    struct rnic_cmd qq = {};
    qq.opcode = RNIC_CMD_QUERY_QP;
    qq.handle = qp.qpn;
    EXPECT_EQ(n.cmd(qq), RNIC_CMD_ST_OK);
    EXPECT_EQ(qq.out0, RNIC_QPS_RTR);
    EXPECT_EQ(qq.params.modify.path_mtu, 1024);
    EXPECT_EQ(qq.params.modify.dest_ip, 0xC6120002u);
    // destroy in order
    struct rnic_cmd dq = {};
    dq.opcode = RNIC_CMD_DESTROY_QP;
    dq.handle = qp.qpn;
    EXPECT_EQ(n.cmd(dq), RNIC_CMD_ST_OK);
    EXPECT_EQ(n.cmd(dq), RNIC_CMD_ST_BAD_QP);
    dc.handle = cq.cqn;
    EXPECT_EQ(n.cmd(dc), RNIC_CMD_ST_OK);
    // a command block outside RAM
    n.nic->ctrl_write(RNIC_REG_CMD_ADDR_LO, 0x1000, 4);
    n.nic->ctrl_write(RNIC_REG_CMD_ADDR_HI, 0, 4);
    n.nic->ctrl_write(RNIC_REG_CMD_EXEC, RNIC_CMD_EXEC_GO, 4);
    EXPECT_EQ(n.reg(RNIC_REG_CMD_STATUS), RNIC_CMD_ST_BAD_ADDR);
    EXPECT_GE(n.counter(RNIC_CNT_INDEX_COMMAND_ERRORS), 25u);
}

TEST(Rnic, TablesFillUpAndRefuse)
{
    Link l;
    Node n(0, l);
    for (unsigned i = 0; i < RNIC_MAX_PD; i++)
        n.create_pd();
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_CREATE_PD;
    EXPECT_EQ(n.cmd(c), RNIC_CMD_ST_NO_RESOURCE);
}

// An MR key is index << 8 | a key byte; the byte is random (as rxe's), so that a user who knows
// or guesses the index (the first MR of a node is index 0) does not know the key.
TEST(Rnic, MrKeysCarryAnUnpredictableKeyByte)
{
    Link l;
    Node n(0, l);
    const uint32_t pd = n.create_pd();
    const uint64_t buf = n.alloc(4096);
    std::set<uint32_t> tags;
    unsigned successors = 0;
    uint32_t prev = 0;
    for (int i = 0; i < 32; i++) {
        const uint32_t key = n.mr(pd, buf, 4096);
        ASSERT_EQ(RNIC_KEY_INDEX(key), 0u);
        const uint32_t tag = RNIC_KEY_TAG(key);
        EXPECT_NE(tag, 0u);
        EXPECT_NE(tag, prev) << "a key byte repeated at once at the same index";
        successors += tag == ((prev + 1) & 0xff);
        tags.insert(tag);
        prev = tag;
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_DEREG_MR;
        c.handle = key;
        ASSERT_EQ(n.cmd(c), RNIC_CMD_ST_OK);
    }
    EXPECT_LT(successors, 8u) << "the key bytes count up";
    EXPECT_GT(tags.size(), 16u);
}

// ---- every operation at the boundary sizes ----

class RnicSizes : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RnicSizes, WriteReadSendAtBoundarySizesIntoMiddleAndEnd)
{
    const uint16_t mtu = 1024;
    Pair p(mtu);
    const uint32_t sizes[] = {1, mtu - 1u, mtu, mtu + 1u, 1u << 20};
    const uint32_t len = sizes[GetParam()];
    for (int where = 0; where < 2; where++) {
        // middle of the MR, or ending at its last byte
        const uint64_t roff = where ? Pair::kBuf - len : Pair::kBuf / 2 - len / 2;
        const uint64_t loff = 4096;
        std::memset(p.b.mem(p.bufb), 0, Pair::kBuf);
        fill(p.a.mem(p.bufa + loff), len, len + where);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 11, p.bufa + loff, len, p.keya, p.bufb + roff, p.keyb));
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[0].wr_id, 11u);
        EXPECT_EQ(c[0].opcode, RNIC_CQE_OP_WRITE);
        EXPECT_EQ(c[0].byte_len, len);
        EXPECT_EQ(c[0].qpn, p.qa.qpn);
        EXPECT_GT(c[0].modeled_ns, 0u);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + roff), p.a.mem(p.bufa + loff), len), 0);
        // nothing around it
        if (roff) {
            EXPECT_EQ(*p.b.mem(p.bufb + roff - 1), 0);
        }
        if (roff + len < Pair::kBuf) {
            EXPECT_EQ(*p.b.mem(p.bufb + roff + len), 0);
        }
        // READ it back into another place
        const uint64_t back = 2 << 20;
        std::memset(p.a.mem(p.bufa + back), 0, len);
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 12, p.bufa + back, len, p.keya, p.bufb + roff, p.keyb));
        c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[0].opcode, RNIC_CQE_OP_READ);
        EXPECT_EQ(c[0].byte_len, len);
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + back), p.a.mem(p.bufa + loff), len), 0);
        // SEND with immediate into a posted receive
        p.b.post_recv(p.qb, 21, p.bufb + roff, len, p.keyb);
        std::memset(p.b.mem(p.bufb + roff), 0, len);
        struct rnic_send_wqe w = wqe(RNIC_WR_SEND_IMM, 13, p.bufa + loff, len, p.keya);
        w.imm = 0xdeadbeef;
        w.flags |= RNIC_WQE_F_SOLICITED;
        p.a.post_send(p.qa, w);
        c = p.wait_a(1);
        auto r = p.wait_b(1);
        ASSERT_EQ(c.size(), 1u);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[0].opcode, RNIC_CQE_OP_SEND);
        EXPECT_EQ(r[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(r[0].wr_id, 21u);
        EXPECT_EQ(r[0].opcode, RNIC_CQE_OP_RECV);
        EXPECT_EQ(r[0].byte_len, len);
        EXPECT_EQ(r[0].imm, 0xdeadbeefu);
        EXPECT_EQ(r[0].flags, RNIC_CQE_F_WITH_IMM | RNIC_CQE_F_SOLICITED | RNIC_CQE_F_RECV);
        EXPECT_EQ(r[0].src_qpn, p.qa.qpn);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + roff), p.a.mem(p.bufa + loff), len), 0);
    }
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RnicSizes, ::testing::Range(0u, 5u));

TEST(Rnic, WriteWithImmediateConsumesAReceiveAndGathersSges)
{
    Pair p;
    // three SGEs gathered into one message
    struct rnic_send_wqe w = {};
    w.wr_id = 5;
    w.opcode = RNIC_WR_WRITE_IMM;
    w.flags = RNIC_WQE_F_SIGNALED;
    w.num_sge = 3;
    w.sge[0] = {p.bufa + 100, 700, p.keya};
    w.sge[1] = {p.bufa + 5000, 1, p.keya};
    w.sge[2] = {p.bufa + 9000, 2000, p.keya};
    w.remote_addr = p.bufb + 333;
    w.rkey = p.keyb;
    w.imm = 0x01020304;
    fill(p.a.mem(p.bufa), 12000, 9);
    p.b.post_recv(p.qb, 77, 0, 0, 0); // a zero-length receive
    p.a.post_send(p.qa, w);
    auto c = p.wait_a(1);
    auto r = p.wait_b(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(c[0].byte_len, 2701u);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].opcode, RNIC_CQE_OP_RECV_RDMA_IMM);
    EXPECT_EQ(r[0].wr_id, 77u);
    EXPECT_EQ(r[0].imm, 0x01020304u);
    EXPECT_EQ(r[0].byte_len, 2701u);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 333), p.a.mem(p.bufa + 100), 700), 0);
    EXPECT_EQ(*p.b.mem(p.bufb + 333 + 700), *p.a.mem(p.bufa + 5000));
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 333 + 701), p.a.mem(p.bufa + 9000), 2000), 0);
}

TEST(Rnic, AtomicsFlushAndAtomicWrite)
{
    Pair p;
    uint64_t v = 100;
    std::memcpy(p.b.mem(p.bufb + 64), &v, 8);
    struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, 1, p.bufa, 8, p.keya, p.bufb + 64, p.keyb);
    w.swap_add = 5;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_CMP_SWAP, 2, p.bufa + 8, 8, p.keya, p.bufb + 64, p.keyb);
    w.compare = 105;
    w.swap_add = 7;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_CMP_SWAP, 3, p.bufa + 16, 8, p.keya, p.bufb + 64, p.keyb);
    w.compare = 105; // fails now: the value is 7
    w.swap_add = 9;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_ATOMIC_WRITE, 4, 0, 0, 0, p.bufb + 128, p.keyb);
    w.num_sge = 0;
    w.swap_add = 0x1122334455667788ull;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_FLUSH, 5, 0, 0, 0, p.bufb + 128, p.keyb);
    w.num_sge = 0;
    w.flush_len = 8;
    w.flush_type = ROCE_FETH_PLT_GLOBAL;
    p.a.post_send(p.qa, w);
    auto c = p.wait_a(5);
    ASSERT_EQ(c.size(), 5u);
    for (unsigned i = 0; i < 5; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, i + 1);
    }
    EXPECT_EQ(c[0].opcode, RNIC_CQE_OP_FETCH_ADD);
    EXPECT_EQ(c[1].opcode, RNIC_CQE_OP_CMP_SWAP);
    EXPECT_EQ(c[3].opcode, RNIC_CQE_OP_ATOMIC_WRITE);
    EXPECT_EQ(c[4].opcode, RNIC_CQE_OP_FLUSH);
    uint64_t r[3];
    std::memcpy(r, p.a.mem(p.bufa), 24);
    EXPECT_EQ(r[0], 100u);
    EXPECT_EQ(r[1], 105u);
    EXPECT_EQ(r[2], 7u);
    std::memcpy(&v, p.b.mem(p.bufb + 64), 8);
    EXPECT_EQ(v, 7u);
    std::memcpy(&v, p.b.mem(p.bufb + 128), 8);
    EXPECT_EQ(v, 0x1122334455667788ull);
}

// ---- the atomic unit in the device (docs/atomic-unit.md "In the RNIC") ----

struct rnic_send_wqe xwqe(bool fetch, uint8_t xop, uint8_t size, uint64_t wr_id, uint64_t laddr,
                          uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t operand,
                          uint64_t compare = 0, uint64_t mask = 0)
{
    struct rnic_send_wqe w =
        wqe(fetch ? RNIC_WR_XATOMIC : RNIC_WR_XATOMIC_POST, wr_id, laddr, size, lkey, raddr, rkey);
    if (!fetch) w.num_sge = 0;
    w.xop = xop;
    w.xsize = size;
    w.swap_add = operand;
    w.compare = compare;
    w.mask = mask;
    return w;
}

TEST(Rnic, EveryExtendedAtomicAt32And64BitsThroughTheAtomicUnit)
{
    Pair p;
    p.set_clock(3600ull * 1000000000ull); // a clock far from 0, as QEMU's (the unit starts at 0)
    uint64_t ref[2] = {0x8877665544332211ull, 0xCAFEF00Dull}; // a 64-bit word and a 32-bit word
    const uint64_t w64 = p.bufb + 4096, w32 = p.bufb + 4096 + 12;
    std::memcpy(p.b.mem(w64), &ref[0], 8);
    std::memcpy(p.b.mem(w32), &ref[1], 4);
    std::memset(p.b.mem(w32 + 4), 0x5A, 4); // the neighbour of the 32-bit word: never touched
    struct Want {
        uint64_t at, old;
        uint8_t size;
    };
    std::vector<Want> want;
    std::vector<uint8_t> opcodes;
    unsigned n = 0;
    for (uint8_t op = 0; op < ROCE_XOP_COUNT; op++)
        for (uint8_t size : {8, 4})
            for (bool fetch : {true, false})
                for (bool match : {true, false}) { // MCSWAP: compare matches or not
                    if (op != ROCE_XOP_MCSWAP && !match) continue;
                    uint64_t &w = ref[size == 4];
                    const uint64_t operand = 0x0123456789ABCDEFull * (n + 3);
                    const uint64_t cmp = match ? w : ~w, mask = n % 2 ? ~0ull : 0xFF00FF00FF00FF00ull;
                    p.a.post_send(p.qa, xwqe(fetch, op, size, n, p.bufa + 8 * n, p.keya,
                                             size == 8 ? w64 : w32, p.keyb, operand, cmp, mask));
                    if (fetch) want.push_back({p.bufa + 8 * n, w, size});
                    opcodes.push_back(fetch ? RNIC_CQE_OP_XATOMIC : RNIC_CQE_OP_XATOMIC_POST);
                    w = amo_alu(op, size, w, operand, cmp, mask);
                    n++;
                }
    // and the IB atomics through the same unit
    struct rnic_send_wqe fa = wqe(RNIC_WR_FETCH_ADD, n, p.bufa + 8 * n, 8, p.keya, w64, p.keyb);
    fa.swap_add = 1000;
    p.a.post_send(p.qa, fa);
    want.push_back({p.bufa + 8 * n, ref[0], 8});
    opcodes.push_back(RNIC_CQE_OP_FETCH_ADD);
    ref[0] += 1000;
    n++;
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, i);
        EXPECT_EQ(c[i].opcode, opcodes[i]) << i;
        EXPECT_GT(c[i].modeled_ns, 0u);
    }
    uint64_t v64;
    uint32_t v32, neighbour;
    std::memcpy(&v64, p.b.mem(w64), 8);
    std::memcpy(&v32, p.b.mem(w32), 4);
    std::memcpy(&neighbour, p.b.mem(w32 + 4), 4);
    EXPECT_EQ(v64, ref[0]);
    EXPECT_EQ(v32, uint32_t(ref[1]));
    EXPECT_EQ(neighbour, 0x5A5A5A5Au);
    for (const Want &w : want) {
        uint64_t v = 0;
        std::memcpy(&v, p.a.mem(w.at), w.size);
        EXPECT_EQ(v, w.old);
    }
    // the unit executed every one; its counters and modeled time are the device's
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_ERRORS), 0u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_MISSES), 1u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HITS), 1u) << "the same two words again and again";
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_HITS) + p.b.counter(RNIC_CNT_INDEX_AMU_MISSES) +
                  p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS),
              n);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_READS), 1u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_WRITES), 1u);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_MODELED_NS), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_AMU_OPS), 0u) << "the requester's unit is not involved";
    // CNT_CLEAR zeroes the unit's counters but its high-water mark
    const uint64_t hw = p.b.counter(RNIC_CNT_INDEX_AMU_MAX_OUTSTANDING);
    EXPECT_GE(hw, 1u);
    p.b.nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE | RNIC_CTRL_CNT_CLEAR, 4);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_MODELED_NS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_MAX_OUTSTANDING), hw);
}

TEST(Rnic, ExtendedAtomicRefusals)
{
    struct Case {
        const char *what;
        std::function<void(struct rnic_send_wqe &, Pair &, uint32_t noatomic)> spoil;
        uint8_t status;
        uint32_t vendor_err;
        bool remote; // refused by the target (a NAK, a guest error there)
    };
    const Case cases[] = {
        {"unaligned 64-bit", [](auto &w, Pair &, uint32_t) { w.remote_addr += 4; }, RNIC_WC_REM_INV_REQ_ERR,
         ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ), true},
        {"unaligned 32-bit",
         [](auto &w, Pair &, uint32_t) { w.remote_addr += 2, w.xsize = 4, w.sge[0].length = 4; },
         RNIC_WC_REM_INV_REQ_ERR, ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ), true},
        {"MR without REMOTE_ATOMIC", [](auto &w, Pair &, uint32_t na) { w.rkey = na; },
         RNIC_WC_REM_ACCESS_ERR, ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"unknown rkey", [](auto &w, Pair &, uint32_t) { w.rkey ^= 0x80; }, RNIC_WC_REM_ACCESS_ERR,
         ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"beyond the MR", [](auto &w, Pair &, uint32_t) { w.remote_addr += Pair::kBuf; },
         RNIC_WC_REM_ACCESS_ERR, ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"unknown xop", [](auto &w, Pair &, uint32_t) { w.xop = ROCE_XOP_COUNT; }, RNIC_WC_LOC_QP_OP_ERR,
         RNIC_LERR_OPCODE, false},
        {"xsize 2", [](auto &w, Pair &, uint32_t) { w.xsize = 2; }, RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_OPCODE,
         false},
        {"SGE not xsize", [](auto &w, Pair &, uint32_t) { w.sge[0].length = 4; }, RNIC_WC_LOC_QP_OP_ERR,
         RNIC_LERR_LENGTH, false},
        {"XATOMIC_POST with an SGE", [](auto &w, Pair &, uint32_t) { w.opcode = RNIC_WR_XATOMIC_POST; },
         RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_SGE_COUNT, false},
        {"reserved opcode 0x42", [](auto &w, Pair &, uint32_t) { w.opcode = RNIC_WR_XATOMIC + 2; },
         RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_OPCODE, false},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Pair p;
        const uint32_t noatomic =
            p.b.mr(p.pdb, p.bufb, 65536,
                   RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ);
        std::vector<uint8_t> before(p.b.mem(p.bufb), p.b.mem(p.bufb) + Pair::kBuf);
        struct rnic_send_wqe w = xwqe(true, ROCE_XOP_ADD, 8, 9, p.bufa, p.keya, p.bufb + 64, p.keyb, 1);
        k.spoil(w, p, noatomic);
        p.a.post_send(p.qa, w);
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, 10, 0, 0, p.bufb + 64, p.keyb, 1)); // flushed
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].wr_id, 9u);
        EXPECT_EQ(c[0].status, k.status);
        EXPECT_EQ(c[0].vendor_err, k.vendor_err);
        EXPECT_EQ(c[1].status, RNIC_WC_WR_FLUSH_ERR);
        EXPECT_TRUE(std::equal(before.begin(), before.end(), p.b.mem(p.bufb))) << "target memory changed";
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 0u) << "refused before the unit";
        if (k.remote) {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_ERR_NAKS_TX), 1u);
            EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 1u) << "a guest-error line on the target";
            EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_REMOTE_VIOLATIONS), 1u);
        } else {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_FRAMES), 0u) << "refused before anything was sent";
        }
    }
}

// A burst of atomics that reach the target at one device time share the unit's look-ahead
// window (values at arrival, timing by the model behind): results forwarded through registers,
// host writes suppressed by rate limiting, none lost; the busy time counts the burst once, not
// the idle time before a second burst.
TEST(Rnic, AtomicBurstSharesTheUnitsWindow)
{
    Pair p;
    p.set_clock(1000000000ull);
    const uint64_t w0 = p.bufb + 8192, w1 = p.bufb + 8192 + 8;
    const unsigned n = 96;
    for (unsigned i = 0; i < n; i++)
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, i, 0, p.keya, i % 3 ? w0 : w1, p.keyb, i + 1));
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    uint64_t want0 = 0, want1 = 0;
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        (i % 3 ? want0 : want1) += i + 1;
    }
    uint64_t v0, v1;
    std::memcpy(&v0, p.b.mem(w0), 8);
    std::memcpy(&v1, p.b.mem(w1), 8);
    EXPECT_EQ(v0, want0);
    EXPECT_EQ(v1, want1);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "operands from the register file";
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED), 0u) << "rate limiting acted";
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_WRITES) + p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED),
              n);
    const uint64_t active = p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS);
    EXPECT_GT(active, 0u);
    EXPECT_NEAR(double(p.b.counter(RNIC_CNT_INDEX_AMU_BUSY_NS)), double(active), 4.0)
        << "one burst: no idle gap";
    // a second burst a second later: the busy clock spans the gap, the active time does not
    p.set_clock(p.clock + 1000000000ull);
    for (unsigned i = 0; i < n; i++)
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, n + i, 0, p.keya, w0, p.keyb, 1));
    ASSERT_EQ(p.wait_a(n).size(), n);
    std::memcpy(&v0, p.b.mem(w0), 8);
    EXPECT_EQ(v0, want0 + n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 2 * n);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_BUSY_NS), 1000000000u);
    EXPECT_LT(p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS), 4 * active);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS), active);
}

// The receive pass (kRxPassGapNs): frames delivered back to back (the next within the gap of the
// previous one's end) reach the unit at the pass's start and share its window; frames delivered
// far apart reach it at their own times, one at a time. Both exact.
TEST(Rnic, BackToBackFramesAreOneReceivePass)
{
    for (uint64_t step : {500ull, 1000000ull}) {
        SCOPED_TRACE(step);
        Pair p;
        p.set_clock(1000000000ull);
        const uint64_t w = p.bufb + 8192;
        const unsigned n = 64;
        for (unsigned i = 0; i < n; i++)
            p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, i, 0, p.keya, w, p.keyb, 1));
        unsigned delivered = 0;
        while (!p.link.q.empty()) { // the requests, each after `step` ns
            Link::Frame f = p.link.pop();
            if (f.to != 1) continue; // ACKs: the RC retransmits nothing within this test's time
            p.set_clock(p.clock + step);
            p.b.nic->on_frame(f.bytes.data(), f.bytes.size());
            delivered++;
        }
        ASSERT_EQ(delivered, n);
        uint64_t v;
        std::memcpy(&v, p.b.mem(w), 8);
        EXPECT_EQ(v, n);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
        if (step < kRxPassGapNs) {
            EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "one pass: the window holds many";
        } else {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "one at a time";
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED), 0u);
        }
    }
}

// Every atomic executed exactly once through loss, duplication, reordering and corruption (the
// RC duplicate rule through the unit): fetched old values are the exact prefix sums.
TEST(Rnic, ExtendedAtomicsExactlyOnceUnderLossAndDuplication)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.rng.seed(seed);
        p.link.drop = 0.05;
        p.link.dup = 0.05;
        p.link.reorder = 0.05;
        p.link.corrupt = 0.02;
        const uint64_t word = p.bufb + (1 << 20);
        const unsigned n = 300;
        uint64_t expect = 0;
        std::vector<uint64_t> olds(n, UINT64_MAX);
        for (unsigned i = 0; i < n; i++) {
            const bool fetch = i % 3 != 2;
            if (fetch) olds[i] = expect;
            p.a.post_send(p.qa, xwqe(fetch, ROCE_XOP_ADD, 8, i, p.bufa + 8 * i, p.keya, word, p.keyb, i + 1));
            expect += i + 1;
        }
        auto c = p.wait_a(n);
        ASSERT_EQ(c.size(), n);
        for (unsigned i = 0; i < n; i++)
            EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        uint64_t v;
        std::memcpy(&v, p.b.mem(word), 8);
        EXPECT_EQ(v, expect) << "each add executed exactly once";
        for (unsigned i = 0; i < n; i++) {
            if (olds[i] == UINT64_MAX) continue;
            std::memcpy(&v, p.a.mem(p.bufa + 8 * i), 8);
            EXPECT_EQ(v, olds[i]) << i;
        }
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n) << "the unit saw each once";
        EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
    }
}

// Global atomicity: the NIC's atomics and the target CPU's own atomics on one word (a thread
// doing __atomic_fetch_add on the guest RAM word the unit updates) give the exact sum.
TEST(Rnic, NicAtomicsAndCpuAtomicsOnOneWordAreExact)
{
    Pair p;
    const uint64_t word = p.bufb + 8192;
    uint64_t *cpu_word = reinterpret_cast<uint64_t *>(p.b.mem(word));
    __atomic_store_n(cpu_word, 0, __ATOMIC_SEQ_CST);
    const unsigned n = 2000;
    std::atomic<bool> started{false}, stop{false};
    uint64_t cpu_n = 0;
    std::thread cpu([&] { // the target CPU adds for as long as the NIC works
        do {
            __atomic_fetch_add(cpu_word, 1ull << 32, __ATOMIC_SEQ_CST);
            cpu_n++;
            started = true;
        } while (!stop.load(std::memory_order_relaxed));
    });
    while (!started.load())
        std::this_thread::yield();
    unsigned posted = 0;
    std::vector<struct rnic_cqe> c;
    while (posted < n) { // a window of 64 in flight
        const unsigned batch = std::min(64u, n - posted);
        for (unsigned i = 0; i < batch; i++, posted++)
            p.a.post_send(p.qa, posted % 2
                                    ? xwqe(false, ROCE_XOP_ADD, 8, posted, 0, 0, word, p.keyb, 3)
                                    : xwqe(true, ROCE_XOP_ADD, 8, posted, p.bufa, p.keya, word, p.keyb, 3));
        auto got = p.wait_a(batch);
        c.insert(c.end(), got.begin(), got.end());
    }
    stop = true;
    cpu.join();
    ASSERT_EQ(c.size(), n);
    for (auto &e : c)
        EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
    EXPECT_EQ(__atomic_load_n(cpu_word, __ATOMIC_SEQ_CST), (cpu_n << 32) + 3ull * n);
}

TEST(Rnic, AtomicUnitPropertiesAreValidated)
{
    Link l;
    RnicConfig cfg;
    cfg.amu.cache_lines = 32;
    cfg.amu.cache_ways = 5; // not a divisor
    Node bad(2, l, cfg);
    EXPECT_EQ(bad.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 1u) << "refused, the defaults used";
    EXPECT_NE(amu_check_config(cfg.amu), nullptr);
    cfg.amu = AmuConfig{};
    cfg.amu.cache_lines = 0; // no cache: every op reads the host
    cfg.amu.tags = 64;
    EXPECT_EQ(amu_check_config(cfg.amu), nullptr);
    AmuRateLimit r;
    AmuRaw w;
    EXPECT_TRUE(amu_rate_limit_from("hostq", &r));
    EXPECT_EQ(r, AmuRateLimit::HostQueue);
    EXPECT_FALSE(amu_rate_limit_from("sometimes", &r));
    EXPECT_TRUE(amu_raw_from("flush", &w));
    EXPECT_EQ(w, AmuRaw::Flush);
    EXPECT_FALSE(amu_raw_from("", &w));
}

// One node, two QPs of it on one CQ (frames loop back inside the device), and MRs described by a
// page list over pages the test chooses.
struct LoopNode {
    Link l;
    Node n{0, l};
    uint32_t pd = n.create_pd();
    Node::Cq cq = n.create_cq();
    Node::Qp q1 = n.create_qp(pd, cq, cq), q2 = n.create_qp(pd, cq, cq);

    // register [iova, iova + len) over `pages` (4 KiB each); returns the key
    uint32_t page_list_mr(uint64_t iova, uint64_t len, std::initializer_list<uint64_t> pages)
    {
        const uint64_t list = n.alloc(8 * pages.size());
        uint64_t k = 0;
        for (uint64_t a : pages)
            std::memcpy(n.mem(list + 8 * k++), &a, 8);
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_REG_MR;
        c.handle = pd;
        c.params.mr = {iova, len, list, uint32_t(pages.size()), RNIC_ACCESS_ALL, 12, 0, 0, 0};
        EXPECT_EQ(n.cmd(c), RNIC_CMD_ST_OK);
        return c.out1;
    }
    void connect()
    {
        n.connect(q1, 0, q2.qpn);
        n.connect(q2, 0, q1.qpn);
    }
};

// ---- FLUSH (IBTA Memory Placement Extensions): placement before the response ----

namespace {
struct rnic_send_wqe flush_wqe(uint64_t wr_id, uint64_t raddr, uint32_t rkey, uint32_t len, uint8_t placement,
                               uint8_t selectivity = ROCE_FETH_SEL_RANGE)
{
    struct rnic_send_wqe w = wqe(RNIC_WR_FLUSH, wr_id, 0, 0, 0, raddr, rkey);
    w.num_sge = 0;
    w.flush_len = len;
    w.flush_type = uint8_t(placement | (selectivity << ROCE_FETH_SEL_SHIFT));
    return w;
}
} // namespace

TEST(Rnic, FlushPersistenceWritesTheRangeBackAfterTheEarlierWrites)
{
    Pair p;
    std::vector<std::pair<uint64_t, uint64_t>> order; // persist calls, with the bytes in RAM then
    bool data_there = false;
    p.b.host.persist = [&](uint64_t addr, uint64_t len, uint64_t &synced) {
        order.push_back({addr, len});
        // the WRITE posted before the FLUSH is already in the target's RAM when it is persisted
        data_there = std::memcmp(p.b.mem(p.bufb + 1000), p.a.mem(p.bufa), 5000) == 0;
        synced += len;
        return RK_OK;
    };
    fill(p.a.mem(p.bufa), 5000, 3);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 5000, p.keya, p.bufb + 1000, p.keyb));
    p.a.post_send(p.qa, flush_wqe(2, p.bufb + 1000, p.keyb, 5000, ROCE_FETH_PLT_PERSIST));
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(c[1].opcode, RNIC_CQE_OP_FLUSH);
    ASSERT_EQ(order.size(), 1u); // a PHYS MR: one contiguous piece
    EXPECT_EQ(order[0], std::make_pair(p.bufb + 1000, uint64_t(5000)));
    EXPECT_TRUE(data_there);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 1u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSH_BYTES), 5000u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u);

    // global visibility only: no write-back, the bytes counted as flushed
    p.a.post_send(p.qa, flush_wqe(3, p.bufb, p.keyb, 64, ROCE_FETH_PLT_GLOBAL));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(order.size(), 1u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 2u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSH_BYTES), 5064u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u);

    // selectivity "whole MR": the RETH range is ignored, the MR's is written back
    p.a.post_send(p.qa, flush_wqe(4, p.bufb + 8, p.keyb, 1, ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST,
                                  ROCE_FETH_SEL_MR));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    ASSERT_EQ(order.size(), 2u);
    EXPECT_EQ(order[1], std::make_pair(p.bufb, uint64_t(Pair::kBuf)));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u + Pair::kBuf);

    // RAM with no backing file: the FLUSH succeeds (visibility), nothing is counted as persisted
    p.b.host.persist = [&](uint64_t, uint64_t, uint64_t &) { return RK_OK; };
    p.a.post_send(p.qa, flush_wqe(5, p.bufb, p.keyb, 4096, ROCE_FETH_PLT_PERSIST));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u + Pair::kBuf);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 4u);
}

TEST(Rnic, FlushPersistenceFollowsThePageListAndAFailedWriteBackIsARemoteOpError)
{
    LoopNode ln;
    Node &n = ln.n;
    const uint64_t pg[2] = {n.alloc(4096), n.alloc(4096)};
    const uint32_t key = ln.page_list_mr(0x70000000, 8192, {pg[1], pg[0]}); // reversed
    ln.connect();
    auto &q1 = ln.q1;
    auto &cq = ln.cq;
    n.post_send(q1, flush_wqe(1, 0x70000000 + 4000, key, 200, ROCE_FETH_PLT_PERSIST));
    auto e = n.poll(cq);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    ASSERT_EQ(n.host.persisted.size(), 2u); // the range crosses from list entry 0 to entry 1
    EXPECT_EQ(n.host.persisted[0], std::make_pair(pg[1] + 4000, uint64_t(96)));
    EXPECT_EQ(n.host.persisted[1], std::make_pair(pg[0], uint64_t(104)));
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 200u);
    // the host cannot write it back: NAK remote operational error, the requester sees REM_OP_ERR
    n.host.persist = [](uint64_t, uint64_t, uint64_t &) { return RK_SLAVE_ERROR; };
    n.post_send(q1, flush_wqe(2, 0x70000000, key, 8, ROCE_FETH_PLT_PERSIST));
    e = n.poll(cq);
    ASSERT_GE(e.size(), 1u);
    EXPECT_EQ(e[0].wr_id, 2u);
    EXPECT_EQ(e[0].status, RNIC_WC_REM_OP_ERR);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_FLUSHES), 1u);
}

TEST(Rnic, FlushIsRefusedWithoutTheMrsFlushFlagForEachPlacementBit)
{
    struct Case {
        uint32_t mr_access;
        uint8_t placement;
        bool ok;
    } cases[] = {
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_GLOBAL, ROCE_FETH_PLT_GLOBAL, true},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_GLOBAL, ROCE_FETH_PLT_PERSIST, false},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_PERSIST, ROCE_FETH_PLT_PERSIST, true},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_PERSIST, ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST,
         false},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, ROCE_FETH_PLT_GLOBAL,
         false},
    };
    for (const Case &k : cases) {
        Pair p;
        const uint64_t buf = p.b.alloc(4096);
        const uint32_t key = p.b.mr(p.pdb, buf, 4096, k.mr_access);
        p.a.post_send(p.qa, flush_wqe(1, buf, key, 64, k.placement));
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, k.ok ? RNIC_WC_SUCCESS : RNIC_WC_REM_ACCESS_ERR)
            << "access 0x" << std::hex << k.mr_access << " placement " << unsigned(k.placement);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), k.ok ? 1u : 0u);
        EXPECT_EQ(p.b.host.persisted.size(), k.ok && (k.placement & ROCE_FETH_PLT_PERSIST) ? 1u : 0u);
    }
}

// ---- MR violations: the right NAK, the right status, nothing written ----

TEST(Rnic, EveryRemoteViolationIsNakedAndWritesNothing)
{
    struct Case {
        const char *what;
        uint8_t op;
        int rkey_kind; // 0 good, 1 unknown, 2 stale key byte, 3 read-only MR, 4 other PD, 5 no-atomic MR
        int64_t roff;
        uint32_t len;
        uint8_t status;
    };
    const Case cases[] = {
        {"unknown rkey", RNIC_WR_WRITE, 1, 0, 64, RNIC_WC_REM_ACCESS_ERR},
        {"stale rkey", RNIC_WR_WRITE, 2, 0, 64, RNIC_WC_REM_ACCESS_ERR},
        {"one byte past the end", RNIC_WR_WRITE, 0, 65536 - 63, 64, RNIC_WC_REM_ACCESS_ERR},
        {"before the start", RNIC_WR_WRITE, 0, -1, 64, RNIC_WC_REM_ACCESS_ERR},
        {"write into read-only", RNIC_WR_WRITE, 3, 0, 64, RNIC_WC_REM_ACCESS_ERR},
        {"MR of another PD", RNIC_WR_WRITE, 4, 0, 64, RNIC_WC_REM_ACCESS_ERR},
        {"read beyond the end", RNIC_WR_READ, 0, 65536 - 10, 64, RNIC_WC_REM_ACCESS_ERR},
        {"atomic without the flag", RNIC_WR_FETCH_ADD, 5, 0, 8, RNIC_WC_REM_ACCESS_ERR},
        {"unaligned atomic", RNIC_WR_FETCH_ADD, 0, 4, 8, RNIC_WC_REM_INV_REQ_ERR},
        {"atomic write into read-only", RNIC_WR_ATOMIC_WRITE, 3, 0, 8, RNIC_WC_REM_ACCESS_ERR},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Pair p;
        const uint64_t win = p.bufb + 65536; // a 64 KiB MR in the middle of b's buffer
        const uint32_t good = p.b.mr(p.pdb, win, 65536);
        const uint32_t ro = p.b.mr(p.pdb, win, 65536, RNIC_ACCESS_REMOTE_READ);
        const uint32_t noatomic = p.b.mr(
            p.pdb, win, 65536, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ);
        const uint32_t otherpd = p.b.mr(p.b.create_pd(), win, 65536);
        uint32_t rkey = good;
        if (k.rkey_kind == 1) rkey = (RNIC_MAX_MR - 1) << 8 | 1;
        if (k.rkey_kind == 2) rkey = good ^ 0x80;
        if (k.rkey_kind == 3) rkey = ro;
        if (k.rkey_kind == 4) rkey = otherpd;
        if (k.rkey_kind == 5) rkey = noatomic;
        std::vector<uint8_t> before(p.b.mem(p.bufb), p.b.mem(p.bufb) + Pair::kBuf);
        fill(p.a.mem(p.bufa), 64, 1);
        struct rnic_send_wqe w = wqe(k.op, 9, p.bufa, k.len, p.keya, win + k.roff, rkey);
        if (k.op == RNIC_WR_ATOMIC_WRITE) w.num_sge = 0;
        w.swap_add = 1;
        p.a.post_send(p.qa, w);
        // a second WR behind it is flushed
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 10, p.bufa, 8, p.keya, win, good));
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].wr_id, 9u);
        EXPECT_EQ(c[0].status, k.status);
        EXPECT_EQ(c[0].vendor_err & 0x60u, ROCE_AETH_TYPE_NAK);
        EXPECT_EQ(c[1].status, RNIC_WC_WR_FLUSH_ERR);
        EXPECT_TRUE(std::equal(before.begin(), before.end(), p.b.mem(p.bufb))) << "target memory changed";
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_ERR_NAKS_TX), 1u);
        if (k.status == RNIC_WC_REM_ACCESS_ERR) {
            EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_REMOTE_VIOLATIONS), 1u);
        }
        EXPECT_EQ(p.a.nic->db_read(RNIC_DB_QP(p.qa.index()) + RNIC_QP_DB_STATE, 4), RNIC_QPS_ERR);
        // the requester's QP failed by the transport: an async event
        EXPECT_EQ(p.a.nic->ctrl_read(RNIC_REG_QP_ERRORS, 8), 1ull << p.qa.index());
        EXPECT_TRUE(p.a.reg(RNIC_REG_INT_STATUS) & 1u);
    }
}

// ---- local errors ----

TEST(Rnic, BadWqesCompleteInOrderWithLocalErrors)
{
    struct Case {
        const char *what;
        std::function<void(struct rnic_send_wqe &, Pair &)> spoil;
        uint8_t status;
        uint32_t lerr;
    };
    const Case cases[] = {
        {"unknown lkey", [](auto &w, Pair &) { w.sge[0].lkey = 0x00ff01; }, RNIC_WC_LOC_PROT_ERR,
         RNIC_LERR_LKEY},
        {"SGE beyond the MR", [](auto &w, Pair &) { w.sge[0].addr += Pair::kBuf; }, RNIC_WC_LOC_PROT_ERR,
         RNIC_LERR_BOUNDS},
        {"lkey of another PD",
         [](auto &w, Pair &p) { w.sge[0].lkey = p.a.mr(p.a.create_pd(), p.bufa, 4096); },
         RNIC_WC_LOC_PROT_ERR, RNIC_LERR_PD},
        {"READ into an MR without local write",
         [](auto &w, Pair &p) {
             w.opcode = RNIC_WR_READ;
             w.sge[0].lkey = p.a.mr(p.pda, p.bufa, 4096, RNIC_ACCESS_REMOTE_READ);
         },
         RNIC_WC_LOC_PROT_ERR, RNIC_LERR_ACCESS},
        {"unknown opcode", [](auto &w, Pair &) { w.opcode = 0x41; }, RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_OPCODE},
        {"five SGEs", [](auto &w, Pair &) { w.num_sge = 5; }, RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_SGE_COUNT},
        {"atomic of 4 bytes",
         [](auto &w, Pair &) {
             w.opcode = RNIC_WR_FETCH_ADD;
             w.sge[0].length = 4;
         },
         RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_LENGTH},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Pair p;
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 4096, p.keya, p.bufb, p.keyb));
        struct rnic_send_wqe w = wqe(RNIC_WR_WRITE, 2, p.bufa, 64, p.keya, p.bufb, p.keyb);
        k.spoil(w, p);
        p.a.post_send(p.qa, w);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 3, p.bufa, 64, p.keya, p.bufb, p.keyb));
        auto c = p.wait_a(3);
        ASSERT_EQ(c.size(), 3u);
        EXPECT_EQ(c[0].wr_id, 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[1].wr_id, 2u);
        EXPECT_EQ(c[1].status, k.status);
        EXPECT_EQ(c[1].vendor_err, k.lerr);
        EXPECT_EQ(c[2].wr_id, 3u);
        EXPECT_EQ(c[2].status, RNIC_WC_WR_FLUSH_ERR);
        EXPECT_GE(p.a.counter(RNIC_CNT_INDEX_WQE_ERRORS), 1u);
        EXPECT_FALSE(p.a.host.guest_errors().empty());
    }
}

TEST(Rnic, ReceiveTooShortIsLocLenErr)
{
    Pair p;
    p.b.post_recv(p.qb, 1, p.bufb, 100, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 2, p.bufa, 101, p.keya));
    auto r = p.wait_b(1);
    auto c = p.wait_a(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, RNIC_WC_LOC_LEN_ERR);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_REM_INV_REQ_ERR);
}

// ---- bad doorbells ----

TEST(Rnic, BadDoorbellsAreRefusedAndCounted)
{
    Pair p;
    const uint64_t e0 = p.a.counter(RNIC_CNT_INDEX_DOORBELL_ERRORS);
    p.a.nic->db_write(RNIC_DB_QP(200) + RNIC_QP_DB_SQ_PI, 1, 4);          // no such QP
    p.a.nic->db_write(RNIC_DB_CQ(200) + RNIC_CQ_DB_CI, 1, 4);             // no such CQ
    p.a.nic->db_write(RNIC_DB_QP(p.qa.index()) + RNIC_QP_DB_SQ_CI, 1, 4); // read-only
    p.a.nic->db_write(RNIC_DB_QP(p.qa.index()) + RNIC_QP_DB_SQ_PI, 1, 8); // wrong size
    p.a.nic->db_write(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_ARM, 7, 4);      // bad arm value
    p.a.nic->db_write(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_CI, 5, 4);       // beyond the producer
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DOORBELL_ERRORS), e0 + 6);
    EXPECT_EQ(p.a.nic->db_read(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_CI, 4), 0u);
    // an SQ producer index more than the ring ahead: the QP goes to Error, an async event
    p.a.nic->db_write(RNIC_DB_QP(p.qa.index()) + RNIC_QP_DB_SQ_PI, 1000, 4);
    EXPECT_EQ(p.a.nic->db_read(RNIC_DB_QP(p.qa.index()) + RNIC_QP_DB_STATE, 4), RNIC_QPS_ERR);
    EXPECT_EQ(p.a.nic->ctrl_read(RNIC_REG_QP_ERRORS, 8), 1ull << p.qa.index());
    EXPECT_EQ(p.a.reg(RNIC_REG_INT_STATUS) & 1u, 1u);
    // W1C
    p.a.nic->ctrl_write(RNIC_REG_QP_ERRORS, 1ull << p.qa.index(), 8);
    EXPECT_EQ(p.a.nic->ctrl_read(RNIC_REG_QP_ERRORS, 8), 0u);
    // a disabled device ignores doorbells
    p.b.nic->ctrl_write(RNIC_REG_CTRL, 0, 4);
    const uint64_t d0 = p.b.counter(RNIC_CNT_INDEX_DOORBELL_ERRORS);
    p.b.post_recv(p.qb, 1, p.bufb, 8, p.keyb);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DOORBELL_ERRORS), d0 + 1);
}

TEST(Rnic, WqeRingThatLeavesRamCompletesWithWqeDmaError)
{
    Pair p;
    // the ring is checked at creation; fail the DMA afterwards (as if RAM were unplugged)
    auto dflt = p.a.host.dma_rw;
    const uint64_t ring = p.qa.sq;
    p.a.host.dma_rw = [&, dflt](uint64_t addr, void *buf, uint64_t len, bool w) {
        if (addr >= ring && addr < ring + 128) return RK_DECODE_ERROR;
        return dflt(addr, buf, len, w);
    };
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 8, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_LOC_QP_OP_ERR);
    EXPECT_EQ(c[0].vendor_err, RNIC_LERR_WQE_DMA);
    EXPECT_GE(p.a.counter(RNIC_CNT_INDEX_DMA_ERRORS), 1u);
}

// ---- faults on the link ----

// Backpressure: a port ring of 4 frames per node refuses sends (LinkTx::Busy) most of the time.
// The device holds what it cannot send, pauses its requesters at their next PSN and continues
// when the ring drains (tx_resume, as the glue's transmit thread does after the port's futex
// wake): 1 MiB WRITE, READ (its responses paced by the responder) and SEND and 64 pipelined
// FETCH_ADDs complete with exact data and totals, no frame dropped, no timeout and no
// retransmission. (Before backpressure the refused
// frames were dropped and each message waited for a retransmission timeout.)
TEST(Rnic, BackpressurePausesAndResumesWithoutRetransmission)
{
    Pair p(1024);
    p.link.ring = 4;
    const uint32_t len = 1u << 20;
    fill(p.a.mem(p.bufa), len, 77);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, len, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), len), 0);
    EXPECT_GT(p.link.refused, 0u);
    EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    EXPECT_GT(p.a.tx_wait_calls, 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), p.a.tx_wait_calls);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_REQ_PACKETS), 1024u); // every packet once
    // READ it back: the responder's 1024 responses meet the full ring and are held, in order
    std::memset(p.a.mem(p.bufa + (2 << 20)), 0, len);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + (2 << 20), len, p.keya, p.bufb, p.keyb));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (2 << 20)), p.a.mem(p.bufa), len), 0);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD), 0u);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    // READ responses are paced, not queued: each push-back holds the one refused frame (and at
    // most an ACK), never the rest of the READ's 1024 responses
    EXPECT_LE(p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD), 2 * p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE))
        << "held " << p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD) << " backpressure "
        << p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE);
    // SEND into a posted receive
    p.b.post_recv(p.qb, 3, p.bufb + (2 << 20), len, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 4, p.bufa, len, p.keya));
    c = p.wait_a(1);
    auto r = p.wait_b(1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(r[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(r[0].byte_len, len);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + (2 << 20)), p.a.mem(p.bufa), len), 0);
    // 64 FETCH_ADDs posted at once: the total is exact
    const uint64_t ctr_at = p.bufb + (3 << 20);
    std::memset(p.b.mem(ctr_at), 0, 8);
    for (unsigned i = 0; i < 64; i++) {
        struct rnic_send_wqe w =
            wqe(RNIC_WR_FETCH_ADD, 100 + i, p.bufa + (3 << 20) + 8 * i, 8, p.keya, ctr_at, p.keyb);
        w.swap_add = i + 1;
        p.a.post_send(p.qa, w);
    }
    c = p.wait_a(64);
    ASSERT_EQ(c.size(), 64u);
    for (unsigned i = 0; i < 64; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, 100u + i);
    }
    uint64_t total = 0;
    std::memcpy(&total, p.b.mem(ctr_at), 8);
    EXPECT_EQ(total, 64u * 65u / 2u);
    for (Node *n : {&p.a, &p.b}) {
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_TIMEOUTS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_LINK_TX_DROPS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
    }
    EXPECT_EQ(p.link.dropped, 0u);
}

// Backpressure and a lossy, reordering link together: exact data, and the retransmission count
// stays a count of packets sent again (a QP paused after a go-back must not count PSNs it never
// reached: an e2e run under a reorder rule once showed 47244643791).
TEST(Rnic, BackpressureUnderLossAndReorderCountsRetransmissionsSanely)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.ring = 4;
        p.link.rng.seed(seed);
        p.link.drop = 0.01;
        p.link.reorder = 0.05;
        p.link.dup = 0.01;
        const uint32_t len = 1u << 20;
        fill(p.a.mem(p.bufa), len, uint32_t(seed));
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, len, p.keya, p.bufb, p.keyb));
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + (2 << 20), len, p.keya, p.bufb, p.keyb));
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), len), 0);
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (2 << 20)), p.a.mem(p.bufa), len), 0);
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
        EXPECT_LE(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), p.a.counter(RNIC_CNT_INDEX_TX_FRAMES));
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    }
}

// Without anyone calling tx_resume (no transmit thread), the timer's poll() drains what is held.
TEST(Rnic, HeldFramesDrainOnPollWithoutAWake)
{
    Pair p(1024);
    p.link.ring = 2;
    fill(p.a.mem(p.bufa), 64 << 10, 5);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64 << 10, p.keya, p.bufb, p.keyb));
    EXPECT_TRUE(p.a.tx_waiting);
    p.a.tx_waiting = false; // nobody answers the wake: only poll() (the retransmission timer) may
    while (!p.link.q.empty()) {
        Link::Frame f = p.link.pop();
        p.node(f.to).nic->on_frame(f.bytes.data(), f.bytes.size());
        p.a.nic->poll();
        p.b.nic->poll();
    }
    auto c = p.a.poll(p.cqa);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 64 << 10), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
}

TEST(Rnic, ExactDataUnderLossDuplicationReorderingAndCorruption)
{
    for (uint64_t seed = 1; seed <= 4; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.rng.seed(seed);
        p.link.drop = 0.03;
        p.link.dup = 0.03;
        p.link.reorder = 0.05;
        p.link.corrupt = 0.02;
        fill(p.a.mem(p.bufa), 1 << 20, uint32_t(seed));
        fill(p.b.mem(p.bufb + (2 << 20)), 1 << 20, uint32_t(seed + 100));
        uint64_t counter = 0;
        std::memcpy(p.b.mem(p.bufb + (3 << 20)), &counter, 8);
        unsigned n = 0;
        for (unsigned i = 0; i < 16; i++) {
            const uint32_t len = 1 + (i * 7919) % 20000;
            const uint64_t off = uint64_t(i) * 32768;
            p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, n++, p.bufa + off, len, p.keya, p.bufb + off, p.keyb));
            p.a.post_send(p.qa, wqe(RNIC_WR_READ, n++, p.bufa + (1 << 20) + off, len, p.keya,
                                    p.bufb + (2 << 20) + off, p.keyb));
            struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, n++, p.bufa + (3 << 20) + 8 * i, 8, p.keya,
                                         p.bufb + (3 << 20), p.keyb);
            w.swap_add = i + 1;
            p.a.post_send(p.qa, w);
        }
        auto c = p.wait_a(n);
        ASSERT_EQ(c.size(), n);
        for (unsigned i = 0; i < n; i++) {
            EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
            EXPECT_EQ(c[i].wr_id, i);
        }
        for (unsigned i = 0; i < 16; i++) {
            const uint32_t len = 1 + (i * 7919) % 20000;
            const uint64_t off = uint64_t(i) * 32768;
            EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + off), p.a.mem(p.bufa + off), len), 0) << i;
            EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (1 << 20) + off), p.b.mem(p.bufb + (2 << 20) + off), len),
                      0)
                << i;
        }
        std::memcpy(&counter, p.b.mem(p.bufb + (3 << 20)), 8);
        EXPECT_EQ(counter, 16u * 17u / 2u) << "FETCH_ADD executed exactly once each";
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS) + p.b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RX_ICRC_ERRORS) + p.b.counter(RNIC_CNT_INDEX_RX_ICRC_ERRORS) +
                      p.a.counter(RNIC_CNT_INDEX_RX_MALFORMED) + p.b.counter(RNIC_CNT_INDEX_RX_MALFORMED),
                  0u);
    }
}

TEST(Rnic, LinkDownExhaustsRetriesAndFlushesEverything)
{
    Pair p(1024, 8, 3);
    p.b.post_recv(p.qb, 1, p.bufb, 64, p.keyb);
    p.a.post_recv(p.qa, 50, p.bufa + 8192, 64, p.keya);
    p.a.post_recv(p.qa, 51, p.bufa + 8192, 64, p.keya);
    p.link.down = true;
    for (unsigned i = 0; i < 4; i++)
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa, 64, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(6);
    ASSERT_EQ(c.size(), 6u);
    EXPECT_EQ(c[0].wr_id, 0u);
    EXPECT_EQ(c[0].status, RNIC_WC_RETRY_EXC_ERR);
    for (unsigned i = 1; i < 4; i++) {
        EXPECT_EQ(c[i].wr_id, i);
        EXPECT_EQ(c[i].status, RNIC_WC_WR_FLUSH_ERR);
    }
    // the receive queue is flushed too
    EXPECT_EQ(c[4].wr_id, 50u);
    EXPECT_EQ(c[4].status, RNIC_WC_WR_FLUSH_ERR);
    EXPECT_EQ(c[4].flags & RNIC_CQE_F_RECV, RNIC_CQE_F_RECV);
    EXPECT_EQ(c[5].wr_id, 51u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_TIMEOUTS), 4u); // retry_cnt 3: 4 expiries
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRY_EXHAUSTED), 1u);
    // after the error, a new WR completes at once with a flush error
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 9, p.bufa, 64, p.keya, p.bufb, p.keyb));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_WR_FLUSH_ERR);
}

TEST(Rnic, RnrWhenNoReceiveThenDelivered)
{
    Pair p;
    fill(p.a.mem(p.bufa), 64, 3);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 1, p.bufa, 64, p.keya));
    // nothing posted yet: RNR NAKs until the receive arrives
    p.run([&] { return p.a.counter(RNIC_CNT_INDEX_RNR_NAKS_RX) >= 2; });
    EXPECT_GE(p.a.counter(RNIC_CNT_INDEX_RNR_NAKS_RX), 2u);
    p.b.post_recv(p.qb, 2, p.bufb, 64, p.keyb);
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 64), 0);
}

// ---- completions, arming, interrupts ----

TEST(Rnic, ArmedCqRaisesItsVectorOnce)
{
    Pair p;
    p.a.nic->ctrl_write(RNIC_REG_INT_ENABLE, RNIC_INT_ALL, 4);
    // not armed: no interrupt
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 8, p.keya, p.bufb, p.keyb));
    EXPECT_EQ(p.wait_a(1).size(), 1u);
    EXPECT_FALSE(p.a.host.irq_level(1));
    p.a.nic->db_write(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_ARM, RNIC_CQ_ARM_NEXT, 4);
    EXPECT_EQ(p.a.nic->db_read(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_ARM, 4), RNIC_CQ_ARM_NEXT);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 2, p.bufa, 8, p.keya, p.bufb, p.keyb));
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 3, p.bufa, 8, p.keya, p.bufb, p.keyb));
    EXPECT_EQ(p.wait_a(2).size(), 2u);
    EXPECT_TRUE(p.a.host.irq_level(1)); // the CQ's vector
    EXPECT_FALSE(p.a.host.irq_level(0));
    EXPECT_EQ(p.a.nic->ctrl_read(RNIC_REG_CQ_EVENTS, 8), 1ull << p.cqa.cqn);
    EXPECT_EQ(p.a.nic->db_read(RNIC_DB_CQ(p.cqa.cqn) + RNIC_CQ_DB_ARM, 4), 0u); // disarmed
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_CQ_EVENTS), 1u);
    p.a.nic->ctrl_write(RNIC_REG_INT_STATUS, 1u << 1, 4);
    EXPECT_FALSE(p.a.host.irq_level(1));
    // solicited-only arming ignores an unsolicited receive and fires on a solicited one
    p.b.nic->ctrl_write(RNIC_REG_INT_ENABLE, RNIC_INT_ALL, 4);
    p.b.nic->db_write(RNIC_DB_CQ(p.cqb.cqn) + RNIC_CQ_DB_ARM, RNIC_CQ_ARM_SOLICITED, 4);
    p.b.post_recv(p.qb, 1, p.bufb, 8, p.keyb);
    p.b.post_recv(p.qb, 2, p.bufb, 8, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 4, p.bufa, 8, p.keya));
    EXPECT_EQ(p.wait_b(1).size(), 1u);
    EXPECT_FALSE(p.b.host.irq_level(1));
    struct rnic_send_wqe w = wqe(RNIC_WR_SEND, 5, p.bufa, 8, p.keya);
    w.flags |= RNIC_WQE_F_SOLICITED;
    p.a.post_send(p.qa, w);
    EXPECT_EQ(p.wait_b(1).size(), 1u);
    EXPECT_TRUE(p.b.host.irq_level(1));
}

TEST(Rnic, UnsignaledWritesCompleteSilently)
{
    Pair p;
    for (unsigned i = 0; i < 300; i++) { // more than the SQ ring (256): the ring wraps
        struct rnic_send_wqe w = wqe(RNIC_WR_WRITE, i, p.bufa + i, 1, p.keya, p.bufb + i, p.keyb);
        if (i != 299) w.flags = 0;
        p.a.post_send(p.qa, w);
        if (i % 128 == 127) p.run([] { return false; }, 100000);
    }
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 299u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_WR_COMPLETED), 300u);
}

// A CQE that finds its CQ full puts the CQ in error, and the event queue reports it once (CQ_ERR).
TEST(Rnic, CqOverflowPutsTheCqInError)
{
    Link l;
    Node n(0, l);
    Eq eq(n);
    const uint32_t pd = n.create_pd();
    Node::Cq cq = n.create_cq(1); // 2 entries
    Node::Qp q = n.create_qp(pd, cq, cq, 4);
    const uint64_t buf = n.alloc(4096);
    const uint32_t key = n.mr(pd, buf, 4096);
    // receives flushed by moving the QP to Error: 3 CQEs into 2 slots
    struct rnic_cmd_modify_qp m = {};
    m.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS;
    m.state = RNIC_QPS_INIT;
    ASSERT_EQ(n.modify(q.qpn, m), RNIC_CMD_ST_OK);
    for (unsigned i = 0; i < 3; i++)
        n.post_recv(q, i, buf, 8, key);
    m.attr_mask = RNIC_QP_ATTR_STATE;
    m.state = RNIC_QPS_ERR;
    ASSERT_EQ(n.modify(q.qpn, m), RNIC_CMD_ST_OK);
    EXPECT_EQ(n.nic->db_read(RNIC_DB_CQ(cq.cqn) + RNIC_CQ_DB_STATUS, 4), RNIC_CQ_ST_ERROR);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_CQ_OVERFLOWS), 1u);
    EXPECT_EQ(n.nic->ctrl_read(RNIC_REG_CQ_ERRORS, 8), 1ull << cq.cqn);
    auto c = n.poll(cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, RNIC_WC_WR_FLUSH_ERR);
    auto ev = eq.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_CQ_ERR);
    EXPECT_EQ(ev[0].element, cq.cqn);
    EXPECT_EQ(ev[0].detail, RNIC_EV_CQ_ERR_OVERFLOW);
    // a CQE arriving at the CQ in error is counted, and no second event is written
    n.post_recv(q, 9, buf, 8, key);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_CQ_OVERFLOWS), 2u);
    EXPECT_TRUE(eq.poll().empty());
}

// ---- loopback on one node, page-list MRs, timing model ----

TEST(Rnic, LoopbackBetweenTwoQpsOfOneNodeThroughAPageListMr)
{
    LoopNode ln;
    Node &n = ln.n;
    // a 3-page MR at IOVA 0x7000_0800 over scattered, reversed physical pages
    const uint64_t pg[3] = {n.alloc(4096), n.alloc(4096), n.alloc(4096)};
    const uint32_t vkey = ln.page_list_mr(0x70000800, 3 * 4096 - 0x800 - 100, {pg[2], pg[0], pg[1]});
    const uint64_t src = n.alloc(8192);
    const uint32_t skey = n.mr(ln.pd, src, 8192);
    ln.connect();
    auto &q1 = ln.q1;
    auto &cq = ln.cq;
    Link &l = ln.l;
    fill(n.mem(src), 8000, 42);
    n.post_send(q1, wqe(RNIC_WR_WRITE, 1, src, 8000, skey, 0x70000800 + 100, vkey));
    auto e = n.poll(cq);
    ASSERT_EQ(e.size(), 1u); // loopback completes within the doorbell
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(l.sent, 0u) << "nothing left the node";
    // IOVA 0x70000800 + 100 is page list entry 0 (pg[2]) at offset 0x800 + 100
    EXPECT_EQ(std::memcmp(n.mem(pg[2] + 0x800 + 100), n.mem(src), 4096 - 0x800 - 100), 0);
    const size_t first = 4096 - 0x800 - 100;
    EXPECT_EQ(std::memcmp(n.mem(pg[0]), n.mem(src + first), 4096), 0);
    EXPECT_EQ(std::memcmp(n.mem(pg[1]), n.mem(src + first + 4096), 8000 - first - 4096), 0);
}

TEST(Rnic, ModeledTimeGrowsWithSizeAndFollowsTheLinkBandwidth)
{
    Pair p;
    uint64_t prev = 0;
    for (uint32_t len : {8u, 4096u, 65536u, 1u << 20}) {
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, len, p.bufa, len, p.keya, p.bufb, p.keyb));
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_GT(c[0].modeled_ns, prev);
        prev = c[0].modeled_ns;
    }
    // 1 MiB at 100 Gbit/s is ~84 us on the wire (with headers); PCIe at 16 GB/s ~66 us: the
    // link dominates
    EXPECT_GT(prev, 84000u);
    EXPECT_LT(prev, 100000u);
    EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_MODELED_LINK_NS), 84000u);
    EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_MODELED_WR_NS), prev);
}

// The threading contract: doorbells on one thread (a vCPU), frames delivered on another (the
// port's), the CQ polled through guest memory meanwhile; one lock in the core (TSan run:
// tests/fuzz/sanitize.sh tsan with RACKEMU_SAN_TESTS=rnic).
TEST(Rnic, DoorbellsAndFramesOnTwoThreads)
{
    Pair p;
    std::atomic<bool> stop{false};
    std::thread port([&] {
        while (!stop.load()) {
            Link::Frame f;
            {
                std::lock_guard lk(p.link.mu);
                if (p.link.q.empty()) {
                    f.to = 99;
                } else {
                    f = std::move(p.link.q.front());
                    p.link.q.pop_front();
                }
            }
            if (f.to < 2)
                p.node(f.to).nic->on_frame(f.bytes.data(), f.bytes.size());
            else
                std::this_thread::yield();
        }
    });
    fill(p.a.mem(p.bufa), 1 << 16, 5);
    unsigned done = 0, posted = 0;
    std::vector<struct rnic_cqe> all;
    while (done < 200) {
        while (posted < 200 && posted - done < 8) {
            const uint64_t off = uint64_t(posted % 64) * 1024;
            p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, posted, p.bufa + off, 1000, p.keya, p.bufb + off, p.keyb));
            posted++;
        }
        auto c = p.a.poll(p.cqa);
        done += unsigned(c.size());
        all.insert(all.end(), c.begin(), c.end());
    }
    stop = true;
    port.join();
    for (unsigned i = 0; i < all.size(); i++) {
        EXPECT_EQ(all[i].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(all[i].wr_id, i);
    }
    for (unsigned k = 0; k < 64; k++)
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + k * 1024), p.a.mem(p.bufa + k * 1024), 1000), 0) << k;
}

TEST(Rnic, ResetDestroysEverything)
{
    Pair p;
    p.a.nic->reset();
    EXPECT_EQ(p.a.reg(RNIC_REG_CTRL), 0u);
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_DESTROY_QP;
    c.handle = p.qa.qpn;
    EXPECT_EQ(p.a.cmd(c), RNIC_CMD_ST_BAD_QP);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_TX_FRAMES), 0u);
}

// ---- the transmit hold limit ----

// While the link pushes back the device holds the frames its responder owes (ACKs here), up to
// tx_hold_max_bytes (64 MiB in the device; 2 KiB here so that a test reaches it). Beyond that a
// frame is dropped and counted in link_tx_drops; the requester's retransmission recovers the
// lost ACKs and the data arrives exactly.
TEST(Rnic, TransmitHoldLimitDropsAndCountsAndNothingIsLost)
{
    EXPECT_EQ(RnicConfig{}.tx_hold_max_bytes, kTxHoldMaxBytes);
    EXPECT_EQ(kTxHoldMaxBytes, size_t(64) << 20);
    constexpr size_t kHold = 2048;
    RnicConfig cfg;
    cfg.tx_hold_max_bytes = kHold;
    Link link;
    Node a(0, link), b(1, link, cfg);
    const uint32_t pda = a.create_pd(), pdb = b.create_pd();
    Node::Cq cqa = a.create_cq(), cqb = b.create_cq();
    Node::Qp qa = a.create_qp(pda, cqa, cqa), qb = b.create_qp(pdb, cqb, cqb);
    const uint64_t bufa = a.alloc(1 << 20), bufb = b.alloc(1 << 20);
    const uint32_t ka = a.mr(pda, bufa, 1 << 20), kb = b.mr(pdb, bufb, 1 << 20);
    a.connect(qa, 1, qb.qpn, 256, 8);
    b.connect(qb, 0, qa.qpn, 256, 8);
    fill(a.mem(bufa), 1 << 20, 41);
    // B's port refuses everything: each ACK B owes is held, until 2 KiB are held
    link.blocked[1] = true;
    for (unsigned i = 0; i < 16; i++)
        a.post_send(qa, wqe(RNIC_WR_WRITE, i, bufa + i * 65536, 65536, ka, bufb + i * 65536, kb));
    uint64_t clock = 0;
    auto deliver = [&] {
        while (!link.q.empty()) {
            Link::Frame f = link.pop();
            (f.to ? b : a).nic->on_frame(f.bytes.data(), f.bytes.size());
        }
    };
    deliver();
    const uint64_t held = b.counter(RNIC_CNT_INDEX_LINK_TX_HELD),
                   drops = b.counter(RNIC_CNT_INDEX_LINK_TX_DROPS);
    // every frame B sent is an ACK of one size: the hold took what fits, and no more
    const size_t ack_len =
        ROCE_ETH_LEN + ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN + ROCE_AETH_LEN + ROCE_ICRC_LEN;
    EXPECT_EQ(held, kHold / ack_len);
    EXPECT_GT(drops, 0u) << "held " << held;
    EXPECT_EQ(held + drops, b.counter(RNIC_CNT_INDEX_ACKS_TX));
    EXPECT_EQ(b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 1u);
    EXPECT_TRUE(b.tx_waiting);
    // the link takes frames again: the held ACKs go out in order, the dropped ones are made up
    // for by the requester's retransmission (timer) and the responder's re-ACK of duplicates
    link.blocked[1] = false;
    b.tx_waiting = b.nic->tx_resume();
    std::vector<struct rnic_cqe> got;
    for (unsigned step = 0; step < 100000 && got.size() < 16; step++) {
        deliver();
        auto v = a.poll(cqa);
        got.insert(got.end(), v.begin(), v.end());
        if (got.size() >= 16 || !link.q.empty()) continue;
        const uint64_t d = std::min(a.nic->next_deadline_ns(), b.nic->next_deadline_ns());
        if (d == UINT64_MAX) break;
        clock = std::max(clock + 1, d);
        a.host.clock_ns = b.host.clock_ns = clock;
        a.nic->poll();
        b.nic->poll();
    }
    ASSERT_EQ(got.size(), 16u);
    for (unsigned i = 0; i < 16; i++) {
        EXPECT_EQ(got[i].wr_id, i);
        EXPECT_EQ(got[i].status, RNIC_WC_SUCCESS);
    }
    EXPECT_EQ(std::memcmp(b.mem(bufb), a.mem(bufa), 1 << 20), 0);
    EXPECT_EQ(b.counter(RNIC_CNT_INDEX_LINK_TX_DROPS), drops); // only the hold dropped
    EXPECT_GT(a.counter(RNIC_CNT_INDEX_TIMEOUTS), 0u);
    EXPECT_GT(b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
}

// ---- the async event queue ----

TEST(Rnic, EventQueueRegistersRefuseBadSettings)
{
    Link l;
    Node n(0, l);
    EXPECT_TRUE(n.reg(RNIC_REG_CAPS) & RNIC_CAP_EQ);
    const size_t e0 = n.host.guest_errors().size();
    // depth_log2 0 and 13: refused, ENABLE stays 0, BAD_CONFIG set
    const uint64_t ring = n.alloc(32u << 12);
    n.nic->ctrl_write(RNIC_REG_EQ_BASE_LO, uint32_t(ring), 4);
    n.nic->ctrl_write(RNIC_REG_EQ_BASE_HI, uint32_t(ring >> 32), 4);
    for (uint32_t log2 : {0u, 13u}) {
        n.nic->ctrl_write(RNIC_REG_EQ_CTRL, RNIC_EQ_CTRL_ENABLE | log2 << RNIC_EQ_CTRL_DEPTH_SHIFT, 4);
        EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_ENABLE, 0u) << log2;
        EXPECT_EQ(n.reg(RNIC_REG_EQ_STATUS), RNIC_EQ_ST_BAD_CONFIG);
        n.nic->ctrl_write(RNIC_REG_EQ_STATUS, RNIC_EQ_ST_BAD_CONFIG, 4);
        EXPECT_EQ(n.reg(RNIC_REG_EQ_STATUS), 0u);
    }
    // a ring that leaves RAM: refused
    n.nic->ctrl_write(RNIC_REG_EQ_BASE_LO, uint32_t(kBase + kRam - 64), 4);
    n.nic->ctrl_write(RNIC_REG_EQ_CTRL, RNIC_EQ_CTRL_ENABLE | 4u << RNIC_EQ_CTRL_DEPTH_SHIFT, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_ENABLE, 0u);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_STATUS), RNIC_EQ_ST_BAD_CONFIG);
    // the low 6 address bits read as 0
    n.nic->ctrl_write(RNIC_REG_EQ_BASE_LO, uint32_t(ring) | 0x3f, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_BASE_LO), uint32_t(ring));
    // a good one: enabled, indices at 0; base and depth are then fixed
    n.nic->ctrl_write(RNIC_REG_EQ_CTRL,
                      RNIC_EQ_CTRL_ENABLE | 12u << RNIC_EQ_CTRL_DEPTH_SHIFT | 3u << RNIC_EQ_CTRL_VECTOR_SHIFT,
                      4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL),
              RNIC_EQ_CTRL_ENABLE | 12u << RNIC_EQ_CTRL_DEPTH_SHIFT | 3u << RNIC_EQ_CTRL_VECTOR_SHIFT);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 0u);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CI), 0u);
    const size_t e1 = n.host.guest_errors().size();
    EXPECT_GE(e1, e0 + 3);
    n.nic->ctrl_write(RNIC_REG_EQ_BASE_LO, 0x1000, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_BASE_LO), uint32_t(ring));
    n.nic->ctrl_write(RNIC_REG_EQ_CTRL, RNIC_EQ_CTRL_ENABLE | 2u << RNIC_EQ_CTRL_DEPTH_SHIFT, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_DEPTH_MASK, 12u << RNIC_EQ_CTRL_DEPTH_SHIFT);
    // CI beyond PI and an arm value other than 1: refused
    n.nic->ctrl_write(RNIC_REG_EQ_CI, 1, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CI), 0u);
    n.nic->ctrl_write(RNIC_REG_EQ_ARM, 2, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_ARM), 0u);
    EXPECT_EQ(n.host.guest_errors().size(), e1 + 4);
    // disable: events are no longer written
    n.nic->ctrl_write(RNIC_REG_EQ_CTRL, 0, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_ENABLE, 0u);
    n.nic->set_link(false);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 0u);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_EQ_EVENTS), 0u);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_EQ_OVERFLOWS), 0u);
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, 0u);
}

// Retry exhaustion: the requester's QP_FATAL carries RETRY_EXC; a consumer's own move to Error
// reports nothing; a bad doorbell is QP_FATAL with detail 0.
TEST(Rnic, EventQueueQpFatalOnRetryExhaustionAndDoorbellFault)
{
    Pair p(1024, 8, 2);
    Eq eqa(p.a), eqb(p.b);
    p.link.down = true;
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_RETRY_EXC_ERR);
    auto ev = eqa.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_QP_FATAL);
    EXPECT_EQ(ev[0].element, p.qa.qpn);
    EXPECT_EQ(ev[0].detail, RNIC_WC_RETRY_EXC_ERR);
    EXPECT_EQ(ev[0].seq, 0u);
    EXPECT_EQ(ev[0].modeled_at_ns, p.clock);
    EXPECT_TRUE(eqb.poll().empty()); // B saw nothing: not even a first packet
    // the consumer moves B's QP to Error itself: no event
    struct rnic_cmd_modify_qp m = {};
    m.attr_mask = RNIC_QP_ATTR_STATE;
    m.state = RNIC_QPS_ERR;
    ASSERT_EQ(p.b.modify(p.qb.qpn, m), RNIC_CMD_ST_OK);
    EXPECT_TRUE(eqb.poll().empty());
    // a doorbell beyond the ring on a healthy QP: QP_FATAL, detail 0
    Node::Qp q2 = p.a.create_qp(p.pda, p.cqa, p.cqa, 2);
    p.a.connect(q2, 1, p.qb.qpn);
    p.a.nic->db_write(RNIC_DB_QP(q2.index()) + RNIC_QP_DB_SQ_PI, 5, 4);
    ev = eqa.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_QP_FATAL);
    EXPECT_EQ(ev[0].element, q2.qpn);
    EXPECT_EQ(ev[0].detail, 0u);
    EXPECT_EQ(ev[0].seq, 1u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_EQ_EVENTS), 2u);
}

// The responder's class C errors: a remote access violation (bad rkey) is QP_ACCESS_ERR with the
// NAK syndrome on the responder and QP_FATAL with REM_ACCESS_ERR on the requester; a WRITE to a
// QP without remote write access is an invalid request: QP_REQ_ERR.
TEST(Rnic, EventQueueResponderAccessAndRequestErrors)
{
    const struct {
        const char *what;
        uint32_t b_access, rkey_flip;
        uint8_t status, b_event, nak;
    } cases[] = {
        {"bad rkey", RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, 0x100, RNIC_WC_REM_ACCESS_ERR,
         RNIC_EV_QP_ACCESS_ERR, ROCE_NAK_REMOTE_ACCESS},
        {"no remote write on B's QP", RNIC_ACCESS_REMOTE_READ, 0, RNIC_WC_REM_INV_REQ_ERR, RNIC_EV_QP_REQ_ERR,
         ROCE_NAK_INVALID_REQ},
    };
    for (const auto &k : cases) {
        SCOPED_TRACE(k.what);
        Pair p(1024, 10, 7, k.b_access);
        Eq eqa(p.a), eqb(p.b);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64, p.keya, p.bufb, p.keyb ^ k.rkey_flip));
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, k.status);
        auto eb = eqb.poll();
        ASSERT_EQ(eb.size(), 1u);
        EXPECT_EQ(eb[0].type, k.b_event);
        EXPECT_EQ(eb[0].element, p.qb.qpn);
        EXPECT_EQ(eb[0].detail, uint32_t(ROCE_AETH_NAK(k.nak)));
        auto ea = eqa.poll();
        ASSERT_EQ(ea.size(), 1u);
        EXPECT_EQ(ea[0].type, RNIC_EV_QP_FATAL);
        EXPECT_EQ(ea[0].element, p.qa.qpn);
        EXPECT_EQ(ea[0].detail, k.status);
    }
}

// COMM_EST: the first packet a QP in RTR receives, once; none for a QP already in RTS.
TEST(Rnic, EventQueueCommunicationEstablishedOnTheFirstPacketInRtr)
{
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTR);
    Eq eqa(p.a), eqb(p.b);
    fill(p.a.mem(p.bufa), 4096, 9);
    for (unsigned i = 0; i < 2; i++)
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 4096), 0);
    auto eb = eqb.poll();
    ASSERT_EQ(eb.size(), 1u); // 8 packets, one event
    EXPECT_EQ(eb[0].type, RNIC_EV_COMM_EST);
    EXPECT_EQ(eb[0].element, p.qb.qpn);
    EXPECT_TRUE(eqa.poll().empty()); // A was in RTS when B's ACKs arrived
}

// Port events, arming and interrupts, and the overflow policy: a full ring keeps the oldest
// events and drops the new ones (counted, OVERFLOW set, a gap in seq).
TEST(Rnic, EventQueuePortEventsArmingAndOverflow)
{
    Link l;
    Node n(0, l);
    n.nic->ctrl_write(RNIC_REG_INT_ENABLE, RNIC_INT_ALL, 4);
    Eq eq(n, 1, 5); // 2 entries, vector 5
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, RNIC_STATUS_LINK_UP);
    n.nic->set_link(true); // no change: no event
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 0u);
    // not armed: the event is written, no interrupt
    n.nic->set_link(false);
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, 0u);
    EXPECT_FALSE(n.host.irq_level(5));
    auto ev = eq.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_PORT_ERR);
    EXPECT_EQ(ev[0].element, RNIC_PORT_NUM);
    // armed: the next event interrupts on the EQ's vector, once, and disarms
    n.nic->ctrl_write(RNIC_REG_EQ_ARM, 1, 4);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_ARM), 1u);
    n.nic->set_link(true);
    EXPECT_TRUE(n.host.irq_level(5));
    EXPECT_EQ(n.reg(RNIC_REG_EQ_ARM), 0u);
    n.nic->ctrl_write(RNIC_REG_INT_STATUS, 1u << 5, 4);
    EXPECT_FALSE(n.host.irq_level(5));
    // arming with an event already waiting interrupts at once
    n.nic->ctrl_write(RNIC_REG_EQ_ARM, 1, 4);
    EXPECT_TRUE(n.host.irq_level(5));
    n.nic->ctrl_write(RNIC_REG_INT_STATUS, 1u << 5, 4);
    // the ring: PORT_ACTIVE (seq 1) waits, one more fits, then two are dropped
    n.nic->set_link(false); // seq 2: written (2 of 2)
    n.nic->set_link(true);  // seq 3: dropped
    n.nic->set_link(false); // seq 4: dropped
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 3u);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_EQ_OVERFLOWS), 2u);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_STATUS), RNIC_EQ_ST_OVERFLOW);
    ev = eq.poll();
    ASSERT_EQ(ev.size(), 2u); // the oldest are kept
    EXPECT_EQ(ev[0].type, RNIC_EV_PORT_ACTIVE);
    EXPECT_EQ(ev[0].seq, 1u);
    EXPECT_EQ(ev[1].type, RNIC_EV_PORT_ERR);
    EXPECT_EQ(ev[1].seq, 2u);
    n.nic->ctrl_write(RNIC_REG_EQ_STATUS, RNIC_EQ_ST_OVERFLOW, 4);
    n.nic->set_link(true); // seq 5: room again; the gap 2 -> 5 shows two were lost
    ev = eq.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_PORT_ACTIVE);
    EXPECT_EQ(ev[0].seq, 5u);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_STATUS), 0u);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_EQ_EVENTS), 4u);
    // the ring wrapped twice: the owner phase flipped and the entries still read right
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 4u);
    // reset: the EQ is off, the port's state stays
    n.nic->reset();
    EXPECT_EQ(n.reg(RNIC_REG_EQ_CTRL), 0u);
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, RNIC_STATUS_LINK_UP);
}

TEST(Rnic, LinkChangesWhileThePausedVmIsStoppedWriteNothingUntilItRuns)
{
    Link l;
    Node n(0, l);
    Eq eq(n, 4, 0);
    n.nic->pause(true);
    n.nic->set_link(false); // the port went down while the VM was stopped
    n.nic->set_link(true);
    n.nic->set_link(false);
    EXPECT_EQ(n.reg(RNIC_REG_EQ_PI), 0u); // nothing written into the stopped guest's memory
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, RNIC_STATUS_LINK_UP);
    n.nic->pause(false); // the last state counts: one PORT_ERR
    auto ev = eq.poll();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, RNIC_EV_PORT_ERR);
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, 0u);
    n.nic->pause(true);
    n.nic->set_link(false); // no change while stopped: nothing at resume
    n.nic->pause(false);
    EXPECT_TRUE(eq.poll().empty());
}

// ---- migration (docs/rnic.md "Migration", hw/rnic/rnic_state.cc) ----

bool same_state(const RnicSnapshot &x, const RnicSnapshot &y)
{
    auto eq = [](const auto &u, const auto &v) {
        return u.size() == v.size() &&
               (u.empty() || std::memcmp(u.data(), v.data(), u.size() * sizeof(u[0])) == 0);
    };
    return std::memcmp(&x.st, &y.st, sizeof(x.st)) == 0 && eq(x.mr, y.mr) && eq(x.pages, y.pages) &&
           eq(x.cq, y.cq) && eq(x.qp, y.qp) && eq(x.wr, y.wr) && eq(x.sqe, y.sqe) && eq(x.res, y.res);
}

// A fresh core for node n (same RAM: guest RAM migrates with the VM), as after an incoming
// migration, with the state `s` loaded. Replaces n's core.
void migrate(Node &n, Link &link, const RnicSnapshot &s)
{
    RnicConfig cfg;
    rnic_default_peer_addr(n.id, cfg.mac, &cfg.ip);
    auto fresh = std::make_unique<Rnic>(
        n.host.host(nullptr, nullptr, n.id, 2), cfg,
        [&link](const uint8_t *f, size_t len) { return link.send(f, len); }, Rnic::TimerFn{},
        [&n] { n.tx_waiting = true, n.tx_wait_calls++; });
    std::string why;
    ASSERT_TRUE(fresh->load(s, &why)) << why;
    n.nic = std::move(fresh);
}

// Deliver what a sent to b; every frame from b to a is lost.
void deliver_to_b_only(Pair &p)
{
    while (!p.link.q.empty()) {
        Link::Frame f = p.link.pop();
        if (f.to == 1) p.b.nic->on_frame(f.bytes.data(), f.bytes.size());
    }
}

// a: a 3-packet WRITE, a 2-packet READ and a FETCH_ADD to b; b executes all three (the WRITE's
// data placed, the atomic applied) but every response is lost: a has all of it unacknowledged,
// b holds the READ and the atomic in its responder resources.
struct MidTransfer : Pair {
    static constexpr uint64_t kInit = 1000, kAdd = 7;
    MidTransfer() : Pair(1024, 8)
    {
        fill(a.mem(bufa), 3000, 1);
        fill(b.mem(bufb + 0x10000), 2000, 2);
        std::memcpy(b.mem(bufb + 0x20000), &kInit, 8);
        a.post_send(qa, wqe(RNIC_WR_WRITE, 1, bufa, 3000, keya, bufb, keyb));
        a.post_send(qa, wqe(RNIC_WR_READ, 2, bufa + 0x10000, 2000, keya, bufb + 0x10000, keyb));
        struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, 3, bufa + 0x20000, 8, keya, bufb + 0x20000, keyb);
        w.swap_add = kAdd;
        a.post_send(qa, w);
        deliver_to_b_only(*this);
    }
};

// The page lists of all MRs together are bounded per device (RNIC_MR_TOTAL_PAGES), and a device
// filled to that bound saves and loads (the restore takes what REG_MR allowed).
TEST(RnicMigration, PageListsAreBoundedPerDeviceAndEveryStateThatSavesLoads)
{
    Link l;
    Node n(0, l);
    const uint32_t pd = n.create_pd();
    const uint64_t page = n.alloc(4096);
    const uint64_t list = n.alloc(uint64_t(RNIC_MR_MAX_PAGES) * 8);
    for (uint64_t k = 0; k < RNIC_MR_MAX_PAGES; k++)
        std::memcpy(n.mem(list + 8 * k), &page, 8);
    auto reg = [&](uint32_t *key) {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_REG_MR;
        c.handle = pd;
        c.params.mr = {
            0, uint64_t(RNIC_MR_MAX_PAGES) << 12, list, RNIC_MR_MAX_PAGES, RNIC_ACCESS_ALL, 12, 0, 0, 0};
        const uint16_t st = n.cmd(c);
        if (key) *key = c.out0;
        return st;
    };
    constexpr unsigned kFit = RNIC_MR_TOTAL_PAGES / RNIC_MR_MAX_PAGES;
    uint32_t first = 0;
    for (unsigned i = 0; i < kFit; i++)
        ASSERT_EQ(reg(i ? nullptr : &first), RNIC_CMD_ST_OK) << i;
    const uint64_t errors = n.counter(RNIC_CNT_INDEX_COMMAND_ERRORS);
    EXPECT_EQ(reg(nullptr), RNIC_CMD_ST_NO_RESOURCE);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_COMMAND_ERRORS), errors + 1);
    const RnicSnapshot s = n.nic->save();
    EXPECT_EQ(s.st.n_pages, RNIC_MR_TOTAL_PAGES);
    migrate(n, l, s);
    EXPECT_TRUE(same_state(n.nic->save(), s));
    // one entry more than the device holds is refused on load
    RnicSnapshot over = s;
    over.mr.back().npages++;
    over.mr.back().length += 4096;
    over.pages.push_back(page);
    over.st.n_pages++;
    std::string why;
    EXPECT_FALSE(n.nic->load(over, &why));
    EXPECT_NE(why.find("page-list entries"), std::string::npos) << why;
    // a deregistration makes room again
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_DEREG_MR;
    c.handle = first;
    ASSERT_EQ(n.cmd(c), RNIC_CMD_ST_OK);
    EXPECT_EQ(reg(nullptr), RNIC_CMD_ST_OK);
}

TEST(RnicMigration, SaveLoadSaveGivesTheSameState)
{
    MidTransfer p;
    const RnicSnapshot sa = p.a.nic->save(), sb = p.b.nic->save();
    EXPECT_EQ(sa.st.n_qp, 1u);
    EXPECT_EQ(sa.st.n_wr, 3u);  // the device's three WRs
    EXPECT_EQ(sa.st.n_sqe, 3u); // and the engine's
    EXPECT_EQ(sb.st.n_res, 2u); // b's READ and FETCH_ADD resources
    EXPECT_EQ(sa.st.n_mr, 1u);
    EXPECT_EQ(sa.st.n_cq, 1u);
    migrate(p.a, p.link, sa);
    migrate(p.b, p.link, sb);
    EXPECT_TRUE(same_state(p.a.nic->save(), sa));
    EXPECT_TRUE(same_state(p.b.nic->save(), sb));
    // the registers and counters the guest reads are the saved ones
    EXPECT_EQ(p.a.reg(RNIC_REG_CTRL), RNIC_CTRL_ENABLE);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_EXECUTED), 3u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 1u);
}

TEST(RnicMigration, PageListMrsAndCqStateSurvive)
{
    Link l;
    Node n(0, l);
    const uint32_t pd = n.create_pd();
    Node::Cq cq = n.create_cq(4, 3);
    // a 3-page MR through a page list in scattered order
    const uint64_t pages = n.alloc(4096 * 3), list = n.alloc(64);
    const uint64_t pl[3] = {pages + 8192, pages, pages + 4096};
    std::memcpy(n.mem(list), pl, sizeof(pl));
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_REG_MR;
    c.handle = pd;
    c.params.mr.iova = 0x7000100;
    c.params.mr.length = 3 * 4096 - 0x200;
    c.params.mr.access = RNIC_ACCESS_LOCAL_WRITE;
    c.params.mr.page_shift = 12;
    c.params.mr.npages = 3;
    c.params.mr.page_list = list;
    ASSERT_EQ(n.cmd(c), RNIC_CMD_ST_OK);
    n.nic->db_write(RNIC_DB_CQ(cq.cqn) + RNIC_CQ_DB_ARM, RNIC_CQ_ARM_NEXT, 4);
    const RnicSnapshot s = n.nic->save();
    ASSERT_EQ(s.mr.size(), 1u);
    EXPECT_EQ(s.pages, std::vector<uint64_t>(pl, pl + 3));
    ASSERT_EQ(s.cq.size(), 1u);
    EXPECT_EQ(s.cq[0].arm, RNIC_CQ_ARM_NEXT);
    EXPECT_EQ(s.cq[0].vector, 3u);
    migrate(n, l, s);
    EXPECT_TRUE(same_state(n.nic->save(), s));
}

// The responses were lost and both nodes migrated: the requester's retransmission timer (armed
// at load) resends everything unacknowledged; the new responder answers the duplicate WRITE with
// an ACK, re-reads the READ and answers the duplicate FETCH_ADD from its saved original value:
// the word is added to once.
TEST(RnicMigration, UnackedWorkCompletesByRetransmissionAndAtomicsAreNotReExecuted)
{
    MidTransfer p;
    const RnicSnapshot sa = p.a.nic->save(), sb = p.b.nic->save();
    migrate(p.a, p.link, sa);
    migrate(p.b, p.link, sb);
    EXPECT_LT(p.a.nic->next_deadline_ns(), UINT64_MAX); // the retransmission timer is armed
    auto c = p.wait_a(3);
    ASSERT_EQ(c.size(), 3u);
    for (unsigned i = 0; i < 3; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, i + 1u);
    }
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 3000), 0);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x10000), p.b.mem(p.bufb + 0x10000), 2000), 0);
    uint64_t orig = 0, word = 0;
    std::memcpy(&orig, p.a.mem(p.bufa + 0x20000), 8);
    std::memcpy(&word, p.b.mem(p.bufb + 0x20000), 8);
    EXPECT_EQ(orig, MidTransfer::kInit);
    EXPECT_EQ(word, MidTransfer::kInit + MidTransfer::kAdd); // once
    EXPECT_GE(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 3u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_DUP_REPLAYS), 2u); // the READ and the atomic
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_EXECUTED), 3u);    // nothing executed twice
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 1u);
    // the QPs go on: a new FETCH_ADD on the same word
    struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, 9, p.bufa + 0x20008, 8, p.keya, p.bufb + 0x20000, p.keyb);
    w.swap_add = 1;
    p.a.post_send(p.qa, w);
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    std::memcpy(&orig, p.a.mem(p.bufa + 0x20008), 8);
    EXPECT_EQ(orig, MidTransfer::kInit + MidTransfer::kAdd);
}

// Nothing reached b before a was saved: the loaded requester sends it all again and b executes
// it once; a multi-packet SEND into b's receive queue also completes.
TEST(RnicMigration, RequestsLostBeforeTheSaveAreSentAgain)
{
    Pair p(256, 8);
    fill(p.a.mem(p.bufa), 1000, 5);
    p.b.post_recv(p.qb, 77, p.bufb, 4096, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 1, p.bufa, 1000, p.keya)); // 4 packets of 256
    // the first packet only reaches b: the message is in progress on both sides
    ASSERT_GE(p.link.q.size(), 4u);
    Link::Frame f = p.link.pop();
    p.b.nic->on_frame(f.bytes.data(), f.bytes.size());
    p.link.q.clear();
    p.link.queued[0] = p.link.queued[1] = 0;
    const RnicSnapshot sa = p.a.nic->save(), sb = p.b.nic->save();
    ASSERT_EQ(sb.qp.size(), 1u);
    EXPECT_EQ(sb.qp[0].in_msg, 1u); // a SEND in progress
    EXPECT_EQ(sb.qp[0].msg_off, 256u);
    migrate(p.a, p.link, sa);
    migrate(p.b, p.link, sb);
    auto c = p.wait_b(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(c[0].wr_id, 77u);
    EXPECT_EQ(c[0].byte_len, 1000u);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 1000), 0);
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
}

// The link pushed back: a's second QP is paused at its first packet (nothing of it left) with
// more WRs behind it. After the load the paused QP continues at once (not after a retransmission
// timeout) and everything completes.
TEST(RnicMigration, WorkNotSentYetContinuesAfterTheLoad)
{
    Pair p(1024, 8);
    const Node::Qp qa2 = p.a.create_qp(p.pda, p.cqa, p.cqa), qb2 = p.b.create_qp(p.pdb, p.cqb, p.cqb);
    Node::Qp q2 = qa2, r2 = qb2;
    p.a.connect(q2, 1, r2.qpn, 1024, 8);
    p.b.connect(r2, 0, q2.qpn, 1024, 8);
    fill(p.a.mem(p.bufa), 64 << 10, 9);
    p.link.ring = 1; // one frame per sender in flight: the second send is refused (Busy)
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 8192, p.keya, p.bufb, p.keyb));
    for (uint64_t k = 0; k < 4; k++)
        p.a.post_send(q2, wqe(RNIC_WR_WRITE, 10 + k, p.bufa + 8192 * (k + 1), 8192, p.keya,
                              p.bufb + 8192 * (k + 1), p.keyb));
    const RnicSnapshot sa = p.a.nic->save();
    ASSERT_EQ(sa.qp.size(), 2u);
    // the second QP's first WR has its PSNs but not one packet of it left
    const auto first2 =
        std::find_if(sa.sqe.begin(), sa.sqe.end(), [](const auto &e) { return e.qp_index == 1; });
    ASSERT_NE(first2, sa.sqe.end());
    EXPECT_EQ(first2->resume, first2->first);
    p.link.ring = 0;
    p.link.q.clear();
    p.link.queued[0] = p.link.queued[1] = 0;
    p.a.tx_waiting = false;
    migrate(p.a, p.link, sa);
    // sent at the load, not after a retransmission timeout
    EXPECT_FALSE(p.link.q.empty());
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_TIMEOUTS), 0u);
    auto c = p.wait_a(5);
    ASSERT_EQ(c.size(), 5u);
    for (const auto &e : c)
        EXPECT_EQ(e.status, RNIC_WC_SUCCESS) << e.wr_id;
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 5 * 8192), 0);
}

// The async event queue and the port state migrate: an event that waits unconsumed, the ring's
// indices and seq, arming and the port's last reported state; after the load the next event lands
// behind it with the next seq and raises the armed vector.
TEST(RnicMigration, EventQueueAndPortStateSurvive)
{
    Link l;
    Node n(0, l);
    Eq eq(n, 3, 2);
    n.nic->set_link(false); // PORT_ERR, seq 0
    ASSERT_EQ(eq.poll().size(), 1u);
    n.nic->set_link(true); // PORT_ACTIVE, seq 1: left unconsumed
    n.nic->ctrl_write(RNIC_REG_INT_ENABLE, RNIC_INT_ALL, 4);
    const RnicSnapshot s = n.nic->save();
    EXPECT_EQ(s.st.eq_pi, 2u);
    EXPECT_EQ(s.st.eq_ci, 1u);
    EXPECT_EQ(s.st.eq_seq, 2u);
    EXPECT_EQ(s.st.link_up, 1u);
    migrate(n, l, s);
    n.nic->ctrl_write(RNIC_REG_INT_STATUS, RNIC_INT_ALL, 4);
    n.nic->ctrl_write(RNIC_REG_EQ_ARM, 1, 4); // an event waits: the vector fires at once
    EXPECT_TRUE(n.nic->int_status() & (1u << 2));
    n.nic->ctrl_write(RNIC_REG_INT_STATUS, RNIC_INT_ALL, 4);
    n.nic->set_link(false); // seq 2, behind the waiting one
    auto ev = eq.poll();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].type, RNIC_EV_PORT_ACTIVE);
    EXPECT_EQ(ev[0].seq, 1u);
    EXPECT_EQ(ev[1].type, RNIC_EV_PORT_ERR);
    EXPECT_EQ(ev[1].seq, 2u);
    EXPECT_EQ(n.reg(RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP, 0u);
    EXPECT_TRUE(same_state(n.nic->save(), n.nic->save()));
    // refusals of the event queue's state
    using M = std::function<void(RnicSnapshot &)>;
    const std::vector<std::pair<const char *, M>> bad = {
        {"eq ctrl", [](RnicSnapshot &x) { x.st.eq_ctrl |= 1u << 30; }},
        {"eq status", [](RnicSnapshot &x) { x.st.eq_status |= 1u << 7; }},
        {"eq base alignment", [](RnicSnapshot &x) { x.st.eq_base += 8; }},
        {"eq ring outside RAM", [](RnicSnapshot &x) { x.st.eq_base = kBase + kRam - 64; }},
        {"eq depth", [](RnicSnapshot &x) { x.st.eq_ctrl &= ~RNIC_EQ_CTRL_DEPTH_MASK; }},
        {"eq indices", [](RnicSnapshot &x) { x.st.eq_pi = x.st.eq_ci + 9; }},
        {"eq armed while disabled",
         [](RnicSnapshot &x) { x.st.eq_ctrl &= ~RNIC_EQ_CTRL_ENABLE, x.st.eq_armed = 1; }},
        {"eq flag", [](RnicSnapshot &x) { x.st.link_up = 2; }},
        {"eq reserved", [](RnicSnapshot &x) { x.st.reserved_eq[1] = 1; }},
    };
    const RnicSnapshot before = n.nic->save();
    for (const auto &[name, mutate] : bad) {
        RnicSnapshot x = s;
        mutate(x);
        std::string why;
        EXPECT_FALSE(n.nic->load(x, &why)) << name;
        EXPECT_NE(why.find("event queue"), std::string::npos) << name << ": " << why;
        EXPECT_TRUE(same_state(n.nic->save(), before)) << name;
    }
}

TEST(RnicMigration, PausedDeviceHoldsFramesAndTimersUntilItRuns)
{
    Pair p(1024, 8);
    fill(p.a.mem(p.bufa), 2048, 3);
    p.b.nic->pause(true);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 2048, p.keya, p.bufb, p.keyb));
    while (!p.link.q.empty()) {
        Link::Frame f = p.link.pop();
        if (f.to == 1) p.b.nic->on_frame(f.bytes.data(), f.bytes.size());
    }
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_FRAMES), 0u); // held, not processed
    EXPECT_EQ(p.b.mem(p.bufb)[0], 0u);
    p.b.nic->pause(false);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_FRAMES), 2u);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 2048), 0);
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    // beyond the hold: dropped and counted
    p.b.nic->pause(true);
    const uint8_t junk[64] = {};
    for (size_t i = 0; i < Rnic::kPausedFrames + 5; i++)
        p.b.nic->on_frame(junk, sizeof(junk));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_PAUSED_DROPS), 5u);
    // a load drops (and counts) what was held for the old state
    const RnicSnapshot s = p.b.nic->save();
    std::string why;
    ASSERT_TRUE(p.b.nic->load(s, &why)) << why;
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_PAUSED_DROPS), 5u + Rnic::kPausedFrames);
    p.b.nic->pause(false);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_MALFORMED), 0u); // none of the junk was processed
}

// Every refusal: a state changed in one place is refused with a reason, and the device is
// exactly as before.
TEST(RnicMigration, LoadRefusesEveryInconsistencyAndChangesNothing)
{
    MidTransfer p;
    const RnicSnapshot sa = p.a.nic->save(), sb = p.b.nic->save();
    ASSERT_FALSE(sa.wr.empty());
    ASSERT_FALSE(sa.sqe.empty());
    ASSERT_FALSE(sb.res.empty());
    using M = std::function<void(RnicSnapshot &)>;
    const std::vector<std::pair<const char *, M>> bad_a = {
        {"version", [](RnicSnapshot &s) { s.st.version++; }},
        {"reserved", [](RnicSnapshot &s) { s.st.reserved = 1; }},
        {"ctrl", [](RnicSnapshot &s) { s.st.ctrl |= 1u << 5; }},
        {"int_status", [](RnicSnapshot &s) { s.st.int_status |= 1u << 9; }},
        {"irq_lines", [](RnicSnapshot &s) { s.st.irq_lines ^= 1; }},
        {"cmd_status", [](RnicSnapshot &s) { s.st.cmd_status = 0x10000; }},
        {"n_mr", [](RnicSnapshot &s) { s.st.n_mr++; }},
        {"n_qp", [](RnicSnapshot &s) { s.st.n_qp = RNIC_MAX_QP + 1; }},
        {"counter base", [](RnicSnapshot &s) { s.st.cnt_base[0] = s.st.counters[0] + 1; }},
        {"next_seq 0", [](RnicSnapshot &s) { s.st.next_seq = 0; }},
        {"mr index", [](RnicSnapshot &s) { s.mr[0].index = RNIC_MAX_MR; }},
        {"mr tag", [](RnicSnapshot &s) { s.st.mr_tag[s.mr[0].index] = 0; }},
        {"mr twice", [](RnicSnapshot &s) { s.mr.push_back(s.mr[0]), s.st.n_mr++; }},
        {"mr pd", [](RnicSnapshot &s) { s.mr[0].pdn = 200; }},
        {"mr pd 0", [](RnicSnapshot &s) { s.mr[0].pdn = 0; }},
        {"mr access", [](RnicSnapshot &s) { s.mr[0].access |= 1u << 20; }},
        {"mr remote write without local", [](RnicSnapshot &s) { s.mr[0].access = RNIC_ACCESS_REMOTE_WRITE; }},
        {"mr outside RAM", [](RnicSnapshot &s) { s.mr[0].iova = kBase + kRam - 100; }},
        {"mr length 0", [](RnicSnapshot &s) { s.mr[0].length = 0; }},
        {"mr phys with pages", [](RnicSnapshot &s) { s.mr[0].npages = 1; }},
        {"mr page list", [](RnicSnapshot &s) { s.mr[0].phys = 0; }},
        {"mr flag", [](RnicSnapshot &s) { s.mr[0].phys = 2; }},
        {"mr reserved", [](RnicSnapshot &s) { s.mr[0].reserved[0] = 1; }},
        {"pages unclaimed", [](RnicSnapshot &s) { s.pages.push_back(kBase), s.st.n_pages++; }},
        {"cq index", [](RnicSnapshot &s) { s.cq[0].index = RNIC_MAX_CQ; }},
        {"cq depth", [](RnicSnapshot &s) { s.cq[0].depth_log2 = RNIC_DEPTH_LOG2_MAX + 1; }},
        {"cq vector", [](RnicSnapshot &s) { s.cq[0].vector = RNIC_MSIX_VECTORS; }},
        {"cq ring alignment", [](RnicSnapshot &s) { s.cq[0].ring += 8; }},
        {"cq ring outside RAM", [](RnicSnapshot &s) { s.cq[0].ring = kBase + kRam; }},
        {"cq indices", [](RnicSnapshot &s) { s.cq[0].pi = s.cq[0].ci + (1u << s.cq[0].depth_log2) + 1; }},
        {"cq arm", [](RnicSnapshot &s) { s.cq[0].arm = 9; }},
        {"cq error flag", [](RnicSnapshot &s) { s.cq[0].error = 2; }},
        {"qp index", [](RnicSnapshot &s) { s.qp[0].index = RNIC_MAX_QP; }},
        {"qp twice", [](RnicSnapshot &s) { s.qp.push_back(s.qp[0]), s.st.n_qp++; }},
        {"qp pd", [](RnicSnapshot &s) { s.qp[0].pdn = 9; }},
        {"qp cq", [](RnicSnapshot &s) { s.qp[0].send_cqn = 5; }},
        {"qp depth", [](RnicSnapshot &s) { s.qp[0].sq_log2 = 0; }},
        {"qp ring outside RAM", [](RnicSnapshot &s) { s.qp[0].rq_ring = kBase + kRam - 64; }},
        {"qp ring alignment", [](RnicSnapshot &s) { s.qp[0].sq_ring += 4; }},
        {"qp sq indices", [](RnicSnapshot &s) { s.qp[0].sq_pi = s.qp[0].sq_ci + 1000; }},
        {"qp state", [](RnicSnapshot &s) { s.qp[0].state = 4; }},
        {"qp device state", [](RnicSnapshot &s) { s.qp[0].dev_state = 7; }},
        {"qp dest node", [](RnicSnapshot &s) { s.qp[0].dest_node = 100000; }},
        {"qp flag", [](RnicSnapshot &s) { s.qp[0].ack_owed = 2; }},
        {"qp reserved", [](RnicSnapshot &s) { s.qp[0].reserved2[1] = 1; }},
        {"qp path mtu", [](RnicSnapshot &s) { s.qp[0].path_mtu = 300; }},
        {"qp dest qpn", [](RnicSnapshot &s) { s.qp[0].dest_qpn = 1u << 24; }},
        {"qp psn 24 bits", [](RnicSnapshot &s) { s.qp[0].next_psn |= 1u << 24; }},
        {"qp epsn 24 bits", [](RnicSnapshot &s) { s.qp[0].epsn = 0xffffffff; }},
        {"qp msn", [](RnicSnapshot &s) { s.qp[0].msn = 1u << 24; }},
        {"qp outstanding window",
         [](RnicSnapshot &s) { s.qp[0].una = (s.qp[0].next_psn + 1) & ROCE_PSN_MASK; }},
        {"qp rd_atomic", [](RnicSnapshot &s) { s.qp[0].max_dest_rd_atomic = 0; }},
        {"qp resources", [](RnicSnapshot &s) { s.qp[0].n_res = 3; }},
        {"qp resource index", [](RnicSnapshot &s) { s.qp[0].res_next = s.qp[0].n_res; }},
        {"qp timeout", [](RnicSnapshot &s) { s.qp[0].timeout = 32; }},
        {"qp retry", [](RnicSnapshot &s) { s.qp[0].retry_left = 8; }},
        {"qp access", [](RnicSnapshot &s) { s.qp[0].access = RNIC_ACCESS_LOCAL_WRITE; }},
        {"qp message", [](RnicSnapshot &s) { s.qp[0].in_msg = 3; }},
        {"qp reads outstanding", [](RnicSnapshot &s) { s.qp[0].rd_outstanding = s.qp[0].max_rd_atomic + 1; }},
        {"qp cursor", [](RnicSnapshot &s) { s.qp[0].cursor = 4; }},
        {"qp held bad WQE missing", [](RnicSnapshot &s) { s.qp[0].bad_held = 1; }},
        {"qp receive length", [](RnicSnapshot &s) { s.qp[0].rlen = uint64_t(RNIC_MAX_MSG) + 1; }},
        {"qp local error", [](RnicSnapshot &s) { s.qp[0].rlerr = 99; }},
        {"qp AckReq count", [](RnicSnapshot &s) { s.qp[0].since_ackreq = 1000; }},
        {"qp rnr retries left", [](RnicSnapshot &s) { s.qp[0].rnr_left = 9; }},
        {"qp rnr timer", [](RnicSnapshot &s) { s.qp[0].min_rnr_timer = 32; }},
        {"qp recv cq", [](RnicSnapshot &s) { s.qp[0].recv_cqn = RNIC_MAX_CQ; }},
        {"qp rq indices", [](RnicSnapshot &s) { s.qp[0].rq_ci = s.qp[0].rq_pi + 1; }},
        {"qp initiator depth", [](RnicSnapshot &s) { s.qp[0].max_rd_atomic = RC_MAX_RD_ATOMIC + 1; }},
        {"pd gone", [](RnicSnapshot &s) { std::memset(s.st.pd_valid, 0, sizeof(s.st.pd_valid)); }},
        {"wr length", [](RnicSnapshot &s) { s.wr[0].len = uint64_t(RNIC_MAX_MSG) + 1; }},
        {"wr reserved", [](RnicSnapshot &s) { s.wr[0].reserved[2] = 1; }},
        {"sqe length", [](RnicSnapshot &s) { s.sqe[0].length = RNIC_MAX_MSG + 1; }},
        {"sqe reserved", [](RnicSnapshot &s) { s.sqe[0].reserved[0] = 1; }},
        {"wr qp", [](RnicSnapshot &s) { s.wr[0].qp_index = 7; }},
        {"wr seq", [](RnicSnapshot &s) { s.wr[0].seq = s.st.next_seq; }},
        {"wr twice", [](RnicSnapshot &s) { s.wr.push_back(s.wr[0]), s.st.n_wr++; }},
        {"wr bad without flag", [](RnicSnapshot &s) { s.wr[0].bad = 1; }},
        {"wr lerr", [](RnicSnapshot &s) { s.wr[0].lerr = 99; }},
        {"sqe qp", [](RnicSnapshot &s) { s.sqe[0].qp_index = 3; }},
        {"sqe without a WR", [](RnicSnapshot &s) { s.sqe[0].local = s.sqe[0].wr_id = 12345; }},
        {"sqe op", [](RnicSnapshot &s) { s.sqe[0].op = 99; }},
        {"sqe psn", [](RnicSnapshot &s) { s.sqe[1].first = 1u << 24; }},
        {"sqe packets", [](RnicSnapshot &s) { s.sqe[0].npkts = 0; }},
        {"sqe order", [](RnicSnapshot &s) { s.sqe[0].assigned = 0; }},
        {"sqe flag", [](RnicSnapshot &s) { s.sqe[0].fence = 3; }},
        {"record count vs records", [](RnicSnapshot &s) { s.sqe.pop_back(); }},
    };
    const std::vector<std::pair<const char *, M>> bad_b = {
        {"res qp", [](RnicSnapshot &s) { s.res[0].qp_index = 2; }},
        {"res slot", [](RnicSnapshot &s) { s.res[0].slot = s.qp[0].n_res; }},
        {"res twice", [](RnicSnapshot &s) { s.res.push_back(s.res[0]), s.st.n_res++; }},
        {"res psn", [](RnicSnapshot &s) { s.res[0].last = 1u << 24; }},
        {"res reserved", [](RnicSnapshot &s) { s.res[0].reserved[3] = 1; }},
    };
    for (auto [node, src, cases] : {std::tuple{&p.a, &sa, &bad_a}, std::tuple{&p.b, &sb, &bad_b}}) {
        const RnicSnapshot before = node->nic->save();
        for (const auto &[name, mutate] : *cases) {
            RnicSnapshot s = *src;
            mutate(s);
            std::string why;
            EXPECT_FALSE(node->nic->load(s, &why)) << name;
            EXPECT_FALSE(why.empty()) << name;
            EXPECT_TRUE(same_state(node->nic->save(), before)) << name;
        }
    }
    // and the unchanged states load
    std::string why;
    EXPECT_TRUE(p.a.nic->load(sa, &why)) << why;
    EXPECT_TRUE(p.b.nic->load(sb, &why)) << why;
}

// ---- the direct path (docs/rnic.md "Direct path"): READs copied from the peer's RAM file ----

// What rk_rmem_direct_run gives the two nodes: each node's RAM-file tail (its published table),
// the bridge's eth_watched word, and the answer of the remote memory (OK: run the copy on the
// peer's RAM; NO_DIRECT or UNREACHABLE: the device must take the wire).
struct DirectWorld {
    std::vector<uint8_t> tail[2];
    uint8_t *ram[2] = {};
    uint64_t watched = 0;
    int answer = RK_RMEM_OK;
    unsigned runs = 0;
    DirectWorld()
    {
        for (auto &t : tail)
            t.assign(RK_RMEM_TAIL_SIZE, 0);
    }
    RnicConfig config(unsigned self)
    {
        RnicConfig c;
        c.direct.own = reinterpret_cast<rnic_pub *>(tail[self].data() + RK_RMEM_TAIL_RNIC_OFF);
        c.direct.own_bytes = RK_RMEM_TAIL_RNIC_SIZE;
        c.direct.node = self;
        c.direct.run = [this, self](unsigned node, rk_rmem_direct_fn fn, void *op, int *ret) -> int {
            if (node > 1 || node == self || answer == RK_RMEM_NO_DIRECT) return RK_RMEM_NO_DIRECT;
            if (answer != RK_RMEM_OK) return answer;
            runs++;
            const rk_rmem_view v{ram[node], kBase, kRam, tail[node].data(), watched};
            *ret = fn(op, &v);
            return RK_RMEM_OK;
        };
        return c;
    }
};

struct DirectPair {
    DirectWorld w;
    Pair p;
    explicit DirectPair(uint32_t b_access = RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE)
        : p(1024, 10, 7, b_access, RNIC_QPS_RTS, w.config(0), w.config(1))
    {
        w.ram[0] = p.a.host.ram.data();
        w.ram[1] = p.b.host.ram.data();
        fill(p.b.mem(p.bufb), Pair::kBuf, 11);
    }
    uint64_t direct_reads() { return p.a.counter(RNIC_CNT_INDEX_DIRECT_READS); }
    // one signaled READ of len bytes from b's buffer + roff into a's buffer + loff; its CQE
    struct rnic_cqe read(uint64_t roff, uint32_t len, uint64_t loff = 0, uint32_t rkey = 0)
    {
        p.a.post_send(p.qa,
                      wqe(RNIC_WR_READ, 7, p.bufa + loff, len, p.keya, p.bufb + roff, rkey ? rkey : p.keyb));
        auto e = p.wait_a(1);
        EXPECT_EQ(e.size(), 1u);
        return e.empty() ? rnic_cqe{} : e[0];
    }
};

TEST(RnicDirect, ReadsCopyFromThePeersRamWithoutAFrameAndTheWireStaysInStep)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t sent0 = p.link.sent;
    const uint32_t sizes[] = {1, 8, 4096 + 7, 65536, kDirectMax};
    for (uint32_t len : sizes) {
        std::memset(p.a.mem(p.bufa), 0, len);
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, len, p.bufa, len, p.keya, p.bufb + 3, p.keyb));
        auto e = p.a.poll(p.cqa); // done within the doorbell: no frame to wait for
        ASSERT_EQ(e.size(), 1u) << len;
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(e[0].opcode, RNIC_CQE_OP_READ);
        EXPECT_EQ(e[0].wr_id, len);
        EXPECT_EQ(e[0].byte_len, len);
        EXPECT_GT(e[0].modeled_ns, 0u); // the timing model's figure, as on the wire
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb + 3), len), 0) << len;
    }
    EXPECT_EQ(p.link.sent, sent0) << "no frame left node 0";
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), std::size(sizes));
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_WR_COMPLETED), std::size(sizes));
    // longer than kDirectMax: the wire, same data
    auto e = d.read(5, kDirectMax + 1);
    EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb + 5), kDirectMax + 1), 0);
    EXPECT_GT(p.link.sent, sent0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    // A READ behind a WRITE still in flight (too long for the direct path) goes on the wire
    // behind it (it must see the WRITE): the direct path would read the old bytes.
    fill(p.a.mem(p.bufa + 0x100000), kDirectMax + 100, 99);
    p.a.post_send(
        p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa + 0x100000, kDirectMax + 100, p.keya, p.bufb + 0x200000, p.keyb));
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + 0x180000, 3000, p.keya, p.bufb + 0x200000, p.keyb));
    auto two = p.wait_a(2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(two[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x180000), p.a.mem(p.bufa + 0x100000), 3000), 0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    // the PSNs stayed in step on both sides: no sequence NAK, no retransmission
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_SEQ_NAKS_RX), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SEQ_NAKS_TX), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    // alone again: direct
    EXPECT_EQ(d.read(0x200000, 3000, 0x1c0000).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x1c0000), p.a.mem(p.bufa + 0x100000), 3000), 0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes) + 1);
    // unsignaled: no CQE, the data is there; the next signaled one completes alone
    fill(p.b.mem(p.bufb), 64, 3);
    struct rnic_send_wqe u = wqe(RNIC_WR_READ, 8, p.bufa, 64, p.keya, p.bufb, p.keyb);
    u.flags = 0;
    p.a.post_send(p.qa, u);
    EXPECT_TRUE(p.a.poll(p.cqa).empty());
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb), 64), 0);
    EXPECT_EQ(d.read(64, 64, 64).wr_id, 7u);
    EXPECT_EQ(d.direct_reads(), std::size(sizes) + 3);
}

TEST(RnicDirect, WritesCopyIntoThePeersRamWithoutAFrame)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t sent0 = p.link.sent;
    const uint32_t sizes[] = {1, 8, 4096 + 7, kDirectMax};
    uint64_t n = 0;
    for (uint32_t len : sizes) {
        fill(p.a.mem(p.bufa), len, len);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, len, p.bufa, len, p.keya, p.bufb + 5, p.keyb));
        auto e = p.a.poll(p.cqa);
        ASSERT_EQ(e.size(), 1u) << len;
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(e[0].opcode, RNIC_CQE_OP_WRITE);
        EXPECT_EQ(e[0].byte_len, len);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 5), p.a.mem(p.bufa), len), 0) << len;
        n++;
    }
    EXPECT_EQ(p.link.sent, sent0) << "no frame left node 0";
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_WRITES), n);
    // then a READ of what was written, and a SEND on the wire: the transport is in step
    EXPECT_EQ(d.read(5, 4096, 0x100000).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x100000), p.b.mem(p.bufb + 5), 4096), 0);
    p.b.post_recv(p.qb, 9, p.bufb + 0x300000, 100, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 3, p.bufa, 100, p.keya));
    auto r = p.wait_b(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 0x300000), p.a.mem(p.bufa), 100), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_SEQ_NAKS_RX), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    // an MR without remote write: the wire, which NAKs it; nothing written
    const uint64_t ro = p.b.alloc(4096);
    std::memset(p.b.mem(ro), 0x5a, 4096);
    const uint32_t rokey = p.b.mr(p.pdb, ro, 4096, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_READ);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 4, p.bufa, 64, p.keya, ro, rokey));
    auto e = p.wait_a(2); // the SEND's, collected while waiting for node 1's, and this one
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].wr_id, 3u);
    EXPECT_EQ(e[1].wr_id, 4u);
    EXPECT_EQ(e[1].status, RNIC_WC_REM_ACCESS_ERR);
    EXPECT_EQ(p.b.mem(ro)[0], 0x5a);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), n);
}

// A peer's direct WRITE holds its busy word while it copies: the owner changes its table (here:
// deregisters the MR, after which the guest may reuse the pages) only once the word is clear,
// however long that takes (counted once a second). A word whose holder is no longer that live
// incarnation (it died, or reconnected) is cleared, while the owner's view of the table is valid.
TEST(RnicDirect, TheOwnerWaitsForAPeersWriteInProgressAndClearsADeadOnesWord)
{
    DirectWorld w;
    auto live = std::make_unique<rkf_live_table>();
    live->magic = RKF_LIVE_MAGIC;
    live->node[0] = (7ull << 1) | RKF_LIVE_UP; // node 0, generation 7, up
    live->node[1] = (3ull << 1) | RKF_LIVE_UP;
    RnicConfig ca = w.config(0), cb = w.config(1);
    ca.direct.live = cb.direct.live = live.get();
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, ca, cb);
    w.ram[0] = p.a.host.ram.data();
    w.ram[1] = p.b.host.ram.data();
    auto *pub = reinterpret_cast<rnic_pub *>(w.tail[1].data() + RK_RMEM_TAIL_RNIC_OFF);
    auto busy0 = [&] { return __atomic_load_n(&pub->busy[0], __ATOMIC_SEQ_CST); };
    auto set_busy0 = [&](uint64_t v) { __atomic_store_n(&pub->busy[0], v, __ATOMIC_SEQ_CST); };
    // a WRITE as node 0 does it holds node 0's liveness word, and clears it when done
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64, p.keya, p.bufb, p.keyb));
    ASSERT_EQ(p.a.poll(p.cqa).size(), 1u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), 1u);
    EXPECT_EQ(busy0(), 0u);
    // a table change in a thread of its own (the owner's vCPU), done when it returns
    auto change = [&](std::atomic<bool> &done) {
        return std::thread([&] {
            const uint64_t buf = p.b.alloc(4096);
            p.b.mr(p.pdb, buf, 4096);
            done = true;
        });
    };
    // node 0 in the middle of a copy for over a second: the deregistration waits until it is done
    set_busy0(live->node[0]);
    std::atomic<bool> done{false};
    std::thread dereg([&] {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_DEREG_MR;
        c.handle = p.keyb;
        EXPECT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
        done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    EXPECT_FALSE(done.load()) << "the table changed under a WRITE in progress";
    EXPECT_EQ(__atomic_load_n(&pub->seq, __ATOMIC_ACQUIRE) % 2, 1u) << "odd: the owner is changing it";
    set_busy0(0);
    dereg.join();
    EXPECT_TRUE(done.load());
    EXPECT_EQ(pub->seq % 2, 0u);
    EXPECT_EQ(pub->mr[RNIC_KEY_INDEX(p.keyb)].key, 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DIRECT_WAIT_STALLS), 1u) << "a second of waiting, counted";
    // a holder that died mid-copy and did not come back (the bridge cleared its UP bit): cleared
    set_busy0(live->node[0]);
    live->node[0] = 7ull << 1;
    {
        std::atomic<bool> d{false};
        change(d).join();
    }
    EXPECT_EQ(busy0(), 0u);
    // one that reconnected (generation 8): cleared too
    set_busy0(live->node[0] | RKF_LIVE_UP);
    live->node[0] = (8ull << 1) | RKF_LIVE_UP;
    {
        std::atomic<bool> d{false};
        change(d).join();
    }
    EXPECT_EQ(busy0(), 0u);
    // while the owner's view of the table is not valid (its link down), nothing is cleared
    set_busy0((7ull << 1) | RKF_LIVE_UP);
    __atomic_store_n(&live->magic, 0u, __ATOMIC_SEQ_CST);
    {
        std::atomic<bool> d{false};
        std::thread t = change(d);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_FALSE(d.load());
        __atomic_store_n(&live->magic, RKF_LIVE_MAGIC,
                         __ATOMIC_SEQ_CST); // back: node 0 is generation 8 now: cleared
        t.join();
    }
    EXPECT_EQ(busy0(), 0u);
    // a requester whose own word is not up (its link is down) does not WRITE directly
    live->node[0] = 8ull << 1;
    const uint64_t before = p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES);
    const uint32_t k2 = p.b.mr(p.pdb, p.bufb, 4096);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 2, p.bufa, 64, p.keya, p.bufb, k2));
    auto e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 64), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), before);
}

TEST(RnicDirect, PageListReadsMatchTheWire)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t pg[3] = {p.b.alloc(4096), p.b.alloc(4096), p.b.alloc(4096)};
    const uint64_t list = p.b.alloc(24);
    const uint64_t order[3] = {pg[2], pg[0], pg[1]};
    std::memcpy(p.b.mem(list), order, 24);
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_REG_MR;
    c.handle = p.pdb;
    c.params.mr = {0x70000800, 3 * 4096 - 0x800, list, 3, RNIC_ACCESS_ALL, 12, 0, 0, 0};
    ASSERT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
    for (uint64_t a : pg)
        fill(p.b.mem(a), 4096, uint32_t(a));
    // IOVA 0x70000800 + 100 is entry 0 (pg[2]) at 0x800 + 100, then pg[0], then pg[1]
    std::vector<uint8_t> want;
    want.insert(want.end(), p.b.mem(pg[2] + 0x800 + 100), p.b.mem(pg[2]) + 4096);
    want.insert(want.end(), p.b.mem(pg[0]), p.b.mem(pg[0]) + 4096);
    want.insert(want.end(), p.b.mem(pg[1]), p.b.mem(pg[1]) + 1000);
    p.a.post_send(p.qa,
                  wqe(RNIC_WR_READ, 1, p.bufa, uint32_t(want.size()), p.keya, 0x70000800 + 100, c.out1));
    auto e = p.a.poll(p.cqa);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), want.data(), want.size()), 0);
    EXPECT_EQ(d.direct_reads(), 1u);
    // deregistered: the READ goes on the wire, which refuses it
    struct rnic_cmd dc = {};
    dc.opcode = RNIC_CMD_DEREG_MR;
    dc.handle = c.out1;
    ASSERT_EQ(p.b.cmd(dc), RNIC_CMD_ST_OK);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa, 64, p.keya, 0x70000800 + 100, c.out1));
    auto f = p.wait_a(1);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].status, RNIC_WC_REM_ACCESS_ERR);
    EXPECT_EQ(d.direct_reads(), 1u);
}

// Only the responder QP's connected peer may use it directly: another QP of the requester's node
// (another user's, aimed at the victim's QP and MR) takes the wire, where it lacks the
// connection's PSN and gets nothing; on the direct path it read and wrote the victim's memory.
TEST(RnicDirect, OnlyTheResponderQpsConnectedPeerIsServed)
{
    DirectPair d;
    Pair &p = d.p;
    // the intruder: a QP of its own on node 0, pointed at b's QP, with its own first PSN
    auto intruder = [&](uint32_t psn) {
        Node::Qp q = p.a.create_qp(p.pda, p.cqa, p.cqa);
        p.a.connect(q, 1, p.qb.qpn, 1024, 1, 1, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS,
                    psn);
        return q;
    };
    Node::Qp x = intruder(0x123456);
    std::memset(p.a.mem(p.bufa), 0, 4096);
    p.a.post_send(x, wqe(RNIC_WR_READ, 1, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    auto e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_NE(e[0].status, RNIC_WC_SUCCESS);
    std::vector<uint8_t> zero(4096, 0);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), zero.data(), 4096), 0)
        << "the victim's bytes reached the intruder";
    Node::Qp y = intruder(0x654321);
    std::vector<uint8_t> before(p.b.mem(p.bufb), p.b.mem(p.bufb) + 4096);
    fill(p.a.mem(p.bufa), 4096, 77);
    p.a.post_send(y, wqe(RNIC_WR_WRITE, 2, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    p.wait_a(1);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), before.data(), 4096), 0)
        << "the intruder wrote the victim's memory";
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_READS), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), 0u);
    // the connected peer still is served directly
    EXPECT_EQ(d.read(0, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 1u);
}

// Every check the responder makes is made on the direct path too: what it refuses goes on the
// wire and gets the wire's answer; what the bridge must see (eth_watched) goes on the wire.
TEST(RnicDirect, WhatTheDirectPathRefusesGetsTheWiresAnswer)
{
    {
        SCOPED_TRACE("bad rkey");
        DirectPair d;
        EXPECT_EQ(d.read(0, 64, 0, d.p.keyb + 1).status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("beyond the MR");
        DirectPair d;
        EXPECT_EQ(d.read(Pair::kBuf - 4, 8).status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the MR does not allow remote READ");
        DirectPair d;
        const uint64_t buf = d.p.b.alloc(4096);
        const uint32_t key = d.p.b.mr(d.p.pdb, buf, 4096, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, buf, key));
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder QP does not take remote READs");
        DirectPair d(RNIC_ACCESS_REMOTE_WRITE);
        EXPECT_EQ(d.read(0, 64).status, RNIC_WC_REM_INV_REQ_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder QP is still in RTR (its first packet raises COMM_EST)");
        DirectWorld w;
        Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTR, w.config(0),
               w.config(1));
        w.ram[0] = p.a.host.ram.data();
        w.ram[1] = p.b.host.ram.data();
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 1, p.bufa, 64, p.keya, p.bufb, p.keyb));
        auto e = p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_READS), 0u);
        EXPECT_GT(w.runs, 0u);
    }
    {
        SCOPED_TRACE("the responder QP is in the error state");
        DirectPair d;
        struct rnic_cmd_modify_qp m = {};
        m.attr_mask = RNIC_QP_ATTR_STATE;
        m.state = RNIC_QPS_ERR;
        ASSERT_EQ(d.p.b.modify(d.p.qb.qpn, m), RNIC_CMD_ST_OK);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_RETRY_EXC_ERR) << "frames to an error QP are dropped";
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    for (uint64_t watched : {1ull << 0, 1ull << 1}) {
        SCOPED_TRACE("the bridge watches node " + std::to_string(watched >> 1));
        DirectPair d;
        d.w.watched = watched;
        const uint64_t sent0 = d.p.link.sent;
        EXPECT_EQ(d.read(0, 4000).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb), 4000), 0);
        EXPECT_GT(d.p.link.sent, sent0);
        EXPECT_EQ(d.direct_reads(), 0u);
        d.w.watched = 1ull << 2; // another node's: direct again
        EXPECT_EQ(d.read(0, 4000).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(d.direct_reads(), 1u);
    }
    for (int answer : {int(RK_RMEM_NO_DIRECT), int(RK_RMEM_UNREACHABLE)}) {
        SCOPED_TRACE("remote memory answers " + std::to_string(answer));
        DirectPair d;
        d.w.answer = answer;
        EXPECT_EQ(d.read(8, 100).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb + 8), 100), 0);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder is disabled, then enabled: the wire's retransmission gets it");
        DirectPair d;
        d.p.b.nic->ctrl_write(RNIC_REG_CTRL, 0, 4);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        EXPECT_TRUE(d.p.a.poll(d.p.cqa).empty());
        EXPECT_EQ(d.direct_reads(), 0u);
        d.p.run([&] { return d.p.b.counter(RNIC_CNT_INDEX_RX_DISABLED) > 0; });
        d.p.b.nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE, 4);
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb), 64), 0);
    }
    {
        SCOPED_TRACE("the responder's VM is stopped");
        DirectPair d;
        d.p.b.nic->pause(true);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        EXPECT_TRUE(d.p.a.poll(d.p.cqa).empty());
        EXPECT_EQ(d.direct_reads(), 0u);
        d.p.b.nic->pause(false);
        EXPECT_EQ(d.p.wait_a(1).size(), 1u);
    }
}

// The published page lists have a fixed room: an MR that does not fit is published without its
// pages (its READs take the wire) and gets them once a deregistration made room.
TEST(RnicDirect, MrsBeyondThePublishedRoomTakeTheWireUntilThereIsRoom)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t cap = (RK_RMEM_TAIL_RNIC_SIZE - RNIC_PUB_PAGES_OFF) / 8;
    // page lists over the same 4 physical pages again and again
    const uint64_t phys = p.b.alloc(4 * 4096);
    fill(p.b.mem(phys), 4 * 4096, 5);
    auto reg = [&](uint64_t iova, uint32_t npages) {
        const uint64_t list = p.b.alloc(8ull * npages, 8);
        for (uint32_t i = 0; i < npages; i++) {
            const uint64_t a = phys + 4096ull * (i % 4);
            std::memcpy(p.b.mem(list + 8ull * i), &a, 8);
        }
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_REG_MR;
        c.handle = p.pdb;
        c.params.mr = {iova, 4096ull * npages, list, npages, RNIC_ACCESS_ALL, 12, 0, 0, 0};
        EXPECT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
        return c.out1;
    };
    const uint32_t big = reg(0x100000000ull, uint32_t(cap - 10));
    const uint32_t small = reg(0x200000000ull, 20); // does not fit beside it
    auto direct_after = [&](uint32_t key, uint64_t iova) {
        const uint64_t before = d.direct_reads();
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 1, p.bufa, 6000, p.keya, iova + 4096 + 100, key));
        auto e = p.wait_a(1);
        EXPECT_EQ(e.size(), 1u);
        EXPECT_EQ(e.empty() ? 99u : e[0].status, RNIC_WC_SUCCESS);
        // page 1 of the list is phys page 1, page 2 is phys page 2
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(phys + 4096 + 100), 6000), 0);
        return d.direct_reads() > before;
    };
    EXPECT_TRUE(direct_after(big, 0x100000000ull));
    EXPECT_FALSE(direct_after(small, 0x200000000ull)) << "published without its pages";
    struct rnic_cmd dc = {};
    dc.opcode = RNIC_CMD_DEREG_MR;
    dc.handle = big;
    ASSERT_EQ(p.b.cmd(dc), RNIC_CMD_ST_OK);
    EXPECT_TRUE(direct_after(small, 0x200000000ull)) << "room again after the deregistration";
}

TEST(RnicDirect, ResetAndLoadRepublish)
{
    DirectPair d;
    Pair &p = d.p;
    EXPECT_EQ(d.read(0, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 1u);
    // the responder's state saved and loaded into itself: the table is the same afterwards
    RnicSnapshot s = p.b.nic->save();
    std::string why;
    ASSERT_TRUE(p.b.nic->load(s, &why)) << why;
    EXPECT_EQ(d.read(64, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 2u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), 2u) << "counted across the load";
    // reset: no QP, no MR, disabled; nothing published that a peer could read
    p.b.nic->reset();
    const auto *pub = reinterpret_cast<const rnic_pub *>(d.w.tail[1].data() + RK_RMEM_TAIL_RNIC_OFF);
    EXPECT_EQ(pub->magic, RNIC_PUB_MAGIC);
    EXPECT_EQ(pub->flags, 0u);
    EXPECT_EQ(pub->seq % 2, 0u);
    for (const auto &q : pub->qp)
        EXPECT_EQ(q.pdn, 0u);
    for (const auto &m : pub->mr)
        ASSERT_EQ(m.key, 0u);
}

} // namespace
