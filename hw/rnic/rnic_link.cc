// SPDX-License-Identifier: MIT
//
// The RNIC's link (docs/rnic.md "Backpressure", "Threading"): frames out (send_frame, the
// engine's RcEnv::send_frame), frames in (on_frame), the timers (poll, next_deadline_ns) and the
// port's link state (set_link: STATUS.LINK_UP and a PORT_ACTIVE / PORT_ERR event).
//   Out: a frame to this node's own MAC is looped back (loop_, delivered by after_engine once the
//   current call is done); no link: dropped and counted; else SendFn. SendFn says Busy (the port's
//   ring is full) -> BLOCKED: the frame and every later one are held in order (held_, at most
//   tx_hold_max_bytes; beyond, dropped and counted: RC retransmission recovers them), the engine's
//   requesters pause at their next PSN (tx_ready()), tx_wait() asks the glue for tx_resume()
//   -> tx_resume() (or poll(), without a transmit thread) sends the held frames in order; all out
//   -> SENDING, rc_->resume_tx() and the paused send queues go on.
//   In: a frame whose delivery starts within kRxPassGapNs of the previous one's end belongs to
//   the same receive pass (its atomics reach the atomic unit at the pass's start).
//   While the VM is stopped (pause(), rnic_state.cc) frames in are held, timers and held frames
//   wait, and a link change is applied at pause(false).
//
// Threading: on_frame from the fabric port's thread, poll from the glue's timer (main loop),
// tx_resume from the glue's transmit thread, set_link from the port's link watcher; each takes
// mu_ for its whole run. send_frame, hold_frame and drain_held run with mu_ held; SendFn and
// TxWaitFn are called with it held and must not call back into the core.
//
// Specification: RoCEv2 frames (IBA Annex A17, as wire.h builds and parses them); nothing here
// looks into a frame but its destination MAC.
//
// Caveat: the only pushback is the port's ring (no PAUSE or PFC); beyond the hold limit frames are
// lost as on a lossy link.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

void Rnic::set_link(bool up)
{
    std::lock_guard lk(mu_);
    if (!cfg_.link) return;
    if (paused_) { // the VM is stopped: nothing is written now; pause(false) applies it
        link_pending_ = up ? 1 : 0;
        return;
    }
    if (up == eq_.link_up) return;
    eq_.link_up = up;
    eq_event(up ? RNIC_EV_PORT_ACTIVE : RNIC_EV_PORT_ERR, RNIC_PORT_NUM, 0);
}

void Rnic::send_frame(const uint8_t *frame, size_t len)
{
    ctr_.modeled_link_ns += ser_ns(len + kWireOverhead);
    if (len >= 6 && std::memcmp(frame, cfg_.mac, 6) == 0) {
        loop_.emplace_back(frame, frame + len); // to this node: delivered after the current call
        return;
    }
    if (!cfg_.link) {
        ctr_.link_tx_drops++;
        return;
    }
    if (tx_blocked_) { // behind the frames already held: order is kept
        hold_frame(frame, len);
        return;
    }
    switch (link_send(frame, len)) {
    case LinkTx::Sent:
        return;
    case LinkTx::Dropped:
        ctr_.link_tx_drops++;
        return;
    case LinkTx::Busy:
        tx_blocked_ = true;
        ctr_.link_backpressure++;
        hold_frame(frame, len);
        host_.tx_wait();
        return;
    }
}

// The host's send_frame: 0 queued, -EAGAIN the port's ring is full, else dropped.
LinkTx Rnic::link_send(const uint8_t *frame, size_t len)
{
    const int rc = host_.send_frame(frame, len);
    return rc == 0 ? LinkTx::Sent : rc == -EAGAIN ? LinkTx::Busy : LinkTx::Dropped;
}

void Rnic::hold_frame(const uint8_t *frame, size_t len)
{
    if (held_bytes_ + len > cfg_.tx_hold_max_bytes) {
        ctr_.link_tx_drops++; // RC retransmission recovers it
        return;
    }
    held_.emplace_back(frame, frame + len);
    held_bytes_ += len;
    ctr_.link_tx_held++;
}

// Send the held frames in order; when all are out, the paused requesters continue.
void Rnic::drain_held()
{
    while (!held_.empty()) {
        const std::vector<uint8_t> &f = held_.front();
        const LinkTx r = link_send(f.data(), f.size());
        if (r == LinkTx::Busy) return;
        if (r == LinkTx::Dropped) ctr_.link_tx_drops++;
        held_bytes_ -= f.size();
        held_.pop_front();
    }
    tx_blocked_ = false;
    rc_->resume_tx();
    after_engine();
}

bool Rnic::tx_resume()
{
    std::lock_guard lk(mu_);
    if (tx_blocked_ && !paused_) drain_held();
    return tx_blocked_ && !paused_;
}

void Rnic::on_frame(const uint8_t *frame, size_t len)
{
    std::lock_guard lk(mu_);
    if (paused_) { // the VM is stopped: nothing changes until it runs again (pause())
        if (rx_paused_.size() < kPausedFrames)
            rx_paused_.emplace_back(frame, frame + len);
        else
            ctr_.rx_paused_drops++; // RC retransmission recovers it
        return;
    }
    if (!(ctrl_ & RNIC_CTRL_ENABLE)) {
        ctr_.rx_disabled++;
        return;
    }
    const uint64_t t = host_.now_ns();
    if (rx_end_ns_ == 0 || t > rx_end_ns_ + kRxPassGapNs) rx_pass_ns_ = t; // a new receive pass
    in_rx_ = true;
    rc_->receive(frame, len);
    rc_->flush_acks();
    after_engine();
    in_rx_ = false;
    rx_end_ns_ = std::max<uint64_t>(host_.now_ns(), 1);
}

void Rnic::poll()
{
    std::lock_guard lk(mu_);
    if (paused_) return;
    if (tx_blocked_) drain_held();
    rc_->poll();
    after_engine();
}

uint64_t Rnic::next_deadline_ns()
{
    std::lock_guard lk(mu_);
    return rc_->next_deadline_ns();
}

} // namespace rackemu::rnic
