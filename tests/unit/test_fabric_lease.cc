// The "poller present" lease of the fabric's rings (shm_ring.h: lease_renew, wake_consumer,
// lease_follow_up; docs/fabric.md, "Poller present"), on one ring in this process's memory so
// that TSan sees every access (test_bridge maps each ring twice, which TSan cannot follow).
//
// The roles are those of the real fabric: a producer (the bridge's router) that pushes frames and
// skips the wake-up of a sleeping consumer while a poller holds a lease, then follows up; the
// consumer's "port thread" that sleeps on the ring's futex without a timeout; a "vCPU" that polls
// the ring now and then, renewing the lease, and stops at random moments. Whatever the timing,
// every frame must be taken, in order, and nothing may stall.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "shm_ring.h"

using namespace rackemu::fabric;
using namespace std::chrono_literals;

namespace {

rkf_frame_hdr frame(uint64_t seq)
{
    rkf_frame_hdr h{};
    h.magic = RKF_FRAME_MAGIC;
    h.type = RKF_T_MSG;
    h.tag = seq;
    return h;
}

void sleep_until_ns(uint64_t t)
{
    const uint64_t now = now_ns();
    if (t > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
}

// The consumer's side: the right to consume (the port's rx_mu) and what was taken.
struct Consumer {
    std::unique_ptr<Ring> ring = std::make_unique<Ring>();
    std::mutex rx_mu;
    std::atomic<uint64_t> taken{0}, by_poller{0}, by_thread{0}, out_of_order{0}, thread_sleeps{0};
    std::atomic<bool> stop{false};

    Consumer() { std::memset(static_cast<void *>(ring.get()), 0, sizeof(Ring)); }

    // rx_mu held. Pops everything, checks the order.
    unsigned drain(std::atomic<uint64_t> &by)
    {
        rkf_frame_hdr h;
        unsigned char payload[RKF_SLOT_SIZE];
        unsigned n = 0;
        while (ring_pop(*ring, h, payload) == PopResult::Ok) {
            if (h.tag != taken.load(std::memory_order_relaxed)) out_of_order++;
            taken.fetch_add(1, std::memory_order_release);
            n++;
        }
        by += n;
        return n;
    }

    // The port thread (port.cc, run()): drain, spin a little, then sleep without a timeout. With
    // a `backstop` (ns), the port thread on a pair ring (docs/fabric.md, "Poller present on pair
    // rings"): it announces kAsleepTimed while a poller holds the lease, and then sleeps at most
    // `backstop`; a timed wake-up that finds frames is the backstop at work.
    std::atomic<uint64_t> backstops{0};
    void port_thread(uint64_t backstop = 0)
    {
        uint64_t last = now_ns();
        while (!stop.load()) {
            unsigned n;
            {
                std::lock_guard lk(rx_mu);
                n = drain(by_thread);
            }
            if (n) {
                last = now_ns();
                continue;
            }
            if (now_ns() - last < 2000) {
                cpu_relax();
                continue;
            }
            thread_sleeps++;
            if (backstop) {
                pair_sleep(backstop);
            } else {
                futex_sleep(&ring->ctl.sleeping, -1, [&] { return !ring_empty(*ring) || stop.load(); });
            }
            last = now_ns();
        }
    }

    void pair_sleep(uint64_t backstop)
    {
        RingCtl &c = ring->ctl;
        const bool timed = lease_valid(c.poll_lease.load(std::memory_order_relaxed), now_ns());
        const uint32_t v = timed ? kAsleepTimed : kAsleep;
        c.sleeping.store(v, std::memory_order_seq_cst);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (ring_empty(*ring) && !stop.load()) {
            const timespec ts{time_t(backstop / 1000000000), long(backstop % 1000000000)};
            const bool timed_out =
                futex_op(&c.sleeping, FUTEX_WAIT, v, timed ? &ts : nullptr) < 0 && errno == ETIMEDOUT;
            if (timed_out && !ring_empty(*ring)) backstops++;
        }
        c.sleeping.store(kAwake, std::memory_order_relaxed);
    }

    // A vCPU reading a device register (port.cc, poll_rx): renew the lease, take what is there.
    void poll(uint64_t lease)
    {
        if (!rx_mu.try_lock()) return;
        lease_renew(ring->ctl, lease);
        if (!ring_empty(*ring)) drain(by_poller);
        rx_mu.unlock();
    }

    bool wait_taken(uint64_t n, std::chrono::seconds limit)
    {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (taken.load(std::memory_order_acquire) < n) {
            if (std::chrono::steady_clock::now() > end) return false;
            std::this_thread::sleep_for(100us);
        }
        return true;
    }

    void shut_down(std::thread &t)
    {
        if (!t.joinable()) return;
        stop = true;
        futex_wake_always(&ring->ctl.sleeping);
        t.join();
    }
};

// Stops the port thread also when an assertion ends the test early.
struct PortThread {
    Consumer &c;
    std::thread t;
    explicit PortThread(Consumer &c_, uint64_t backstop = 0)
        : c(c_), t([this, backstop] { c.port_thread(backstop); })
    {
    }
    ~PortThread() { c.shut_down(t); }
};

// The producer's side (the bridge's router: wake_node_locked, lease_follow_up_locked).
struct Producer {
    Ring &ring;
    bool pair = false; // a node on a pair ring (wake_pair_consumer), else the bridge's router
    bool pending = false;
    uint32_t pending_head = 0;
    uint64_t woken = 0, skipped = 0, lease_wakes = 0;

    void push(uint64_t seq)
    {
        const rkf_frame_hdr h = frame(seq);
        const uint64_t payload = seq;
        while (!ring_push(ring, h, &payload))
            std::this_thread::sleep_for(10us); // the test's ring never fills
        switch (pair ? wake_pair_consumer(ring.ctl) : wake_consumer(ring.ctl)) {
        case Wake::Woken:
            woken++;
            break;
        case Wake::Skipped:
            skipped++;
            pending = true;
            pending_head = ring.ctl.head.load(std::memory_order_relaxed);
            break;
        case Wake::None:
            break;
        }
    }

    // One follow-up; the lease's deadline while it still runs, else 0.
    uint64_t follow_up()
    {
        if (!pending) return 0;
        uint64_t due = 0;
        bool w = false;
        if (lease_follow_up(ring.ctl, pending_head, now_ns(), &due, &w)) {
            pending = false;
            lease_wakes += w;
            return 0;
        }
        return due;
    }

    // Follow up until nothing is pending, sleeping until each lease's end like the router.
    void settle()
    {
        while (uint64_t due = follow_up())
            sleep_until_ns(due);
    }
};

} // namespace

TEST(PollLease, TheProducerSkipsTheWakeOnlyWhileAValidLeaseRuns)
{
    Consumer c;
    RingCtl &ctl = c.ring->ctl;
    Producer p{*c.ring};
    // Consumer awake: nothing to do.
    p.push(0);
    EXPECT_EQ(p.woken + p.skipped, 0u);
    // Asleep, no lease: woken.
    ctl.sleeping.store(1);
    p.push(1);
    EXPECT_EQ(p.woken, 1u);
    EXPECT_EQ(ctl.sleeping.load(), 0u);
    // Asleep, a lease runs: skipped, and the follow-up waits while it runs. (The longest lease
    // believed is kLeaseMaxNs, 1 ms: a step that took longer on a loaded host is retried.)
    for (unsigned tries = 0;; tries++) {
        ASSERT_LT(tries, 100u) << "never managed to push within 1 ms of a renewal";
        ctl.sleeping.store(1);
        ctl.poll_lease.store(0);
        const uint64_t t0 = now_ns(), sk0 = p.skipped;
        ASSERT_TRUE(lease_renew(ctl, kLeaseMaxNs));
        EXPECT_FALSE(lease_renew(ctl, kLeaseMaxNs))
            << "renewed again at once: the line is written at every poll";
        p.push(2 + tries);
        const uint64_t due = p.follow_up();
        if (now_ns() - t0 >= kLeaseMaxNs / 2) { // too slow to judge: the lease may have lapsed
            std::lock_guard lk(c.rx_mu);
            c.drain(c.by_poller);
            p.pending = false;
            continue;
        }
        EXPECT_EQ(p.skipped, sk0 + 1);
        EXPECT_EQ(ctl.sleeping.load(), 1u);
        EXPECT_GT(due, now_ns());
        break;
    }
    // The poller takes the frames: the follow-up is over, no wake-up.
    {
        std::lock_guard lk(c.rx_mu);
        c.drain(c.by_poller);
    }
    EXPECT_EQ(p.follow_up(), 0u);
    EXPECT_FALSE(p.pending);
    EXPECT_EQ(p.lease_wakes, 0u);
    EXPECT_EQ(c.taken.load(), ctl.head.load());
    const uint64_t woken = p.woken, skipped = p.skipped;
    // A lease further ahead than kLeaseMaxNs (written by the untrusted side) is not believed.
    ctl.poll_lease.store(now_ns() + 10 * kLeaseMaxNs);
    ctl.sleeping.store(1);
    p.push(100);
    EXPECT_EQ(p.woken, woken + 1);
    EXPECT_EQ(p.skipped, skipped);
    // A lease in the past is none.
    ctl.poll_lease.store(now_ns() - 1);
    ctl.sleeping.store(1);
    p.push(101);
    EXPECT_EQ(p.woken, woken + 2);
    // A corrupt tail (beyond head) counts as taken, with no wake-up: it concerns only the consumer.
    ctl.poll_lease.store(now_ns() + kLeaseMaxNs);
    p.pending = true;
    p.pending_head = ctl.head.load();
    ctl.tail.store(p.pending_head + 5);
    ctl.sleeping.store(1);
    EXPECT_EQ(p.follow_up(), 0u);
    EXPECT_EQ(ctl.sleeping.load(), 1u);
    EXPECT_EQ(p.lease_wakes, 0u);
}

// The poller stops right after renewing its lease: the frame delivered meanwhile is not announced,
// and the producer's follow-up wakes the sleeping port thread once the lease has lapsed.
TEST(PollLease, AFrameLeftByAPollerThatStoppedIsWokenWhenTheLeaseLapses)
{
    Consumer c;
    PortThread port(c);
    Producer p{*c.ring};
    unsigned round = 0, slow = 0;
    while (round < 20) {
        ASSERT_LT(slow, 200u) << "never managed to deliver within 1 ms of a renewal";
        // Let the port thread go to sleep.
        const auto end = std::chrono::steady_clock::now() + 10s;
        while (c.ring->ctl.sleeping.load() == 0 && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(50us);
        ASSERT_EQ(c.ring->ctl.sleeping.load(), 1u);
        const uint64_t t0 = now_ns();
        c.poll(kLeaseMaxNs); // the longest lease believed, then this "vCPU" halts
        const uint64_t skipped = p.skipped;
        p.push(round);
        if (p.skipped == skipped) {
            // Only if the host took longer than the lease between the poll and the push.
            ASSERT_GE(now_ns() - t0, kLeaseMaxNs) << "round " << round << ": the wake-up was not skipped";
            ASSERT_TRUE(c.wait_taken(round + 1, 10s));
            slow++;
            round++;
            continue;
        }
        // Nobody takes it while the lease runs, nor after (the poller is gone, the port thread
        // asleep) until the producer follows up.
        std::this_thread::sleep_for(2ms);
        EXPECT_EQ(c.taken.load(), round);
        p.settle();
        ASSERT_TRUE(c.wait_taken(round + 1, 10s))
            << "round " << round << ": frame lost after the lease lapsed";
        round++;
    }
    EXPECT_EQ(p.skipped + slow, 20u);
    EXPECT_EQ(p.lease_wakes, p.skipped);
    EXPECT_GT(p.skipped, 0u);
    EXPECT_EQ(c.by_thread.load(), 20u);
    EXPECT_EQ(c.out_of_order.load(), 0u);
}

// Delivery raced against lease expiry many times: a poller polls in bursts with a short lease and
// stops at random moments, so frames arrive just before, as and just after leases end. All are
// taken, in order, with no stall, whoever takes them.
TEST(PollLease, DeliveryRacingLeaseExpiryLosesNothing)
{
    Consumer c;
    PortThread port(c);
    constexpr uint64_t kFrames = 20000;
    constexpr uint64_t kLease = 8000; // 8 us: leases end all the time
    std::atomic<bool> done{false};
    std::thread vcpu([&] {
        std::mt19937 rng(7);
        while (!done.load()) {
            const uint64_t burst = now_ns() + rng() % 40000;
            while (now_ns() < burst && !done.load()) {
                c.poll(kLease);
                cpu_relax();
            }
            std::this_thread::sleep_for(std::chrono::nanoseconds(rng() % 30000)); // halted
        }
    });
    Producer p{*c.ring};
    std::mt19937 rng(11);
    for (uint64_t i = 0; i < kFrames; i++) {
        p.push(i);
        // Between frames (0-12 us), follow up like the router: spin on it, and now and then
        // sleep to the lease's end (the router sleeps with a timeout).
        const uint64_t gap_end = now_ns() + rng() % 12000;
        while (now_ns() < gap_end) {
            p.follow_up();
            cpu_relax();
        }
        if (rng() % 8 == 0) {
            if (uint64_t due = p.follow_up()) sleep_until_ns(due);
        }
    }
    p.settle();
    const bool all = c.wait_taken(kFrames, 60s);
    done = true;
    vcpu.join();
    EXPECT_TRUE(all) << "taken " << c.taken.load() << " of " << kFrames << " (a frame was never announced)";
    EXPECT_EQ(c.out_of_order.load(), 0u);
    EXPECT_EQ(c.by_poller.load() + c.by_thread.load(), kFrames);
    // Both paths ran: frames skipped for a present poller, and frames handed to the port thread.
    EXPECT_GT(p.skipped, 0u);
    EXPECT_GT(c.by_thread.load(), 0u);
    std::printf(
        "frames %llu: poller %llu, port thread %llu; wake-ups %llu, skipped %llu, after a lapsed lease %llu\n",
        (unsigned long long)kFrames, (unsigned long long)c.by_poller.load(),
        (unsigned long long)c.by_thread.load(), (unsigned long long)p.woken, (unsigned long long)p.skipped,
        (unsigned long long)p.lease_wakes);
}

// The pair-ring rule under the same kind of storm, with a sender that often stops following up
// (its vCPU halted after the send): a frame whose wake-up was skipped is then taken by the
// poller, by a later follow-up, or by the consumer's backstop timer. Every frame must be taken,
// in order, whichever of them took it, and the backstop must have taken some.
TEST(PollLease, OnAPairRingASkippedWakeUpNobodyFollowsUpEndsAtTheBackstop)
{
    Consumer c;
    // A lease long enough to outlive a loaded host's scheduling delays (else hardly any wake-up
    // is skipped), a backstop beyond it and short enough for a quick test.
    constexpr uint64_t kBackstop = 300000;
    PortThread port(c, kBackstop);
    constexpr uint64_t kFrames = 4000, kMinSkipped = 50;
    constexpr uint64_t kLease = 100000;
    std::atomic<bool> done{false};
    std::thread vcpu([&] {
        std::mt19937 rng(5);
        while (!done.load()) {
            const uint64_t burst = now_ns() + rng() % 400000;
            while (now_ns() < burst && !done.load()) {
                c.poll(kLease);
                cpu_relax();
            }
            std::this_thread::sleep_for(std::chrono::nanoseconds(rng() % 100000)); // halted
        }
    });
    Producer p{*c.ring, true};
    std::mt19937 rng(13);
    uint64_t sent = 0;
    for (; (sent < kFrames || p.skipped < kMinSkipped || c.backstops.load() == 0) && sent < 50 * kFrames;
         sent++) {
        p.push(sent);
        const uint64_t gap_end = now_ns() + rng() % 30000;
        if (rng() % 2) {
            while (now_ns() < gap_end) { // the sender keeps running: it follows up
                p.follow_up();
                cpu_relax();
            }
        } else {
            sleep_until_ns(gap_end); // halted: no follow-up until its next frame
        }
    }
    p.settle();
    const bool all = c.wait_taken(sent, 60s);
    done = true;
    vcpu.join();
    EXPECT_TRUE(all) << "taken " << c.taken.load() << " of " << sent;
    EXPECT_EQ(c.out_of_order.load(), 0u);
    EXPECT_EQ(c.by_poller.load() + c.by_thread.load(), sent);
    EXPECT_GE(p.skipped, kMinSkipped) << sent << " frames";
    EXPECT_GT(c.backstops.load(), 0u) << sent << " frames"; // what nobody followed up
    std::printf(
        "frames %llu: poller %llu, port thread %llu (backstop %llu); wake-ups %llu, skipped %llu, "
        "followed up %llu\n",
        (unsigned long long)kFrames, (unsigned long long)c.by_poller.load(),
        (unsigned long long)c.by_thread.load(), (unsigned long long)c.backstops.load(),
        (unsigned long long)p.woken, (unsigned long long)p.skipped, (unsigned long long)p.lease_wakes);
}

// The rule itself: a sender finding kAsleep wakes at once whatever the lease (the port thread
// arms no timer then); finding kAsleepTimed, it skips only while the lease is valid.
TEST(PollLease, APairSenderSkipsOnlyForATimedSleeperWithAValidLease)
{
    Consumer c;
    RingCtl &ctl = c.ring->ctl;
    ctl.poll_lease.store(now_ns() + 500000);
    ctl.sleeping.store(kAsleep);
    EXPECT_EQ(wake_pair_consumer(ctl), Wake::Woken);
    EXPECT_EQ(ctl.sleeping.load(), kAwake);
    ctl.sleeping.store(kAsleepTimed);
    EXPECT_EQ(wake_pair_consumer(ctl), Wake::Skipped);
    EXPECT_EQ(ctl.wakes_skipped.load(), 1u);
    EXPECT_EQ(ctl.sleeping.load(), kAsleepTimed);
    ctl.poll_lease.store(now_ns() - 1);
    EXPECT_EQ(wake_pair_consumer(ctl), Wake::Woken);
    ctl.poll_lease.store(now_ns() + 2 * kLeaseMaxNs); // not believed
    ctl.sleeping.store(kAsleepTimed);
    EXPECT_EQ(wake_pair_consumer(ctl), Wake::Woken);
    EXPECT_EQ(wake_pair_consumer(ctl), Wake::None); // awake
    EXPECT_EQ(ctl.wakes_skipped.load(), 1u);
}
