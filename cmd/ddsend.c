/*
 * ddsend.c -- the `ddsend` command: write a replication stream
 * (format/stream.md) to stdout.
 *
 *   ddsend [-v|-q] [--json[=F]] [-i BASE] [-t TOKEN] STORE@SNAP
 *                                                  a snapshot of a store
 *   ddsend [-v|-q] [--json[=F]] [-b SIZE] [-c LEVEL] -f FILE
 *                                                  a raw file or device
 *
 * Uses include/dedup.h only.  Exit status: 0 success, 1 an error (one line
 * "ddsend: message" on stderr), 2 a usage error.  The stream goes to
 * stdout and nowhere else; progress and the --json summary go to stderr
 * (or the summary into a file).  A stream is binary,
 * so it is never written to a terminal.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedup.h"
#include "util.h"

static const char usage_text[] =
	"usage: ddsend [-v|-q] [--json[=FILE]] [-i BASE] [-t TOKEN] STORE@SNAP\n"
	"       ddsend [-v|-q] [--json[=FILE]] [--chunker fixed|fastcdc] [-b SIZE]\n"
	"              [-c LEVEL] -f FILE|DEVICE\n"
	"\n"
	"Writes a replication stream to stdout, e.g.\n"
	"  ddsend store@monday | ssh host ddrecv backup\n"
	"\n"
	"  -i, --incremental BASE  send only what changed since BASE (NAME,\n"
	"                          @NAME or STORE@NAME, a snapshot of the same\n"
	"                          store); its blocks travel as references\n"
	"  -t, --resume TOKEN      send the rest of an interrupted receive\n"
	"                          (the token `ddrecv -s` printed)\n"
	"  -f, --file PATH         stream a regular file or block device, no\n"
	"                          store needed (deduplicated within the stream)\n"
	"      --chunker NAME      how -f cuts the file: fixed (default) or\n"
	"                          fastcdc, content-defined blocks (a store's\n"
	"                          snapshot goes as its store cut it)\n"
	"  -b, --block-size SIZE   block size for -f (4K..1M, power of two;\n"
	"                          default 128K); for fastcdc the average\n"
	"                          (4K..256K)\n"
	"  -c, --compress LEVEL    zstd level 1..19 for -f, or 'none' (default 1)\n"
	"      --digest-version N  content digest of fixed blocks: 2 (default\n"
	"                          for -f; a snapshot goes with its own), or 1\n"
	"                          for a receiver of an older build (at most\n"
	"                          2^32 blocks)\n"
	"  -v, --verbose           show progress on stderr (default when stderr\n"
	"                          is a terminal)\n"
	"  -q, --quiet             no progress: errors only\n"
	"      --json[=FILE]       a summary as JSON on stderr, or into FILE\n"
	"                          (never on stdout: it carries the stream)\n"
	"      --help              show this help\n"
	"      --version           show the version\n"
	"\n"
	"Exit status: 0 success, 1 error, 2 usage error.\n";

struct send_args {
	int verbose;
	int json;
	const char *json_path;    /* --json=FILE; NULL: stderr */
	const char *base;
	const char *token;
	const char *file;
	uint32_t block_size;
	int level;
	int chunker;
	int digest_version;       /* 0: the default */
	const char *snapref;
};

enum { OPT_HELP = 256, OPT_VERSION, OPT_JSON, OPT_CHUNKER, OPT_DIGEST };


static uint32_t parse_block_size(const char *s)
{
	uint64_t v;

	if (parse_size(s, &v) != 0 || !block_size_valid(v))
		die_usage("block size '%.100s' is not a power of two in "
			  "4K..1M", s);
	return (uint32_t)v;
}

static int parse_level(const char *s)
{
	char *end;
	long v;

	if (strcmp(s, "none") == 0)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 19)
		die_usage("compression level '%.100s' is not 1..19 or 'none'",
			  s);
	return (int)v;
}

static void parse_args(int argc, char **argv, struct send_args *a)
{
	static const struct option longopts[] = {
		{"verbose", no_argument, NULL, 'v'},
		{"quiet", no_argument, NULL, 'q'},
		{"json", optional_argument, NULL, OPT_JSON},
		{"incremental", required_argument, NULL, 'i'},
		{"resume", required_argument, NULL, 't'},
		{"file", required_argument, NULL, 'f'},
		{"block-size", required_argument, NULL, 'b'},
		{"compress", required_argument, NULL, 'c'},
		{"chunker", required_argument, NULL, OPT_CHUNKER},
		{"digest-version", required_argument, NULL, OPT_DIGEST},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	int c, b_set = 0, c_set = 0, k_set = 0;

	memset(a, 0, sizeof(*a));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":vqi:t:f:b:c:h", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'v': a->verbose = 1; break;
		case 'q': util_quiet = 1; break;
		case OPT_JSON: a->json = 1; a->json_path = optarg; break;
		case 'i': a->base = optarg; break;
		case 't': a->token = optarg; break;
		case 'f': a->file = optarg; break;
		case 'b': a->block_size = parse_block_size(optarg); b_set = 1;
			break;
		case 'c': a->level = parse_level(optarg); c_set = 1; break;
		case OPT_CHUNKER:
			a->chunker = parse_chunker(optarg);
			if (a->chunker < 0)
				die_usage("--chunker takes fixed or fastcdc, not "
					  "'%.100s'", optarg);
			k_set = 1;
			break;
		case OPT_DIGEST:
			if (strcmp(optarg, "1") && strcmp(optarg, "2"))
				die_usage("--digest-version takes 1 or 2, not "
					  "'%.100s'", optarg);
			a->digest_version = optarg[0] - '0';
			break;
		case 'h':
		case OPT_HELP: fputs(usage_text, stdout); exit(0);
		case OPT_VERSION: print_tool_version("ddsend");
		default: die_bad_option(NULL, c, argv);
		}
	}
	if (a->json_path && strcmp(a->json_path, "-") == 0)
		die_usage("--json=- would mix the summary into the stream on "
			  "stdout");
	if (a->file) {
		if (a->base || a->token)
			die_usage("-f cannot be combined with -i or -t");
		if (a->block_size &&
		    !chunker_size_valid(a->chunker, a->block_size))
			die_usage("a fastcdc average block size is a power of "
				  "two in 4K..256K, not %u", a->block_size);
		if (optind < argc)
			die_usage("unexpected argument '%.300s'", argv[optind]);
		return;
	}
	if (b_set || c_set || k_set)
		die_usage("-b, -c and --chunker apply to -f only (a store's "
			  "blocks keep their own size and compression)");
	if (optind >= argc)
		die_usage("missing STORE@SNAP");
	if (optind + 1 < argc)
		die_usage("unexpected argument '%.300s'", argv[optind + 1]);
	a->snapref = argv[optind];
}

/* BASE is NAME, @NAME or STORE@NAME; a STORE part must name the store
 * being sent from (an incremental is against a snapshot of the same
 * store). */
static const char *base_name(const char *base, const char *store)
{
	const char *at = strrchr(base, '@');
	const char *name = at ? at + 1 : base;

	if (at && at != base && ((size_t)(at - base) != strlen(store) ||
				 strncmp(base, store, strlen(store)) != 0))
		die_usage("base '%.300s' is not a snapshot of store '%.300s'",
			  base, store);
	if (dd_name_check(name) != 0)
		die_usage("'%.300s': invalid base snapshot name", base);
	return name;
}

static void refuse_terminal(void)
{
	if (isatty(STDOUT_FILENO))
		die("refusing to write a binary stream to a terminal "
		    "(redirect stdout to a file or a pipe)");
}

/* dd_fd_write, counting the stream's bytes for --json. */
struct counted_out {
	int fd;
	uint64_t bytes;
};

static int counted_write(void *ctx, const void *buf, size_t len)
{
	struct counted_out *o = ctx;
	int rc = dd_fd_write(&o->fd, buf, len);

	if (rc == 0)
		o->bytes += len;
	return rc;
}

/* The summary: what was sent and how big the stream was. */
static void send_summary(const struct send_args *a, const char *kind,
			 const char *what, const char *base, uint64_t size,
			 const struct counted_out *out, double secs)
{
	FILE *f;

	if (!a->json)
		return;
	f = summary_open(a->json_path);
	fprintf(f, "{\"%s\": ", kind);
	json_string(f, what);
	fputs(", \"base\": ", f);
	if (base)
		json_string(f, base);
	else
		fputs("null", f);
	fprintf(f, ", \"bytes\": %" PRIu64 ", \"stream_bytes\": %" PRIu64
		", \"seconds\": %.3f}\n", size, out->bytes, secs);
	summary_close(f, a->json_path);
}

static int send_file(const struct send_args *a)
{
	dd_send_opts opts = DD_SEND_OPTS_INIT;
	struct progress pg;
	struct counted_out out = {STDOUT_FILENO, 0};
	char *copy, *name;
	double t0 = now_seconds();
	struct stat st;
	int in, rc;

	in = open(a->file, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		die("cannot open '%.300s': %s", a->file, strerror(errno));
	copy = strdup(a->file);
	if (!copy)
		die("out of memory");
	name = basename(copy);
	if (dd_name_check(name) != 0)
		die("'%.300s' cannot name a stream (its file name is not a "
		    "valid snapshot name)", a->file);
	progress_init(&pg, "ddsend", 0, a->verbose);
	opts.progress = progress_lib_cb;
	opts.progress_ctx = &pg;
	opts.chunker = a->chunker;
	opts.digest_version = a->digest_version;
	rc = dd_send_fd(in, name, a->block_size, a->level, &opts,
			counted_write, &out);
	progress_finish(&pg);
	if (rc == 0 && fstat(in, &st) == 0)
		send_summary(a, "file", a->file, NULL, pg.total ? pg.total
			     : (uint64_t)st.st_size, &out, now_seconds() - t0);
	close(in);
	free(copy);
	if (rc)
		die("%s", best_errmsg(NULL, rc));
	return 0;
}

static int send_snapshot(const struct send_args *a)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_send_opts opts = DD_SEND_OPTS_INIT;
	struct progress pg;
	struct counted_out out = {STDOUT_FILENO, 0};
	dd_snapshot_info si;
	dd_store *store;
	char *sname, *snap;
	double t0 = now_seconds();
	int rc;

	split_snapref_or_die(a->snapref, &sname, &snap);
	if (a->base)
		opts.base = base_name(a->base, sname);
	opts.resume_token = a->token;
	opts.digest_version = a->digest_version;
	oo.readonly = 1;
	rc = dd_store_open(&store, sname, &oo);
	if (rc)
		die("%s", best_errmsg(dd_store_errmsg(NULL), rc));
	progress_init(&pg, "ddsend", 0, a->verbose);
	opts.progress = progress_lib_cb;
	opts.progress_ctx = &pg;
	rc = dd_send(store, snap, &opts, counted_write, &out);
	progress_finish(&pg);
	if (rc == 0 && a->json) {
		rc = dd_snapshot_stat(store, snap, &si);
		if (rc == 0)
			send_summary(a, "snapshot", a->snapref, opts.base,
				     si.size, &out, now_seconds() - t0);
	}
	if (rc) {
		/* die() exits: keep the message, not the store. */
		static char msg[1024];

		snprintf(msg, sizeof(msg), "%s",
			 best_errmsg(dd_store_errmsg(store), rc));
		dd_store_close(store);
		die("%s", msg);
	}
	dd_store_close(store);
	free(sname);
	free(snap);
	return 0;
}

int main(int argc, char **argv)
{
	struct send_args a;

	util_set_prog("ddsend");
	parse_args(argc, argv, &a);
	refuse_terminal();
	/* A receiver that stops reading is a write error with a message,
	 * not a silent death by SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	if (a.file)
		return send_file(&a);
	return send_snapshot(&a);
}
