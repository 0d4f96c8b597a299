/*
 * faults.h -- fault injection for tests (SQLite test_malloc.c style).
 *
 * Each class of operation counts its calls; when a class is armed with
 * n > 0, its nth call from now fails with the given errno (and, with
 * `sticky`, every call after it).  The counters are process-wide and
 * atomic.  Production code never arms them; the cost is one relaxed load.
 */
#ifndef DD_COMMON_FAULTS_H
#define DD_COMMON_FAULTS_H

#include <stdint.h>

enum dd_fault_class {
	DD_FAULT_ALLOC = 0,
	DD_FAULT_READ,
	DD_FAULT_WRITE,
	DD_FAULT_SYNC,
	DD_FAULT_RENAME,
	DD_FAULT_OPEN,
	DD_FAULT_NCLASSES
};

/* Arms class c: its nth next call fails with errnum (n = 0 or UINT64_MAX
 * disarms); if sticky, every call after it fails too. */
void dd_fault_arm(enum dd_fault_class c, uint64_t n, int errnum, int sticky);
/* Disarms every class and resets the hit counters and the read delay. */
void dd_fault_disarm_all(void);

/* Number of injected failures in class c since dd_fault_disarm_all. */
uint64_t dd_fault_hits(enum dd_fault_class c);

/* Called by the wrappers: 0 to go on, or the errno to fail with. */
int dd_fault_check(enum dd_fault_class c);

/* Test hook: a delay in microseconds added to every pread (slow disks). */
void dd_fault_set_read_delay_us(uint32_t us);
uint32_t dd_fault_read_delay_us(void);

#endif
