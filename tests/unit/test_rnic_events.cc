// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicEvents: the asynchronous event queue
// (docs/rnic.md "Async events"): its registers, QP, CQ and port events, arming, overflow, link
// changes while the VM is stopped. The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

// ---- the async event queue ----

TEST(RnicEvents, EventQueueRegistersRefuseBadSettings)
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
TEST(RnicEvents, EventQueueQpFatalOnRetryExhaustionAndDoorbellFault)
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
TEST(RnicEvents, EventQueueResponderAccessAndRequestErrors)
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
TEST(RnicEvents, EventQueueCommunicationEstablishedOnTheFirstPacketInRtr)
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
TEST(RnicEvents, EventQueuePortEventsArmingAndOverflow)
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

TEST(RnicEvents, LinkChangesWhileThePausedVmIsStoppedWriteNothingUntilItRuns)
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

} // namespace
