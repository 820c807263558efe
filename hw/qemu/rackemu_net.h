/* SPDX-License-Identifier: MIT */
/*
 * The node's IP network interface (docs/networking.md): a standard virtio-net NIC (virtio-mmio)
 * whose backend is the node's fabric port, so Ethernet frames go to the bridge's switch through
 * the port's shared-memory rings (RKF_SVC_ETH) with no socket on the data path.
 *
 * The backend is a QEMU net client (NetClientState with its own NetClientInfo) that the machine
 * creates in C and links to the NIC's "netdev" property, so no QAPI netdev type is needed. Its
 * MAC is the node's (rkf_eth_node_mac(): 02:52:4b:00:00:<id>).
 *
 * Data path and threads:
 *   NIC -> fabric: virtio-net hands a frame to the backend (main loop or vCPU thread, big lock
 *     held); the backend queues it on the port without blocking. When the port's ring has no
 *     room (-EAGAIN) the backend answers 0: QEMU's net layer keeps the frame and pauses the
 *     NIC's transmit queue, and a timer (20 us, doubling to 1 ms) flushes it again. Nothing is
 *     lost to a full ring. With the link down a frame is dropped and counted (a cable pulled).
 *   fabric -> NIC: the port's service thread hands over whole frames; the backend copies each
 *     into a bounded queue (RACKEMU_NET_RX_QUEUE_FRAMES frames, RACKEMU_NET_RX_QUEUE_BYTES bytes;
 *     beyond: dropped and counted, never waiting) and schedules a bottom half. The bottom half
 *     (main loop, big lock) passes frames to the NIC with qemu_send_packet_async; when the guest's
 *     receive ring is full, QEMU parks the frame and the backend stops until the NIC calls back.
 *     The port thread never takes the big lock.
 *   link: the port's link state becomes the NIC's carrier (virtio-net's link status bit).
 *
 * Counters are read-only QOM properties of /machine/rackemu-net (qom-get), listed in
 * docs/networking.md.
 */
#ifndef RACKEMU_NET_H
#define RACKEMU_NET_H

#include "qom/object.h"
#include "qapi/qapi-types-common.h" /* OnOffAuto */
#include "rk_fabric_port.h"

#define TYPE_RACKEMU_NET "rackemu-net"
OBJECT_DECLARE_SIMPLE_TYPE(RackemuNet, RACKEMU_NET)

#define RACKEMU_NET_RX_QUEUE_FRAMES 1024u
#define RACKEMU_NET_RX_QUEUE_BYTES  (4u << 20)
#define RACKEMU_NET_MTU_MIN         68u   /* IPv4's minimum */
#define RACKEMU_NET_MTU_MAX         9000u /* a jumbo frame of 9014 bytes fits RKF_ETH_MAX_FRAME */
#define RACKEMU_NET_MTU_DEFAULT     1500u

/*
 * Create the node's backend on `port` and a virtio-net NIC linked to it on the free virtio-mmio
 * transport with the highest base address (where a first -device virtio-* would go), with the
 * node's MAC and `mtu` as its advertised MTU (virtio-net host_mtu). `parent` owns the result
 * (child "rackemu-net"). Call it in the machine's init, after virt's init and before the port
 * starts. `stack_roce`: whether the guest's stack may send RoCEv2 (UDP port 4791) frames: on,
 * off, or auto (only while no RNIC is attached to the port; docs/networking.md). Returns NULL
 * with `errp` set if no transport is free or the name is taken.
 */
RackemuNet *rackemu_net_create(Object *parent, RkFabricPort *port, unsigned node_id, unsigned mtu,
                               OnOffAuto stack_roce, Error **errp);
/* The port's link went up or down (any thread): the NIC's carrier follows, in the main loop. */
void rackemu_net_link(RackemuNet *n, int up);

#endif /* RACKEMU_NET_H */
