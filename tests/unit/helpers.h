/*
 * helpers.h -- what several unit-test programs share: temporary stores,
 * writing and checking images, and the fault walk (faults.h) that the
 * store, stream and cache tests run over their operations.
 *
 * tests/CMakeLists.txt links tests/unit/helpers*.c into every unit-test
 * program; the programs include this header as "helpers.h".  Failures are
 * cmocka assertions.
 */
#ifndef DD_TEST_HELPERS_H
#define DD_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup.h"

/* ---- temporary stores ------------------------------------------------------*/

/* Makes a fresh /tmp/dd-test-store-XXXXXX directory and returns the path
 * of a store inside it, ".../s" (malloc'd, not created). */
char *th_tmp_store(void);
/* Creates the store at path with block size bs, verify mode, compression
 * (enum dd_compress) and block hash (hash/hash.h: DD_HASH_SHA256, or
 * DD_HASH_TEST_WEAK16 to force collisions); asserts it opens. */
dd_store *th_create(const char *path, uint32_t bs, int verify, int compress,
		    int hash_kind);
/* Removes the whole temporary directory of th_tmp_store; frees path. */
void th_rm_store(char *path);
void th_rm_rf(const char *path);
/* Damage: flips a bit of byte off of file (which must have it). */
void th_flip_byte(const char *file, uint64_t off);
/* Replaces directory `to` with a copy of `from` (cp -a). */
void th_copy_tree(const char *from, const char *to);

/* ---- images ------------------------------------------------------------------*/

/* Writes snapshot `name` in pieces of `chunk` bytes; 0 or the first error. */
int th_put(dd_store *s, const char *name, const uint8_t *data, size_t n,
	   size_t chunk);
/* Asserts that snapshot `name` reads back as exactly data[0..n). */
void th_check_image(dd_store *s, const char *name, const uint8_t *data,
		    size_t n);

typedef struct th_image {
	const char *name;
	const uint8_t *data;
	size_t size;
} th_image;

/* Opens the store at path with a new handle, asserts that scrub passes and
 * that each image reads back exact, and closes it. */
void th_check_store(const char *path, const th_image *imgs, size_t nimgs);

/* A store that a walk step starts from afresh: `work`, beside `tmpl` (a
 * th_tmp_store path), replaced by a copy of it, and open as `s` with one
 * worker thread (so that faults land in the same order every time). */
typedef struct th_tmpl {
	char *tmpl, *work;
	dd_store *s;
} th_tmpl;

/* Takes tmpl (a th_tmp_store path holding a closed store); opens a copy. */
void th_tmpl_init(th_tmpl *t, char *tmpl);
/* Closes s, copies the template over work again, opens s. */
void th_tmpl_reset(th_tmpl *t);
/* The same as a th_walk.reset, for a ctx whose first member is a th_tmpl. */
void th_tmpl_walk_reset(void *ctx);
/* Closes s, checks work with th_check_store, opens s again. */
void th_tmpl_check(th_tmpl *t, const th_image *imgs, size_t nimgs);
/* Closes s and removes both stores. */
void th_tmpl_fini(th_tmpl *t);

/* A stream in memory, for dd_send / dd_recv and the stream codec: writes
 * append to p (grown as needed; free it), reads hand out from pos on, at
 * most max_read bytes a call when set (0: all asked for). */
typedef struct th_mem {
	uint8_t *p;
	size_t len, cap, pos;
	size_t max_read;
} th_mem;
int th_mem_write(void *ctx, const void *buf, size_t len);
int th_mem_read(void *ctx, void *buf, size_t len, size_t *got);

/* xorshift64: deterministic bytes, so a failure reproduces.  Set
 * th_rng_state (non-zero) to seed it. */
extern uint64_t th_rng_state;
uint64_t th_rng(void);

/* ---- fault walks ---------------------------------------------------------------*/

/*
 * A walk runs `op` again and again with one injected fault: for each class
 * (DD_FAULT_ALLOC, _READ, ...), step k makes the kth call of that class
 * during op fail (ENOMEM for allocations; ENOSPC or EIO, alternately, for
 * I/O).  After each step, with faults disarmed, `after` checks the state
 * (the store opens, scrub passes, committed snapshots are exact, ...).
 * The walk of a class ends at the first step whose fault was never reached:
 * op then ran to its end and must have succeeded.
 *
 * A failed op must return DD_ENOMEM, DD_EIO or DD_ENOSPC -- what was
 * injected, not DD_ECORRUPT or DD_ECHECKSUM -- and must not fail unless a
 * fault was hit.  An op that succeeded although a fault was hit (the
 * library tolerated it) is checked by `after` like any success, then
 * `reset` brings back the starting state for the next step.  An op that
 * leaves the state as it was when it fails -- what a failed gc or receive
 * must do -- needs no reset in between, and each step then also checks
 * that the previous failure changed nothing that matters.  Every step
 * must start with as many open descriptors as the first (no leak, no
 * stray close) and fd 0 open.  With DD_TEST_FAULT_STICKY=1 in the
 * environment, every call of the class after the kth fails too.
 */
typedef struct th_walk {
	const char *what;                  /* names the walk in messages */
	const int *classes;                /* enum dd_fault_class values */
	size_t nclasses;
	uint64_t max_steps;                /* per class; fail beyond it */
	void *ctx;
	/* Back to the state before op: at the start of each class and after
	 * a tolerated fault (or before every step, with reset_every_step).
	 * NULL: op needs no reset. */
	void (*reset)(void *ctx);
	bool reset_every_step;
	/* The operation under test, run with one fault armed. */
	int (*op)(void *ctx);
	/* Checks after each step, faults disarmed; rc is op's result. */
	void (*after)(void *ctx, int rc);
} th_walk;

/* Runs the walk; returns how many steps failed, over all classes. */
uint64_t th_fault_walk(const th_walk *w);

/* Is rc an error a fault may cause (DD_ENOMEM, DD_EIO, DD_ENOSPC)? */
bool th_fault_code(int rc);
/* Asserts that msg is one line that names the code rc ("DD_EIO: ..."). */
void th_check_errmsg(const char *msg, int rc);

#endif
