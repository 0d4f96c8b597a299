/*
 * faults.c -- process-wide fault injection counters.
 *
 * Production code calls dd_fault_check() on every allocation and I/O, so
 * the disarmed path must cost one relaxed load of dd_fault_any and nothing
 * else.  dd_fault_any is a hint: it only goes up on arm and down on
 * disarm_all, which tests do between operations, not during them.
 *
 * Per class, df_left counts down the calls still to let through; the call
 * that takes it from 1 to 0 fails.  The decrement is a compare-and-swap so
 * that exactly one of several racing threads gets the failure.  A sticky
 * class's last decrement goes to DD_FAULT_FAILING instead of 0, and every
 * later call fails: one atomic state, so no thread racing the failing
 * call can find the class exhausted but not yet failing (a separate flag
 * set after the decrement let such a call through).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/faults.h"

struct dd_fault {
	atomic_uint_least64_t df_left;
	atomic_int df_errnum;
	atomic_bool df_sticky;
	atomic_uint_least64_t df_hits;
};

/* df_left of a sticky class past its failing call */
#define DD_FAULT_FAILING UINT64_MAX

static struct dd_fault dd_faults[DD_FAULT_NCLASSES];
static atomic_bool dd_fault_any;
static atomic_uint_least32_t dd_fault_delay_us;

static bool dd_fault_class_ok(enum dd_fault_class c)
{
	return (unsigned)c < DD_FAULT_NCLASSES;
}

void dd_fault_arm(enum dd_fault_class c, uint64_t n, int errnum, int sticky)
{
	struct dd_fault *f;

	if (!dd_fault_class_ok(c))
		return;
	f = &dd_faults[c];
	/* Disarm first so a concurrent check never sees a half-set class. */
	atomic_store(&f->df_left, 0);
	if (n == 0 || n == DD_FAULT_FAILING)
		return;
	atomic_store(&f->df_errnum, errnum ? errnum : EIO);
	atomic_store(&f->df_sticky, sticky != 0);
	atomic_store(&f->df_left, n);
	atomic_store(&dd_fault_any, true);
}

void dd_fault_disarm_all(void)
{
	atomic_store(&dd_fault_any, false);
	for (int c = 0; c < DD_FAULT_NCLASSES; c++) {
		atomic_store(&dd_faults[c].df_left, 0);
		atomic_store(&dd_faults[c].df_hits, 0);
	}
	atomic_store(&dd_fault_delay_us, 0);
}

uint64_t dd_fault_hits(enum dd_fault_class c)
{
	if (!dd_fault_class_ok(c))
		return 0;
	return atomic_load(&dd_faults[c].df_hits);
}

int dd_fault_check(enum dd_fault_class c)
{
	struct dd_fault *f;
	uint64_t left;

	if (!atomic_load_explicit(&dd_fault_any, memory_order_relaxed))
		return 0;
	if (!dd_fault_class_ok(c))
		return 0;
	f = &dd_faults[c];
	left = atomic_load(&f->df_left);
	for (;;) {
		uint64_t next;

		if (left == 0)
			return 0;
		if (left == DD_FAULT_FAILING)
			break;
		next = left - 1;
		if (next == 0 && atomic_load(&f->df_sticky))
			next = DD_FAULT_FAILING;
		if (!atomic_compare_exchange_weak(&f->df_left, &left, next))
			continue;       /* left was reloaded; try again */
		if (left != 1)
			return 0;
		break;
	}
	atomic_fetch_add(&f->df_hits, 1);
	return atomic_load(&f->df_errnum);
}

void dd_fault_set_read_delay_us(uint32_t us)
{
	atomic_store(&dd_fault_delay_us, us);
	/* The delay is applied only past the dd_fault_any fast path. */
	if (us)
		atomic_store(&dd_fault_any, true);
}

uint32_t dd_fault_read_delay_us(void)
{
	if (!atomic_load_explicit(&dd_fault_any, memory_order_relaxed))
		return 0;
	return atomic_load_explicit(&dd_fault_delay_us, memory_order_relaxed);
}
