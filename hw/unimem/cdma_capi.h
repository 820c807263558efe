/* SPDX-License-Identifier: MIT */
/*
 * The cDMA (Xilinx AXI CDMA) core as a rackemu device (rackemu/device.h): its table of
 * operations, which the generic adapter serves (hw/qemu/rackemu_cdma.c). The device is
 * rackemu::unimem::Cdma (cdma.h) with its engine on a thread of its own (cdma_capi.cc): register
 * writes that start work only wake the engine, so a vCPU never waits for a transfer, and
 * transfers to other nodes block only the engine thread. The core reaches memory (the node's
 * RAM and the global address space window), its interrupt line (line 0) and the guest-error log
 * through the host (rackemu/host.h); its engine thread tells the host when it starts and ends.
 */
#ifndef RACKEMU_CDMA_CAPI_H
#define RACKEMU_CDMA_CAPI_H

#include "rackemu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * create takes no configuration (cfg NULL). One region (the register page, RACKEMU_CDMA_SIZE),
 * one interrupt line (cdma_introut); the state is CdmaState (cdma.h), its fields in an X-macro
 * there. pause(on) quiesces the engine at its next transfer or descriptor boundary and waits.
 */
extern const RkDeviceOps rk_cdma_device_ops;

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_CDMA_CAPI_H */
