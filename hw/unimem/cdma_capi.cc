// SPDX-License-Identifier: MIT
// The cDMA core and its engine thread as a rackemu device; see cdma_capi.h.
#include "cdma_capi.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "cdma.h"
#include "device_ops.h"

using namespace rackemu::unimem;

namespace {

// The core and the engine thread that runs its process() whenever a register write kicks it.
class CdmaDevice {
public:
    explicit CdmaDevice(rackemu::Host host) : host_(host), core_(host, [this] { kick(); })
    {
        engine_ = std::thread([this] { run(); });
    }
    ~CdmaDevice()
    {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        engine_.join();
    }

    uint64_t read(uint64_t offset, unsigned size) { return core_.read(offset, size); }
    void write(uint64_t offset, uint64_t value, unsigned size) { core_.write(offset, value, size); }
    const char *reg_name(uint64_t offset)
    {
        static thread_local std::string name;
        name = core_.reg_name(offset);
        return name.c_str();
    }
    void reset() { core_.reset(); }
    void pause(bool on) { core_.pause(on); }
    bool irq_level(unsigned line) const { return line == 0 && core_.irq_level(); }
    void save(rackemu::StateOut &out) const { core_.save(out); }
    bool load(rackemu::StateIn &in, std::string *why) { return core_.load(in, why); }

private:
    void run()
    {
        host_.thread(true); // QEMU: an RCU reader (the engine reads guest memory)
        std::unique_lock lk(mu_);
        for (;;) {
            cv_.wait(lk, [this] { return kicked_ || stop_; });
            if (stop_) break;
            kicked_ = false;
            lk.unlock();
            core_.process(); // the transfer runs without this lock: the next kick queues up
            lk.lock();
        }
        lk.unlock();
        host_.thread(false);
    }
    void kick()
    {
        {
            std::lock_guard lk(mu_);
            kicked_ = true;
        }
        cv_.notify_one();
    }

    rackemu::Host host_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool kicked_ = false, stop_ = false;
    Cdma core_;
    std::thread engine_;
};

using Ops = rackemu::DeviceOps<CdmaDevice>;

void *create(const RkHost *host, const void *, char *err, size_t errlen)
{
    if (!host || !host->ops) {
        snprintf(err, errlen, "no host interface");
        return nullptr;
    }
    return new CdmaDevice(rackemu::Host(*host));
}

const char *reg_name(void *core, uint64_t offset)
{
    return Ops::of(core)->reg_name(offset);
}

} // namespace

extern "C" const RkDeviceOps rk_cdma_device_ops = {
    .name = "rackemu-cdma",
    .create = create,
    .free = Ops::free,
    .nregions = 1,
    .regions = {{"rackemu-cdma", RACKEMU_CDMA_SIZE, 0, Ops::read<&CdmaDevice::read>,
                 Ops::write<&CdmaDevice::write>, reg_name}},
    .nirqs = 1,
    .msix_bar = -1,
    .reset = Ops::reset,
    .pause = Ops::pause,
    .irq_level = Ops::irq_level,
    .state_version = 1,
    .state_max = 4096, // CdmaState is about 80 bytes
    .save = Ops::save,
    .load = Ops::load<0>, // no lists
    .fabric_svc = -1,
    .fabric = nullptr,
    .eth_class = -1,
    .frame = nullptr,
    .ntimers = 0,
    .timer = nullptr,
    .tx_resume = nullptr,
};
