#!/bin/busybox sh
# shellcheck shell=dash
# /init of the initramfs that scripts/kmod/qemu-test.sh boots: load the
# patched amdgpu.ko and its dependencies, run the kfd selftest, power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "sluice-qemu: kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpu(s)"

for m in $(cat /modules/order); do
	insmod "/modules/$m" || echo "sluice-qemu: insmod $m failed"
done
if [ -c /dev/kfd ]; then
	echo "sluice-qemu: /dev/kfd present ($(cat /sys/class/kfd/kfd/dev))"
else
	echo "sluice-qemu: no /dev/kfd after loading amdgpu"
fi

/kfd_selftest
echo "sluice-qemu: selftest exited with $?"
echo "sluice-qemu: kernel log about amdgpu/kfd:"
dmesg | grep -i -E 'amdgpu|kfd|taint|BUG|Oops|WARNING' | tail -n 20
poweroff -f
