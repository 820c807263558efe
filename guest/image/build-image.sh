#!/usr/bin/env bash
# Build the guest initramfs: busybox, the kernel modules (virtio transport and console from
# Debian's kernel package, rackemu's own), rackemu's static programs, the agent and /init.
# Rebuilds only when an input changed. Output: $RACKEMU_BUILD/guest/initramfs.cpio, uncompressed:
# every node's kernel unpacks it at boot, and gunzipping it took 0.43 s of a node's CPU under TCG
# (the ~15 MiB it costs in each guest's RAM until the kernel frees the initrd is cheaper).
source "$(dirname "$0")/../../platform/setup/lib.sh"
env_file=$RACKEMU_BUILD/guest/guest.env
[ -f "$env_file" ] || die "$env_file missing: run platform/setup/fetch-guest.sh"
source "$env_file"
g=$RACKEMU_BUILD/guest
out=$g/initramfs.cpio
# Debian's modules the image needs, in load order (virtio core and ring are built in): the
# virtio-mmio transport, the agent's console, and the fabric NIC's virtio_net (with the failover
# modules it links against; docs/networking.md), and the persistent-memory stack that turns the
# DT's pmem-region into /dev/pmem0 (of_pmem on libnvdimm, nd_pmem with dax and nd_btt; docs/pmem.md).
sys_mods=(kernel/drivers/virtio/virtio_mmio.ko kernel/drivers/char/virtio_console.ko
          kernel/net/core/failover.ko kernel/drivers/net/net_failover.ko kernel/drivers/net/virtio_net.ko
          kernel/drivers/dax/dax.ko kernel/drivers/nvdimm/libnvdimm.ko kernel/drivers/nvdimm/nd_btt.ko
          kernel/drivers/nvdimm/nd_pmem.ko kernel/drivers/nvdimm/of_pmem.ko)

# Debian's modules that the extra modules need (guest/image/build-modules.sh lists them in load order).
extra_deps=()
[ -f "$g/modules/extra/sys-deps" ] && mapfile -t extra_deps < <(sed '/^$/d' "$g/modules/extra/sys-deps")

inputs=("$BUSYBOX" "$RACKEMU_ROOT/guest/image/init" "$RACKEMU_ROOT/guest/image/build-image.sh" "$g/bin"/* "$g/modules"/* "$g/modules/extra"/*)
for m in "${sys_mods[@]}" "${extra_deps[@]}"; do inputs+=("$MODULES_DIR/$m"); done
key=$( (for f in "${inputs[@]}"; do [ -f "$f" ] && sha256sum "$f"; done) | sha256sum | cut -c1-32)
if [ -f "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then
    exit 0
fi
root=$(mktemp -d)
chmod 0755 "$root" # mktemp -d makes it 0700: unprivileged guest processes could not reach any path
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,lib/modules,root}
cp "$BUSYBOX" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 0755 "$RACKEMU_ROOT/guest/image/init" "$root/init"
: > "$root/lib/modules/load-order"
for m in "${sys_mods[@]}"; do
    [ -f "$MODULES_DIR/$m" ] || die "kernel module $m missing from $MODULES_DIR"
    cp "$MODULES_DIR/$m" "$root/lib/modules/"
    basename "$m" >> "$root/lib/modules/load-order"
done
if [ -f "$g/modules/load-order" ]; then
    while read -r m; do
        [ -n "$m" ] || continue
        cp "$g/modules/$m" "$root/lib/modules/"
        echo "$m" >> "$root/lib/modules/load-order"
    done < "$g/modules/load-order"
fi
# not loaded at boot: tests and examples insmod them from /lib/modules/extra/ (rackemu's
# mbox_echo; Linux's unmodified xilinx_dma and dmatest). Debian modules they depend on go there
# too, listed in load order in /lib/modules/extra/sys-deps (insmod those first).
mkdir -p "$root/lib/modules/extra"
for m in "$g/modules/extra"/*.ko; do [ -f "$m" ] && cp "$m" "$root/lib/modules/extra/"; done
: > "$root/lib/modules/extra/sys-deps"
for m in "${extra_deps[@]}"; do
    [ -f "$MODULES_DIR/$m" ] || die "kernel module $m (needed by an extra module) missing from $MODULES_DIR"
    cp "$MODULES_DIR/$m" "$root/lib/modules/extra/"
    basename "$m" >> "$root/lib/modules/extra/sys-deps"
done
for b in "$g/bin"/*; do [ -f "$b" ] && install -m 0755 "$b" "$root/bin/"; done
# the remoteFork example target (docs/gsas.md): gsas run under this name acts as `gsas child`
[ -f "$root/bin/gsas" ] && ln -sf gsas "$root/bin/gsas-child"
# root, and two unprivileged users for tests and careful use (`su u -c CMD`, `su v -c CMD`;
# docs/trust-model.md); init makes /home/u and /home/v theirs
printf 'root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000:unprivileged user:/home/u:/bin/sh\nv:x:1001:1001:second unprivileged user:/home/v:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nu:x:1000:\nv:x:1001:\n' > "$root/etc/group"
printf 'root::0:0:99999:7:::\nu:!:0:0:99999:7:::\nv:!:0:0:99999:7:::\n' > "$root/etc/shadow"
chmod 0600 "$root/etc/shadow"
mkdir -p "$root/home/u" "$root/home/v"
(cd "$root" && find . | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0 > "$out.tmp")
mv "$out.tmp" "$out"
rm -f "$g/initramfs.cpio.gz" "$g/initramfs.cpio.gz.key" # the compressed image of older checkouts
echo "$key" > "$out.key"
say "guest image: $out ($(du -h "$out" | cut -f1); modules: $(tr '\n' ' ' < "$root/lib/modules/load-order"); extra: $(cd "$root/lib/modules/extra" && ls -- *.ko 2>/dev/null | tr '\n' ' '))"
