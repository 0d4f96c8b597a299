/*
 * util_cache.h -- the block caches on the command line: the per-command
 * cache options (--no-cache, --l1-size, --l2-write-max,
 * --l2-feed-sequential, --stats), the `dedup cache` subcommand, and the
 * cache figures in `dedup stat` and in --stats files.
 *
 * Uses include/dedup.h only, like every command.
 */
#ifndef DD_CMD_UTIL_CACHE_H
#define DD_CMD_UTIL_CACHE_H

#include <stdio.h>

#include "dedup.h"

/* Option values, clear of the commands' own (256.. and 512..). */
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

/* Takes one of the options above (die_usage on a bad value); returns 0,
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

/* `dedup cache add|rm|ls|set ...`: argv[0] is "cache". */
int cmd_cache(int argc, char **argv);

#endif
