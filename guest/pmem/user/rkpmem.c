// SPDX-License-Identifier: MIT
/*
 * rkpmem: store to, persist and read the node's persistent-memory region through /dev/rkpmem0
 * (docs/pmem.md "Mapping, storing, persisting"). Offsets are region-relative; numbers take 0x.
 *   rkpmem info                        base, size, mode, NIC entries, LLC lines
 *   rkpmem fill OFF LEN BYTE [persist] store BYTE to [OFF, OFF+LEN) with CPU stores, then (with
 *                                      "persist") rk_pmem_persist the range
 *   rkpmem persist OFF LEN             rk_pmem_persist [OFF, OFF+LEN) (DC CVAP or DC CVAC + DSB)
 *   rkpmem read OFF LEN                print [OFF, OFF+LEN) in hex, one line
 * Exit status 0, 1 on a refused request (message on stderr), 2 on usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rackemu/pmem_persist.h"
#include "rackemu/pmem_uapi.h"

static const char *const mode_names[] = {"none", "eadr", "adr", "adr-ddio"};

static int usage(void)
{
    fprintf(stderr, "usage: rkpmem info | fill OFF LEN BYTE [persist] | persist OFF LEN | read OFF LEN\n");
    return 2;
}

static int num(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 0);
    return errno || !*s || *end ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct rkpmem_info info;
    uint64_t off = 0, len = 0, byte = 0;
    int fd;

    if (argc < 2) return usage();
    fd = open(RKPMEM_DEV, O_RDWR);
    if (fd < 0) {
        fprintf(stderr, "rkpmem: %s: %s\n", RKPMEM_DEV, strerror(errno));
        return 1;
    }
    if (ioctl(fd, RKPMEM_IOC_INFO, &info) < 0) {
        fprintf(stderr, "rkpmem: RKPMEM_IOC_INFO: %s\n", strerror(errno));
        return 1;
    }
    if (strcmp(argv[1], "info") == 0) {
        printf("base=0x%llx size=%llu mode=%s nic_entries=%u llc_lines=%u\n", (unsigned long long)info.base,
               (unsigned long long)info.size, info.mode < 4 ? mode_names[info.mode] : "?", info.nic_entries,
               info.llc_lines);
        return 0;
    }
    if (argc < 4 || num(argv[2], &off) || num(argv[3], &len)) return usage();
    if (len == 0 || off >= info.size || len > info.size - off) {
        fprintf(stderr, "rkpmem: [0x%llx, +0x%llx) is not inside the %llu-byte region\n", (unsigned long long)off,
                (unsigned long long)len, (unsigned long long)info.size);
        return 1;
    }
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const uint64_t moff = off & ~(page - 1), mlen = off + len - moff;
    uint8_t *map = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)moff);
    if (map == MAP_FAILED) {
        fprintf(stderr, "rkpmem: mmap: %s\n", strerror(errno));
        return 1;
    }
    uint8_t *p = map + (off - moff);
    if (strcmp(argv[1], "fill") == 0) {
        if (argc < 5 || argc > 6 || num(argv[4], &byte) || byte > 255) return usage();
        if (argc == 6 && strcmp(argv[5], "persist") != 0) return usage();
        memset(p, (int)byte, len);
        if (argc == 6) rk_pmem_persist(p, len);
    } else if (strcmp(argv[1], "persist") == 0) {
        rk_pmem_persist(p, len);
    } else if (strcmp(argv[1], "read") == 0) {
        for (uint64_t i = 0; i < len; i++)
            printf("%02x", p[i]);
        printf("\n");
    } else {
        return usage();
    }
    munmap(map, mlen);
    return 0;
}
