// SPDX-License-Identifier: MIT
//
// The host interface (rackemu/host.h) for unit tests and fuzzers: every op is a std::function a
// test may replace, with defaults that model a node with `ram` as its RAM at `ram_base` (DMA
// outside it is a decode error), interrupt levels recorded per line, guest errors collected, and
// a clock the test sets. The same device cores run under QEMU through hw/qemu/rackemu_glue.c.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rackemu/host.h"

namespace rackemu::test {

class TestHost {
public:
    explicit TestHost(uint64_t ram_size = 0, uint64_t ram_base = 0) : ram(ram_size), ram_base(ram_base)
    {
        ops_.set_irq = [](void *o, unsigned line, int level) { self(o)->set_irq(line, level != 0); };
        ops_.guest_error = [](void *o, const char *msg) { self(o)->guest_error(msg); };
        ops_.dma_rw = [](void *o, uint64_t addr, void *buf, uint64_t len, int write) {
            return self(o)->dma_rw(addr, buf, len, write != 0);
        };
        ops_.dma_map = [](void *o, uint64_t addr, uint64_t *len, int write) {
            return self(o)->dma_map(addr, *len, write != 0);
        };
        ops_.dma_unmap = [](void *o, void *p, uint64_t len, int write, uint64_t access_len) {
            self(o)->dma_unmap(p, len, write != 0, access_len);
        };
        ops_.now_ns = [](void *o) { return self(o)->now_ns(); };
        ops_.persist = [](void *o, uint64_t addr, uint64_t len, uint64_t *synced) {
            return self(o)->persist(addr, len, *synced);
        };
        ops_.thread = [](void *o, int start) { self(o)->thread(start != 0); };
        ops_.send_frame = [](void *o, const uint8_t *frame, size_t len) {
            return self(o)->send_frame(frame, len);
        };
        ops_.tx_wait = [](void *o) { self(o)->tx_wait(); };
        ops_.timer_arm = [](void *o, unsigned id, uint64_t deadline_ns) {
            self(o)->timer_arm(id, deadline_ns);
        };
        ops_.nvm = [](void *o, unsigned op, uint64_t addr, const void *data, uint64_t len) {
            return self(o)->nvm(op, addr, data, len);
        };
        set_irq = [this](unsigned line, bool level) {
            std::lock_guard lk(mu);
            if (line >= irq.size()) irq.resize(line + 1, false);
            if (level && !irq[line]) irq_raised++;
            irq[line] = level;
        };
        guest_error = [this](const std::string &m) {
            std::lock_guard lk(mu);
            errors.push_back(m);
        };
        dma_rw = [this](uint64_t addr, void *buf, uint64_t len, bool write) {
            if (!in_ram(addr, len)) return RK_DECODE_ERROR;
            // Byte by byte through atomic_ref, like a bus that other agents (a test polling a
            // completion queue, another core) observe concurrently: never a data race, and a
            // byte written last (a valid/phase byte) is seen only with what precedes it.
            uint8_t *p = ram.data() + (addr - this->ram_base), *b = static_cast<uint8_t *>(buf);
            for (uint64_t i = 0; i < len; i++) {
                if (write) {
                    std::atomic_ref<uint8_t>(p[i]).store(b[i], std::memory_order_release);
                } else {
                    b[i] = std::atomic_ref<uint8_t>(p[i]).load(std::memory_order_acquire);
                }
            }
            return RK_OK;
        };
        dma_map = [this](uint64_t addr, uint64_t &len, bool) -> void * {
            if (!in_ram(addr, len) || len == 0) return nullptr;
            maps++;
            return ram.data() + (addr - this->ram_base);
        };
        dma_unmap = [this](void *, uint64_t, bool, uint64_t) { maps--; };
        now_ns = [this] { return clock_ns.load(); };
        // RAM is "file-backed" unless a test says otherwise: each range is recorded as written back
        persist = [this](uint64_t addr, uint64_t len, uint64_t &synced) {
            if (!in_ram(addr, len)) return RK_DECODE_ERROR;
            std::lock_guard lk(mu);
            persisted.push_back({addr, len});
            if (ram_file_backed) synced += len;
            return RK_OK;
        };
        // the core's own threads: how many have started and not ended
        thread = [this](bool start) { threads += start ? 1 : -1; };
        // no port: every frame is dropped; the last deadline of each timer is recorded
        send_frame = [](const uint8_t *, size_t) { return -ENOTCONN; };
        tx_wait = [] {};
        timer_arm = [this](unsigned id, uint64_t deadline_ns) {
            std::lock_guard lk(mu);
            if (id >= timers.size()) timers.resize(id + 1, UINT64_MAX);
            timers[id] = deadline_ns;
        };
        // no persistent memory: a test binds one (e.g. rk_pmem_nvm on a rackemu::pmem::Pmem core
        // over this RAM, hw/pmem/pmem_capi.h) by replacing nvm
        nvm = [](unsigned, uint64_t, const void *, uint64_t) { return RK_DECODE_ERROR; };
    }
    TestHost(const TestHost &) = delete;
    TestHost &operator=(const TestHost &) = delete;

    // The RkHost to hand to a core (points at this object: keep it alive longer than the core).
    RkHost raw(RkFabricPort *port = nullptr, RkRemoteMem *rmem = nullptr, unsigned node_id = 0,
               unsigned node_count = 1)
    {
        return RkHost{&ops_, this, port, rmem, node_id, node_count, nullptr};
    }
    Host host(RkFabricPort *port = nullptr, RkRemoteMem *rmem = nullptr, unsigned node_id = 0,
              unsigned node_count = 1)
    {
        return Host(raw(port, rmem, node_id, node_count));
    }

    bool in_ram(uint64_t addr, uint64_t len) const
    {
        return addr >= ram_base && addr - ram_base <= ram.size() && len <= ram.size() - (addr - ram_base);
    }
    bool irq_level(unsigned line = 0)
    {
        std::lock_guard lk(mu);
        return line < irq.size() && irq[line];
    }
    std::vector<std::string> guest_errors()
    {
        std::lock_guard lk(mu);
        return errors;
    }

    // Replaceable behaviour (tests and fuzzers inject faults here).
    std::function<void(unsigned, bool)> set_irq;
    std::function<void(const std::string &)> guest_error;
    std::function<Status(uint64_t, void *, uint64_t, bool)> dma_rw;
    std::function<void *(uint64_t, uint64_t &, bool)> dma_map;
    std::function<void(void *, uint64_t, bool, uint64_t)> dma_unmap;
    std::function<uint64_t()> now_ns;
    std::function<Status(uint64_t, uint64_t, uint64_t &)> persist;
    std::function<void(bool)> thread;
    std::function<int(const uint8_t *, size_t)> send_frame; // 0, -EAGAIN (ring full) or dropped
    std::function<void()> tx_wait;
    std::function<void(unsigned, uint64_t)> timer_arm;
    std::function<Status(unsigned, uint64_t, const void *, uint64_t)> nvm; // RkHostOps.nvm

    // State of the default behaviour.
    std::vector<uint8_t> ram;
    uint64_t ram_base;
    std::atomic<uint64_t> clock_ns{0};
    std::atomic<int> maps{0}; // maps not yet unmapped
    // the core's threads running (thread(true) minus thread(false))
    std::atomic<int> threads{0};
    std::mutex mu;
    std::vector<bool> irq;
    uint64_t irq_raised = 0; // rising edges over all lines
    std::vector<std::string> errors;
    bool ram_file_backed = true;                          // what persist reports as written back
    std::vector<std::pair<uint64_t, uint64_t>> persisted; // ranges persist was called on
    std::vector<uint64_t> timers;                         // deadline per timer (UINT64_MAX: none)

private:
    static TestHost *self(void *o) { return static_cast<TestHost *>(o); }
    RkHostOps ops_{};
};

} // namespace rackemu::test
