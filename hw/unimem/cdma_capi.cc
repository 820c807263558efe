// SPDX-License-Identifier: MIT
// C wrapper and engine thread of the cDMA core; see cdma_capi.h.
#include "cdma_capi.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "cdma.h"

using namespace rackemu::unimem;

struct RkCdma {
    std::mutex mu;
    std::condition_variable cv;
    bool kicked = false, stop = false;
    std::unique_ptr<Cdma> core;
    std::thread engine;
    rk_cdma_thread_fn thread_hook = nullptr;
    void *opaque = nullptr;

    void run()
    {
        if (thread_hook) thread_hook(opaque, 1);
        std::unique_lock lk(mu);
        for (;;) {
            cv.wait(lk, [this] { return kicked || stop; });
            if (stop) break;
            kicked = false;
            lk.unlock();
            core->process(); // the transfer runs without this lock: the next kick queues up
            lk.lock();
        }
        lk.unlock();
        if (thread_hook) thread_hook(opaque, 0);
    }
    void kick()
    {
        {
            std::lock_guard lk(mu);
            kicked = true;
        }
        cv.notify_one();
    }
};

static MemStatus to_status(int rc)
{
    return rc == RK_CDMA_MEM_OK           ? MemStatus::Ok
           : rc == RK_CDMA_MEM_DECODE_ERR ? MemStatus::DecodeError
                                          : MemStatus::SlaveError;
}

extern "C" {

RkCdma *rk_cdma_new(rk_cdma_mem_fn mem, rk_cdma_irq_fn irq, rk_cdma_log_fn log, rk_cdma_thread_fn thread,
                    void *opaque)
{
    auto *c = new RkCdma;
    c->thread_hook = thread;
    c->opaque = opaque;
    CdmaHost h;
    h.mem_read = [mem, opaque](uint64_t addr, void *buf, uint64_t len) {
        return to_status(mem(opaque, 0, addr, buf, len));
    };
    h.mem_write = [mem, opaque](uint64_t addr, const void *buf, uint64_t len) {
        return to_status(mem(opaque, 1, addr, const_cast<void *>(buf), len));
    };
    h.set_irq = [irq, opaque](bool level) { irq(opaque, level); };
    h.guest_error = [log, opaque](const std::string &m) { log(opaque, m.c_str()); };
    h.kick = [c] { c->kick(); };
    c->core = std::make_unique<Cdma>(std::move(h));
    c->engine = std::thread([c] { c->run(); });
    return c;
}

void rk_cdma_free(RkCdma *c)
{
    if (!c) return;
    {
        std::lock_guard lk(c->mu);
        c->stop = true;
    }
    c->cv.notify_one();
    c->engine.join();
    delete c;
}

uint64_t rk_cdma_read(RkCdma *c, uint64_t offset, unsigned size)
{
    return c->core->read(offset, size);
}
void rk_cdma_write(RkCdma *c, uint64_t offset, uint64_t value, unsigned size)
{
    c->core->write(offset, value, size);
}
void rk_cdma_reset(RkCdma *c)
{
    c->core->reset();
}
int rk_cdma_irq_level(RkCdma *c)
{
    return c->core->irq_level() ? 1 : 0;
}

} // extern "C"
