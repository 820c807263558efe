// Unit tests of the Xilinx AXI CDMA core (hw/unimem/cdma.cc) against PG034 and the register
// sequences of Linux's drivers/dma/xilinx/xilinx_dma.c.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cdma.h"
#include "cdma_capi.h"
#include "test_host.h"
#include "rackemu/unimem_regs.h" // both register headers in one unit: rk_u32/rk_u64 defined once

using namespace rackemu::unimem;

static_assert(sizeof(xcdma_desc) == XCDMA_DESC_SIZE, "descriptor layout is eight 32-bit words");

namespace {

constexpr uint64_t kRam = 0x40000000; // 1 MiB of local RAM
constexpr uint64_t kRamSize = 1 << 20;
constexpr uint64_t kHigh = GAS_WINDOW_ADDR(3, 0x40000000); // 64 KiB above 4 GiB
constexpr uint64_t kHighSize = 1 << 16;
constexpr uint64_t kSlave = 0x0a000000; // answers SLVERR
constexpr uint64_t kRom = 0x0c000000;   // writes "succeed" and vanish
constexpr uint64_t kHole = 0x09000000;  // nothing there: DECERR
constexpr uint8_t kDstFill = 0xEE;

uint8_t pattern(uint64_t i)
{
    return uint8_t(i * 7 + 3);
}

struct Rig {
    struct Access {
        bool write;
        uint64_t addr, len;
    };
    std::vector<uint8_t> ram = std::vector<uint8_t>(kRamSize);
    std::vector<uint8_t> high = std::vector<uint8_t>(kHighSize);
    std::vector<uint8_t> rom = std::vector<uint8_t>(0x1000);
    std::vector<Access> accesses;
    std::vector<bool> irq_changes;
    std::vector<std::string> errors;
    unsigned kicks = 0;
    bool sync = true;                              // kick() runs process() at once
    std::function<void(const Access &)> on_access; // test hook, runs before the access
    std::function<void(bool)> on_irq;
    rackemu::test::TestHost th;
    Cdma cdma;

    explicit Rig(CdmaConfig cfg = {})
        : cdma(
              hooked(),
              [this] {
                  kicks++;
                  if (sync) cdma.process();
              },
              cfg)
    {
    }

    // The host: DMA into the maps below, interrupt line 0 and guest errors recorded here.
    rackemu::Host hooked()
    {
        th.dma_rw = [this](uint64_t a, void *b, uint64_t l, bool w) { return mem(w, a, b, l); };
        th.set_irq = [this](unsigned line, bool l) {
            EXPECT_EQ(line, 0u);
            irq_changes.push_back(l);
            if (on_irq) on_irq(l);
        };
        th.guest_error = [this](const std::string &m) { errors.push_back(m); };
        return th.host();
    }

    rackemu::Status mem(bool write, uint64_t addr, void *buf, uint64_t len)
    {
        accesses.push_back({write, addr, len});
        if (on_access) on_access(accesses.back());
        auto in = [&](uint64_t base, uint64_t size) { return addr >= base && addr - base + len <= size; };
        if (addr >= kSlave && addr < kSlave + 0x10000) return RK_SLAVE_ERROR;
        uint8_t *p = nullptr;
        if (in(kRam, kRamSize)) {
            p = ram.data() + (addr - kRam);
        } else if (in(kHigh, kHighSize)) {
            p = high.data() + (addr - kHigh);
        } else if (in(kRom, rom.size())) {
            if (write) return RK_OK;
            p = rom.data() + (addr - kRom);
        } else {
            return RK_DECODE_ERROR;
        }
        if (write) {
            std::memcpy(p, buf, len);
        } else {
            std::memcpy(buf, p, len);
        }
        return RK_OK;
    }

    uint8_t *at(uint64_t addr)
    {
        if (addr >= kHigh) return high.data() + (addr - kHigh);
        if (addr >= kRom && addr < kRom + rom.size()) return rom.data() + (addr - kRom);
        return ram.data() + (addr - kRam);
    }
    void fill(uint64_t addr, uint64_t len, bool pat, uint8_t v = kDstFill)
    {
        for (uint64_t i = 0; i < len; i++)
            at(addr)[i] = pat ? pattern(i) : v;
    }
    uint32_t rd(uint64_t off) { return uint32_t(cdma.read(off, 4)); }
    void wr(uint64_t off, uint64_t v) { cdma.write(off, v, 4); }
    void wr64(uint64_t off, uint64_t v) // as the driver's lo_hi_writeq
    {
        wr(off, uint32_t(v));
        wr(off + 4, uint32_t(v >> 32));
    }
    void simple(uint64_t src, uint64_t dst, uint32_t btt)
    {
        wr64(XCDMA_SA, src);
        wr64(XCDMA_DA, dst);
        wr(XCDMA_BTT, btt);
    }
    // A descriptor at `addr` in fake memory.
    void desc(uint64_t addr, uint64_t next, uint64_t sa, uint64_t da, uint32_t control, uint32_t status = 0)
    {
        xcdma_desc d{uint32_t(next), uint32_t(next >> 32), uint32_t(sa), uint32_t(sa >> 32),
                     uint32_t(da),   uint32_t(da >> 32),   control,      status};
        std::memcpy(at(addr), &d, sizeof d); // the host is little-endian, as the guest
    }
    uint32_t status_of(uint64_t addr)
    {
        uint32_t v;
        std::memcpy(&v, at(addr) + XCDMA_DESC_STATUS, 4);
        return v;
    }
    void start_sg(uint64_t cur, uint64_t tail)
    {
        wr64(XCDMA_CURDESC_PNTR, cur);
        wr64(XCDMA_TAILDESC_PNTR, tail);
    }
    unsigned rising_edges() const
    {
        unsigned n = 0;
        for (bool l : irq_changes)
            n += l;
        return n;
    }
};

constexpr uint32_t kIrqEnAll = XCDMA_CR_IRQEN_ALL;
uint32_t threshold(uint32_t n)
{
    return n << XCDMA_CR_IRQTHRESHOLD_SHIFT;
}
uint32_t sr_threshold(uint32_t sr)
{
    return (sr & XCDMA_SR_IRQTHRESHOLDSTS_MASK) >> XCDMA_SR_IRQTHRESHOLDSTS_SHIFT;
}

} // namespace

TEST(Cdma, ResetValuesAreIdleWithSgIncludedAndThresholdOne)
{
    Rig r;
    EXPECT_EQ(r.rd(XCDMA_CDMACR), 0x00010002u);
    EXPECT_EQ(r.rd(XCDMA_CDMASR), 0x0001000au); // Idle, SGIncld, IRQThresholdSts = 1
    for (uint64_t off = XCDMA_CURDESC_PNTR; off < XCDMA_REG_END; off += 4)
        EXPECT_EQ(r.rd(off), 0u) << off;
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_TRUE(r.errors.empty());
}

class CdmaSimpleSize : public ::testing::TestWithParam<uint32_t> {};

TEST_P(CdmaSimpleSize, CopiesExactlyBttBytesAtUnalignedAddresses)
{
    const uint32_t n = GetParam();
    Rig r;
    const uint64_t src = kRam + 0x1003, dst = kRam + 0x80005;
    r.fill(src, n, true);
    r.fill(dst - 16, n + 32, false);
    r.wr(XCDMA_CDMACR, XCDMA_CR_IOC_IRQEN);
    r.simple(src, dst, n);
    for (uint32_t i = 0; i < n; i++)
        ASSERT_EQ(r.at(dst)[i], pattern(i)) << "byte " << i << " not copied";
    for (int i = 1; i <= 16; i++) {
        EXPECT_EQ(r.at(dst)[-i], kDstFill) << "overwritten before the range";
        EXPECT_EQ(r.at(dst)[n - 1 + i], kDstFill) << "overwritten after the range";
    }
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_TRUE(sr & XCDMA_SR_IOC_IRQ);
    EXPECT_EQ(sr & XCDMA_SR_ERR_ALL, 0u);
    EXPECT_TRUE(r.cdma.irq_level());
    EXPECT_EQ(r.cdma.counters().bytes, n);
    EXPECT_EQ(r.cdma.counters().transfers, 1u);
    EXPECT_TRUE(r.errors.empty());
}

INSTANTIATE_TEST_SUITE_P(BoundarySizes, CdmaSimpleSize, ::testing::Values(1u, 1024u, 1025u, 65536u, 65537u));

TEST(Cdma, IocLevelFollowsEnableAndDropsAfterWriteOneToClear)
{
    Rig r;
    r.fill(kRam, 64, true);
    r.simple(kRam, kRam + 0x1000, 64); // IOC_IrqEn = 0: status bit only
    EXPECT_TRUE(r.rd(XCDMA_CDMASR) & XCDMA_SR_IOC_IRQ);
    EXPECT_FALSE(r.cdma.irq_level());
    r.wr(XCDMA_CDMACR, XCDMA_CR_RESET_VALUE | XCDMA_CR_IOC_IRQEN);
    EXPECT_TRUE(r.cdma.irq_level());
    r.wr(XCDMA_CDMASR, XCDMA_SR_DLY_IRQ); // other bits: no effect
    EXPECT_TRUE(r.cdma.irq_level());
    r.wr(XCDMA_CDMASR, XCDMA_SR_IOC_IRQ);
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_EQ(r.irq_changes, (std::vector<bool>{true, false}));
    EXPECT_EQ(r.cdma.counters().irqs_raised, 1u);
}

TEST(Cdma, SixtyFourBitAddressesUseTheMsbRegisters)
{
    Rig r;
    r.fill(kHigh + 0x100, 300, true);
    r.fill(kRam + 0x2000, 300, false);
    r.cdma.write(XCDMA_SA, kHigh + 0x100, 8); // SA then SA_MSB
    r.wr(XCDMA_DA, uint32_t(kRam + 0x2000));
    r.wr(XCDMA_DA_MSB, 0);
    EXPECT_EQ(r.rd(XCDMA_SA_MSB), uint32_t(kHigh >> 32));
    r.wr(XCDMA_BTT, 300);
    for (unsigned i = 0; i < 300; i++)
        ASSERT_EQ(r.at(kRam + 0x2000)[i], pattern(i));
    // and back above 4 GiB
    r.fill(kHigh + 0x8000, 301, false);
    r.simple(kRam + 0x2000, kHigh + 0x8000, 300);
    for (unsigned i = 0; i < 300; i++)
        ASSERT_EQ(r.at(kHigh + 0x8000)[i], pattern(i));
    EXPECT_EQ(r.at(kHigh + 0x8000)[300], kDstFill);
    // Without the MSB the same low word is another address: here the start of local RAM.
    r.fill(kRam, 4, false, 0xAA);
    r.wr(XCDMA_SA_MSB, 0);
    r.wr(XCDMA_SA, uint32_t(kHigh));
    r.wr64(XCDMA_DA, kRam + 0x3000);
    r.wr(XCDMA_BTT, 4);
    EXPECT_EQ(r.at(kRam + 0x3000)[0], 0xAA);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, 0u);
}

TEST(Cdma, BttZeroIsDmaIntErrAndErrIrqDropsAfterWriteOneToClear)
{
    Rig r;
    r.wr(XCDMA_CDMACR, XCDMA_CR_ERR_IRQEN);
    r.simple(kRam, kRam + 0x100, 0);
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_TRUE(sr & XCDMA_SR_DMAINTERR);
    EXPECT_TRUE(sr & XCDMA_SR_ERR_IRQ);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_TRUE(r.cdma.irq_level());
    EXPECT_EQ(r.kicks, 0u); // nothing for the engine to do
    EXPECT_EQ(r.errors.size(), 1u);
    // The driver's IRQ handler: W1C the IRQ bits, then "errors & recoverable" (DMAIntErr).
    r.wr(XCDMA_CDMASR, sr & XCDMA_SR_IRQ_ALL);
    r.wr(XCDMA_CDMASR, sr & XCDMA_SR_DMAINTERR);
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_TRUE(r.rd(XCDMA_CDMASR) & XCDMA_SR_DMAINTERR) << "error bits are read-only until reset";
    EXPECT_EQ(r.cdma.counters().dma_int_errors, 1u);
}

TEST(Cdma, DecodeErrorOnSourceHaltsWithDmaDecErrAndWritesNothing)
{
    Rig r;
    r.fill(kRam + 0x100, 64, false);
    r.wr(XCDMA_CDMACR, XCDMA_CR_ERR_IRQEN | XCDMA_CR_IOC_IRQEN);
    r.simple(kHole, kRam + 0x100, 64);
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_EQ(sr & XCDMA_SR_ERR_ALL, XCDMA_SR_DMADECERR);
    EXPECT_TRUE(sr & XCDMA_SR_ERR_IRQ);
    EXPECT_FALSE(sr & XCDMA_SR_IOC_IRQ);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_TRUE(r.cdma.irq_level());
    for (int i = 0; i < 64; i++)
        EXPECT_EQ(r.at(kRam + 0x100)[i], kDstFill);
    // Halted: a new BTT write moves nothing until a reset.
    r.fill(kRam, 64, true);
    r.simple(kRam, kRam + 0x100, 64);
    EXPECT_EQ(r.at(kRam + 0x100)[0], kDstFill);
    EXPECT_EQ(r.cdma.counters().transfers, 0u);
}

TEST(Cdma, DecodeErrorOnDestinationIsDmaDecErr)
{
    Rig r;
    r.fill(kRam, 64, true);
    r.simple(kRam, kHole, 64);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_DMADECERR);
    EXPECT_EQ(r.cdma.counters().dma_dec_errors, 1u);
}

TEST(Cdma, SlaveErrorIsDmaSlvErr)
{
    Rig r;
    r.simple(kSlave, kRam, 64);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_DMASLVERR);
    EXPECT_EQ(r.cdma.counters().dma_slv_errors, 1u);
}

TEST(Cdma, SgChainOfThreeWritesBackCmpltAndRaisesIocAtThreshold)
{
    Rig r;
    const uint64_t d0 = kRam + 0x100, d1 = kRam + 0x140, d2 = kRam + 0x1c0;
    const uint32_t len[3] = {100, 4096, 1};
    uint64_t src = kRam + 0x10000, dst = kRam + 0x40000;
    r.fill(src, 8192, true);
    r.fill(dst, 8192, false);
    r.desc(d0, d1, src, dst, len[0]);
    r.desc(d1, d2, src + 100, dst + 100, len[1]);
    r.desc(d2, kRam + 0x9999c0, src + 4196, dst + 4196, len[2]); // next: past the tail, never fetched
    unsigned done_at_irq = 0;
    r.on_irq = [&](bool l) {
        if (l)
            done_at_irq = !!(r.status_of(d0) & XCDMA_DESC_STS_CMPLT) +
                          !!(r.status_of(d1) & XCDMA_DESC_STS_CMPLT) +
                          !!(r.status_of(d2) & XCDMA_DESC_STS_CMPLT);
    };
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | kIrqEnAll | threshold(3));
    r.start_sg(d0, d2);
    for (uint64_t d : {d0, d1, d2})
        EXPECT_EQ(r.status_of(d), XCDMA_DESC_STS_CMPLT) << std::hex << d;
    for (unsigned i = 0; i < 4197; i++)
        ASSERT_EQ(r.at(dst)[i], pattern(i)) << i;
    EXPECT_EQ(r.at(dst)[4197], kDstFill);
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_TRUE(sr & XCDMA_SR_IOC_IRQ);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_EQ(sr_threshold(sr), 3u) << "counter reloaded";
    EXPECT_EQ(r.rising_edges(), 1u);
    EXPECT_EQ(done_at_irq, 3u) << "one interrupt, after the third descriptor";
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR), uint32_t(d2));
    const auto c = r.cdma.counters();
    EXPECT_EQ(c.descriptors, 3u);
    EXPECT_EQ(c.chains, 1u);
    EXPECT_EQ(c.bytes, 4197u);
    // Only the STATUS words were written back, nothing else of the descriptors.
    unsigned desc_writes = 0;
    for (const auto &a : r.accesses) {
        if (a.write && a.addr < kRam + 0x200) {
            EXPECT_EQ((a.addr - kRam) % 0x40, XCDMA_DESC_STATUS);
            EXPECT_EQ(a.len, 4u);
            desc_writes++;
        }
    }
    EXPECT_EQ(desc_writes, 3u);
}

TEST(Cdma, IrqThresholdTwoCoalescesAndTheDelayFiresAtChainEnd)
{
    Rig r;
    const uint64_t d[3] = {kRam, kRam + 0x40, kRam + 0x80};
    for (int i = 0; i < 3; i++)
        r.desc(d[i], i < 2 ? d[i + 1] : 0, kRam + 0x1000, kRam + 0x2000 + 0x100 * i, 16);
    std::vector<unsigned> done_at_irq;
    r.on_irq = [&](bool l) {
        unsigned n = 0;
        for (uint64_t x : d)
            n += !!(r.status_of(x) & XCDMA_DESC_STS_CMPLT);
        if (l) done_at_irq.push_back(n);
    };
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_IOC_IRQEN | threshold(2));
    r.start_sg(d[0], d[2]);
    EXPECT_EQ(done_at_irq, std::vector<unsigned>{2}) << "IOC after the second descriptor only";
    uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_EQ(sr_threshold(sr), 1u) << "third completion counted, not signalled";
    EXPECT_FALSE(sr & XCDMA_SR_DLY_IRQ) << "IRQDelay = 0: no delay interrupt";

    // Same chain with IRQDelay: the delay interrupt covers the unsignalled third descriptor.
    Rig q;
    for (int i = 0; i < 3; i++)
        q.desc(d[i], i < 2 ? d[i + 1] : 0, kRam + 0x1000, kRam + 0x2000 + 0x100 * i, 16);
    q.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_DLY_IRQEN | threshold(2) | 5u << XCDMA_CR_IRQDELAY_SHIFT);
    q.start_sg(d[0], d[2]);
    sr = q.rd(XCDMA_CDMASR);
    EXPECT_TRUE(sr & XCDMA_SR_IOC_IRQ);
    EXPECT_TRUE(sr & XCDMA_SR_DLY_IRQ);
    EXPECT_EQ(sr_threshold(sr), 2u) << "the delay interrupt reloads the counter";
    EXPECT_EQ(sr & XCDMA_SR_IRQDELAYSTS_MASK, 0u);
    EXPECT_TRUE(q.cdma.irq_level());
    q.wr(XCDMA_CDMASR, XCDMA_SR_DLY_IRQ);
    EXPECT_FALSE(q.cdma.irq_level());
}

TEST(Cdma, SelfLinkedDescriptorEndsInSgIntErrOnItsStaleCmplt)
{
    Rig r;
    const uint64_t d0 = kRam + 0x400;
    r.desc(d0, d0, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_ERR_IRQEN);
    r.start_sg(d0, kRam + 0x800); // the tail is never reached
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_EQ(sr & XCDMA_SR_ERR_ALL, XCDMA_SR_SGINTERR);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_TRUE(r.cdma.irq_level());
    EXPECT_EQ(r.status_of(d0), XCDMA_DESC_STS_CMPLT) << "the stale descriptor is not updated again";
    EXPECT_EQ(r.cdma.counters().descriptors, 1u);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_NE(r.errors[0].find("Cmplt"), std::string::npos);
    EXPECT_FALSE(r.cdma.busy());
}

TEST(Cdma, LoopThatNeverCompletesIsCutAfterTheDescriptorBound)
{
    CdmaConfig cfg;
    cfg.max_descriptors = 1000;
    Rig r(cfg);
    // The descriptor lives where writes vanish, so its Cmplt never sticks: only the bound stops it.
    r.desc(kRom, kRom, kRam, kRam + 0x100, 4);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_ERR_IRQEN);
    r.start_sg(kRom, kRam + 0x800);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_SGINTERR);
    EXPECT_TRUE(r.cdma.irq_level());
    EXPECT_EQ(r.cdma.counters().descriptors, 1000u);
    EXPECT_EQ(r.cdma.counters().sg_int_errors, 1u);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_NE(r.errors[0].find("1000 descriptors"), std::string::npos);
}

TEST(Cdma, DescriptorOutsideMemoryIsSgDecErrAndCurdescPointsAtIt)
{
    Rig r;
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_ERR_IRQEN);
    r.start_sg(kHole + 0x40, kHole + 0x40);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_SGDECERR);
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR), uint32_t(kHole + 0x40));
    EXPECT_TRUE(r.cdma.irq_level());

    Rig s;
    s.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    s.start_sg(kSlave, kSlave);
    EXPECT_EQ(s.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_SGSLVERR);
}

TEST(Cdma, DataErrorInSgModeIsWrittenIntoTheDescriptorStatus)
{
    Rig r;
    const uint64_t d0 = kRam, d1 = kRam + 0x40;
    r.desc(d0, d1, kRam + 0x1000, kRam + 0x2000, 8);
    r.desc(d1, 0, kHole, kRam + 0x3000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_ERR_IRQEN | XCDMA_CR_IOC_IRQEN);
    r.start_sg(d0, d1);
    EXPECT_EQ(r.status_of(d0), XCDMA_DESC_STS_CMPLT);
    EXPECT_EQ(r.status_of(d1), XCDMA_DESC_STS_DECERR) << "error bit, no Cmplt";
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    EXPECT_EQ(sr & XCDMA_SR_ERR_ALL, XCDMA_SR_DMADECERR);
    EXPECT_TRUE(sr & XCDMA_SR_IOC_IRQ) << "d0 completed before the error";
    EXPECT_EQ(r.cdma.counters().descriptors, 1u);
}

TEST(Cdma, DescriptorWithZeroBttIsDmaIntErr)
{
    Rig r;
    r.desc(kRam, 0, kRam + 0x1000, kRam + 0x2000, 0xfc000000u); // BTT bits all 0, reserved bits set
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.start_sg(kRam, kRam);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, XCDMA_SR_DMAINTERR);
    EXPECT_EQ(r.status_of(kRam), XCDMA_DESC_STS_INTERR);
    EXPECT_EQ(r.cdma.counters().bytes, 0u);
}

TEST(Cdma, SoftResetClearsErrorsAndRegistersAndTheEngineWorksAgain)
{
    Rig r;
    r.wr(XCDMA_CDMACR, XCDMA_CR_ERR_IRQEN | XCDMA_CR_SGMODE | threshold(7) | 9u << XCDMA_CR_IRQDELAY_SHIFT);
    r.start_sg(kHole, kHole);
    r.wr(XCDMA_SA, 0x1234);
    ASSERT_TRUE(r.cdma.irq_level());
    // xilinx_dma_reset(): set CDMACR.Reset, poll until it reads 0.
    r.wr(XCDMA_CDMACR, r.rd(XCDMA_CDMACR) | XCDMA_CR_RESET);
    EXPECT_EQ(r.rd(XCDMA_CDMACR), XCDMA_CR_RESET_VALUE);
    EXPECT_EQ(r.rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
    for (uint64_t off = XCDMA_CURDESC_PNTR; off < XCDMA_REG_END; off += 4)
        EXPECT_EQ(r.rd(off), 0u) << off;
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_EQ(r.cdma.counters().soft_resets, 1u);
    r.fill(kRam, 32, true);
    r.simple(kRam, kRam + 0x100, 32);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & (XCDMA_SR_ERR_ALL | XCDMA_SR_IOC_IRQ), XCDMA_SR_IOC_IRQ);
    EXPECT_EQ(r.at(kRam + 0x100)[31], pattern(31));
}

TEST(Cdma, SoftResetDuringATransferReadsOneUntilTheEngineAborts)
{
    CdmaConfig cfg;
    cfg.chunk = 4096;
    Rig r(cfg);
    r.sync = false;
    r.fill(kRam, 65536, true);
    r.fill(kRam + 0x80000, 65536, false);
    r.wr(XCDMA_CDMACR, XCDMA_CR_IOC_IRQEN);
    r.simple(kRam, kRam + 0x80000, 65536);
    EXPECT_EQ(r.kicks, 1u);
    std::vector<uint32_t> cr_seen;
    r.on_access = [&](const Rig::Access &a) {
        if (!a.write && a.addr == kRam + 4096) { // second chunk: the driver resets and polls
            r.wr(XCDMA_CDMACR, r.rd(XCDMA_CDMACR) | XCDMA_CR_RESET);
            cr_seen.push_back(r.rd(XCDMA_CDMACR));
            r.wr(XCDMA_SA, 0x5555); // ignored while the reset is pending
        }
    };
    r.cdma.process();
    ASSERT_EQ(cr_seen.size(), 1u);
    EXPECT_TRUE(cr_seen[0] & XCDMA_CR_RESET);
    EXPECT_EQ(r.rd(XCDMA_CDMACR), XCDMA_CR_RESET_VALUE);
    EXPECT_EQ(r.rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_EQ(r.at(kRam + 0x80000)[8191], pattern(8191)) << "the chunk in flight completes";
    EXPECT_EQ(r.at(kRam + 0x80000)[8192], kDstFill) << "nothing after the abort";
    EXPECT_EQ(r.cdma.counters().aborted, 1u);
    EXPECT_EQ(r.cdma.counters().transfers, 0u);
    EXPECT_EQ(r.errors.size(), 1u); // the SA write during the reset
}

TEST(Cdma, RegisterWriteOnlyKicksAndTheEngineRunsInProcess)
{
    Rig r;
    r.sync = false;
    r.fill(kRam, 256, true);
    r.simple(kRam, kRam + 0x1000, 256);
    EXPECT_EQ(r.kicks, 1u);
    EXPECT_TRUE(r.cdma.busy());
    EXPECT_FALSE(r.rd(XCDMA_CDMASR) & XCDMA_SR_IDLE);
    EXPECT_TRUE(r.accesses.empty()) << "the register write moved no data";
    r.wr(XCDMA_BTT, 16); // busy: ignored and logged
    EXPECT_EQ(r.rd(XCDMA_BTT), 256u);
    EXPECT_EQ(r.errors.size(), 1u);
    r.cdma.process();
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_TRUE(r.rd(XCDMA_CDMASR) & XCDMA_SR_IDLE);
    EXPECT_EQ(r.at(kRam + 0x1000)[255], pattern(255));
    EXPECT_EQ(r.cdma.counters().transfers, 1u) << "one transfer, not two";
    r.cdma.process(); // nothing pending: harmless
    EXPECT_EQ(r.cdma.counters().transfers, 1u);
}

TEST(Cdma, EightByteAccessesActAsLowThenHighHalf)
{
    Rig r;
    r.cdma.write(XCDMA_SA, 0x0000001122334455ull, 8);
    EXPECT_EQ(r.rd(XCDMA_SA), 0x22334455u);
    EXPECT_EQ(r.rd(XCDMA_SA_MSB), 0x11u);
    EXPECT_EQ(r.cdma.read(XCDMA_SA, 8), 0x0000001122334455ull);
    EXPECT_EQ(r.cdma.read(XCDMA_CDMACR, 8), uint64_t(XCDMA_SR_RESET_VALUE) << 32 | XCDMA_CR_RESET_VALUE);
    // A 64-bit TAILDESC store starts the chain: its high half is the TAILDESC_PNTR_MSB write.
    r.desc(kRam, 0, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.cdma.write(XCDMA_CURDESC_PNTR, kRam, 8);
    r.cdma.write(XCDMA_TAILDESC_PNTR, kRam, 8);
    EXPECT_EQ(r.status_of(kRam), XCDMA_DESC_STS_CMPLT);
    EXPECT_TRUE(r.errors.empty());
}

TEST(Cdma, BadOffsetsAndSizesAreLoggedAndHarmless)
{
    Rig r;
    const CdmaState before = r.cdma.save();
    EXPECT_EQ(r.cdma.read(XCDMA_CDMACR, 2), 0u); // size
    EXPECT_EQ(r.cdma.read(XCDMA_CDMACR, 1), 0u);
    EXPECT_EQ(r.cdma.read(0x02, 4), 0u);              // unaligned
    EXPECT_EQ(r.cdma.read(XCDMA_CDMASR, 8), 0u);      // 8-byte at a 4-aligned offset
    EXPECT_EQ(r.cdma.read(XCDMA_REG_END, 4), 0u);     // reserved
    EXPECT_EQ(r.cdma.read(RACKEMU_CDMA_SIZE, 4), 0u); // out of range
    r.cdma.write(XCDMA_CDMACR, XCDMA_CR_RESET, 2);
    r.cdma.write(XCDMA_BTT, 16, 1);
    r.cdma.write(0x2a, 1, 4);
    r.cdma.write(0x100, 1, 4);
    r.cdma.write(XCDMA_BTT, 16ull << 32, 8); // BTT = 0 (DMAIntErr), reserved 0x2C
    EXPECT_EQ(r.errors.size(), 12u);
    EXPECT_EQ(r.cdma.counters().guest_errors, 12u);
    CdmaState after = r.cdma.save();
    EXPECT_EQ(after.cr, before.cr);
    EXPECT_EQ(after.btt, 0u) << "BTT = 0 got DMAIntErr, not a transfer";
    EXPECT_EQ(r.kicks, 0u);
    EXPECT_EQ(r.errors[0].rfind("2-byte load at 0x0", 0), 0u) << r.errors[0]; // the host adds the device name
}

TEST(Cdma, WritesOutsideTheirModeAreLoggedAndStartNothing)
{
    Rig r;
    r.start_sg(kRam, kRam); // simple mode: descriptor pointers are cleared/ignored
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR), 0u);
    EXPECT_EQ(r.rd(XCDMA_TAILDESC_PNTR), 0u);
    EXPECT_EQ(r.errors.size(), 4u);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.simple(kRam, kRam + 0x100, 64); // SG mode: BTT stored, no transfer
    EXPECT_EQ(r.rd(XCDMA_BTT), 64u);
    EXPECT_EQ(r.errors.size(), 5u);
    EXPECT_EQ(r.kicks, 0u);
    EXPECT_TRUE(r.accesses.empty());
}

TEST(Cdma, TaildescWrittenWhileBusyMovesThePausePoint)
{
    Rig r;
    r.sync = false;
    const uint64_t d[3] = {kRam, kRam + 0x40, kRam + 0x80};
    for (int i = 0; i < 3; i++)
        r.desc(d[i], i < 2 ? d[i + 1] : 0, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.start_sg(d[0], d[0]);
    EXPECT_EQ(r.kicks, 1u);
    r.wr64(XCDMA_TAILDESC_PNTR, d[2]); // busy: repositions, does not restart
    EXPECT_EQ(r.kicks, 1u);
    r.cdma.process();
    for (uint64_t x : d)
        EXPECT_EQ(r.status_of(x), XCDMA_DESC_STS_CMPLT);
    EXPECT_TRUE(r.errors.empty());
}

TEST(Cdma, NewTailAfterAPauseResumesAtTheNextDescriptor)
{
    Rig r;
    const uint64_t d[3] = {kRam, kRam + 0x40, kRam + 0x80};
    for (int i = 0; i < 3; i++)
        r.desc(d[i], i < 2 ? d[i + 1] : 0, kRam + 0x1000, kRam + 0x2000 + 0x10 * i, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | threshold(1));
    r.start_sg(d[0], d[1]);
    EXPECT_EQ(r.status_of(d[2]), 0u);
    EXPECT_EQ(r.cdma.counters().chains, 1u);
    r.wr64(XCDMA_TAILDESC_PNTR, d[2]); // CURDESC untouched: continue after d1
    EXPECT_EQ(r.status_of(d[2]), XCDMA_DESC_STS_CMPLT);
    EXPECT_EQ(r.cdma.counters().descriptors, 3u);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, 0u) << "d0/d1 were not fetched again";
}

TEST(Cdma, MisalignedDescriptorPointerLowBitsAreIgnored)
{
    Rig r;
    r.desc(kRam + 0x40, 0, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.start_sg(kRam + 0x48, kRam + 0x7f);
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR), uint32_t(kRam + 0x40));
    EXPECT_EQ(r.rd(XCDMA_TAILDESC_PNTR), uint32_t(kRam + 0x40));
    EXPECT_EQ(r.status_of(kRam + 0x40), XCDMA_DESC_STS_CMPLT);
    EXPECT_EQ(r.errors.size(), 2u);
}

TEST(Cdma, LeavingSgModeClearsTheDescriptorPointers)
{
    Rig r;
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.wr64(XCDMA_CURDESC_PNTR, kHigh);
    r.wr(XCDMA_TAILDESC_PNTR, 0x1000);
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR_MSB), uint32_t(kHigh >> 32));
    r.wr(XCDMA_CDMACR, 0);
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR), 0u);
    EXPECT_EQ(r.rd(XCDMA_CURDESC_PNTR_MSB), 0u);
    EXPECT_EQ(r.rd(XCDMA_TAILDESC_PNTR), 0u);
    EXPECT_EQ(r.rd(XCDMA_CDMACR), XCDMA_CR_RESET_VALUE) << "threshold 0 ignored, TailPntrEn reads 1";
}

TEST(Cdma, DeviceResetDuringATransferAbandonsIt)
{
    CdmaConfig cfg;
    cfg.chunk = 4096;
    Rig r(cfg);
    r.sync = false;
    r.fill(kRam, 16384, true);
    r.simple(kRam, kRam + 0x80000, 16384);
    r.on_access = [&](const Rig::Access &a) {
        if (!a.write && a.addr == kRam + 4096) r.cdma.reset();
    };
    r.cdma.process();
    EXPECT_EQ(r.rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_EQ(r.cdma.counters().transfers, 0u);
    const size_t n = r.accesses.size();
    r.cdma.process();
    EXPECT_EQ(r.accesses.size(), n) << "nothing pending after the reset";
}

TEST(Cdma, CyclicRingRunsInSlicesUntilReset)
{
    CdmaConfig cfg;
    cfg.cyclic_slice = 4;
    Rig r(cfg);
    r.sync = false;
    r.desc(kRam, kRam + 0x40, kRam + 0x1000, kRam + 0x2000, 8);
    r.desc(kRam + 0x40, kRam, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_CYCLIC_BD_EN | XCDMA_CR_IOC_IRQEN | threshold(2));
    r.start_sg(kRam, kRam + 0x1000); // PG034: the tail is not part of the ring
    r.cdma.process();
    EXPECT_EQ(r.cdma.counters().descriptors, 4u);
    EXPECT_EQ(r.kicks, 2u) << "the slice end asks for more";
    EXPECT_TRUE(r.cdma.busy());
    r.cdma.process();
    EXPECT_EQ(r.cdma.counters().descriptors, 8u);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, 0u) << "Cmplt ignored in cyclic mode";
    EXPECT_TRUE(r.cdma.irq_level());
    r.wr(XCDMA_CDMACR, XCDMA_CR_RESET);
    EXPECT_FALSE(r.cdma.busy());
    r.cdma.process();
    EXPECT_EQ(r.cdma.counters().descriptors, 8u);
}

TEST(Cdma, SynchronousKickSurvivesCyclicRecursion)
{
    CdmaConfig cfg;
    cfg.cyclic_slice = 3;
    Rig r(cfg); // kick() calls process(): the nested call must return, not recurse forever
    r.desc(kRam, kRam, kRam + 0x1000, kRam + 0x2000, 8);
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_CYCLIC_BD_EN);
    r.start_sg(kRam, kRam + 0x1000);
    EXPECT_EQ(r.cdma.counters().descriptors, 3u);
    r.cdma.process();
    EXPECT_EQ(r.cdma.counters().descriptors, 6u);
}

TEST(Cdma, StateRoundTripsAndRejectsInconsistentState)
{
    Rig r;
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | threshold(4) | kIrqEnAll);
    r.wr64(XCDMA_CURDESC_PNTR, kRam + 0x40);
    r.wr64(XCDMA_SA, kRam + 0x1234); // stored in SG mode, no transfer
    r.wr(XCDMA_BTT, 77);
    CdmaState st = r.cdma.save();
    Rig q;
    ASSERT_TRUE(q.cdma.load(st));
    for (uint64_t off = 0; off < XCDMA_REG_END; off += 4)
        EXPECT_EQ(q.rd(off), r.rd(off)) << "register " << off;
    EXPECT_EQ(q.kicks, 0u);
    const CdmaState loaded = q.cdma.save();
    auto bad_is_refused = [&](const CdmaState &bad) {
        EXPECT_FALSE(q.cdma.load(bad));
        for (uint64_t off = 0; off < XCDMA_REG_END; off += 4)
            EXPECT_EQ(q.rd(off), r.rd(off)) << "refused load changed register " << off;
        EXPECT_EQ(q.cdma.save().phase, loaded.phase);
    };
    CdmaState bad = st;
    bad.phase = CdmaPhase(42);
    bad_is_refused(bad);
    bad = st;
    bad.irq_count = 0;
    bad_is_refused(bad);
    bad = st;
    bad.irq_count = 0x100;
    bad_is_refused(bad);
    bad = st;
    bad.curdesc |= 4;
    bad_is_refused(bad);
    bad = st;
    bad.resume_next |= 1;
    bad_is_refused(bad);
    bad = st;
    bad.btt = XCDMA_BTT_MASK + 1;
    bad_is_refused(bad);
    bad = st;
    bad.cr &= ~XCDMA_CR_IRQTHRESHOLD_MASK; // threshold 0
    bad_is_refused(bad);
    bad = st;
    bad.phase = CdmaPhase::Simple; // a simple transfer in SG mode
    bad_is_refused(bad);
    bad = st;
    bad.cr &= ~XCDMA_CR_SGMODE;
    bad.phase = CdmaPhase::Fetch; // a chain in simple mode
    bad_is_refused(bad);
    EXPECT_TRUE(q.errors.empty());
}

// A transfer in flight at save does not vanish and does not hang: after load the engine is
// halted with DMASlvErr and Err_Irq (cdma.h, Cdma::load), moves nothing, and a soft reset makes
// it usable again.
TEST(Cdma, TransferInFlightAtSaveEndsWithDmaSlvErrAfterLoad)
{
    Rig s;
    s.sync = false; // the engine never ran: the transfer is in flight
    s.wr(XCDMA_CDMACR, kIrqEnAll);
    s.fill(kRam, 64, true);
    s.simple(kRam, kRam + 0x100, 64);
    const CdmaState st = s.cdma.save();
    ASSERT_EQ(st.phase, CdmaPhase::Simple);

    Rig t;
    t.fill(kRam + 0x100, 64, false);
    ASSERT_TRUE(t.cdma.load(st));
    const uint32_t sr = t.rd(XCDMA_CDMASR);
    EXPECT_TRUE(sr & XCDMA_SR_DMASLVERR) << std::hex << sr;
    EXPECT_TRUE(sr & XCDMA_SR_ERR_IRQ);
    EXPECT_TRUE(sr & XCDMA_SR_IDLE);
    EXPECT_FALSE(t.cdma.busy());
    EXPECT_TRUE(t.cdma.irq_level());
    ASSERT_FALSE(t.irq_changes.empty());
    EXPECT_TRUE(t.irq_changes.back()) << "the host saw the error interrupt";
    EXPECT_EQ(t.kicks, 0u);
    EXPECT_TRUE(t.accesses.empty());
    EXPECT_EQ(t.at(kRam + 0x100)[0], kDstFill);
    EXPECT_EQ(t.cdma.counters().dma_slv_errors, 1u);
    ASSERT_EQ(t.errors.size(), 1u);
    EXPECT_NE(t.errors[0].find("in flight"), std::string::npos) << t.errors[0];
    EXPECT_EQ(t.rd(XCDMA_SA), uint32_t(kRam)); // the registers are the saved ones
    EXPECT_EQ(t.rd(XCDMA_BTT), 64u);
    // The driver's error path: soft reset, then the transfer again.
    t.wr(XCDMA_CDMACR, XCDMA_CR_RESET);
    EXPECT_EQ(t.rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
    t.fill(kRam, 64, true);
    t.simple(kRam, kRam + 0x100, 64);
    EXPECT_EQ(t.at(kRam + 0x100)[63], pattern(63));
    EXPECT_TRUE(t.rd(XCDMA_CDMASR) & XCDMA_SR_IOC_IRQ);
    // The saving side is not affected: its engine goes on.
    s.cdma.process();
    EXPECT_EQ(s.at(kRam + 0x100)[63], pattern(63));
}

TEST(Cdma, ChainInFlightAtSaveEndsWithDmaSlvErrAndPendingSoftResetCompletesAtLoad)
{
    Rig s;
    s.sync = false;
    s.desc(kRam, kRam + 0x40, kRam + 0x1000, kRam + 0x2000, 16);
    s.desc(kRam + 0x40, kRam, kRam + 0x1000, kRam + 0x3000, 16);
    s.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | XCDMA_CR_ERR_IRQEN);
    s.start_sg(kRam, kRam + 0x40);
    const CdmaState st = s.cdma.save();
    ASSERT_EQ(st.phase, CdmaPhase::Fetch);
    Rig t;
    t.desc(kRam, kRam + 0x40, kRam + 0x1000, kRam + 0x2000, 16);
    ASSERT_TRUE(t.cdma.load(st));
    EXPECT_TRUE(t.rd(XCDMA_CDMASR) & XCDMA_SR_DMASLVERR);
    EXPECT_TRUE(t.rd(XCDMA_CDMASR) & XCDMA_SR_IDLE);
    EXPECT_EQ(t.rd(XCDMA_CURDESC_PNTR), uint32_t(kRam)); // the descriptor that did not complete
    EXPECT_EQ(t.status_of(kRam), 0u);                    // its STATUS is not written
    EXPECT_TRUE(t.cdma.irq_level());
    EXPECT_TRUE(t.accesses.empty());
    t.wr64(XCDMA_TAILDESC_PNTR, kRam + 0x40); // halted: no restart until a reset
    EXPECT_TRUE(t.accesses.empty());

    CdmaState pending_reset = st;
    pending_reset.cr |= XCDMA_CR_RESET;
    Rig u;
    ASSERT_TRUE(u.cdma.load(pending_reset));
    EXPECT_EQ(u.rd(XCDMA_CDMACR), XCDMA_CR_RESET_VALUE);
    EXPECT_EQ(u.rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
    EXPECT_EQ(u.cdma.counters().soft_resets, 1u);
    EXPECT_FALSE(u.cdma.irq_level());
}

TEST(Cdma, PauseHoldsNewWorkUntilResume)
{
    Rig r;
    r.sync = false;
    r.fill(kRam, 256, true);
    r.cdma.pause(true);
    r.simple(kRam, kRam + 0x400, 256);
    EXPECT_EQ(r.kicks, 1u);
    r.cdma.process(); // the engine thread's turn: paused, it moves nothing
    EXPECT_TRUE(r.accesses.empty());
    EXPECT_TRUE(r.cdma.busy());
    EXPECT_EQ(r.cdma.save().phase, CdmaPhase::Simple);
    r.cdma.pause(false);
    EXPECT_EQ(r.kicks, 2u) << "resume wakes the engine for the pending work";
    r.cdma.process();
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_EQ(r.at(kRam + 0x400)[255], pattern(255));
    r.cdma.pause(false); // not paused: nothing to do
    EXPECT_EQ(r.kicks, 2u);
}

// pause() from another thread while the engine is inside a chain returns once the engine has
// finished the descriptor it is on (data and STATUS) and stopped before the next one.
TEST(Cdma, PauseWaitsForTheDescriptorInProgressAndStopsTheChain)
{
    Rig r;
    r.sync = false;
    constexpr unsigned kDescs = 4;
    for (unsigned i = 0; i < kDescs; i++)
        r.desc(kRam + 0x40 * i, kRam + 0x40 * (i + 1), kRam + 0x1000, kRam + 0x2000 + 0x100 * i, 64);
    r.fill(kRam + 0x1000, 64, true);
    std::mutex mu;
    std::condition_variable cv;
    bool in_transfer = false, go = false;
    r.on_access = [&](const Rig::Access &a) {
        if (a.addr != kRam + 0x1000 || in_transfer) return; // the first data read only
        std::unique_lock lk(mu);
        in_transfer = true;
        cv.notify_all();
        cv.wait(lk, [&] { return go; });
    };
    r.wr(XCDMA_CDMACR, XCDMA_CR_SGMODE);
    r.start_sg(kRam, kRam + 0x40 * (kDescs - 1));
    std::thread engine([&] { r.cdma.process(); });
    {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return in_transfer; });
    }
    std::atomic<bool> paused{false};
    std::thread pauser([&] {
        r.cdma.pause(true);
        paused = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(paused.load()) << "pause() must wait for the descriptor in progress";
    {
        std::lock_guard lk(mu);
        go = true;
        cv.notify_all();
    }
    pauser.join();
    engine.join();
    EXPECT_TRUE(paused.load());
    EXPECT_EQ(r.status_of(kRam), XCDMA_DESC_STS_CMPLT);
    EXPECT_EQ(r.status_of(kRam + 0x40), 0u);
    const CdmaState st = r.cdma.save();
    EXPECT_EQ(st.phase, CdmaPhase::Fetch);
    EXPECT_EQ(st.curdesc, kRam + 0x40);
    EXPECT_TRUE(r.cdma.busy());
    r.cdma.pause(false);
    r.cdma.process();
    for (unsigned i = 0; i < kDescs; i++)
        EXPECT_EQ(r.status_of(kRam + 0x40 * i), XCDMA_DESC_STS_CMPLT) << i;
    EXPECT_FALSE(r.cdma.busy());
    EXPECT_TRUE(r.errors.empty());
}

// The register sequence of drivers/dma/xilinx/xilinx_dma.c (Linux 6.1) for an SG-capable CDMA:
// probe (read SGIncld, reset, enable IRQs), alloc_chan_resources (SGMode), two memcpy
// transactions issued together, the interrupt handler, terminate_all.
TEST(Cdma, LinuxDriverSequenceRunsTwoMemcpysWithOneInterrupt)
{
    Rig r;
    const auto set = [&](uint32_t bits) { r.wr(XCDMA_CDMACR, r.rd(XCDMA_CDMACR) | bits); };
    const auto clr = [&](uint32_t bits) { r.wr(XCDMA_CDMACR, r.rd(XCDMA_CDMACR) & ~bits); };
    ASSERT_TRUE(r.rd(XCDMA_CDMASR) & XCDMA_SR_SGINCLD); // has_sg
    set(XCDMA_CR_RESET);
    ASSERT_FALSE(r.rd(XCDMA_CDMACR) & XCDMA_CR_RESET); // poll
    set(XCDMA_CR_IRQEN_ALL);
    set(XCDMA_CR_SGMODE);
    // prep_memcpy x2: next_desc = own address (low word only, MSB left 0), 64-bit SA/DA;
    // append_desc_queue links the first to the second (low word only).
    const uint64_t s0 = kRam + 0x40, s1 = kRam + 0x80, src = kHigh + 0x100, dst = kRam + 0x20000;
    r.fill(src, 5000, true);
    r.desc(s0, s0, src, dst, 3000);
    r.desc(s1, s1, src + 3000, dst + 3000, 2000);
    reinterpret_cast<xcdma_desc *>(r.at(s0))->nxtdesc = uint32_t(s1);
    // start_transfer: coalesce = pending count, SGMode toggle, CURDESC, TAILDESC (lo_hi).
    uint32_t cr = r.rd(XCDMA_CDMACR);
    cr = (cr & ~XCDMA_CR_IRQTHRESHOLD_MASK) | threshold(2);
    r.wr(XCDMA_CDMACR, cr);
    clr(XCDMA_CR_SGMODE);
    set(XCDMA_CR_SGMODE);
    unsigned irqs = 0;
    r.on_irq = [&](bool l) { irqs += l; };
    r.wr64(XCDMA_CURDESC_PNTR, s0);
    r.wr64(XCDMA_TAILDESC_PNTR, s1);
    EXPECT_EQ(irqs, 1u);
    // xilinx_dma_irq_handler
    const uint32_t sr = r.rd(XCDMA_CDMASR);
    ASSERT_TRUE(sr & XCDMA_SR_IOC_IRQ);
    r.wr(XCDMA_CDMASR, sr & XCDMA_SR_IRQ_ALL);
    EXPECT_FALSE(r.cdma.irq_level());
    EXPECT_EQ(sr & XCDMA_SR_ERR_ALL, 0u);
    for (unsigned i = 0; i < 5000; i++)
        ASSERT_EQ(r.at(dst)[i], pattern(i)) << i;
    // terminate_all: wait for Idle, leave SG mode.
    EXPECT_TRUE(r.rd(XCDMA_CDMASR) & XCDMA_SR_IDLE);
    clr(XCDMA_CR_SGMODE);
    EXPECT_TRUE(r.errors.empty());
}

// The QEMU arrangement (cdma_capi.cc): process() on an engine thread woken by kick(), register
// accesses from a vCPU thread, set_irq from both. Transfers with soft resets in the middle.
TEST(Cdma, EngineThreadAndVcpuThreadStayConsistent)
{
    std::mutex mu;
    std::condition_variable cv;
    bool kicked = false, stop = false;
    std::atomic<int> host_level{0};
    std::atomic<unsigned> errors{0};
    CdmaConfig cfg;
    cfg.chunk = 4096;
    Cdma *core = nullptr;
    rackemu::test::TestHost th(kRamSize, kRam); // the host's RAM, DMA outside it a decode error
    th.set_irq = [&](unsigned, bool l) { host_level = l; };
    th.guest_error = [&](const std::string &) { errors++; };
    Cdma cdma(
        th.host(),
        [&] {
            std::lock_guard lk(mu);
            kicked = true;
            cv.notify_one();
        },
        cfg);
    std::vector<uint8_t> &ram = th.ram;
    core = &cdma;
    std::thread engine([&] {
        std::unique_lock lk(mu);
        for (;;) {
            cv.wait(lk, [&] { return kicked || stop; });
            if (stop) return;
            kicked = false;
            lk.unlock();
            core->process();
            lk.lock();
        }
    });
    auto rd = [&](uint64_t off) { return uint32_t(cdma.read(off, 4)); };
    auto wait_idle = [&] {
        while (!(rd(XCDMA_CDMASR) & XCDMA_SR_IDLE))
            std::this_thread::yield();
    };
    for (uint64_t i = 0; i < 0x40000; i++)
        ram[i] = pattern(i);
    unsigned copied = 0, resets = 0;
    for (unsigned it = 0; it < 200; it++) {
        const uint32_t len = 1 + (it * 7919u) % 0x3ffff;
        const uint64_t dst = kRam + 0x80000 + (it % 13);
        cdma.write(XCDMA_CDMACR, XCDMA_CR_IRQEN_ALL, 4);
        cdma.write(XCDMA_SA, kRam, 8);
        cdma.write(XCDMA_DA, dst, 8);
        cdma.write(XCDMA_BTT, len, 4);
        if (it % 5 == 4) { // xilinx_dma_reset() while the engine may be moving data
            cdma.write(XCDMA_CDMACR, rd(XCDMA_CDMACR) | XCDMA_CR_RESET, 4);
            while (rd(XCDMA_CDMACR) & XCDMA_CR_RESET)
                std::this_thread::yield();
            ASSERT_EQ(rd(XCDMA_CDMASR), XCDMA_SR_RESET_VALUE);
            resets++;
            continue;
        }
        wait_idle();
        const uint32_t sr = rd(XCDMA_CDMASR);
        ASSERT_EQ(sr & XCDMA_SR_ERR_ALL, 0u);
        ASSERT_TRUE(sr & XCDMA_SR_IOC_IRQ);
        ASSERT_EQ(std::memcmp(ram.data() + (dst - kRam), ram.data(), len), 0) << "iteration " << it;
        cdma.write(XCDMA_CDMASR, sr & XCDMA_SR_IRQ_ALL, 4);
        copied++;
    }
    {
        std::lock_guard lk(mu);
        stop = true;
        cv.notify_one();
    }
    engine.join();
    EXPECT_EQ(copied, 160u);
    EXPECT_EQ(resets, 40u);
    EXPECT_EQ(cdma.counters().transfers + cdma.counters().aborted, 200u);
    EXPECT_EQ(host_level.load(), int(cdma.irq_level())) << "the host saw the last level";
    EXPECT_EQ(errors.load(), 0u);
}

TEST(Cdma, KeyHoleReadRepeatsOneBeatAndKeyHoleWriteKeepsTheLast)
{
    Rig r; // data width 8 bytes
    r.fill(kRam, 64, true);
    r.fill(kRam + 0x100, 64, false);
    r.wr(XCDMA_CDMACR, XCDMA_CR_KEYHOLE_READ);
    r.simple(kRam, kRam + 0x100, 32); // a FIFO at kRam: four reads of the same 8 bytes
    for (unsigned i = 0; i < 32; i++)
        ASSERT_EQ(r.at(kRam + 0x100)[i], pattern(i % 8)) << i;
    EXPECT_EQ(r.at(kRam + 0x100)[32], kDstFill);
    r.wr(XCDMA_CDMACR, XCDMA_CR_KEYHOLE_WRITE);
    r.simple(kRam + 8, kRam + 0x200, 20); // beats of 8, 8 and 4 bytes into one register
    for (unsigned i = 0; i < 4; i++)
        EXPECT_EQ(r.at(kRam + 0x200)[i], pattern(8 + 16 + i));
    for (unsigned i = 4; i < 8; i++)
        EXPECT_EQ(r.at(kRam + 0x200)[i], pattern(8 + 8 + i));
    unsigned writes_at_fixed = 0;
    for (const auto &a : r.accesses)
        writes_at_fixed += a.write && a.addr == kRam + 0x200;
    EXPECT_EQ(writes_at_fixed, 3u);
    EXPECT_EQ(r.rd(XCDMA_CDMASR) & XCDMA_SR_ERR_ALL, 0u);
}

// ---------------------------------------------------------------------------------------------
// The device operations (cdma_capi.h): the core with its engine thread, as the generic adapter
// drives it, and its state as one byte string (hw/core/state.h).

namespace {

struct OpsRig {
    rackemu::test::TestHost th{kRamSize, kRam};
    RkHost host = th.raw();
    void *core = nullptr;

    OpsRig()
    {
        char err[128] = "";
        core = rk_cdma_device_ops.create(&host, nullptr, err, sizeof err);
        EXPECT_NE(core, nullptr) << err;
    }
    ~OpsRig() { rk_cdma_device_ops.free(core); }
    uint32_t rd(uint64_t off)
    {
        uint64_t v = 0;
        EXPECT_EQ(rk_cdma_device_ops.regions[0].read(core, off, 4, &v), RK_OK);
        return uint32_t(v);
    }
    void wr(uint64_t off, uint64_t v)
    {
        EXPECT_EQ(rk_cdma_device_ops.regions[0].write(core, off, v, 4), RK_OK);
    }
    void wr64(uint64_t off, uint64_t v)
    {
        wr(off, uint32_t(v));
        wr(off + 4, uint32_t(v >> 32));
    }
    uint8_t *at(uint64_t addr) { return th.ram.data() + (addr - kRam); }
    void desc(uint64_t addr, uint64_t next, uint64_t sa, uint64_t da, uint32_t control)
    {
        xcdma_desc d{uint32_t(next), uint32_t(next >> 32), uint32_t(sa), uint32_t(sa >> 32),
                     uint32_t(da),   uint32_t(da >> 32),   control,      0};
        std::memcpy(at(addr), &d, sizeof d);
    }
    // The engine thread finished (CDMASR.Idle), within 5 s.
    bool idle()
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!(rd(XCDMA_CDMASR) & XCDMA_SR_IDLE)) {
            if (std::chrono::steady_clock::now() > end) return false;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        return true;
    }
    std::vector<uint32_t> regs()
    {
        std::vector<uint32_t> v;
        for (uint64_t off = 0; off < XCDMA_REG_END; off += 4)
            v.push_back(rd(off));
        return v;
    }
    std::vector<uint8_t> save()
    {
        uint8_t *b = nullptr;
        uint64_t n = 0;
        EXPECT_EQ(rk_cdma_device_ops.save(core, &b, &n), 0);
        std::vector<uint8_t> v(b, b + n);
        free(b);
        return v;
    }
    int load(const std::vector<uint8_t> &v, std::string &msg)
    {
        char m[300] = "";
        const int rc = rk_cdma_device_ops.load(core, v.data(), v.size(), m, sizeof m);
        msg = m;
        return rc;
    }
    // An SG chain of three 64-byte copies with threshold 2: one IOC, one completion unsignalled,
    // paused at the tail (resume_valid).
    void chain()
    {
        for (unsigned i = 0; i < 4; i++)
            desc(kRam + 0x40 * i, kRam + 0x40 * (i + 1), kRam + 0x1000 + 0x40 * i, kRam + 0x2000 + 0x40 * i,
                 64);
        for (unsigned i = 0; i < 0x100; i++)
            at(kRam + 0x1000)[i] = pattern(i);
        wr(XCDMA_CDMACR, XCDMA_CR_SGMODE | threshold(2) | kIrqEnAll);
        wr64(XCDMA_CURDESC_PNTR, kRam);
        wr64(XCDMA_TAILDESC_PNTR, kRam + 0x80);
    }
};

} // namespace

TEST(CdmaDeviceOps, TheEngineThreadRunsAndTellsTheHost)
{
    OpsRig r;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (r.th.threads.load() != 1 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(r.th.threads.load(), 1) << "the engine thread called host.thread(true)";
    r.chain();
    ASSERT_TRUE(r.idle());
    EXPECT_EQ(r.at(kRam + 0x2000 + 0x80)[63], pattern(0x80 + 63));
    EXPECT_EQ(rk_cdma_device_ops.irq_level(r.core, 0), 1) << "IOC at the threshold";
    EXPECT_STREQ(rk_cdma_device_ops.regions[0].reg_name(r.core, XCDMA_BTT), "BTT");
    rk_cdma_device_ops.free(r.core);
    r.core = nullptr;
    EXPECT_EQ(r.th.threads.load(), 0) << "the engine thread called host.thread(false)";
}

// (a) save -> load into a fresh device -> save gives the same bytes, and both behave the same.
TEST(CdmaDeviceOps, StateRoundTripsThroughAFreshDeviceByteForByte)
{
    OpsRig a;
    a.chain();
    ASSERT_TRUE(a.idle());
    rk_cdma_device_ops.pause(a.core, 1);
    const std::vector<uint8_t> saved = a.save();
    rk_cdma_device_ops.pause(a.core, 0);

    OpsRig b;
    b.th.ram = a.th.ram;
    std::string msg;
    ASSERT_EQ(b.load(saved, msg), 0) << msg;
    EXPECT_EQ(b.save(), saved);
    EXPECT_EQ(b.regs(), a.regs());
    EXPECT_EQ(rk_cdma_device_ops.irq_level(b.core, 0), 1);
    // a new tail on both: each resumes at the next descriptor, the same way
    for (OpsRig *r : {&a, &b}) {
        r->wr(XCDMA_CDMASR, XCDMA_SR_IRQ_ALL); // W1C
        r->wr64(XCDMA_TAILDESC_PNTR, kRam + 0xc0);
        ASSERT_TRUE(r->idle());
        EXPECT_EQ(r->at(kRam + 0x20c0)[63], pattern(0xc0 + 63));
    }
    EXPECT_EQ(b.regs(), a.regs());
    EXPECT_EQ(b.save(), a.save());
}

// (b) a truncated state, one with trailing bytes and one with a value out of range are refused
// with a message naming the field, and the device is unchanged.
TEST(CdmaDeviceOps, DamagedStatesAreRefusedNamingTheFieldAndChangeNothing)
{
    OpsRig r;
    r.chain();
    ASSERT_TRUE(r.idle());
    const std::vector<uint8_t> good = r.save();
    const std::vector<uint32_t> before = r.regs();
    // byte offsets (RK_CDMA_STATE, little-endian, no padding): cr, sr, curdesc, taildesc, sa, da,
    // btt, irq_count (44), unsignalled, phase (52), resume_valid (56), ...
    ASSERT_EQ(good.size(), 4 + 4 + 8 * 4 + 4 * 4 + 1 + 8 + 8) << "the layout this test assumes";
    ASSERT_EQ(good[56], 1u) << "paused at the tail";
    struct Case {
        const char *what;
        std::vector<uint8_t> blob;
        const char *field;
    };
    std::vector<Case> cases;
    cases.push_back({"truncated", std::vector<uint8_t>(good.begin(), good.begin() + 46), "irq_count"});
    std::vector<uint8_t> longer = good;
    longer.insert(longer.end(), {1, 2, 3});
    cases.push_back({"trailing bytes", longer, "left over"});
    std::vector<uint8_t> b = good;
    b[44] = b[45] = b[46] = b[47] = 0;
    cases.push_back({"irq_count 0", b, "irq_count"});
    b = good;
    b[52] = 9;
    cases.push_back({"phase 9", b, "phase"});
    b = good;
    b[56] = 2;
    cases.push_back({"resume_valid 2", b, "resume_valid"});
    b = good;
    b[8] |= 4; // curdesc bit 2
    cases.push_back({"curdesc misaligned", b, "curdesc"});
    for (const Case &k : cases) {
        std::string msg;
        EXPECT_EQ(r.load(k.blob, msg), -EINVAL) << k.what;
        EXPECT_NE(msg.find(k.field), std::string::npos) << k.what << ": " << msg;
        EXPECT_EQ(r.regs(), before) << k.what << " changed the device";
        EXPECT_EQ(r.save(), good) << k.what << " changed the device";
    }
    EXPECT_TRUE(r.th.guest_errors().empty());
}
