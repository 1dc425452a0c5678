/* gpuquota_usage.h — binary layout of the gpu-quota `usage` file (version 1).
 *
 * One file per container (/run/gpu-quota/usage inside, the hook's state
 * directory outside). libgpuquota.so owns the format: the first opener
 * ftruncate()s the empty file to GQ_USAGE_TOTAL_SIZE under flock(LOCK_EX),
 * writes the header and stores `magic` last; every process then mmaps it
 * MAP_SHARED. All integers are little-endian; 8-byte fields are naturally
 * aligned and updated with atomic instructions (read them with 64-bit atomic
 * loads, e.g. __atomic_load_n(..., __ATOMIC_SEQ_CST) or AtomicU64 in Rust).
 *
 * Container usage of device d = sum over slots [0, high_water) of used[d].
 * A slot with owner == 0 is free (its used[] is 0). owner == UINT64_MAX
 * means "being reclaimed". Otherwise owner = pid | (start_time & 0xffffffff) << 32,
 * where pid is in the container's pid namespace and start_time is field 22 of
 * /proc/<pid>/stat (0 when unknown). A process is dead when its pid is gone,
 * when it is a zombie (state Z/X: it holds no device memory any more), or
 * when the start time differs; a process that exec'd frees its earlier
 * image's slot (same owner word) when it first opens the file. The file is
 * exactly GQ_USAGE_TOTAL_SIZE bytes or empty; a file of any other size or
 * with a header that does not match these constants is never written (in a
 * container every allocation is then refused). Slots of dead processes keep their
 * numbers until a process of the container reclaims them (on its first
 * allocation, on a refusal, on cuMemGetInfo/nvmlDeviceGetMemoryInfo), so a
 * host tool that cannot check pids in the container's namespace may see
 * stale usage of crashed processes until then.
 * A file may be shared by several containers (the consumers of one DRA
 * claim), each in its own pid namespace: a slot carries its process's
 * consumer `group` (from the container's limits file), a process judges
 * only slots of its own group by pid, and the host frees a group's slots
 * when its container ends. A slot is claimed by moving its owner from free
 * to GQ_OWNER_RECLAIMING, writing pid, start time and group, then storing
 * the owner word: a reader never judges a half-written slot.
 * In a container with a compute share (sm=), a process that becomes one of
 * the share's MPS clients at cuInit stores its owner word in `mps_client`;
 * the share's clients are the live slots whose mps_client equals their
 * owner (a claim clears it, so a slot reused by another process is no
 * client). The count is the interceptor's (sm-procs=), cooperative like
 * the usage itself.
 * See docs/interceptor.md. The layout is defined once, in the Rust crate
 * gpu-quota-formats (formats/src/usage.rs); formats/tests/usage_header.rs
 * compiles this header and fails when any define, offset or size differs.
 */
#ifndef GPUQUOTA_USAGE_H
#define GPUQUOTA_USAGE_H
#include <stdint.h>

#define GQ_USAGE_MAGIC 0x41544F5551555047ULL /* bytes "GPUQUOTA" */
#define GQ_USAGE_VERSION 1u
#define GQ_USAGE_HEADER_SIZE 4096u
#define GQ_USAGE_SLOT_COUNT 1024u
#define GQ_USAGE_DEV_COUNT 16u
#define GQ_USAGE_SLOT_SIZE 256u
#define GQ_USAGE_SLOT_USED_OFFSET 64u /* offset of used[] in a slot */
#define GQ_USAGE_TOTAL_SIZE (GQ_USAGE_HEADER_SIZE + GQ_USAGE_SLOT_COUNT * GQ_USAGE_SLOT_SIZE) /* 266240 */

#define GQ_USAGE_FLAG_CONTAINER 1u /* limits came from a state directory (hook) */
#define GQ_USAGE_FLAG_PERCENT 2u   /* limit given as a percentage; limit[d] filled per device when known */

#define GQ_OWNER_FREE 0ull
#define GQ_OWNER_RECLAIMING 0xffffffffffffffffull

#define GQ_UUID_EMPTY 0u   /* uuid_state[d] */
#define GQ_UUID_WRITING 1u
#define GQ_UUID_VALID 2u

struct gq_usage_header {
  uint64_t magic;                  /*   0 GQ_USAGE_MAGIC, written last */
  uint32_t version;                /*   8 GQ_USAGE_VERSION */
  uint32_t header_size;            /*  12 4096 */
  uint32_t slot_count;             /*  16 1024 */
  uint32_t dev_count;              /*  20 16 */
  uint32_t slot_size;              /*  24 256 */
  uint32_t slot_used_offset;       /*  28 64: offset of used[] in a slot */
  uint64_t slots_offset;           /*  32 4096: offset of slot 0 */
  uint32_t high_water;             /*  40 atomic: slots [0, high_water) may be in use */
  uint32_t flags;                  /*  44 GQ_USAGE_FLAG_* */
  uint64_t limit[16];              /*  48 per-device slice in bytes (0 = not known yet) */
  uint8_t uuid[16][16];            /* 176 device identity of index d (raw cuDeviceGetUuid bytes) */
  uint32_t uuid_state[16];         /* 432 atomic: GQ_UUID_* */
  uint64_t context_overhead_bytes; /* 496 charged once per process and device */
  uint64_t refusals;               /* 504 atomic: allocations refused so far */
  char container_id[64];           /* 512 NUL-padded */
  uint64_t reclaim_want[16];     /* 576 atomic: bytes an allocation within the guarantee waits for (0: none) */
  uint64_t reclaim_since_ms[16]; /* 704 atomic: since when (CLOCK_MONOTONIC ms) */
  uint64_t reclaim_waits;          /* 832 atomic: waits that got their memory */
  uint64_t reclaim_last_ms;        /* 840 atomic: the last one's wait */
  uint8_t reserved[4096 - 848];    /* 848 zero */
};

struct gq_usage_slot {
  uint64_t owner;        /*   0 atomic, see above */
  uint64_t start_time;   /*   8 full start time (clock ticks since boot) */
  uint64_t pid;          /*  16 */
  uint64_t group;        /*  24 consumer group (limits' consumer_group; 0 none) */
  uint64_t mps_client;   /*  32 atomic: owner word at cuInit of a compute share's MPS client, see above */
  uint8_t reserved0[24]; /*  40 */
  uint64_t used[16];     /*  64 atomic: bytes charged by this process per device */
  uint8_t reserved1[64]; /* 192 */
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct gq_usage_header) == GQ_USAGE_HEADER_SIZE, "header size");
_Static_assert(sizeof(struct gq_usage_slot) == GQ_USAGE_SLOT_SIZE, "slot size");
#endif

static inline const struct gq_usage_slot *gq_usage_slot_at(const void *base, uint32_t i) {
  return (const struct gq_usage_slot *)((const uint8_t *)base + GQ_USAGE_HEADER_SIZE + (uint64_t)i * GQ_USAGE_SLOT_SIZE);
}

/* Container usage of device `dev` in bytes. */
static inline uint64_t gq_usage_used(const void *base, uint32_t dev) {
  const struct gq_usage_header *h = (const struct gq_usage_header *)base;
  uint32_t hw = __atomic_load_n(&h->high_water, __ATOMIC_SEQ_CST);
  if (hw > GQ_USAGE_SLOT_COUNT) hw = GQ_USAGE_SLOT_COUNT;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < hw; i++) sum += __atomic_load_n(&gq_usage_slot_at(base, i)->used[dev], __ATOMIC_SEQ_CST);
  return sum;
}

/* Number of slots with an owner (live or not yet reclaimed). */
static inline uint32_t gq_usage_live_slots(const void *base) {
  const struct gq_usage_header *h = (const struct gq_usage_header *)base;
  uint32_t hw = __atomic_load_n(&h->high_water, __ATOMIC_SEQ_CST), n = 0;
  if (hw > GQ_USAGE_SLOT_COUNT) hw = GQ_USAGE_SLOT_COUNT;
  for (uint32_t i = 0; i < hw; i++) {
    uint64_t o = __atomic_load_n(&gq_usage_slot_at(base, i)->owner, __ATOMIC_SEQ_CST);
    if (o != GQ_OWNER_FREE && o != GQ_OWNER_RECLAIMING) n++;
  }
  return n;
}
#endif
