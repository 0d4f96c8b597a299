/*
 * dedup_cmd.h -- what the files of the `dedup` command share.
 *
 *   dedup.c        main, the subcommand table and `dedup --help`; option
 *                  parsing and store opening for the subcommands
 *   dedup_store.c  init put get ls rm
 *   dedup_stat.c   stat gc scrub; the refcount histogram (scan's too)
 *   dedup_repair.c repair
 *   dedup_scan.c   scan
 *   dedup_cache.c  cache, the cache options of every subcommand that
 *                  opens a store, the cache part of stat
 *   dedup_life.c   diff prune: a snapshot's life after put
 *   dedup_mount.c  mount umount: snapshots as files (FUSE)
 *
 * A subcommand is a cmd_NAME(argc, argv) with argv[0] its name, in its
 * own dedup_*.c (CMakeLists.txt builds cmd/dedup_*.c into `dedup`), with
 * one entry in dedup.c's table.  It returns the exit status or exits
 * through die / die_usage (util.h).  Uses include/dedup.h only, like every
 * command.
 */
#ifndef DD_CMD_DEDUP_CMD_H
#define DD_CMD_DEDUP_CMD_H

#include <stdio.h>

#include "dedup.h"
#include "util.h"

/* ---- the subcommands ----------------------------------------------------*/

int cmd_init(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_scrub(int argc, char **argv);
int cmd_repair(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);

/* The running subcommand's name ("put"), for messages; set by main. */
extern const char *dedup_subcmd;

/* ---- options (dedup.c) --------------------------------------------------*/

/* getopt values: the shared options below from 256, scan's own from 512,
 * the cache options from 768, `dedup cache`'s own from 1024, those of
 * diff, prune and mount from 1280. */
enum {
	OPT_HELP = 'h',
	OPT_VERBOSE = 'v',
	OPT_WAIT = 256,
	OPT_JSON,
	OPT_BLOCK_SIZE,
	OPT_VERIFY,
	OPT_COMPRESS,
	OPT_NO_UNIQUE,
	OPT_CHUNKER,
	OPT_SALVAGE,
	OPT_FROM,
};

enum {
	OPT_NO_CACHE = 768,
	OPT_L1_SIZE,
	OPT_L2_WRITE_MAX,
	OPT_L2_FEED_SEQ,
	OPT_STATS,
};

/* Entries for a getopt_long table, and for a subcommand's allow list. */
#define CACHE_LONGOPTS \
	{"no-cache", no_argument, NULL, OPT_NO_CACHE}, \
	{"l1-size", required_argument, NULL, OPT_L1_SIZE}, \
	{"l2-write-max", required_argument, NULL, OPT_L2_WRITE_MAX}, \
	{"l2-feed-sequential", no_argument, NULL, OPT_L2_FEED_SEQ}, \
	{"stats", required_argument, NULL, OPT_STATS}
#define CACHE_ALLOW OPT_NO_CACHE, OPT_L1_SIZE, OPT_L2_WRITE_MAX, \
	OPT_L2_FEED_SEQ, OPT_STATS

/* Prints `dedup --help` on stdout and exits 0. */
_Noreturn void usage_exit(void);

/* The default case of a subcommand's getopt loop: a cache option, or a
 * usage error. */
void other_option(int c, char **argv);

/* Positionals left after options: between min and max of them. */
void want_args(int argc, char **argv, int min, int max);

struct common_opts {
	int verbose;
	int wait;           /* --wait: 0 no, -1 for ever, else ms (parse_wait) */
	int json;
	int no_unique;      /* ls --no-unique */
	int salvage;        /* get --salvage */
};

/* Parses the options most subcommands share (-v, --wait, --json and the
 * cache options); `allow` lists the ones this subcommand takes (OPT_
 * values, zero-terminated).  Any other is a usage error. */
void parse_common(int argc, char **argv, const int *allow,
		  struct common_opts *o);

/* ---- the store (dedup.c) ------------------------------------------------*/

/* Opens the store with the cache options given, or dies; wait as
 * parse_wait gives it (0: fail at once when busy).  readonly: 1 for a
 * read-only handle; OPEN_DEFER_CHECK added: without the whole-file check
 * of the catalog (scrub runs it, naming every damaged page).  Closed
 * with cache_cli_close. */
#define OPEN_DEFER_CHECK 2
dd_store *open_store(const char *path, int wait, int readonly);

/* The subcommands that take options and one STORE (ls stat gc scrub):
 * parse_common, exactly one positional, and open_store on it (with --wait,
 * waiting while repair or an upgrade has the store). */
dd_store *open_store_arg(int argc, char **argv, const int *allow,
			 struct common_opts *o, int readonly);

/* Exits with the store's message for rc. */
_Noreturn void die_store(dd_store *s, int rc);

/* "DD_ECHECKSUM" out of "DD_ECHECKSUM: checksum mismatch". */
const char *err_symbol(char *buf, size_t len, int code);

/* ---- the refcount histogram (dedup_stat.c) ------------------------------*/

/* The table as `zdb -DD` (stat) and `zdb -S` (scan) print it: a row per
 * non-empty bucket, then "Total"; with bars, each row also shows its
 * share of the referenced bytes (scan). */
void print_hist_table(const dd_hist_row *hist, int bars);

/* As a JSON member "histogram": [...] (non-empty rows only), indented by
 * `ind`. */
void print_hist_json(const dd_hist_row *hist, const char *ind);

/* gc's one line: what it reclaimed and how (gc, prune --gc). */
void print_gc_result(FILE *f, const dd_gc_result *res);

/* ---- the caches on the command line (dedup_cache.c) ---------------------*/

/* Takes one of the cache options (die_usage on a bad value); returns 0,
 * or -1 when c is not a cache option. */
int cache_cli_option(const char *cmd, int c, const char *arg);

/* Puts the options given into oo. */
void cache_cli_apply(dd_open_opts *oo);

/* After dd_store_open: remembers the store and command for --stats (the
 * figures are written at cache_cli_close, or at exit after a die()). */
void cache_cli_opened(dd_store *s, const char *cmd, const char *path);

/* Warns once about each cache device the run could not use, writes the
 * --stats file, then closes the store. */
void cache_cli_close(dd_store *s);

/* `dedup stat`: the cache part, as text or as the members of a JSON
 * object (ending with a comma). */
void cache_stat_text(dd_store *s);
void cache_stat_json(dd_store *s, FILE *f);

#endif /* DD_CMD_DEDUP_CMD_H */
