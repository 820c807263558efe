// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicMigration: pause, save and load (docs/rnic.md
// "Migration", hw/rnic/rnic_state.cc). The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "rnic_capi.h"
#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

// ---- migration (docs/rnic.md "Migration", hw/rnic/rnic_state.cc) ----

// The state as the device ops save it (one string, hw/core/state.h).
std::vector<uint8_t> bytes(const RnicSnapshot &s)
{
    StateOut out;
    out.put(s);
    return out.bytes();
}

bool same_state(const RnicSnapshot &x, const RnicSnapshot &y)
{
    return bytes(x) == bytes(y);
}

size_t n_pages(const RnicSnapshot &s)
{
    size_t n = 0;
    for (const MrRec &m : s.mr)
        n += m.mr.pages.size();
    return n;
}

// A fresh core for node n (same RAM: guest RAM migrates with the VM), as after an incoming
// migration, with the state `s` loaded. Replaces n's core.
void migrate(Node &n, Link &link, const RnicSnapshot &s)
{
    RnicConfig cfg;
    rnic_default_peer_addr(n.id, cfg.mac, &cfg.ip);
    n.attach(link);
    auto fresh = std::make_unique<Rnic>(n.host.host(nullptr, nullptr, n.id, 2), cfg);
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
    EXPECT_EQ(n_pages(s), RNIC_MR_TOTAL_PAGES);
    migrate(n, l, s);
    EXPECT_TRUE(same_state(n.nic->save(), s));
    // one entry more than the device holds is refused on load
    RnicSnapshot over = s;
    over.mr.back().mr.length += 4096;
    over.mr.back().mr.pages.push_back(page);
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
    EXPECT_EQ(sa.qp.size(), 1u);
    EXPECT_EQ(sa.wr.size(), 3u);  // the device's three WRs
    EXPECT_EQ(sa.sqe.size(), 3u); // and the engine's
    EXPECT_EQ(sb.res.size(), 2u); // b's READ and FETCH_ADD resources
    EXPECT_EQ(sa.mr.size(), 1u);
    EXPECT_EQ(sa.cq.size(), 1u);
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
    EXPECT_EQ(s.mr[0].mr.pages, std::vector<uint64_t>(pl, pl + 3));
    ASSERT_EQ(s.cq.size(), 1u);
    EXPECT_EQ(s.cq[0].cq.arm, RNIC_CQ_ARM_NEXT);
    EXPECT_EQ(s.cq[0].cq.vector, 3u);
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
    EXPECT_EQ(sb.qp[0].rc.in_msg, 1u); // a SEND in progress
    EXPECT_EQ(sb.qp[0].rc.msg_off, 256u);
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
    EXPECT_EQ(first2->e.resume, first2->e.first);
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
        {"ctrl", [](RnicSnapshot &s) { s.st.ctrl |= 1u << 5; }},
        {"int_status", [](RnicSnapshot &s) { s.st.int_status |= 1u << 9; }},
        {"irq_lines", [](RnicSnapshot &s) { s.st.irq_lines ^= 1; }},
        {"cmd_status", [](RnicSnapshot &s) { s.st.cmd_status = 0x10000; }},
        {"n_qp", [](RnicSnapshot &s) { s.qp.resize(RNIC_MAX_QP + 1, s.qp[0]); }},
        {"counter base", [](RnicSnapshot &s) { s.st.cnt_base[0] = s.st.counters[0] + 1; }},
        {"next_seq 0", [](RnicSnapshot &s) { s.st.next_seq = 0; }},
        {"mr index", [](RnicSnapshot &s) { s.mr[0].index = RNIC_MAX_MR; }},
        {"mr tag", [](RnicSnapshot &s) { s.st.mr_tag[s.mr[0].index] = 0; }},
        {"mr twice", [](RnicSnapshot &s) { s.mr.push_back(s.mr[0]); }},
        {"mr pd", [](RnicSnapshot &s) { s.mr[0].mr.pdn = 200; }},
        {"mr pd 0", [](RnicSnapshot &s) { s.mr[0].mr.pdn = 0; }},
        {"mr access", [](RnicSnapshot &s) { s.mr[0].mr.access |= 1u << 20; }},
        {"mr remote write without local",
         [](RnicSnapshot &s) { s.mr[0].mr.access = RNIC_ACCESS_REMOTE_WRITE; }},
        {"mr outside RAM", [](RnicSnapshot &s) { s.mr[0].mr.iova = kBase + kRam - 100; }},
        {"mr length 0", [](RnicSnapshot &s) { s.mr[0].mr.length = 0; }},
        {"mr phys with pages", [](RnicSnapshot &s) { s.mr[0].mr.pages.push_back(kBase); }},
        {"mr page list", [](RnicSnapshot &s) { s.mr[0].mr.phys = false; }},
        {"cq index", [](RnicSnapshot &s) { s.cq[0].index = RNIC_MAX_CQ; }},
        {"cq depth", [](RnicSnapshot &s) { s.cq[0].cq.depth_log2 = RNIC_DEPTH_LOG2_MAX + 1; }},
        {"cq vector", [](RnicSnapshot &s) { s.cq[0].cq.vector = RNIC_MSIX_VECTORS; }},
        {"cq ring alignment", [](RnicSnapshot &s) { s.cq[0].cq.ring += 8; }},
        {"cq ring outside RAM", [](RnicSnapshot &s) { s.cq[0].cq.ring = kBase + kRam; }},
        {"cq indices",
         [](RnicSnapshot &s) { s.cq[0].cq.pi = s.cq[0].cq.ci + (1u << s.cq[0].cq.depth_log2) + 1; }},
        {"cq arm", [](RnicSnapshot &s) { s.cq[0].cq.arm = 9; }},
        {"qp index", [](RnicSnapshot &s) { s.qp[0].dev.index = RNIC_MAX_QP; }},
        {"qp twice", [](RnicSnapshot &s) { s.qp.push_back(s.qp[0]); }},
        {"qp pd", [](RnicSnapshot &s) { s.qp[0].dev.pdn = 9; }},
        {"qp cq", [](RnicSnapshot &s) { s.qp[0].dev.send_cqn = 5; }},
        {"qp depth", [](RnicSnapshot &s) { s.qp[0].dev.sq_log2 = 0; }},
        {"qp ring outside RAM", [](RnicSnapshot &s) { s.qp[0].dev.rq_ring = kBase + kRam - 64; }},
        {"qp ring alignment", [](RnicSnapshot &s) { s.qp[0].dev.sq_ring += 4; }},
        {"qp sq indices", [](RnicSnapshot &s) { s.qp[0].dev.sq_pi = s.qp[0].dev.sq_ci + 1000; }},
        {"qp state", [](RnicSnapshot &s) { s.qp[0].rc.state = QpState(5); }},
        {"qp device state", [](RnicSnapshot &s) { s.qp[0].dev.state = 7; }},
        {"qp dest node", [](RnicSnapshot &s) { s.qp[0].dev.dest_node = 100000; }},
        {"qp path mtu", [](RnicSnapshot &s) { s.qp[0].rc.attr.path_mtu = 300; }},
        {"qp dest qpn", [](RnicSnapshot &s) { s.qp[0].rc.attr.dest_qpn = 1u << 24; }},
        {"qp psn 24 bits", [](RnicSnapshot &s) { s.qp[0].rc.next_psn |= 1u << 24; }},
        {"qp epsn 24 bits", [](RnicSnapshot &s) { s.qp[0].rc.epsn = 0xffffffff; }},
        {"qp msn", [](RnicSnapshot &s) { s.qp[0].rc.msn = 1u << 24; }},
        {"qp outstanding window",
         [](RnicSnapshot &s) { s.qp[0].rc.una = (s.qp[0].rc.next_psn + 1) & ROCE_PSN_MASK; }},
        {"qp rd_atomic", [](RnicSnapshot &s) { s.qp[0].rc.attr.max_dest_rd_atomic = 0; }},
        {"qp resources", [](RnicSnapshot &s) { s.qp[0].n_res = 3; }},
        {"qp resource index", [](RnicSnapshot &s) { s.qp[0].rc.res_next = s.qp[0].n_res; }},
        {"qp timeout", [](RnicSnapshot &s) { s.qp[0].rc.attr.timeout = 32; }},
        {"qp retry", [](RnicSnapshot &s) { s.qp[0].rc.retry_left = 8; }},
        {"qp access", [](RnicSnapshot &s) { s.qp[0].rc.attr.access = RNIC_ACCESS_LOCAL_WRITE; }},
        {"qp message", [](RnicSnapshot &s) { s.qp[0].rc.in_msg = 3; }},
        {"qp reads outstanding",
         [](RnicSnapshot &s) { s.qp[0].rc.rd_outstanding = s.qp[0].rc.attr.max_rd_atomic + 1; }},
        {"qp cursor", [](RnicSnapshot &s) { s.qp[0].rc.cursor = 4; }},
        {"qp held bad WQE missing", [](RnicSnapshot &s) { s.qp[0].dev.bad_held = true; }},
        {"qp receive length", [](RnicSnapshot &s) { s.qp[0].dev.rlen = uint64_t(RNIC_MAX_MSG) + 1; }},
        {"qp local error", [](RnicSnapshot &s) { s.qp[0].dev.rlerr = 99; }},
        {"qp AckReq count", [](RnicSnapshot &s) { s.qp[0].rc.since_ackreq = 1000; }},
        {"qp rnr retries left", [](RnicSnapshot &s) { s.qp[0].rc.rnr_left = 9; }},
        {"qp rnr timer", [](RnicSnapshot &s) { s.qp[0].rc.attr.min_rnr_timer = 32; }},
        {"qp recv cq", [](RnicSnapshot &s) { s.qp[0].dev.recv_cqn = RNIC_MAX_CQ; }},
        {"qp rq indices", [](RnicSnapshot &s) { s.qp[0].dev.rq_ci = s.qp[0].dev.rq_pi + 1; }},
        {"qp initiator depth", [](RnicSnapshot &s) { s.qp[0].rc.attr.max_rd_atomic = RC_MAX_RD_ATOMIC + 1; }},
        {"pd gone", [](RnicSnapshot &s) { s.st.pd_valid = {}; }},
        {"wr length", [](RnicSnapshot &s) { s.wr[0].wr.len = uint64_t(RNIC_MAX_MSG) + 1; }},
        {"sqe length", [](RnicSnapshot &s) { s.sqe[0].e.wr.length = RNIC_MAX_MSG + 1; }},
        {"wr qp", [](RnicSnapshot &s) { s.wr[0].qp_index = 7; }},
        {"wr seq", [](RnicSnapshot &s) { s.wr[0].seq = s.st.next_seq; }},
        {"wr twice", [](RnicSnapshot &s) { s.wr.push_back(s.wr[0]); }},
        {"wr bad without flag", [](RnicSnapshot &s) { s.wr[0].bad = true; }},
        {"wr lerr", [](RnicSnapshot &s) { s.wr[0].wr.lerr = 99; }},
        {"sqe qp", [](RnicSnapshot &s) { s.sqe[0].qp_index = 3; }},
        {"sqe without a WR", [](RnicSnapshot &s) { s.sqe[0].e.wr.local = s.sqe[0].e.wr.wr_id = 12345; }},
        {"sqe op", [](RnicSnapshot &s) { s.sqe[0].e.wr.op = WrOp(99); }},
        {"sqe psn", [](RnicSnapshot &s) { s.sqe[1].e.first = 1u << 24; }},
        {"sqe packets", [](RnicSnapshot &s) { s.sqe[0].e.npkts = 0; }},
        {"sqe order", [](RnicSnapshot &s) { s.sqe[0].e.assigned = false; }},
        {"sqe beyond the WRs", [](RnicSnapshot &s) { s.sqe.push_back(s.sqe[0]), s.sqe.push_back(s.sqe[0]); }},
    };
    const std::vector<std::pair<const char *, M>> bad_b = {
        {"res qp", [](RnicSnapshot &s) { s.res[0].qp_index = 2; }},
        {"res slot", [](RnicSnapshot &s) { s.res[0].slot = s.qp[0].n_res; }},
        {"res twice", [](RnicSnapshot &s) { s.res.push_back(s.res[0]); }},
        {"res psn", [](RnicSnapshot &s) { s.res[0].r.last = 1u << 24; }},
        {"res not valid", [](RnicSnapshot &s) { s.res[0].r.valid = false; }},
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

// ---- the state as one string, through the device operations (rnic_capi.h) ----

std::vector<uint8_t> ops_save(Node &n)
{
    uint8_t *buf = nullptr;
    uint64_t len = 0;
    EXPECT_EQ(rk_rnic_device_ops.save(n.nic.get(), &buf, &len), 0);
    std::vector<uint8_t> v(buf, buf + len);
    free(buf);
    return v;
}

// 0, or -EINVAL with the reason in *why
int ops_load(Node &n, const std::vector<uint8_t> &b, std::string *why)
{
    char msg[300] = "";
    const int rc = rk_rnic_device_ops.load(n.nic.get(), b.data(), b.size(), msg, sizeof(msg));
    *why = msg;
    return rc;
}

// A fresh core for node n (as after an incoming migration) with the string `b` loaded.
void migrate_bytes(Node &n, Link &link, const std::vector<uint8_t> &b)
{
    RnicConfig cfg;
    rnic_default_peer_addr(n.id, cfg.mac, &cfg.ip);
    n.attach(link);
    n.nic = std::make_unique<Rnic>(n.host.host(nullptr, nullptr, n.id, 2), cfg);
    std::string why;
    ASSERT_EQ(ops_load(n, b, &why), 0) << why;
}

TEST(RnicMigration, StateStringLoadsIntoAFreshCoreSavesTheSameBytesAndTheWorkCompletes)
{
    MidTransfer p;
    const std::vector<uint8_t> sa = ops_save(p.a), sb = ops_save(p.b);
    EXPECT_EQ(sa, bytes(p.a.nic->save())); // the ops' string is the snapshot's
    EXPECT_LE(sa.size(), rk_rnic_device_ops.state_max);
    migrate_bytes(p.a, p.link, sa);
    migrate_bytes(p.b, p.link, sb);
    EXPECT_EQ(ops_save(p.a), sa);
    EXPECT_EQ(ops_save(p.b), sb);
    auto c = p.wait_a(3); // behaves the same: retransmission completes the unacknowledged work
    ASSERT_EQ(c.size(), 3u);
    for (unsigned i = 0; i < 3; i++)
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
    uint64_t word = 0;
    std::memcpy(&word, p.b.mem(p.bufb + 0x20000), 8);
    EXPECT_EQ(word, MidTransfer::kInit + MidTransfer::kAdd);
}

TEST(RnicMigration, TruncatedStateStringIsRefusedNamingTheFieldAndChangesNothing)
{
    MidTransfer p;
    const std::vector<uint8_t> before = ops_save(p.a);
    std::vector<uint8_t> b = before;
    b.pop_back();
    std::string why;
    EXPECT_EQ(ops_load(p.a, b, &why), -EINVAL);
    EXPECT_NE(why.find("ends 1 bytes early"), std::string::npos) << why;
    EXPECT_NE(why.find(':'), 0u) << why; // "<field>: ..."
    EXPECT_EQ(ops_save(p.a), before);
    EXPECT_EQ(ops_load(p.a, {}, &why), -EINVAL);
    EXPECT_NE(why.find("ctrl:"), std::string::npos) << why; // the first field
    EXPECT_EQ(ops_save(p.a), before);
}

TEST(RnicMigration, StateStringWithTrailingBytesIsRefusedAndChangesNothing)
{
    MidTransfer p;
    const std::vector<uint8_t> before = ops_save(p.a);
    std::vector<uint8_t> b = before;
    b.push_back(0);
    std::string why;
    EXPECT_EQ(ops_load(p.a, b, &why), -EINVAL);
    EXPECT_NE(why.find("1 bytes left over"), std::string::npos) << why;
    EXPECT_EQ(ops_save(p.a), before);
}

TEST(RnicMigration, OutOfRangeValuesInTheStringAreRefusedNamingTheFieldAndChangeNothing)
{
    MidTransfer p;
    const std::vector<uint8_t> before = ops_save(p.a);
    std::string why;
    // a flag that is neither 0 nor 1: the fixed part's last field, link_up
    StateOut fixed;
    fixed.put(p.a.nic->save().st);
    std::vector<uint8_t> b = before;
    b[fixed.bytes().size() - 1] = 2;
    EXPECT_EQ(ops_load(p.a, b, &why), -EINVAL);
    EXPECT_NE(why.find("link_up: 2 is not a boolean"), std::string::npos) << why;
    EXPECT_EQ(ops_save(p.a), before);
    // a CQ's interrupt vector beyond the device's
    RnicSnapshot s = p.a.nic->save();
    s.cq[0].cq.vector = RNIC_MSIX_VECTORS;
    EXPECT_EQ(ops_load(p.a, bytes(s), &why), -EINVAL);
    EXPECT_NE(why.find("vector"), std::string::npos) << why;
    EXPECT_EQ(ops_save(p.a), before);
    // a list longer than any the device holds is refused before it is allocated
    b = before;
    StateOut head;
    head.put(s.st);
    const size_t at = head.bytes().size(); // the MR list's count
    const uint32_t n = RNIC_MR_TOTAL_PAGES + 1;
    std::memcpy(&b[at], &n, 4);
    EXPECT_EQ(ops_load(p.a, b, &why), -EINVAL);
    EXPECT_NE(why.find("mr: 1048577 entries, at most 1048576"), std::string::npos) << why;
    EXPECT_EQ(ops_save(p.a), before);
}

TEST(RnicMigration, CreateRefusesABadAtomicUnitProperty)
{
    TestHost h(kRam, kBase);
    const RkHost raw = h.raw();
    RkRnicConfig cfg = {};
    cfg.timing = {100000, 300, 500, 400, 16000, 4096, 345, 111, 55};
    char err[200] = "";
    EXPECT_EQ(rk_rnic_device_ops.create(&raw, &cfg, err, sizeof(err)), nullptr); // zero amu-*: refused
    EXPECT_NE(std::string(err).find("amu-"), std::string::npos) << err;
}

} // namespace
