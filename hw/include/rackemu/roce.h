/* SPDX-License-Identifier: MIT */
/*
 * RoCEv2 on the wire: the one definition of the frames the rackemu RNIC sends and receives
 * (Ethernet II / IPv4 / UDP 4791 / BTH / extension headers / payload / pad / ICRC), shared by the
 * device core (hw/rnic), the guest driver and library, the bridge's capture and fault rules, and
 * the tests. Plain C, usable from the kernel (rk_types.h) and from C++.
 *
 * Sources: InfiniBand Architecture Specification Vol 1 Release 1.5 (IBA): sec. 9.2 BTH, 9.3
 * extension headers (RETH, AtomicETH, AETH, AtomicAckETH, ImmDt), the OpCode table of 9.2,
 * 9.7.5.2 (AETH syndrome, credit and RNR timer encodings), 9.7.6 (requester timeouts), 7.8.1
 * (ICRC); Annex A17 (RoCEv2): A17.4 (IP/UDP encapsulation, UDP destination port 4791),
 * A17.4.3 (ICRC over the masked IP/UDP headers), A17.9.3 (CNP); the Memory Placement Extensions
 * of IBA 1.5 (FLUSH 0x1C with FETH, ATOMIC WRITE 0x1D). Linux's rxe (drivers/infiniband/sw/rxe)
 * is the reference implementation the semantics follow (docs/rnic.md).
 *
 * Byte order: every multi-byte field is big-endian (network order) on the wire, except the ICRC,
 * which is the CRC-32 value transmitted least significant byte first (as Ethernet's FCS): the
 * headers are declared as byte arrays and read and written only through the roce_get_* /
 * roce_put_* accessors below, so no struct is ever read in host order by mistake.
 */
#ifndef RACKEMU_ROCE_H
#define RACKEMU_ROCE_H
/* Tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h" /* rk_u64, rk_u32, rk_u16, rk_u8 */

/* ---- Encapsulation (Annex A17.4) ---- */
#define ROCE_ETHERTYPE_IPV4    0x0800u  /* Ethernet II type of the IPv4 header that follows */
#define ROCE_IP_PROTO_UDP      17u
#define ROCE_UDP_DPORT         4791u    /* IANA "roce": RoCEv2's UDP destination port (A17.4.1) */
#define ROCE_UDP_SPORT_MIN     0xC000u  /* source ports are an entropy hash of the flow in 0xC000..0xFFFF (A17.4.1, rxe) */
#define ROCE_IP_TTL_DEFAULT    64u
#define ROCE_IP_FLAG_DF        0x4000u  /* IPv4 flags/fragment: don't fragment; MF and the offset must be 0 */
#define ROCE_IP_FRAG_MASK      0x3FFFu  /* MF + fragment offset */
#define ROCE_PKEY_DEFAULT      0xFFFFu  /* the default partition, full membership (IBA 10.9.1.2) */
#define ROCE_TVER              0u       /* BTH transport header version (IBA 9.2) */

/* ---- Sizes ---- */
#define ROCE_ETH_LEN           14u
#define ROCE_IPV4_LEN          20u      /* no IP options */
#define ROCE_UDP_LEN           8u
#define ROCE_BTH_LEN           12u
#define ROCE_RETH_LEN          16u
#define ROCE_ATOMICETH_LEN     28u
#define ROCE_AETH_LEN          4u
#define ROCE_ATOMICACKETH_LEN  8u
#define ROCE_IMMDT_LEN         4u
#define ROCE_FETH_LEN          4u
#define ROCE_CNP_RESV_LEN      16u      /* the CNP's reserved bytes after the BTH (A17.9.3) */
#define ROCE_ICRC_LEN          4u
#define ROCE_HDRS_LEN          (ROCE_ETH_LEN + ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN) /* 54 */
#define ROCE_EXT_MAX_LEN       ROCE_ATOMICETH_LEN /* the longest extension-header set of an opcode */
#define ROCE_MTU_MIN           256u     /* path MTU (payload bytes per packet): 256, 512, 1024, 2048, 4096 */
#define ROCE_MTU_MAX           4096u
#define ROCE_FRAME_MAX         (ROCE_HDRS_LEN + ROCE_EXT_MAX_LEN + ROCE_MTU_MAX + 3u + ROCE_ICRC_LEN) /* 4185 */
#define ROCE_ETH_MIN_FRAME     60u      /* shortest Ethernet frame without FCS: shorter ones are padded */
#define ROCE_PSN_MASK          0xFFFFFFu /* PSNs are 24 bits (IBA 9.2) */
#define ROCE_QPN_MASK          0xFFFFFFu
#define ROCE_MSN_MASK          0xFFFFFFu

/* ---- Headers, as they are on the wire ---- */
struct roce_eth {
    rk_u8 dst[6];
    rk_u8 src[6];
    rk_u8 type[2];          /* ROCE_ETHERTYPE_IPV4 (untagged frames only) */
};
struct roce_ipv4 {
    rk_u8 ver_ihl;          /* 0x45: version 4, 5 words */
    rk_u8 tos;              /* DSCP [7:2], ECN [1:0]; masked to 1s in the ICRC */
    rk_u8 tot_len[2];       /* IP header to ICRC inclusive */
    rk_u8 id[2];
    rk_u8 frag[2];          /* flags [15:13], fragment offset [12:0]: ROCE_IP_FLAG_DF */
    rk_u8 ttl;              /* masked to 1s in the ICRC */
    rk_u8 proto;            /* ROCE_IP_PROTO_UDP */
    rk_u8 csum[2];          /* RFC 791 header checksum; masked to 1s in the ICRC */
    rk_u8 src[4];
    rk_u8 dst[4];
};
struct roce_udp {
    rk_u8 sport[2];
    rk_u8 dport[2];         /* ROCE_UDP_DPORT */
    rk_u8 len[2];           /* UDP header to ICRC inclusive */
    rk_u8 csum[2];          /* 0 (A17.4.2: not used over IPv4); masked to 1s in the ICRC */
};
/* Base Transport Header (IBA 9.2). */
struct roce_bth {
    rk_u8 opcode;           /* ROCE_OP_* */
    rk_u8 flags;            /* SE [7], MigReq [6], PadCnt [5:4], TVer [3:0] */
    rk_u8 pkey[2];
    rk_u8 resv8a;           /* RoCEv2: FECN [7], BECN [6], reserved [5:0]; masked to 1s in the ICRC */
    rk_u8 dqpn[3];          /* destination QP number */
    rk_u8 ackreq;           /* AckReq [7], reserved [6:0] */
    rk_u8 psn[3];
};
#define ROCE_BTH_SE            0x80u
#define ROCE_BTH_MIGREQ        0x40u
#define ROCE_BTH_PAD_SHIFT     4u
#define ROCE_BTH_PAD_MASK      0x30u
#define ROCE_BTH_TVER_MASK     0x0Fu
#define ROCE_BTH_FECN          0x80u    /* in resv8a */
#define ROCE_BTH_BECN          0x40u
#define ROCE_BTH_ACKREQ        0x80u    /* in ackreq */
/* RDMA Extended Transport Header (IBA 9.3.3): RDMA READ/WRITE requests, FLUSH, ATOMIC WRITE. */
struct roce_reth {
    rk_u8 va[8];
    rk_u8 rkey[4];
    rk_u8 dma_len[4];       /* bytes of the whole message */
};
/* Atomic Extended Transport Header (IBA 9.3.4): COMPARE_SWAP, FETCH_ADD. */
struct roce_atomiceth {
    rk_u8 va[8];            /* 8-byte aligned */
    rk_u8 rkey[4];
    rk_u8 swap_add[8];      /* swap value (CMP_SWAP) or addend (FETCH_ADD) */
    rk_u8 compare[8];       /* CMP_SWAP only */
};
/* ACK Extended Transport Header (IBA 9.3.5). */
struct roce_aeth {
    rk_u8 syndrome;         /* ROCE_AETH_* */
    rk_u8 msn[3];           /* the responder's message sequence number */
};
/* Atomic ACK Extended Transport Header (IBA 9.3.6). */
struct roce_atomicacketh {
    rk_u8 orig[8];          /* the remote data before the atomic */
};
/* Immediate data (IBA 9.3.7): carried opaque, delivered in the receive completion. */
struct roce_immdt {
    rk_u8 imm[4];
};
/* FLUSH Extended Transport Header (IBA 1.5 Memory Placement Extensions): a 32-bit word. */
struct roce_feth {
    rk_u8 bits[4];
};
#define ROCE_FETH_PLT_MASK     0x0Fu    /* placement type, bits [3:0] of the word */
#define ROCE_FETH_PLT_GLOBAL   0x01u    /* global visibility */
#define ROCE_FETH_PLT_PERSIST  0x02u    /* persistence */
#define ROCE_FETH_SEL_SHIFT    4u       /* selectivity level, bits [5:4] */
#define ROCE_FETH_SEL_MASK     0x30u
#define ROCE_FETH_SEL_RANGE    0u       /* the RETH's range of the memory region */
#define ROCE_FETH_SEL_MR       1u       /* the whole memory region (RETH VA/length ignored) */

/* ---- OpCodes (IBA 9.2, OpCode table; RC = transport 000b) ---- */
#define ROCE_OP_SEND_FIRST             0x00u
#define ROCE_OP_SEND_MIDDLE            0x01u
#define ROCE_OP_SEND_LAST              0x02u
#define ROCE_OP_SEND_LAST_IMM          0x03u
#define ROCE_OP_SEND_ONLY              0x04u
#define ROCE_OP_SEND_ONLY_IMM          0x05u
#define ROCE_OP_WRITE_FIRST            0x06u
#define ROCE_OP_WRITE_MIDDLE           0x07u
#define ROCE_OP_WRITE_LAST             0x08u
#define ROCE_OP_WRITE_LAST_IMM         0x09u
#define ROCE_OP_WRITE_ONLY             0x0Au
#define ROCE_OP_WRITE_ONLY_IMM         0x0Bu
#define ROCE_OP_READ_REQUEST           0x0Cu
#define ROCE_OP_READ_RESP_FIRST        0x0Du
#define ROCE_OP_READ_RESP_MIDDLE       0x0Eu
#define ROCE_OP_READ_RESP_LAST         0x0Fu
#define ROCE_OP_READ_RESP_ONLY         0x10u
#define ROCE_OP_ACK                    0x11u
#define ROCE_OP_ATOMIC_ACK             0x12u
#define ROCE_OP_CMP_SWAP               0x13u
#define ROCE_OP_FETCH_ADD              0x14u
/* 0x15 reserved; 0x16/0x17 SEND LAST/ONLY WITH INVALIDATE: not supported (no memory windows) */
#define ROCE_OP_SEND_LAST_INV          0x16u
#define ROCE_OP_SEND_ONLY_INV          0x17u
#define ROCE_OP_FLUSH                  0x1Cu /* BTH + FETH + RETH; answered by a zero-length READ RESPONSE ONLY */
#define ROCE_OP_ATOMIC_WRITE           0x1Du /* BTH + RETH + 8-byte payload; answered by a zero-length READ RESPONSE ONLY */
#define ROCE_OP_CNP                    0x81u /* RoCEv2 congestion notification (A17.9.3): BTH + 16 reserved bytes */
/* Manufacturer-specific opcodes are 0xC0..0xFF (transport types 110b and 111b, IBA 9.2).
 * rackemu reserves 0xC0..0xCF for the extended atomic requests of the NIC atomic unit (the NIC-atomics paper)
 * and 0xD0..0xDF for their responses; 0xE0..0xFF stay unassigned. Until the atomic-unit issue
 * defines their headers, a frame with one of these opcodes parses as "reserved opcode" and an RC
 * responder answers it with NAK Invalid Request. */
#define ROCE_OP_XATOMIC_REQ_FIRST      0xC0u
#define ROCE_OP_XATOMIC_REQ_LAST       0xCFu
#define ROCE_OP_XATOMIC_RESP_FIRST     0xD0u
#define ROCE_OP_XATOMIC_RESP_LAST      0xDFu
#define ROCE_OP_MANUFACTURER_FIRST     0xC0u

/* What follows the BTH for an opcode, in wire order (FETH, RETH, AtomicETH, AETH, AtomicAckETH,
 * ImmDt, payload): roce_opcode_info(op). */
#define ROCE_HDR_VALID         0x0001u  /* an opcode this RNIC sends or accepts */
#define ROCE_HDR_FETH          0x0002u
#define ROCE_HDR_RETH          0x0004u
#define ROCE_HDR_ATOMICETH     0x0008u
#define ROCE_HDR_AETH          0x0010u
#define ROCE_HDR_ATOMICACKETH  0x0020u
#define ROCE_HDR_IMMDT         0x0040u
#define ROCE_HDR_CNP           0x0080u  /* 16 reserved bytes, no payload */
#define ROCE_HDR_PAYLOAD       0x0100u  /* may carry payload (0..MTU bytes) */
#define ROCE_HDR_FULL          0x0200u  /* FIRST/MIDDLE: payload of exactly one path MTU */
#define ROCE_HDR_PAYLOAD8      0x0400u  /* exactly 8 bytes of payload (ATOMIC WRITE) */
#define ROCE_HDR_REQUEST       0x1000u  /* requester -> responder */
#define ROCE_HDR_RESPONSE      0x2000u  /* responder -> requester */
#define ROCE_HDR_FIRST         0x4000u  /* starts a message (FIRST or ONLY) */
#define ROCE_HDR_LAST          0x8000u  /* ends a message (LAST or ONLY) */

static inline rk_u32 roce_opcode_info(rk_u8 op)
{
    const rk_u32 rq = ROCE_HDR_VALID | ROCE_HDR_REQUEST, rs = ROCE_HDR_VALID | ROCE_HDR_RESPONSE;
    const rk_u32 fi = ROCE_HDR_FIRST, la = ROCE_HDR_LAST, on = ROCE_HDR_FIRST | ROCE_HDR_LAST;
    const rk_u32 pl = ROCE_HDR_PAYLOAD, fu = ROCE_HDR_PAYLOAD | ROCE_HDR_FULL;

    switch (op) {
    case ROCE_OP_SEND_FIRST:       return rq | fi | fu;
    case ROCE_OP_SEND_MIDDLE:      return rq | fu;
    case ROCE_OP_SEND_LAST:        return rq | la | pl;
    case ROCE_OP_SEND_LAST_IMM:    return rq | la | pl | ROCE_HDR_IMMDT;
    case ROCE_OP_SEND_ONLY:        return rq | on | pl;
    case ROCE_OP_SEND_ONLY_IMM:    return rq | on | pl | ROCE_HDR_IMMDT;
    case ROCE_OP_WRITE_FIRST:      return rq | fi | fu | ROCE_HDR_RETH;
    case ROCE_OP_WRITE_MIDDLE:     return rq | fu;
    case ROCE_OP_WRITE_LAST:       return rq | la | pl;
    case ROCE_OP_WRITE_LAST_IMM:   return rq | la | pl | ROCE_HDR_IMMDT;
    case ROCE_OP_WRITE_ONLY:       return rq | on | pl | ROCE_HDR_RETH;
    case ROCE_OP_WRITE_ONLY_IMM:   return rq | on | pl | ROCE_HDR_RETH | ROCE_HDR_IMMDT;
    case ROCE_OP_READ_REQUEST:     return rq | on | ROCE_HDR_RETH;
    case ROCE_OP_READ_RESP_FIRST:  return rs | fi | fu | ROCE_HDR_AETH;
    case ROCE_OP_READ_RESP_MIDDLE: return rs | fu;
    case ROCE_OP_READ_RESP_LAST:   return rs | la | pl | ROCE_HDR_AETH;
    case ROCE_OP_READ_RESP_ONLY:   return rs | on | pl | ROCE_HDR_AETH;
    case ROCE_OP_ACK:              return rs | on | ROCE_HDR_AETH;
    case ROCE_OP_ATOMIC_ACK:       return rs | on | ROCE_HDR_AETH | ROCE_HDR_ATOMICACKETH;
    case ROCE_OP_CMP_SWAP:         return rq | on | ROCE_HDR_ATOMICETH;
    case ROCE_OP_FETCH_ADD:        return rq | on | ROCE_HDR_ATOMICETH;
    case ROCE_OP_FLUSH:            return rq | on | ROCE_HDR_FETH | ROCE_HDR_RETH;
    case ROCE_OP_ATOMIC_WRITE:     return rq | on | ROCE_HDR_RETH | ROCE_HDR_PAYLOAD | ROCE_HDR_PAYLOAD8;
    case ROCE_OP_CNP:              return ROCE_HDR_VALID | ROCE_HDR_CNP;
    default:                       return 0;
    }
}

/* Bytes of extension headers between the BTH and the payload for an opcode's info. */
static inline unsigned roce_ext_len(rk_u32 info)
{
    return ((info & ROCE_HDR_FETH) ? ROCE_FETH_LEN : 0u) + ((info & ROCE_HDR_RETH) ? ROCE_RETH_LEN : 0u) +
           ((info & ROCE_HDR_ATOMICETH) ? ROCE_ATOMICETH_LEN : 0u) + ((info & ROCE_HDR_AETH) ? ROCE_AETH_LEN : 0u) +
           ((info & ROCE_HDR_ATOMICACKETH) ? ROCE_ATOMICACKETH_LEN : 0u) +
           ((info & ROCE_HDR_IMMDT) ? ROCE_IMMDT_LEN : 0u) + ((info & ROCE_HDR_CNP) ? ROCE_CNP_RESV_LEN : 0u);
}

/* ---- Extended atomics of the NIC atomic unit (the NIC-atomics paper sec. III; docs/atomic-unit.md) ----
 * Two request opcodes in rackemu's reserved range, one extension header, one response opcode:
 *   ROCE_OP_XATOMIC      BTH + XAtomicETH: executed once, answered by ROCE_OP_XATOMIC_ACK
 *                        (AETH + AtomicAckETH: the value before the operation, zero-extended for
 *                        32-bit operands); a duplicate is answered from the responder resources
 *                        like COMPARE_SWAP/FETCH_ADD.
 *   ROCE_OP_XATOMIC_POST BTH + XAtomicETH, no value returned: answered by a plain ACK, like a
 *                        WRITE; a duplicate is re-ACKed, never executed again.
 * The operation is in XAtomicETH.op (ROCE_XOP_*), the operand size in .size (4 or 8 bytes, VA
 * aligned to it). Arithmetic on operand-size unsigned integers in the target's byte order (the
 * target's CPU reads them as its own integers; rackemu's nodes are little-endian):
 *   ADD new = old + operand (mod 2^bits)      SWAP new = operand
 *   XOR new = old ^ operand   AND new = old & operand   OR new = old | operand
 *   MCSWAP (masked compare-swap): if ((old ^ compare) & mask) == 0 then
 *          new = (old & ~mask) | (operand & mask), else new = old. mask = all ones is COMPARE_SWAP.
 * This block is self-contained: roce_opcode_info() does not list these opcodes (an RC engine that
 * does not host the atomic unit keeps NAKing them); roce_xatomic_info() does, and
 * parse_frame(..., xatomic = true) in hw/rnic/wire.h accepts them. */
#define ROCE_OP_XATOMIC                0xC0u
#define ROCE_OP_XATOMIC_POST           0xC1u
#define ROCE_OP_XATOMIC_ACK            0xD0u
#define ROCE_XATOMICETH_LEN    40u
#define ROCE_HDR_XATOMICETH    0x0800u  /* extension header of the extended atomic requests */
struct roce_xatomiceth {
    rk_u8 va[8];            /* aligned to the operand size */
    rk_u8 rkey[4];
    rk_u8 op;               /* ROCE_XOP_* */
    rk_u8 size;             /* operand bytes: ROCE_XATOMIC_SIZE32 or ROCE_XATOMIC_SIZE64 */
    rk_u8 resv[2];          /* zero */
    rk_u8 operand[8];       /* addend, swap value or bit pattern (32-bit: low half, high half zero) */
    rk_u8 compare[8];       /* MCSWAP only (else zero) */
    rk_u8 mask[8];          /* MCSWAP only (else zero) */
};
#define ROCE_XOP_ADD           0u
#define ROCE_XOP_SWAP          1u
#define ROCE_XOP_XOR           2u
#define ROCE_XOP_AND           3u
#define ROCE_XOP_OR            4u
#define ROCE_XOP_MCSWAP        5u
#define ROCE_XOP_COUNT         6u
#define ROCE_XATOMIC_SIZE32    4u
#define ROCE_XATOMIC_SIZE64    8u

/* roce_opcode_info() extended with the atomic unit's opcodes (0 for any other reserved opcode). */
static inline rk_u32 roce_xatomic_info(rk_u8 op)
{
    const rk_u32 on = ROCE_HDR_VALID | ROCE_HDR_FIRST | ROCE_HDR_LAST;

    switch (op) {
    case ROCE_OP_XATOMIC:          return on | ROCE_HDR_REQUEST | ROCE_HDR_XATOMICETH;
    case ROCE_OP_XATOMIC_POST:     return on | ROCE_HDR_REQUEST | ROCE_HDR_XATOMICETH;
    case ROCE_OP_XATOMIC_ACK:      return on | ROCE_HDR_RESPONSE | ROCE_HDR_AETH | ROCE_HDR_ATOMICACKETH;
    default:                       return roce_opcode_info(op);
    }
}

/* Bytes of extension headers of an opcode's roce_xatomic_info() (a request frame carries no
 * payload, so ROCE_FRAME_MAX, sized by the longest header set with a payload, still bounds it). */
static inline unsigned roce_xatomic_ext_len(rk_u32 info)
{
    return roce_ext_len(info) + ((info & ROCE_HDR_XATOMICETH) ? ROCE_XATOMICETH_LEN : 0u);
}
#ifdef __cplusplus
static_assert(sizeof(struct roce_xatomiceth) == ROCE_XATOMICETH_LEN, "XAtomicETH layout");
static_assert(ROCE_OP_XATOMIC >= ROCE_OP_XATOMIC_REQ_FIRST && ROCE_OP_XATOMIC_POST <= ROCE_OP_XATOMIC_REQ_LAST,
              "extended atomic requests in the reserved request range");
static_assert(ROCE_OP_XATOMIC_ACK >= ROCE_OP_XATOMIC_RESP_FIRST && ROCE_OP_XATOMIC_ACK <= ROCE_OP_XATOMIC_RESP_LAST,
              "extended atomic responses in the reserved response range");
static_assert(ROCE_HDRS_LEN + ROCE_XATOMICETH_LEN + ROCE_ICRC_LEN <= ROCE_FRAME_MAX, "XATOMIC frame fits");
static_assert((ROCE_HDR_XATOMICETH & (ROCE_HDR_VALID | ROCE_HDR_FETH | ROCE_HDR_RETH | ROCE_HDR_ATOMICETH |
                                      ROCE_HDR_AETH | ROCE_HDR_ATOMICACKETH | ROCE_HDR_IMMDT | ROCE_HDR_CNP |
                                      ROCE_HDR_PAYLOAD | ROCE_HDR_FULL | ROCE_HDR_PAYLOAD8 | ROCE_HDR_REQUEST |
                                      ROCE_HDR_RESPONSE | ROCE_HDR_FIRST | ROCE_HDR_LAST)) == 0,
              "ROCE_HDR_XATOMICETH is a free bit");
#endif
/* ---- end of the extended atomics ---- */

/* ---- AETH syndrome (IBA 9.3.5, 9.7.5.2) ---- */
#define ROCE_AETH_TYPE_MASK    0x60u    /* bits [6:5]; bit 7 is reserved (0) */
#define ROCE_AETH_TYPE_ACK     0x00u    /* [4:0]: credit count code (roce_credit_count); 0x1F = no credit information */
#define ROCE_AETH_TYPE_RNR     0x20u    /* [4:0]: RNR timer code (roce_rnr_timer_us) */
#define ROCE_AETH_TYPE_NAK     0x60u    /* [4:0]: NAK code */
#define ROCE_AETH_VALUE_MASK   0x1Fu
#define ROCE_AETH_CREDITS_INVALID 0x1Fu /* "invalid credit count": the responder does not advertise credits */
#define ROCE_NAK_PSN_SEQ       0x00u    /* PSN sequence error: AETH PSN is the expected PSN */
#define ROCE_NAK_INVALID_REQ   0x01u    /* invalid request (bad opcode sequence, length, unsupported) */
#define ROCE_NAK_REMOTE_ACCESS 0x02u    /* remote access error (R_Key, bounds, access rights) */
#define ROCE_NAK_REMOTE_OP     0x03u    /* remote operational error (the responder could not complete it) */
#define ROCE_NAK_INVALID_RD    0x04u    /* invalid RD request (reliable datagram only: never sent by RC) */
#define ROCE_AETH_ACK(credits) ((rk_u8)(ROCE_AETH_TYPE_ACK | ((credits) & ROCE_AETH_VALUE_MASK)))
#define ROCE_AETH_RNR(timer)   ((rk_u8)(ROCE_AETH_TYPE_RNR | ((timer) & ROCE_AETH_VALUE_MASK)))
#define ROCE_AETH_NAK(code)    ((rk_u8)(ROCE_AETH_TYPE_NAK | ((code) & ROCE_AETH_VALUE_MASK)))

/* RNR NAK timer codes (IBA ch. 9, the RNR timer encoding) in microseconds: code 0 is the longest, 655.36 ms. */
static inline rk_u32 roce_rnr_timer_us(unsigned code)
{
    static const rk_u32 us[32] = {
        655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
        2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
        163840, 245760, 327680, 491520,
    };
    return us[code & 31u];
}

/* Credit count codes (IBA ch. 9, the end-to-end credit encoding): code -> receive WQEs advertised; 0x1F has no value. */
static inline rk_u32 roce_credit_count(unsigned code)
{
    static const rk_u32 n[31] = {
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    };
    return code < 31u ? n[code] : 0u;
}

/* ---- ICRC masking (IBA 7.8.1, Annex A17.4.3; IPv4) ----
 * The ICRC is CRC-32 (the Ethernet polynomial 0x04C11DB7, reflected, initial value 0xFFFFFFFF,
 * final complement) over: 8 bytes of 0xFF (in place of the masked LRH), then the IPv4 header, UDP
 * header and BTH with these fields replaced by 1s: IPv4 TOS (DSCP + ECN), TTL and header
 * checksum, the UDP checksum, and the BTH's resv8a byte (FECN, BECN, reserved); then the
 * extension headers, the payload and the pad bytes. The Ethernet header is not covered. The
 * result is transmitted least significant byte first (ConnectX-4 Lx and rxe: CNP frame in
 * tests/unit/roce_vectors.py). Offsets below are from the start of the IPv4 header. */
#define ROCE_ICRC_SEED_LEN     8u
#define ROCE_ICRC_MASK_TOS     1u
#define ROCE_ICRC_MASK_TTL     8u
#define ROCE_ICRC_MASK_IPCSUM  10u      /* 2 bytes */
#define ROCE_ICRC_MASK_UDPCSUM 26u      /* 2 bytes */
#define ROCE_ICRC_MASK_RESV8A  32u      /* BTH byte 4 */

/* ---- Accessors (network order) ---- */
static inline rk_u16 roce_get16(const rk_u8 *p) { return (rk_u16)((rk_u16)p[0] << 8 | p[1]); }
static inline rk_u32 roce_get24(const rk_u8 *p) { return (rk_u32)p[0] << 16 | (rk_u32)p[1] << 8 | p[2]; }
static inline rk_u32 roce_get32(const rk_u8 *p)
{
    return (rk_u32)p[0] << 24 | (rk_u32)p[1] << 16 | (rk_u32)p[2] << 8 | p[3];
}
static inline rk_u64 roce_get64(const rk_u8 *p) { return (rk_u64)roce_get32(p) << 32 | roce_get32(p + 4); }
static inline void roce_put16(rk_u8 *p, rk_u16 v) { p[0] = (rk_u8)(v >> 8); p[1] = (rk_u8)v; }
static inline void roce_put24(rk_u8 *p, rk_u32 v)
{
    p[0] = (rk_u8)(v >> 16); p[1] = (rk_u8)(v >> 8); p[2] = (rk_u8)v;
}
static inline void roce_put32(rk_u8 *p, rk_u32 v)
{
    p[0] = (rk_u8)(v >> 24); p[1] = (rk_u8)(v >> 16); p[2] = (rk_u8)(v >> 8); p[3] = (rk_u8)v;
}
static inline void roce_put64(rk_u8 *p, rk_u64 v) { roce_put32(p, (rk_u32)(v >> 32)); roce_put32(p + 4, (rk_u32)v); }

static inline unsigned roce_bth_pad(const struct roce_bth *b)
{
    return (b->flags & ROCE_BTH_PAD_MASK) >> ROCE_BTH_PAD_SHIFT;
}
static inline rk_u32 roce_bth_psn(const struct roce_bth *b) { return roce_get24(b->psn); }
static inline rk_u32 roce_bth_dqpn(const struct roce_bth *b) { return roce_get24(b->dqpn); }

/* ---- PSN arithmetic (IBA 9.7.1: 24-bit sequence space, half of it ahead) ---- */
/* a - b as a signed distance in the 24-bit circle: > 0 when a is ahead of b (by < 2^23). */
static inline int roce_psn_diff(rk_u32 a, rk_u32 b)
{
    rk_u32 d = (a - b) & ROCE_PSN_MASK;

    return d & 0x800000u ? (int)d - 0x1000000 : (int)d;
}
static inline rk_u32 roce_psn_add(rk_u32 psn, rk_u32 n) { return (psn + n) & ROCE_PSN_MASK; }

/* ---- Retransmission timer (IBA 9.7.6.1.3): 4.096 us * 2^timeout; 0 = infinite ---- */
static inline rk_u64 roce_timeout_ns(unsigned timeout)
{
    return timeout == 0u || timeout > 31u ? 0u : (rk_u64)4096u << timeout; /* 4096 ns * 2^t */
}

/* clang-format on */
#endif /* RACKEMU_ROCE_H */
