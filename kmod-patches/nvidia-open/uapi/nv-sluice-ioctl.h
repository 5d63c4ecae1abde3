/* SPDX-License-Identifier: MIT */
/*
 * sluice: SM trap (stop trigger) escapes on the NVIDIA control device.
 *
 * User-space ABI of the sluice patch to the NVIDIA open GPU kernel modules.
 * Both escapes are issued on /dev/nvidiactl with ioctl(2); the request
 * numbers use the driver's own magic ('F') and escape base (200), so the
 * driver's generic ioctl path copies the argument in and out.
 *
 * SLUICE_NV_IOCTL_QUERY: version and capability query; any user may call it.
 * An unpatched driver answers EINVAL (unknown escape).
 *
 * SLUICE_NV_IOCTL_TRAP: one operation per call, CAP_SYS_ADMIN only.
 *   TRACK    start recording the RM clients, subdevices and compute objects
 *            that the calling process allocates from now on (call it before
 *            the CUDA context is created); the calling fd owns the record
 *            and closing it ends tracking.
 *   UNTRACK  free the debugger sessions ARM made and end tracking.
 *   ARM      for every recorded compute context of the calling process on
 *            gpu_id: allocate a GT200_DEBUGGER session in the process's own
 *            RM client, set its exception mask to none (RC recovery is never
 *            deferred for it) and enable SM debug mode.
 *   TRIGGER  for every armed context on gpu_id: SUSPEND_CONTEXT (stop
 *            trigger: every resident warp enters the trap handler), then
 *            RESUME_CONTEXT.
 *
 * Errors: EINVAL (bad size, op, flags, non-zero reserved word, or gpu_id
 * given where it must be 0), EPERM (no CAP_SYS_ADMIN, or the fd tracks
 * another process), ENOTTY (not the control device), EBUSY (already
 * tracking, or no free tracking slot), ESRCH (fd is not tracking, or no
 * recorded/armed context on that GPU), ENODEV (no GPU with that gpu_id),
 * EOPNOTSUPP (the RM or GSP firmware refused the debugger control as not
 * supported), EIO (another RM failure; rm_status holds the NV_STATUS),
 * EFAULT (bad argument pointer).
 */

#ifndef _NV_SLUICE_IOCTL_H_
#define _NV_SLUICE_IOCTL_H_

#include <linux/ioctl.h>
#include <linux/types.h>

#define SLUICE_NV_IOCTL_MAGIC     'F'
#define SLUICE_NV_ESC_BASE        200
#define SLUICE_NV_ESC_QUERY       (SLUICE_NV_ESC_BASE + 48)
#define SLUICE_NV_ESC_TRAP        (SLUICE_NV_ESC_BASE + 49)

#define SLUICE_NV_MAGIC           0x564e4c53U
#define SLUICE_NV_ABI_MAJOR       1
#define SLUICE_NV_ABI_MINOR       0
#define SLUICE_NV_MAX_GPUS        16
#define SLUICE_NV_VERSION_LEN     32

#define SLUICE_NV_CAP_TRAP        (1U << 0)

#define SLUICE_NV_TRAP_OP_TRACK   1
#define SLUICE_NV_TRAP_OP_UNTRACK 2
#define SLUICE_NV_TRAP_OP_ARM     3
#define SLUICE_NV_TRAP_OP_TRIGGER 4

struct sluice_nv_gpu {
	__u32 gpu_id;
	__u32 pci_domain;
	__u8 pci_bus;
	__u8 pci_slot;
	__u8 pci_function;
	__u8 pad;
	__u16 vendor_id;
	__u16 device_id;
};

struct sluice_nv_query {
	__u32 magic;
	__u16 abi_major;
	__u16 abi_minor;
	__u32 caps;
	__u32 num_gpus;
	char driver_version[SLUICE_NV_VERSION_LEN];
	__u32 reserved[4];
	struct sluice_nv_gpu gpus[SLUICE_NV_MAX_GPUS];
};

struct sluice_nv_trap {
	__u32 op;
	__u32 gpu_id;
	__u32 flags;
	__u32 contexts;
	__u32 rm_status;
	__u32 reserved[3];
};

#define SLUICE_NV_IOCTL_QUERY \
	_IOWR(SLUICE_NV_IOCTL_MAGIC, SLUICE_NV_ESC_QUERY, struct sluice_nv_query)
#define SLUICE_NV_IOCTL_TRAP \
	_IOWR(SLUICE_NV_IOCTL_MAGIC, SLUICE_NV_ESC_TRAP, struct sluice_nv_trap)

#endif /* _NV_SLUICE_IOCTL_H_ */
