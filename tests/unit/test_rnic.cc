// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core (hw/rnic), suite Rnic: registers, commands and the verbs
// objects, every operation at boundary sizes, local errors and refusals, doorbells, completions,
// arming and interrupts, loopback and the timing model, the threading contract, reset. The rig is
// rnic_rig.h; the other suites: test_rnic_atomics.cc (RnicAtomics), test_rnic_flush.cc
// (RnicFlush), test_rnic_link.cc (RnicLink), test_rnic_events.cc (RnicEvents),
// test_rnic_migration.cc (RnicMigration), test_rnic_direct.cc (RnicDirect).
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

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

} // namespace
