// SPDX-License-Identifier: MIT
//
// The rig of the RNIC device core's unit tests (test_rnic*.cc, one file per suite): two cores on
// TestHosts, back to back over an in-process Ethernet link (Link) with seeded loss, duplication,
// reordering and corruption, a port ring that can push back, and a fake clock (Rig::run). A small
// driver does what the kernel driver does (Node: command blocks, rings in guest RAM, WQEs,
// doorbells, CQ polling; Eq: the event queue); Pair is a connected pair of QPs with an MR and a CQ
// each, LoopNode one node whose two QPs talk through the device's loopback. Assertions are on the
// bytes in guest RAM, the CQEs, the registers and the counters.
#pragma once

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

namespace rackemu::rnic::rig {

using rackemu::test::TestHost;

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
        attach(link);
        nic = std::make_unique<Rnic>(host.host(nullptr, nullptr, id, 2), cfg);
        nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE, 4);
    }
    // The host's link: frames to `link`, push-back recorded for Rig::run.
    void attach(Link &link)
    {
        host.send_frame = [&link](const uint8_t *f, size_t n) {
            const LinkTx r = link.send(f, n);
            return r == LinkTx::Sent ? 0 : r == LinkTx::Busy ? -EAGAIN : -EIO;
        };
        host.tx_wait = [this] { tx_waiting = true, tx_wait_calls++; };
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

inline struct rnic_send_wqe wqe(uint8_t op, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey,
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

inline void fill(uint8_t *p, size_t n, uint32_t seed)
{
    std::mt19937 r(seed);
    for (size_t i = 0; i < n; i++)
        p[i] = uint8_t(r());
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

} // namespace rackemu::rnic::rig
