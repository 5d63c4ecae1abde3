/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * sluice's private amdkfd ioctls: a capability query and a per-process
 * wave kill for reset-based preemption.
 *
 * Numbering: these ioctls share amdkfd's type byte ('K', AMDKFD_IOCTL_BASE)
 * and use command numbers from the private block 0xA0..0xAF. Upstream
 * amdkfd allocates its numbers sequentially from 0x01 (0x01..0x27 as of
 * Linux 6.12, see AMDKFD_COMMAND_END), ROCm's out-of-tree DKMS driver uses
 * 0x80..0x84 and other research patches 0x85..0x88. 0xA0 leaves 0x79
 * numbers of headroom above upstream and 0x17 above the highest known
 * out-of-tree user, and the block fits in the 8-bit _IOC_NR field. A
 * driver without this patch answers every number in the block with
 * -ENOTTY, which is how user space tells a stock driver apart.
 */
#ifndef KFD_SLUICE_H_INCLUDED
#define KFD_SLUICE_H_INCLUDED

#include <linux/ioctl.h>
#include <linux/types.h>

#define KFD_SLUICE_IOCTL_BASE		'K'

/* "SLUI": answered by AMDKFD_IOC_SLUICE_GET_VERSION on a patched driver */
#define KFD_SLUICE_MAGIC		0x534c5549
#define KFD_SLUICE_VERSION		1

/* AMDKFD_IOC_SLUICE_WAVE_KILL is implemented */
#define KFD_SLUICE_CAP_WAVE_KILL	(1ULL << 0)

struct kfd_ioctl_sluice_version_args {
	__u32 magic;		/* from KFD: KFD_SLUICE_MAGIC */
	__u32 version;		/* from KFD: KFD_SLUICE_VERSION */
	__u64 caps;		/* from KFD: KFD_SLUICE_CAP_* */
	__u32 reserved[4];	/* from KFD: zero */
};

/*
 * Look the target up and validate everything, but do not send the KILL:
 * lets a scheduler probe the whole path at start-up without side effects.
 */
#define KFD_SLUICE_WAVE_KILL_DRY_RUN	(1U << 0)
#define KFD_SLUICE_WAVE_KILL_FLAGS	KFD_SLUICE_WAVE_KILL_DRY_RUN

/*
 * Kill every wave of process @pid on GPU @gpu_id with SQ_CMD KILL sent to
 * that process's VMID; the GPU is not reset and other processes' waves are
 * not touched. Requires CAP_SYS_ADMIN. Errors:
 *   EPERM       the caller lacks CAP_SYS_ADMIN
 *   EINVAL      unknown bit in @flags, or a nonzero @reserved word
 *   ESRCH       no process @pid, or it has no KFD context
 *   ENODEV      @gpu_id is not a GPU of that process
 *   EOPNOTSUPP  the VMID of a process cannot be looked up on this GPU
 *               (e.g. MES-scheduled gfx11/gfx12)
 *   EBUSY       the GPU is resetting, its scheduler hung, or its run list
 *               is over-subscribed (VMIDs may change under firmware control)
 *   EFAULT      the argument pointer is bad
 */
struct kfd_ioctl_sluice_wave_kill_args {
	__u32 gpu_id;		/* to KFD */
	__u32 pid;		/* to KFD: thread group id, caller's pid namespace */
	__u32 flags;		/* to KFD: KFD_SLUICE_WAVE_KILL_* */
	__u32 vmid;		/* to KFD: ignored; from KFD: VMID killed, 0 if none */
	__u32 reserved[4];	/* to KFD: must be zero */
};

#define AMDKFD_IOC_SLUICE_GET_VERSION		\
		_IOR(KFD_SLUICE_IOCTL_BASE, 0xA0, struct kfd_ioctl_sluice_version_args)

#define AMDKFD_IOC_SLUICE_WAVE_KILL		\
		_IOWR(KFD_SLUICE_IOCTL_BASE, 0xA1, struct kfd_ioctl_sluice_wave_kill_args)

#define AMDKFD_SLUICE_COMMAND_START	0xA0
#define AMDKFD_SLUICE_COMMAND_END	0xA2

#endif /* KFD_SLUICE_H_INCLUDED */
