/* SPDX-License-Identifier: MIT */
/* The node's virtio-net NIC on the fabric port; see rackemu_net.h and docs/networking.md. */
#include "qemu/osdep.h"
#include "qemu/iov.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/queue.h"
#include "qemu/thread.h"
#include "qemu/timer.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "hw/virtio/virtio-mmio.h"
#include "net/net.h"

#include "rackemu_net.h"
#include "trace.h"

#define RACKEMU_NET_NAME         "rackemu-fabric" /* the backend's net client name (info network) */
#define RACKEMU_NET_RX_BATCH     64u              /* frames per bottom-half run, then the main loop breathes */
#define RACKEMU_NET_TX_RETRY_NS  (20 * SCALE_US)  /* first retry of a frame the ring could not take */
#define RACKEMU_NET_TX_RETRY_MAX (1 * SCALE_MS)

/* The counters, in the order of rackemu_net_counter_names (QOM properties, docs/networking.md). */
enum {
    RN_TX_FRAMES,       /* frames from the NIC queued to the bridge */
    RN_TX_BYTES,        /* their bytes */
    RN_TX_DEFERRED,     /* times the ring was full: the NIC's transmit paused, the frame retried */
    RN_TX_DROPPED_DOWN, /* frames from the NIC dropped because the link was down */
    RN_TX_DROPPED_BAD,  /* frames the port refused (shorter than 14 or longer than 9216 bytes) */
    RN_TX_DROPPED_ROCE, /* RoCEv2 frames of the kernel's stack refused (stack-roce, docs/networking.md) */
    RN_RX_FRAMES,       /* frames from the bridge handed to the NIC */
    RN_RX_BYTES,        /* their bytes */
    RN_RX_DROPPED_FULL, /* frames dropped because the backend's queue was full (guest not reading) */
    RN_RX_DROPPED_NIC,  /* frames the NIC refused (driver not ready, link down) */
    RN_RX_QUEUE_MAX,    /* high-water mark of the backend's receive queue, frames */
    RN_LINK_CHANGES,    /* carrier changes passed to the NIC */
    RN_COUNT
};
static const char *const rackemu_net_counter_names[RN_COUNT] = {
    "tx-frames",       "tx-bytes",  "tx-deferred",     "tx-dropped-down", "tx-dropped-bad", "tx-dropped-roce",
    "rx-frames",       "rx-bytes",  "rx-dropped-full", "rx-dropped-nic",  "rx-queue-max",   "link-changes",
};

typedef struct RackemuNetPkt {
    QSIMPLEQ_ENTRY(RackemuNetPkt) next;
    size_t len;
    uint8_t data[];
} RackemuNetPkt;

/* QEMU's net client: the backend as the NIC's peer sees it. */
typedef struct RackemuNetClient {
    NetClientState nc;
    RackemuNet *owner;
} RackemuNetClient;

struct RackemuNet {
    Object parent_obj;
    RkFabricPort *port;
    unsigned node_id;
    OnOffAuto stack_roce; /* RoCEv2 from the kernel's stack: rackemu_net_tx_allowed() */
    NetClientState *nc; /* NULL once QEMU's net layer cleaned it up (exit) */
    DeviceState *nic;

    /* fabric -> NIC: filled by the port thread, drained by rx_bh in the main loop */
    QemuMutex rx_lock;
    QSIMPLEQ_HEAD(, RackemuNetPkt) rx_queue; /* rx_lock */
    unsigned rx_frames;                      /* rx_lock: frames in rx_queue */
    size_t rx_bytes;                         /* rx_lock: their bytes */
    QEMUBH *rx_bh;
    bool rx_waiting; /* main loop: a frame is parked in the NIC's queue until rackemu_net_rx_sent */

    /* NIC -> fabric: the retry of a frame the ring could not take (main loop) */
    QEMUTimer *tx_timer;
    int64_t tx_retry_ns;

    int link_want; /* atomic: the port's latest link state */
    QEMUBH *link_bh;

    uint64_t counters[RN_COUNT]; /* atomic */
};

static void rackemu_net_count(RackemuNet *n, unsigned c, uint64_t by)
{
    qatomic_set(&n->counters[c], qatomic_read(&n->counters[c]) + by);
}

/* ---- fabric -> NIC ---- */

/* The port's service thread: copy the frame, queue it, wake the main loop. Never blocks. */
static void rackemu_net_port_rx(void *opaque, const uint8_t *frame, size_t len, unsigned src_node)
{
    RackemuNet *n = opaque;
    RackemuNetPkt *p;
    unsigned depth = 0;

    qemu_mutex_lock(&n->rx_lock);
    if (n->rx_frames < RACKEMU_NET_RX_QUEUE_FRAMES && n->rx_bytes + len <= RACKEMU_NET_RX_QUEUE_BYTES) {
        p = g_malloc(sizeof(*p) + len);
        p->len = len;
        memcpy(p->data, frame, len);
        QSIMPLEQ_INSERT_TAIL(&n->rx_queue, p, next);
        depth = ++n->rx_frames;
        n->rx_bytes += len;
        /* the counters are written by the port thread only (here) or the main loop only */
        if (depth > qatomic_read(&n->counters[RN_RX_QUEUE_MAX])) {
            qatomic_set(&n->counters[RN_RX_QUEUE_MAX], depth);
        }
    }
    qemu_mutex_unlock(&n->rx_lock);
    if (!depth) {
        rackemu_net_count(n, RN_RX_DROPPED_FULL, 1);
        trace_rackemu_net_rx_drop(n->node_id, src_node, len, "backend queue full");
        return;
    }
    trace_rackemu_net_rx(n->node_id, src_node, len, depth);
    qemu_bh_schedule(n->rx_bh);
}

/* The NIC took the frame it had parked (or purged it): go on. */
static void rackemu_net_rx_sent(NetClientState *nc, ssize_t len)
{
    RackemuNet *n = DO_UPCAST(RackemuNetClient, nc, nc)->owner;

    n->rx_waiting = false;
    qemu_bh_schedule(n->rx_bh);
}

static void rackemu_net_rx_bh(void *opaque)
{
    RackemuNet *n = opaque;
    unsigned done = 0;

    while (!n->rx_waiting && n->nc) {
        RackemuNetPkt *p;
        ssize_t r;

        if (done == RACKEMU_NET_RX_BATCH) {
            qemu_bh_schedule(n->rx_bh); /* more later: let the main loop run */
            return;
        }
        qemu_mutex_lock(&n->rx_lock);
        p = QSIMPLEQ_FIRST(&n->rx_queue);
        if (p) {
            QSIMPLEQ_REMOVE_HEAD(&n->rx_queue, next);
            n->rx_frames--;
            n->rx_bytes -= p->len;
        }
        qemu_mutex_unlock(&n->rx_lock);
        if (!p) {
            return;
        }
        done++;
        if (n->nc->link_down) {
            rackemu_net_count(n, RN_RX_DROPPED_NIC, 1);
            trace_rackemu_net_rx_drop(n->node_id, n->node_id, p->len, "link down");
        } else {
            /* 0: the NIC cannot take it now; QEMU keeps a copy and calls rackemu_net_rx_sent */
            r = qemu_send_packet_async(n->nc, p->data, p->len, rackemu_net_rx_sent);
            if (r == 0) {
                n->rx_waiting = true;
            }
            if (r >= 0) {
                rackemu_net_count(n, RN_RX_FRAMES, 1);
                rackemu_net_count(n, RN_RX_BYTES, p->len);
            } else {
                rackemu_net_count(n, RN_RX_DROPPED_NIC, 1);
                trace_rackemu_net_rx_drop(n->node_id, n->node_id, p->len, "refused by the NIC");
            }
        }
        g_free(p);
    }
}

/* ---- NIC -> fabric ---- */

static void rackemu_net_tx_retry(void *opaque)
{
    RackemuNet *n = opaque;

    if (n->nc) {
        qemu_flush_queued_packets(n->nc); /* delivers the parked frames again, in order */
    }
}

/*
 * Whether the guest's kernel stack may send this frame: RoCEv2 (UDP to port 4791) only with
 * stack-roce=on, or with auto (the default) on a node without an RNIC on the port (soft-RoCE).
 * Otherwise any user's UDP socket could inject requests into a peer's RNIC (ReDMArk).
 */
static bool rackemu_net_tx_allowed(RackemuNet *n, const struct iovec *iov, int iovcnt)
{
    uint8_t hdr[128];
    size_t got;

    if (n->stack_roce == ON_OFF_AUTO_ON) {
        return true;
    }
    got = iov_to_buf(iov, iovcnt, 0, hdr, sizeof(hdr));
    if (!rk_fabric_eth_is_rocev2(hdr, got)) {
        return true;
    }
    return n->stack_roce == ON_OFF_AUTO_AUTO && !rk_fabric_port_eth_attached(n->port, RK_FABRIC_ETH_ROCE);
}

static ssize_t rackemu_net_receive_iov(NetClientState *nc, const struct iovec *iov, int iovcnt)
{
    RackemuNet *n = DO_UPCAST(RackemuNetClient, nc, nc)->owner;
    size_t len = iov_size(iov, iovcnt);
    int rc;

    if (!rackemu_net_tx_allowed(n, iov, iovcnt)) {
        rackemu_net_count(n, RN_TX_DROPPED_ROCE, 1);
        if (qatomic_read(&n->counters[RN_TX_DROPPED_ROCE]) == 1) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "rackemu-net: node %u: the guest's network stack sent RoCEv2 (UDP port 4791) on "
                          "a node whose RNIC owns RoCE: dropped (counted in tx-dropped-roce; "
                          "-M rackemu-node,stack-roce=on allows it)\n", n->node_id);
        }
        trace_rackemu_net_tx_drop(n->node_id, len, "RoCEv2 from the stack");
        return len;
    }
    rc = rk_fabric_port_eth_sendv(n->port, iov, iovcnt);

    switch (rc) {
    case 0:
        rackemu_net_count(n, RN_TX_FRAMES, 1);
        rackemu_net_count(n, RN_TX_BYTES, len);
        n->tx_retry_ns = RACKEMU_NET_TX_RETRY_NS;
        trace_rackemu_net_tx(n->node_id, len);
        return len;
    case -EAGAIN:
        /* QEMU keeps the frame and pauses the NIC until qemu_flush_queued_packets */
        rackemu_net_count(n, RN_TX_DEFERRED, 1);
        if (!timer_pending(n->tx_timer)) {
            timer_mod(n->tx_timer, qemu_clock_get_ns(QEMU_CLOCK_REALTIME) + n->tx_retry_ns);
            n->tx_retry_ns = MIN(n->tx_retry_ns * 2, RACKEMU_NET_TX_RETRY_MAX);
        }
        trace_rackemu_net_tx_full(n->node_id, len);
        return 0;
    case -ENOTCONN:
        rackemu_net_count(n, RN_TX_DROPPED_DOWN, 1);
        trace_rackemu_net_tx_drop(n->node_id, len, "link down");
        return len;
    default:
        rackemu_net_count(n, RN_TX_DROPPED_BAD, 1);
        qemu_log_mask(LOG_GUEST_ERROR,
                      "rackemu-net: node %u: the guest sent a %zu-byte Ethernet frame; the fabric carries "
                      "%u..%u bytes: dropped\n", n->node_id, len, RKF_ETH_MIN_FRAME, RKF_ETH_MAX_FRAME);
        trace_rackemu_net_tx_drop(n->node_id, len, "bad size");
        return len;
    }
}

static ssize_t rackemu_net_receive(NetClientState *nc, const uint8_t *buf, size_t size)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = size };

    return rackemu_net_receive_iov(nc, &iov, 1);
}

/* QEMU's net layer deletes its clients at exit: stop the port from calling in first. */
static void rackemu_net_cleanup(NetClientState *nc)
{
    RackemuNet *n = DO_UPCAST(RackemuNetClient, nc, nc)->owner;

    rk_fabric_port_eth_attach(n->port, RK_FABRIC_ETH_NET, NULL, NULL);
    timer_del(n->tx_timer);
    n->nc = NULL;
}

static NetClientInfo rackemu_net_info = {
    /*
     * Caveat: QAPI's NetClientDriver has no value for a backend a machine creates; `none` is the
     * one no code treats specially (`info network` shows type=none and the info string below).
     */
    .type = NET_CLIENT_DRIVER_NONE,
    .size = sizeof(RackemuNetClient),
    .receive = rackemu_net_receive,
    .receive_iov = rackemu_net_receive_iov,
    .cleanup = rackemu_net_cleanup,
};

/* ---- link ---- */

static void rackemu_net_link_bh(void *opaque)
{
    RackemuNet *n = opaque;
    bool down = !qatomic_read(&n->link_want);
    NetClientState *nc = n->nc;

    if (!nc || nc->link_down == down) {
        return;
    }
    nc->link_down = down;
    if (nc->peer) {
        nc->peer->link_down = down;
        if (nc->peer->info->link_status_changed) {
            nc->peer->info->link_status_changed(nc->peer);
        }
    }
    rackemu_net_count(n, RN_LINK_CHANGES, 1);
    trace_rackemu_net_link(n->node_id, !down);
    if (down) {
        qemu_flush_queued_packets(nc); /* frames parked for the ring are dropped now (link down) */
    }
}

void rackemu_net_link(RackemuNet *n, int up)
{
    if (n) {
        qatomic_set(&n->link_want, !!up);
        qemu_bh_schedule(n->link_bh);
    }
}

/* ---- creation ---- */

/* The free virtio-mmio transport with the highest base: where a first -device virtio-* would go. */
static BusState *rackemu_net_free_transport(void)
{
    BusState *best = NULL;
    hwaddr best_base = 0;
    BusChild *kid;

    QTAILQ_FOREACH(kid, &sysbus_get_default()->children, sibling) {
        DeviceState *dev = kid->child;
        BusState *bus;

        if (!object_dynamic_cast(OBJECT(dev), TYPE_VIRTIO_MMIO)) {
            continue;
        }
        bus = QLIST_FIRST(&dev->child_bus);
        if (!bus || bus->num_children || SYS_BUS_DEVICE(dev)->num_mmio < 1) {
            continue;
        }
        if (!best || SYS_BUS_DEVICE(dev)->mmio[0].addr > best_base) {
            best = bus;
            best_base = SYS_BUS_DEVICE(dev)->mmio[0].addr;
        }
    }
    return best;
}

RackemuNet *rackemu_net_create(Object *parent, RkFabricPort *port, unsigned node_id, unsigned mtu,
                               OnOffAuto stack_roce, Error **errp)
{
    BusState *bus = rackemu_net_free_transport();
    RackemuNet *n;
    uint8_t mac[6];

    if (!bus) {
        error_setg(errp, "no free virtio-mmio transport for the node's NIC");
        return NULL;
    }
    if (qemu_find_netdev(RACKEMU_NET_NAME)) {
        error_setg(errp, "a netdev is already called %s (the name of the node's fabric backend): "
                   "rename it, or use the machine's NIC (net=on)", RACKEMU_NET_NAME);
        return NULL;
    }
    n = RACKEMU_NET(object_new(TYPE_RACKEMU_NET));
    object_property_add_child(parent, "rackemu-net", OBJECT(n));
    object_unref(OBJECT(n));
    n->port = port;
    n->node_id = node_id;
    n->stack_roce = stack_roce;
    n->link_want = rk_fabric_port_is_up(port);
    n->nc = qemu_new_net_client(&rackemu_net_info, NULL, "rackemu-fabric", RACKEMU_NET_NAME);
    DO_UPCAST(RackemuNetClient, nc, n->nc)->owner = n;
    n->nc->link_down = !n->link_want;
    rkf_eth_node_mac(node_id, mac);
    qemu_set_info_str(n->nc, "rackemu fabric port of node %u (MAC %02x:%02x:%02x:%02x:%02x:%02x)", node_id,
                      mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);

    n->nic = qdev_new("virtio-net-device");
    qdev_prop_set_macaddr(n->nic, "mac", mac);
    qdev_prop_set_netdev(n->nic, "netdev", n->nc);
    qdev_prop_set_uint16(n->nic, "host_mtu", mtu);
    if (!qdev_realize_and_unref(n->nic, bus, errp)) {
        return NULL;
    }
    if (n->nc->peer) {
        n->nc->peer->link_down = n->nc->link_down; /* the carrier the guest sees first */
    }
    rk_fabric_port_eth_attach(port, RK_FABRIC_ETH_NET, rackemu_net_port_rx, n);
    return n;
}

static void rackemu_net_get_counter(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    RackemuNet *n = RACKEMU_NET(obj);
    uint64_t value = qatomic_read(&n->counters[(uintptr_t)opaque]);

    visit_type_uint64(v, name, &value, errp);
}

static void rackemu_net_instance_init(Object *obj)
{
    RackemuNet *n = RACKEMU_NET(obj);

    qemu_mutex_init(&n->rx_lock);
    QSIMPLEQ_INIT(&n->rx_queue);
    n->rx_bh = qemu_bh_new(rackemu_net_rx_bh, n);
    n->link_bh = qemu_bh_new(rackemu_net_link_bh, n);
    n->tx_timer = timer_new_ns(QEMU_CLOCK_REALTIME, rackemu_net_tx_retry, n);
    n->tx_retry_ns = RACKEMU_NET_TX_RETRY_NS;
}

static void rackemu_net_class_init(ObjectClass *oc, void *data)
{
    for (uintptr_t i = 0; i < RN_COUNT; i++) {
        object_class_property_add(oc, rackemu_net_counter_names[i], "uint64", rackemu_net_get_counter, NULL, NULL,
                                  (void *)i);
    }
}

static const TypeInfo rackemu_net_type_info = {
    .name = TYPE_RACKEMU_NET,
    .parent = TYPE_OBJECT,
    .instance_size = sizeof(RackemuNet),
    .instance_init = rackemu_net_instance_init,
    .class_init = rackemu_net_class_init,
};

static void rackemu_net_register(void)
{
    type_register_static(&rackemu_net_type_info);
}

type_init(rackemu_net_register)
