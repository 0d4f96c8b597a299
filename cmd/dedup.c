/*
 * dedup.c -- the `dedup` command: create a store, put and get snapshots,
 * list, remove, report statistics, collect garbage and scrub.
 *
 * Uses include/dedup.h only.  Exit status: 0 success, 1 an error (one line
 * "dedup: message" on stderr), 2 a usage error.  Data and requested output
 * go to stdout; messages, summaries and progress to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedup.h"
#include "util.h"
#include "util_cache.h"

#define PUT_CHUNK (4u << 20)
#define GET_CHUNK (8u << 20)

/* get's I/O buffer, static so that a die() on an error path leaves
 * nothing unreachable behind (LeakSanitizer runs at exit).  put hands a
 * file's byte ranges to the writer, whose workers read them
 * (dd_writer_write_file), and reads pipes straight into the writer's
 * buffer (dd_writer_buffer). */
static char io_buf[GET_CHUNK];
#define HOLE_GRAIN (64u << 10)  /* zero runs skipped when writing a file */

static const char usage_text[] =
	"usage: dedup COMMAND [OPTIONS] ARGS\n"
	"\n"
	"  dedup init [--block-size N] [--verify] [--compress zstd[:LEVEL]|none] STORE\n"
	"  dedup put  [-v] [--wait] STORE@NAME [FILE|-]   ingest FILE, a device or stdin\n"
	"  dedup get  [-v] STORE@NAME [FILE|-]            restore to FILE or stdout\n"
	"  dedup ls   [--json] STORE                      list snapshots\n"
	"  dedup rm   [--wait] STORE@NAME                 delete a snapshot\n"
	"  dedup stat [--json] STORE                      dedup/compress ratios, DDT, histogram\n"
	"  dedup gc   [--wait] STORE                      reclaim unreferenced space\n"
	"  dedup scrub STORE                              verify every stored block\n"
	"  dedup cache add [--size N] [--force] STORE PATH  add an L2 cache device\n"
	"  dedup cache rm STORE PATH                      stop using an L2 cache device\n"
	"  dedup cache ls [--json] STORE                  cache devices and tunables\n"
	"  dedup cache set [--l1-size N|off] [--l2-write-max N]\n"
	"                  [--l2-feed-sequential on|off] STORE  store the tunables\n"
	"  dedup scan [-v] [--json] [--block-size N[,N...]] [--compress zstd[:L]|none]\n"
	"             [--memory SIZE] [--sample] [--sample-rate N] [--tmpdir DIR]\n"
	"             PATH...|-                           what dedup would save on existing\n"
	"                                                 files, trees, devices or stdin\n"
	"\n"
	"  --help       show this help\n"
	"  --version    show the version\n"
	"\n"
	"Commands that open a store (put get ls rm stat gc scrub) also take:\n"
	"  --no-cache            do not use the store's L2 cache devices\n"
	"  --l1-size N           RAM for the L1 block cache (0: none)\n"
	"  --l2-write-max N      bytes per second fed to L2\n"
	"  --l2-feed-sequential  feed blocks of long sequential reads to L2\n"
	"  --stats FILE|-        write this run's I/O and cache figures as JSON\n"
	"\n"
	"Sizes accept K/KiB/M/MiB/G/GiB suffixes (powers of 1024).\n"
	"Exit status: 0 success, 1 error, 2 usage error.\n";

static const char *subcmd = "";

/* ---- option parsing -----------------------------------------------------*/

enum {
	OPT_HELP = 'h',
	OPT_VERBOSE = 'v',
	OPT_WAIT = 256,
	OPT_JSON,
	OPT_BLOCK_SIZE,
	OPT_VERIFY,
	OPT_COMPRESS,
};

static _Noreturn void usage_exit(void)
{
	fputs(usage_text, stdout);
	exit(0);
}

/* Positionals left after options: between min and max of them. */
static void want_args(int argc, char **argv, int min, int max)
{
	int n = argc - optind;

	if (n < min)
		die_usage("%s: missing argument", subcmd);
	if (n > max)
		die_usage("%s: unexpected argument '%.300s'", subcmd,
			  argv[optind + max]);
}

struct common_opts {
	int verbose;
	int wait;
	int json;
};

/* Parses options shared by most subcommands; `allow` lists the ones this
 * subcommand takes (as OPT_ values in a zero-terminated array). */
static void parse_common(int argc, char **argv, const int *allow,
			 struct common_opts *o)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"wait", no_argument, NULL, OPT_WAIT},
		{"json", no_argument, NULL, OPT_JSON},
		CACHE_LONGOPTS,     /* util_cache.h */
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		const int *a;

		if (c == OPT_HELP)
			usage_exit();
		if (c == '?' || c == ':')
			die_bad_option(subcmd, c, argv);
		for (a = allow; *a && *a != c; a++)
			;
		if (!*a)
			die_usage("%s: option '%s' not valid here", subcmd,
				  argv[optind - 1]);
		if (c == OPT_VERBOSE)
			o->verbose = 1;
		else if (c == OPT_WAIT)
			o->wait = 1;
		else if (c == OPT_JSON)
			o->json = 1;
		else
			cache_cli_option(subcmd, c, optarg);
	}
}

/* ---- store helpers ------------------------------------------------------*/

static dd_store *open_store(const char *path, int wait, int readonly)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_store *s = NULL;
	int rc;

	oo.wait_for_lock = wait;
	oo.readonly = readonly;
	cache_cli_apply(&oo);         /* --no-cache, --l1-size, ... */
	rc = dd_store_open(&s, path, &oo);
	if (rc != 0)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	cache_cli_opened(s, subcmd, path);   /* for --stats */
	return s;
}

/* The subcommands that take options and one STORE (ls stat gc scrub):
 * parses both and opens the store, waiting for the writer lock with
 * --wait. */
static dd_store *open_store_arg(int argc, char **argv, const int *allow,
				struct common_opts *o, int readonly)
{
	parse_common(argc, argv, allow, o);
	want_args(argc, argv, 1, 1);
	return open_store(argv[optind], o->wait, readonly);
}

static _Noreturn void die_store(dd_store *s, int rc)
{
	die("%s", lib_msg(dd_store_errmsg(s), rc));
}

/* "DD_ECHECKSUM" out of "DD_ECHECKSUM: checksum mismatch". */
static const char *err_symbol(char *buf, size_t len, int code)
{
	const char *s = dd_strerror(code);
	size_t n = strcspn(s, ":");

	if (n >= len)
		n = len - 1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	return buf;
}

/* ---- init ---------------------------------------------------------------*/

static void parse_compress(const char *arg, dd_create_opts *co)
{
	int rc = parse_compress_spec(arg, &co->compress, &co->compress_level);

	if (rc == -1)
		die_usage("init: --compress takes zstd, zstd:LEVEL or none, "
			  "not '%.100s'", arg);
	if (rc == -2)
		die_usage("init: zstd level must be 1..19, not '%.100s'",
			  arg + 5);
}

static uint32_t parse_block_size(const char *arg)
{
	uint64_t v;

	if (parse_size(arg, &v) != 0)
		die_usage("init: invalid block size '%.100s'", arg);
	if (!block_size_valid(v))
		die_usage("init: block size must be a power of two from "
			  "4 KiB to 1 MiB, not '%.100s'", arg);
	return (uint32_t)v;
}

static int cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"compress", required_argument, NULL, OPT_COMPRESS},
		{NULL, 0, NULL, 0},
	};
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_store *s = NULL;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_BLOCK_SIZE:
			co.block_size = parse_block_size(optarg);
			break;
		case OPT_VERIFY:
			co.verify = 1;
			break;
		case OPT_COMPRESS:
			parse_compress(optarg, &co);
			break;
		default:
			die_bad_option(subcmd, c, argv);
		}
	}
	want_args(argc, argv, 1, 1);
	rc = dd_store_create(&s, argv[optind], &co, NULL);
	if (rc != 0)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	dd_store_close(s);
	return 0;
}

/* ---- put ----------------------------------------------------------------*/

struct input {
	int fd;
	const char *label;
	uint64_t size;      /* 0 when unknown (pipes) */
};

static void open_input(struct input *in, const char *path)
{
	struct stat st;

	in->size = 0;
	if (!path || strcmp(path, "-") == 0) {
		in->fd = STDIN_FILENO;
		in->label = "stdin";
	} else {
		in->fd = open(path, O_RDONLY | O_CLOEXEC);
		in->label = path;
		if (in->fd < 0)
			die("%s: %s", path, strerror(errno));
	}
	if (fstat(in->fd, &st) != 0)
		die("%s: %s", in->label, strerror(errno));
	if (S_ISDIR(st.st_mode))
		die("%s: is a directory", in->label);
	if (S_ISREG(st.st_mode)) {
		in->size = (uint64_t)st.st_size;
	} else if (S_ISBLK(st.st_mode)) {
		/* A block device is read as a stream; its size only feeds
		 * the progress meter. */
		off_t end = lseek(in->fd, 0, SEEK_END);

		if (end > 0 && lseek(in->fd, 0, SEEK_SET) == 0)
			in->size = (uint64_t)end;
	}
}

/* Aborts the writer and exits with its message. */
static _Noreturn void put_fail(dd_writer *w, int rc, const char *why)
{
	char msg[1024];

	snprintf(msg, sizeof(msg), "%s", why ? why :
		 lib_msg(dd_writer_errmsg(w), rc));
	dd_writer_abort(w);
	dd_writer_free(w);
	die("%s", msg);
}

static void put_summary(dd_store *s, const char *name, uint64_t bytes,
			double secs)
{
	dd_snapshot_info si;
	char hs[32];

	human_size(hs, sizeof(hs), bytes);
	if (dd_snapshot_stat(s, name, &si) == 0)
		fprintf(stderr, "%s: put %s: %" PRIu64 " bytes (%s), %" PRIu64
			" blocks, %" PRIu64 " zero, %.2f s, %.1f MB/s\n",
			util_prog, name, bytes, hs, si.blocks, si.zero_blocks,
			secs, secs > 0 ? (double)bytes / secs / 1e6 : 0.0);
	else
		fprintf(stderr, "%s: put %s: %" PRIu64 " bytes (%s), %.2f s\n",
			util_prog, name, bytes, hs, secs);
}

/* A regular file or a device of known size: its bytes are handed over by
 * range and read by the writer's workers (dd_writer_write_file), a slice
 * at a time for the progress meter.  Leaves the offset at the end of that
 * range, for the read loop to take whatever was appended meanwhile.
 * Returns the bytes handed over. */
static uint64_t put_known_size(dd_writer *w, struct input *in,
			       struct progress *pg)
{
	const uint64_t slice = (uint64_t)64 << 20;
	off_t start = lseek(in->fd, 0, SEEK_CUR);
	uint64_t off;
	int rc;

	if (in->size == 0 || start < 0 || (uint64_t)start >= in->size)
		return 0;
	for (off = (uint64_t)start; off < in->size; off += slice) {
		uint64_t n = in->size - off < slice ? in->size - off : slice;

		rc = dd_writer_write_file(w, in->fd, off, n);
		if (rc != 0)
			put_fail(w, rc, NULL);
		progress_update(pg, off + n - (uint64_t)start);
	}
	if (lseek(in->fd, (off_t)in->size, SEEK_SET) < 0) {
		char why[512];

		snprintf(why, sizeof(why), "%s: seek: %s", in->label,
			 strerror(errno));
		put_fail(w, 0, why);
	}
	return in->size - (uint64_t)start;
}

static int cmd_put(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_WAIT, CACHE_ALLOW, 0};
	struct common_opts o;
	struct progress pg;
	struct input in;
	char *path, *name;
	dd_writer *w = NULL;
	dd_store *s;
	uint64_t total = 0;
	double t0;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 2);
	split_snapref_or_die(argv[optind], &path, &name);
	open_input(&in, optind + 1 < argc ? argv[optind + 1] : NULL);
	s = open_store(path, o.wait, 0);
	rc = dd_writer_begin(&w, s, name);
	if (rc != 0)
		die_store(s, rc);

	t0 = now_seconds();
	progress_init(&pg, name, in.size, o.verbose);
	total = put_known_size(w, &in, &pg);
	for (;;) {
		void *dst;
		size_t room;
		ssize_t n;
		char why[512];

		/* read straight into the writer's buffer: no extra copy */
		rc = dd_writer_buffer(w, &dst, &room);
		if (rc != 0)
			put_fail(w, rc, NULL);
		n = read_full(in.fd, dst, room < PUT_CHUNK ? room : PUT_CHUNK);
		if (n < 0) {
			snprintf(why, sizeof(why), "%s: read: %s", in.label,
				 strerror(errno));
			put_fail(w, 0, why);
		}
		if (n == 0)
			break;
		rc = dd_writer_produce(w, (size_t)n);
		if (rc != 0)
			put_fail(w, rc, NULL);
		total += (uint64_t)n;
		progress_update(&pg, total);
	}
	rc = dd_writer_commit(w);
	if (rc != 0)
		put_fail(w, rc, NULL);
	progress_finish(&pg);
	dd_writer_free(w);
	if (o.verbose)
		put_summary(s, name, total, now_seconds() - t0);
	cache_cli_close(s);
	if (in.fd != STDIN_FILENO)
		close(in.fd);
	free(path);
	free(name);
	return 0;
}

/* ---- get ----------------------------------------------------------------*/

struct output {
	int fd;
	const char *path;   /* NULL for stdout */
	int regular;        /* a regular file: holes allowed, removed on error */
	int sparse;         /* zero runs were skipped with lseek */
};

static struct output *get_out;

static _Noreturn void get_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* Exits with one line, first removing a partially written regular FILE. */
static void get_fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (get_out && get_out->path && get_out->regular) {
		close(get_out->fd);
		unlink(get_out->path);
	}
	die("%s", msg);
}

static void open_output(struct output *out, const char *path)
{
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (!path || strcmp(path, "-") == 0) {
		out->fd = STDOUT_FILENO;
		return;
	}
	out->path = path;
	out->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (out->fd < 0)
		die("%s: %s", path, strerror(errno));
	if (fstat(out->fd, &st) != 0)
		die("%s: %s", path, strerror(errno));
	out->regular = S_ISREG(st.st_mode);
}

static int all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Writes a chunk; into a regular file, runs of zeros become holes. */
static void write_chunk(struct output *out, const char *p, size_t n)
{
	const char *name = out->path ? out->path : "stdout";

	while (n > 0) {
		size_t k = n < HOLE_GRAIN ? n : HOLE_GRAIN;

		if (out->regular && all_zero(p, k)) {
			if (lseek(out->fd, (off_t)k, SEEK_CUR) < 0)
				get_fail("%s: seek: %s", name, strerror(errno));
			out->sparse = 1;
		} else if (write_all(out->fd, p, k) != 0) {
			get_fail("%s: write: %s", name, strerror(errno));
		}
		p += k;
		n -= k;
	}
}

static void finish_output(struct output *out, uint64_t size)
{
	const char *name = out->path ? out->path : "stdout";

	if (!out->path)
		return;
	if (out->sparse && ftruncate(out->fd, (off_t)size) != 0)
		get_fail("%s: truncate: %s", name, strerror(errno));
	if (fsync(out->fd) != 0 && errno != EINVAL)
		get_fail("%s: fsync: %s", name, strerror(errno));
	if (close(out->fd) != 0) {
		out->regular = 0;  /* fd is gone; report without unlinking */
		unlink(out->path);
		die("%s: close: %s", name, strerror(errno));
	}
}

static int cmd_get(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, CACHE_ALLOW, 0};
	struct common_opts o;
	struct output out;
	struct progress pg;
	char *path, *name, *buf;
	dd_reader *r = NULL;
	dd_store *s;
	uint64_t size, off = 0;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 2);
	split_snapref_or_die(argv[optind], &path, &name);
	buf = io_buf;
	s = open_store(path, 0, 1);
	rc = dd_reader_open(&r, s, name);
	if (rc != 0)
		die_store(s, rc);
	size = dd_reader_size(r);

	/* The output is created only once the snapshot is known to exist. */
	open_output(&out, optind + 1 < argc ? argv[optind + 1] : NULL);
	get_out = &out;
	progress_init(&pg, name, size, o.verbose);
	while (off < size) {
		size_t want = size - off < GET_CHUNK ? (size_t)(size - off)
						     : GET_CHUNK;
		size_t got = 0;

		rc = dd_reader_pread(r, buf, want, off, &got);
		if (rc != 0)
			get_fail("%s", lib_msg(dd_reader_errmsg(r), rc));
		if (got == 0 || got > want)
			get_fail("%s@%s: snapshot ended early", path, name);
		write_chunk(&out, buf, got);
		off += got;
		progress_update(&pg, off);
	}
	finish_output(&out, size);
	get_out = NULL;
	progress_finish(&pg);
	if (o.verbose)
		fprintf(stderr, "%s: get %s: %" PRIu64 " bytes\n", util_prog,
			name, size);
	dd_reader_close(r);
	cache_cli_close(s);
	free(path);
	free(name);
	return 0;
}

/* ---- ls -----------------------------------------------------------------*/

static void ls_json(const dd_snapshot_info *list, size_t count)
{
	char hex[65], when[40];
	size_t i;

	fputs("[", stdout);
	for (i = 0; i < count; i++) {
		const dd_snapshot_info *si = &list[i];

		fputs(i ? ",\n  {" : "\n  {", stdout);
		fputs("\"name\": ", stdout);
		json_string(stdout, si->name);
		printf(", \"size\": %" PRIu64 ", \"blocks\": %" PRIu64
		       ", \"zero_blocks\": %" PRIu64 ", \"ctime\": \"%s\""
		       ", \"ctime_epoch\": %" PRId64 ", \"digest\": \"%s\"}",
		       si->size, si->blocks, si->zero_blocks,
		       iso8601_utc(when, sizeof(when), si->ctime), si->ctime,
		       hex_encode(hex, si->digest, sizeof(si->digest)));
	}
	fputs(count ? "\n]\n" : "]\n", stdout);
}

static void ls_text(const dd_snapshot_info *list, size_t count)
{
	char hex[65], when[40];
	int wname = 4, wsize = 4, wblocks = 6;
	size_t i;

	for (i = 0; i < count; i++) {
		char num[32];
		int n = (int)strlen(list[i].name);

		wname = n > wname ? n : wname;
		n = snprintf(num, sizeof(num), "%" PRIu64, list[i].size);
		wsize = n > wsize ? n : wsize;
		n = snprintf(num, sizeof(num), "%" PRIu64, list[i].blocks);
		wblocks = n > wblocks ? n : wblocks;
	}
	printf("%-*s  %*s  %*s  %-20s  %s\n", wname, "NAME", wsize, "SIZE",
	       wblocks, "BLOCKS", "CTIME", "DIGEST");
	for (i = 0; i < count; i++) {
		const dd_snapshot_info *si = &list[i];

		hex_encode(hex, si->digest, 8);
		printf("%-*s  %*" PRIu64 "  %*" PRIu64 "  %-20s  %s\n", wname,
		       si->name, wsize, si->size, wblocks, si->blocks,
		       iso8601_utc(when, sizeof(when), si->ctime), hex);
	}
}

static int cmd_ls(int argc, char **argv)
{
	static const int allow[] = {OPT_JSON, CACHE_ALLOW, 0};
	struct common_opts o;
	dd_snapshot_info *list = NULL;
	size_t count = 0;
	dd_store *s;
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 1);
	rc = dd_snapshot_list(s, &list, &count);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		ls_json(list, count);
	} else {
		char token[128];

		ls_text(list, count);
		/* a kept partial receive (ddrecv -s) and how to finish it */
		if (dd_recv_resume_token(s, token, sizeof(token)) == 0)
			printf("partial receive: resume with "
			       "'ddsend -t %s STORE@SNAP | ddrecv -s %s', "
			       "or drop it with 'ddrecv -A %s'\n",
			       token, argv[optind], argv[optind]);
	}
	dd_snapshot_list_free(list);
	cache_cli_close(s);
	return 0;
}

/* ---- rm -----------------------------------------------------------------*/

static int cmd_rm(int argc, char **argv)
{
	static const int allow[] = {OPT_WAIT, CACHE_ALLOW, 0};
	struct common_opts o;
	char *path, *name;
	dd_store *s;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 1);
	split_snapref_or_die(argv[optind], &path, &name);
	s = open_store(path, o.wait, 0);
	rc = dd_snapshot_delete(s, name);
	if (rc != 0)
		die_store(s, rc);
	cache_cli_close(s);
	free(path);
	free(name);
	return 0;
}

/* ---- stat ---------------------------------------------------------------*/

static void json_u64(const char *key, uint64_t v)
{
	printf("  \"%s\": %" PRIu64 ",\n", key, v);
}

/* ---- the refcount histogram (stat and scan) --------------------------------*/

#define HIST_BAR_WIDTH 30

/* Adds a histogram row into the table's "Total" row. */
static void hist_add(dd_hist_row *tot, const dd_hist_row *h)
{
	tot->blocks += h->blocks;
	tot->lsize += h->lsize;
	tot->psize += h->psize;
	tot->ref_blocks += h->ref_blocks;
	tot->ref_lsize += h->ref_lsize;
	tot->ref_psize += h->ref_psize;
}

/* A row's share of the largest row's referenced bytes, in '#'s; at least
 * one for a row that has any. */
static void hist_bar(char *buf, uint64_t v, uint64_t max)
{
	size_t n = max ? (size_t)((double)v / (double)max * HIST_BAR_WIDTH +
				  0.5) : 0;

	if (v && n == 0)
		n = 1;
	memset(buf, '#', n);
	buf[n] = '\0';
}

static void hist_row(const char *label, const dd_hist_row *h, const char *bar)
{
	char c[6][16];

	printf("%6s   %6s   %5s   %5s   %6s   %5s   %5s%s%s\n", label,
	       nicenum(c[0], 16, h->blocks), nicenum(c[1], 16, h->lsize),
	       nicenum(c[2], 16, h->psize), nicenum(c[3], 16, h->ref_blocks),
	       nicenum(c[4], 16, h->ref_lsize), nicenum(c[5], 16, h->ref_psize),
	       *bar ? "   " : "", bar);
}

/* The table as `zdb -DD` (stat) and `zdb -S` (scan) print it: a row per
 * non-empty bucket, then "Total"; with bars, each row also gets its share
 * of referenced bytes (scan). */
static void print_hist_table(const dd_hist_row *hist, int bars)
{
	char label[16], bar[HIST_BAR_WIDTH + 1] = "";
	uint64_t max = 0;
	dd_hist_row tot;
	int i;

	memset(&tot, 0, sizeof(tot));
	for (i = 0; bars && i < DD_HIST_BUCKETS; i++)
		if (hist[i].ref_lsize > max)
			max = hist[i].ref_lsize;
	printf("bucket              allocated                 referenced\n");
	printf("______   _______________________   _______________________\n");
	printf("refcnt   blocks   LSIZE   PSIZE   blocks   LSIZE   PSIZE\n");
	printf("------   ------   -----   -----   ------   -----   -----\n");
	for (i = 0; i < DD_HIST_BUCKETS; i++) {
		const dd_hist_row *h = &hist[i];

		if (!h->blocks && !h->ref_blocks)
			continue;
		if (bars)
			hist_bar(bar, h->ref_lsize, max);
		hist_row(nicenum(label, sizeof(label), 1ull << i), h, bar);
		hist_add(&tot, h);
	}
	hist_row("Total", &tot, "");
}

/* The refcount histogram as a JSON member "histogram": [...] (rows with
 * blocks only), indented by `ind`; shared by stat and scan. */
static void print_hist_json(const dd_hist_row *hist, const char *ind)
{
	int first = 1;

	printf("%s\"histogram\": [", ind);
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		const dd_hist_row *h = &hist[i];
		uint64_t lo = 1ull << i;

		if (!h->blocks && !h->ref_blocks)
			continue;
		printf("%s\n%s  {\"refcnt_min\": %" PRIu64
		       ", \"refcnt_max\": %" PRIu64 ", \"blocks\": %" PRIu64
		       ", \"lsize\": %" PRIu64 ", \"psize\": %" PRIu64
		       ", \"ref_blocks\": %" PRIu64 ", \"ref_lsize\": %" PRIu64
		       ", \"ref_psize\": %" PRIu64 "}",
		       first ? "" : ",", ind, lo, 2 * lo - 1, h->blocks,
		       h->lsize, h->psize, h->ref_blocks, h->ref_lsize,
		       h->ref_psize);
		first = 0;
	}
	if (!first)
		printf("\n%s", ind);
	printf("]");
}

static void stat_json(dd_store *s, const dd_stat *st,
		      const dd_store_info *info)
{
	char comp[32];

	printf("{\n");
	json_u64("block_size", info->block_size);
	printf("  \"verify\": %s,\n", info->verify ? "true" : "false");
	printf("  \"compress\": \"%s\",\n",
	       compress_spec_name(comp, sizeof(comp), info->compress,
				  info->compress_level));
	json_u64("format_version", info->format_version);
	json_u64("snapshots", st->snapshots);
	json_u64("logical_bytes", st->logical_bytes);
	json_u64("zero_blocks", st->zero_blocks);
	json_u64("referenced_blocks", st->referenced_blocks);
	json_u64("referenced_bytes", st->referenced_bytes);
	json_u64("unique_blocks", st->unique_blocks);
	json_u64("unique_bytes", st->unique_bytes);
	json_u64("stored_bytes", st->stored_bytes);
	json_u64("unreferenced_blocks", st->unreferenced_blocks);
	json_u64("pack_files", st->pack_files);
	json_u64("pack_bytes", st->pack_bytes);
	json_u64("ddt_entries", st->ddt_entries);
	json_u64("ddt_bytes", st->ddt_bytes);
	json_u64("meta_bytes", st->meta_bytes);
	json_u64("lmdb_file_bytes", st->lmdb_file_bytes);
	printf("  ");
	json_double(stdout, "dedup_ratio", st->dedup_ratio, ",\n  ");
	json_double(stdout, "compress_ratio", st->compress_ratio, ",\n");
	cache_stat_json(s, stdout);  /* "cache": {...}, util_cache.c */
	print_hist_json(st->hist, "  ");
	printf("\n}\n");
}

static void stat_text(const char *path, const dd_stat *st,
		      const dd_store_info *info)
{
	char a[32], b[32], comp[32];
	double perentry = st->ddt_entries ?
		(double)st->ddt_bytes / (double)st->ddt_entries : 0;

	printf("store %s: format %" PRIu32 ", block size %s, compress %s, "
	       "verify %s\n", path, info->format_version,
	       human_size(a, sizeof(a), info->block_size),
	       compress_spec_name(comp, sizeof(comp), info->compress,
				  info->compress_level),
	       info->verify ? "on" : "off");
	printf("snapshots: %" PRIu64 ", logical %s (%" PRIu64 " bytes), "
	       "zero blocks %" PRIu64 "\n", st->snapshots,
	       human_size(a, sizeof(a), st->logical_bytes), st->logical_bytes,
	       st->zero_blocks);
	printf("referenced: %" PRIu64 " blocks, %s; unique: %" PRIu64
	       " blocks, %s, stored %s\n", st->referenced_blocks,
	       human_size(a, sizeof(a), st->referenced_bytes),
	       st->unique_blocks, human_size(b, sizeof(b), st->unique_bytes),
	       human_size(comp, sizeof(comp), st->stored_bytes));
	printf("DDT: %" PRIu64 " entries, %s on disk (%.0f bytes/entry), "
	       "%" PRIu64 " awaiting gc\n", st->ddt_entries,
	       human_size(a, sizeof(a), st->ddt_bytes), perentry,
	       st->unreferenced_blocks);
	printf("packs: %" PRIu64 " files, %s; metadata %s, LMDB file %s\n",
	       st->pack_files, human_size(a, sizeof(a), st->pack_bytes),
	       human_size(b, sizeof(b), st->meta_bytes),
	       human_size(comp, sizeof(comp), st->lmdb_file_bytes));
	printf("\n");
	print_hist_table(st->hist, 0);
	printf("\ndedup = %.2f, compress = %.2f, dedup * compress = %.2f\n",
	       st->dedup_ratio, st->compress_ratio,
	       st->dedup_ratio * st->compress_ratio);
}

static int cmd_stat(int argc, char **argv)
{
	static const int allow[] = {OPT_JSON, CACHE_ALLOW, 0};
	struct common_opts o;
	dd_store_info info;
	dd_stat st;
	dd_store *s;
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 1);
	memset(&st, 0, sizeof(st));
	st.version = DD_STAT_VERSION;
	rc = dd_store_info_get(s, &info);
	if (rc == 0)
		rc = dd_store_stat(s, &st);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		stat_json(s, &st, &info);
	} else {
		stat_text(argv[optind], &st, &info);
		cache_stat_text(s);
	}
	cache_cli_close(s);
	return 0;
}

/* ---- gc -----------------------------------------------------------------*/

static int cmd_gc(int argc, char **argv)
{
	static const int allow[] = {OPT_WAIT, CACHE_ALLOW, 0};
	dd_gc_result res;
	struct common_opts o;
	dd_store *s;
	char hs[32];
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 0);
	memset(&res, 0, sizeof(res));
	rc = dd_store_gc(s, NULL, &res);
	if (rc != 0)
		die_store(s, rc);
	printf("gc: reclaimed %s (%" PRIu64 " bytes); %" PRIu64
	       " DDT entries removed, %" PRIu64 " packs deleted, %" PRIu64
	       " packs rewritten, %" PRIu64 " blocks moved\n",
	       human_size(hs, sizeof(hs), res.bytes_reclaimed),
	       res.bytes_reclaimed, res.ddt_entries_removed, res.packs_deleted,
	       res.packs_rewritten, res.blocks_moved);
	cache_cli_close(s);
	return 0;
}

/* ---- scrub --------------------------------------------------------------*/

static int scrub_report(const dd_scrub_bad *bad, void *ctx)
{
	char hex[65], sym[32];

	(void)ctx;
	printf("bad block %s (pack %" PRIu32 ", off %" PRIu64 "): %s; ",
	       hex_encode(hex, bad->hash, sizeof(bad->hash)), bad->pack,
	       bad->pack_offset, err_symbol(sym, sizeof(sym), bad->error));
	if (bad->snapshot) {
		fputs("used by ", stdout);
		fputs(bad->snapshot, stdout);
		printf(" at offset %" PRIu64 "\n", bad->offset);
	} else {
		fputs("not used by any snapshot\n", stdout);
	}
	fflush(stdout);
	return 0;
}

static int cmd_scrub(int argc, char **argv)
{
	static const int allow[] = {CACHE_ALLOW, 0};
	dd_scrub_result res;
	struct common_opts o;
	dd_store *s;
	char hs[32];
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 1);
	memset(&res, 0, sizeof(res));
	rc = dd_store_scrub(s, scrub_report, NULL, &res);
	if (rc != 0 && rc != DD_ECHECKSUM)
		die_store(s, rc);
	printf("scrub: %" PRIu64 " blocks (%s) checked, %" PRIu64 " bad\n",
	       res.blocks_checked, human_size(hs, sizeof(hs), res.bytes_checked),
	       res.bad_blocks);
	fflush(stdout);
	if (rc == DD_ECHECKSUM || res.bad_blocks) {
		cache_cli_close(s);
		die("%s: scrub found %" PRIu64 " bad block%s", argv[optind],
		    res.bad_blocks, res.bad_blocks == 1 ? "" : "s");
	}
	cache_cli_close(s);
	return 0;
}

/* ---- scan ---------------------------------------------------------------*/

#define SCAN_SKIP_KEEP 1000   /* skipped inputs listed in the report */

struct scan_skip {
	char *path;
	int code;
	char *msg;
};

/* What the report needs besides the library's figures; static so that a
 * die() leaves it reachable (LeakSanitizer runs at exit). */
static struct scan_state {
	struct scan_skip skips[SCAN_SKIP_KEEP];
	size_t nskips;
	struct progress pg;
	dd_scan_result res[DD_SCAN_MAX_BLOCK_SIZES];
	dd_scan *scan;
} scan_st;

static void scan_warn(void *ctx, const char *path, int code, const char *msg)
{
	struct scan_skip *sk;

	(void)ctx;
	if (scan_st.pg.drawn)
		fputc('\n', stderr);   /* keep the meter off the warning */
	warnmsg("%s: %s", path, msg);
	if (scan_st.nskips == SCAN_SKIP_KEEP)
		return;
	sk = &scan_st.skips[scan_st.nskips];
	sk->path = strdup(path);
	sk->msg = strdup(msg);
	sk->code = code;
	if (sk->path && sk->msg)
		scan_st.nskips++;
	else {
		free(sk->path);
		free(sk->msg);
	}
}

static int scan_progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)total;
	progress_update(&scan_st.pg, done);
	return 0;
}

static void scan_free_state(void)
{
	for (size_t i = 0; i < scan_st.nskips; i++) {
		free(scan_st.skips[i].path);
		free(scan_st.skips[i].msg);
	}
	scan_st.nskips = 0;
	dd_scan_free(scan_st.scan);
	scan_st.scan = NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* --block-size 4K,16K,128K: sorted, each a power of two in range. */
static size_t scan_parse_sizes(const char *arg, uint32_t *sizes)
{
	uint64_t v[DD_SCAN_MAX_BLOCK_SIZES];
	const char *bad;
	size_t n, i;

	if (parse_size_list(arg, v, DD_SCAN_MAX_BLOCK_SIZES, &n, &bad) != 0)
		die_usage("scan: invalid block size list '%.100s' (at '%.40s'; "
			  "sizes like 4K,128K, at most %d)", arg, bad,
			  DD_SCAN_MAX_BLOCK_SIZES);
	for (i = 0; i < n; i++) {
		if (!block_size_valid(v[i]))
			die_usage("scan: block size must be a power of two from "
				  "4 KiB to 1 MiB, not %" PRIu64, v[i]);
		sizes[i] = (uint32_t)v[i];
	}
	qsort(sizes, n, sizeof(*sizes), cmp_u32);
	for (i = 1; i < n; i++)
		if (sizes[i] == sizes[i - 1])
			die_usage("scan: block size %" PRIu32 " listed twice",
				  sizes[i]);
	return n;
}

static unsigned scan_parse_rate(const char *arg)
{
	uint64_t v;
	unsigned shift = 0;

	if (parse_size(arg, &v) != 0 || v == 0 || (v & (v - 1)) ||
	    v > (1ull << 32))
		die_usage("scan: --sample-rate takes N, a power of two from 1 "
			  "to 2^32 (keep 1 block content in N), not '%.100s'",
			  arg);
	while (v >>= 1)
		shift++;
	return shift;
}

static const char *scan_pct(char *buf, size_t len, double e)
{
	if (!isfinite(e))
		snprintf(buf, len, "unbounded (sample too small)");
	else
		snprintf(buf, len, "%.2f%%", e * 100.0);
	return buf;
}

static void scan_text_one(const dd_scan_result *r)
{
	char a[32], b[32], c[32];

	printf("\nblock size %s: %" PRIu64 " blocks, %" PRIu64 " zero; "
	       "referenced %" PRIu64 " blocks (%s)\n",
	       human_size(a, sizeof(a), r->block_size), r->blocks,
	       r->zero_blocks, r->referenced_blocks,
	       human_size(b, sizeof(b), r->referenced_bytes));
	print_hist_table(r->hist, 1);
	printf("unique blocks: %" PRIu64 "%s; DDT on disk ~ %s (%d bytes per "
	       "entry, compacted)\n", r->unique_blocks,
	       r->sample_shift ? " (estimated)" : "",
	       human_size(c, sizeof(c), r->ddt_bytes),
	       DD_SCAN_DDT_ENTRY_BYTES);
	if (r->sample_shift)
		printf("sample: 1 in %.0f block contents, %" PRIu64 " sampled; "
		       "at %.0f%% confidence dedup within %s, compress "
		       "within %s\n", ldexp(1.0, (int)r->sample_shift),
		       r->sampled_blocks, r->confidence * 100.0,
		       scan_pct(a, sizeof(a), r->dedup_error),
		       scan_pct(b, sizeof(b), r->compress_error));
	if (r->spill_runs)
		printf("spilled: %" PRIu64 " sorted runs, %s on disk\n",
		       r->spill_runs, human_size(a, sizeof(a), r->spill_bytes));
	printf("dedup = %.2f, compress = %.2f, dedup * compress = %.2f\n",
	       r->dedup_ratio, r->compress_ratio,
	       r->dedup_ratio * r->compress_ratio);
}

static void scan_text(const dd_scan_info *info, const dd_scan_opts *so)
{
	char a[32], comp[32];
	size_t i;

	compress_spec_name(comp, sizeof(comp), so->compress, so->compress_level);
	printf("scan: %" PRIu64 " image%s, %s read; mode %s; compress %s\n",
	       info->images, info->images == 1 ? "" : "s",
	       human_size(a, sizeof(a), info->bytes),
	       so->mode == DD_SCAN_SAMPLE ? "sample" : "exact", comp);
	for (i = 0; i < info->nblock_sizes; i++)
		scan_text_one(&scan_st.res[i]);
	if (info->special)
		printf("\nnot read: %" PRIu64 " fifos, sockets or devices "
		       "inside directories\n", info->special);
	if (!info->skipped)
		return;
	printf("\nskipped or partly read: %" PRIu64 "\n", info->skipped);
	for (i = 0; i < scan_st.nskips; i++)
		printf("  %s: %s\n", scan_st.skips[i].path,
		       scan_st.skips[i].msg);
	if (info->skipped > scan_st.nskips)
		printf("  ... and %" PRIu64 " more\n",
		       info->skipped - scan_st.nskips);
}

static void scan_json_hist(const dd_scan_result *r)
{
	print_hist_json(r->hist, "     ");
	printf("}");
}

static void scan_json_one(const dd_scan_result *r)
{
	printf("    {\"block_size\": %" PRIu32 ", \"mode\": \"%s\",\n",
	       r->block_size, r->mode == DD_SCAN_SAMPLE ? "sample" : "exact");
	printf("     \"dedup_ratio\": %.17g, \"compress_ratio\": %.17g, "
	       "\"dedup_compress_ratio\": %.17g,\n", r->dedup_ratio,
	       r->compress_ratio, r->dedup_ratio * r->compress_ratio);
	printf("     \"logical_bytes\": %" PRIu64 ", \"blocks\": %" PRIu64
	       ", \"zero_blocks\": %" PRIu64 ",\n", r->logical_bytes,
	       r->blocks, r->zero_blocks);
	printf("     \"referenced_blocks\": %" PRIu64 ", \"referenced_bytes\": "
	       "%" PRIu64 ",\n", r->referenced_blocks, r->referenced_bytes);
	printf("     \"unique_blocks\": %" PRIu64 ", \"unique_bytes\": %" PRIu64
	       ", \"stored_bytes\": %" PRIu64 ",\n", r->unique_blocks,
	       r->unique_bytes, r->stored_bytes);
	printf("     \"ddt_bytes\": %" PRIu64 ", \"ddt_bytes_per_entry\": %d,\n",
	       r->ddt_bytes, DD_SCAN_DDT_ENTRY_BYTES);
	printf("     \"sample_rate\": %.17g, \"sampled_blocks\": %" PRIu64
	       ", \"confidence\": %.17g, ", ldexp(1.0, -(int)r->sample_shift),
	       r->sampled_blocks, r->confidence);
	json_double(stdout, "dedup_error", r->dedup_error, ", ");
	json_double(stdout, "compress_error", r->compress_error, ",\n");
	printf("     \"spill_runs\": %" PRIu64 ", \"spill_bytes\": %" PRIu64
	       ",\n", r->spill_runs, r->spill_bytes);
	scan_json_hist(r);
}

static void scan_json(const dd_scan_info *info, const dd_scan_opts *so)
{
	char comp[32];
	size_t i;

	compress_spec_name(comp, sizeof(comp), so->compress, so->compress_level);
	printf("{\n  \"mode\": \"%s\",\n  \"compress\": \"%s\",\n",
	       so->mode == DD_SCAN_SAMPLE ? "sample" : "exact", comp);
	printf("  \"images\": %" PRIu64 ",\n  \"bytes\": %" PRIu64 ",\n"
	       "  \"special_files\": %" PRIu64 ",\n  \"skipped_count\": %"
	       PRIu64 ",\n  \"skipped\": [", info->images, info->bytes,
	       info->special, info->skipped);
	for (i = 0; i < scan_st.nskips; i++) {
		char sym[32];

		printf("%s\n    {\"path\": ", i ? "," : "");
		json_string(stdout, scan_st.skips[i].path);
		printf(", \"error\": \"%s\", \"message\": ",
		       err_symbol(sym, sizeof(sym), scan_st.skips[i].code));
		json_string(stdout, scan_st.skips[i].msg);
		printf("}");
	}
	printf("%s],\n  \"results\": [\n", scan_st.nskips ? "\n  " : "");
	for (i = 0; i < info->nblock_sizes; i++) {
		scan_json_one(&scan_st.res[i]);
		printf("%s\n", i + 1 < info->nblock_sizes ? "," : "");
	}
	printf("  ]\n}\n");
}

static _Noreturn void scan_die(int rc)
{
	progress_finish(&scan_st.pg);
	die("%s", lib_msg(dd_scan_errmsg(scan_st.scan), rc));
}

static uint64_t scan_total(int argc, char **argv)
{
	uint64_t total = 0, n;

	for (int i = optind; i < argc; i++)
		if (strcmp(argv[i], "-") != 0 &&
		    dd_scan_path_bytes(argv[i], &n) == 0)
			total += n;
	return total;
}

static void scan_inputs(int argc, char **argv)
{
	for (int i = optind; i < argc; i++) {
		int rc = strcmp(argv[i], "-") == 0
			? dd_scan_add_fd(scan_st.scan, STDIN_FILENO, "stdin")
			: dd_scan_add_path(scan_st.scan, argv[i]);

		if (rc != 0)
			scan_die(rc);
	}
}

enum {
	OPT_MEMORY = 512,
	OPT_SAMPLE,
	OPT_SAMPLE_RATE,
	OPT_TMPDIR,
};

static void scan_parse(int argc, char **argv, dd_scan_opts *so,
		       uint32_t *sizes, int *json, int *verbose)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"json", no_argument, NULL, OPT_JSON},
		{"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
		{"compress", required_argument, NULL, OPT_COMPRESS},
		{"memory", required_argument, NULL, OPT_MEMORY},
		{"sample", no_argument, NULL, OPT_SAMPLE},
		{"sample-rate", required_argument, NULL, OPT_SAMPLE_RATE},
		{"tmpdir", required_argument, NULL, OPT_TMPDIR},
		{NULL, 0, NULL, 0},
	};
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_VERBOSE:
			*verbose = 1;
			break;
		case OPT_JSON:
			*json = 1;
			break;
		case OPT_BLOCK_SIZE:
			so->nblock_sizes = scan_parse_sizes(optarg, sizes);
			break;
		case OPT_COMPRESS:
			if (parse_compress_spec(optarg, &so->compress,
						&so->compress_level) != 0)
				die_usage("scan: --compress takes zstd, "
					  "zstd:LEVEL (1..19) or none, not "
					  "'%.100s'", optarg);
			break;
		case OPT_MEMORY:
			if (parse_size(optarg, &so->mem_limit) != 0 ||
			    so->mem_limit < (64u << 10))
				die_usage("scan: --memory takes a size of at "
					  "least 64K, not '%.100s'", optarg);
			break;
		case OPT_SAMPLE:
			so->mode = DD_SCAN_SAMPLE;
			break;
		case OPT_SAMPLE_RATE:
			so->mode = DD_SCAN_SAMPLE;
			so->sample_shift = scan_parse_rate(optarg);
			break;
		case OPT_TMPDIR:
			so->tmpdir = optarg;
			break;
		default:
			die_bad_option(subcmd, c, argv);
		}
	}
	if (optind >= argc)
		die_usage("scan: missing PATH (use - for stdin)");
	so->block_sizes = sizes;
}

static int cmd_scan(int argc, char **argv)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_info info = {DD_SCAN_INFO_VERSION, 0, 0, 0, 0, 0};
	uint32_t sizes[DD_SCAN_MAX_BLOCK_SIZES];
	int json = 0, verbose = 0, rc;
	uint64_t total = 0;

	scan_parse(argc, argv, &so, sizes, &json, &verbose);
	progress_init(&scan_st.pg, "scan", 0, verbose);
	if (scan_st.pg.enabled)
		total = scan_total(argc, argv);
	scan_st.pg.total = total;
	so.progress = scan_progress;
	so.progress_total = total;
	so.warn = scan_warn;
	rc = dd_scan_new(&scan_st.scan, &so);
	if (rc != 0)
		die("scan: %s", lib_msg(dd_last_errmsg(), rc));
	scan_inputs(argc, argv);
	rc = dd_scan_finish(scan_st.scan);
	if (rc != 0)
		scan_die(rc);
	progress_finish(&scan_st.pg);
	for (size_t i = 0; i < (so.nblock_sizes ? so.nblock_sizes : 1); i++) {
		scan_st.res[i].version = DD_SCAN_RESULT_VERSION;
		rc = dd_scan_result_get(scan_st.scan, i, &scan_st.res[i]);
		if (rc != 0)
			scan_die(rc);
	}
	dd_scan_info_get(scan_st.scan, &info);
	if (json)
		scan_json(&info, &so);
	else
		scan_text(&info, &so);
	fflush(stdout);
	scan_free_state();
	if (info.images == 0 && info.skipped == 0)
		warnmsg("scan: nothing to scan (no files in the input)");
	if (info.skipped) {
		warnmsg("scan: %" PRIu64 " input%s skipped or partly read "
			"(listed in the report)", info.skipped,
			info.skipped == 1 ? "" : "s");
		return 1;
	}
	return 0;
}

/* ---- main ---------------------------------------------------------------*/

struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
};

static const struct subcommand subcommands[] = {
	{"init", cmd_init},
	{"put", cmd_put},
	{"get", cmd_get},
	{"ls", cmd_ls},
	{"rm", cmd_rm},
	{"stat", cmd_stat},
	{"gc", cmd_gc},
	{"scrub", cmd_scrub},
	{"cache", cmd_cache},       /* util_cache.c */
	{"scan", cmd_scan},
};

int main(int argc, char **argv)
{
	size_t i;

	util_set_prog("dedup");
	if (argc < 2)
		die_usage("missing command");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0)
		usage_exit();
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
		print_tool_version("dedup");
	for (i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
		if (strcmp(argv[1], subcommands[i].name) == 0) {
			subcmd = subcommands[i].name;
			return subcommands[i].run(argc - 1, argv + 1);
		}
	}
	if (argv[1][0] == '-')
		die_usage("unknown option '%.100s'", argv[1]);
	die_usage("unknown command '%.100s'", argv[1]);
}
