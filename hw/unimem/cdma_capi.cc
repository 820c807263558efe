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

extern "C" {

RkCdma *rk_cdma_new(const RkHost *host, rk_cdma_thread_fn thread, void *opaque)
{
    auto *c = new RkCdma;
    c->thread_hook = thread;
    c->opaque = opaque;
    c->core = std::make_unique<Cdma>(rackemu::Host(*host), [c] { c->kick(); });
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
void rk_cdma_pause(RkCdma *c)
{
    c->core->pause();
}
void rk_cdma_resume(RkCdma *c)
{
    c->core->resume();
}
void rk_cdma_save(RkCdma *c, RkCdmaState *st)
{
    const CdmaState s = c->core->save();
    *st = RkCdmaState{s.cr,
                      s.sr,
                      s.curdesc,
                      s.taildesc,
                      s.sa,
                      s.da,
                      s.btt,
                      s.irq_count,
                      s.unsignalled,
                      uint32_t(s.phase),
                      s.resume_valid ? 1u : 0u,
                      s.resume_next,
                      s.session_descriptors};
}
int rk_cdma_load(RkCdma *c, const RkCdmaState *st)
{
    if (st->resume_valid > 1) return -1; // the core validates the rest
    CdmaState s;
    s.cr = st->cr;
    s.sr = st->sr;
    s.curdesc = st->curdesc;
    s.taildesc = st->taildesc;
    s.sa = st->sa;
    s.da = st->da;
    s.btt = st->btt;
    s.irq_count = st->irq_count;
    s.unsignalled = st->unsignalled;
    s.phase = CdmaPhase(st->phase);
    s.resume_valid = st->resume_valid != 0;
    s.resume_next = st->resume_next;
    s.session_descriptors = st->session_descriptors;
    return c->core->load(s) ? 0 : -1;
}

} // extern "C"
