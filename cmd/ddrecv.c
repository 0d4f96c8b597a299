/*
 * ddrecv.c -- the `ddrecv` command: read a replication stream
 * (format/stream.md) from stdin.
 *
 *   ddrecv [-v|-q] [--json[=F]] [-s] [--no-create] STORE[@NAME]
 *                                   into a store (as NAME, or the stream's),
 *                                   created with the stream's block size
 *                                   when missing
 *   ddrecv [-v|-q] [--json[=F]] -o FILE|DEVICE   rebuild the raw image
 *   ddrecv -n [--json]              check and describe, write nothing
 *   ddrecv -A STORE                 discard a partial resumable receive
 *
 * Uses include/dedup.h only.  Exit status: 0 success, 1 an error (one line
 * "ddrecv: message" on stderr), 2 a usage error.  Only -n writes to stdout
 * (its report; --json=- too, when asked); progress and the --json summary
 * go to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedup.h"
#include "util.h"

static const char usage_text[] =
	"usage: ddrecv [-v|-q] [--json[=FILE]] [-s] [--no-create] [--wait[=S]]\n"
	"              STORE[@NAME]\n"
	"       ddrecv [-v|-q] [--json[=FILE]] -o FILE|DEVICE\n"
	"       ddrecv -n [--json]\n"
	"       ddrecv [--wait[=S]] -A STORE\n"
	"\n"
	"Reads a replication stream (from ddsend) on stdin.\n"
	"\n"
	"  STORE[@NAME]        receive into STORE, as snapshot NAME (default:\n"
	"                      the name in the stream); the snapshot appears only\n"
	"                      once the whole stream checked out; a missing STORE\n"
	"                      is created with the stream's block size\n"
	"      --no-create     refuse a STORE that does not exist\n"
	"  -s, --resumable     keep what arrived if the receive is interrupted and\n"
	"                      print a resume token for `ddsend -t`\n"
	"  -o, --output PATH   rebuild the raw image into a file or block device\n"
	"  -n, --dry-run       check the whole stream and describe it; write nothing\n"
	"      --json[=FILE]   with -n: the description as JSON on stdout;\n"
	"                      else a summary of the receive as JSON on stderr,\n"
	"                      or into FILE\n"
	"  -A, --abort STORE   discard a partial resumable receive kept in STORE\n"
	"      --wait[=S]      while repair has the store, wait for it (at most S\n"
	"                      seconds) instead of failing at once\n"
	"  -v, --verbose       show progress on stderr (default when stderr is a\n"
	"                      terminal)\n"
	"  -q, --quiet         no progress: errors only\n"
	"      --help          show this help\n"
	"      --version       show the version\n"
	"\n"
	"Exit status: 0 success, 1 error, 2 usage error.\n";

enum mode { MODE_STORE, MODE_OUTPUT, MODE_CHECK, MODE_ABORT };

struct recv_args {
	enum mode mode;
	int verbose;
	int resumable;
	int json;
	int wait;             /* --wait: parse_wait's */
	const char *json_path;  /* --json=FILE; NULL: stderr (stdout for -n) */
	int no_create;
	const char *path;     /* -o PATH, -A STORE, or STORE[@NAME] */
};

enum { OPT_HELP = 256, OPT_VERSION, OPT_JSON, OPT_NO_CREATE, OPT_WAIT };


static void set_mode(struct recv_args *a, enum mode m, const char *path)
{
	if (a->mode != MODE_STORE)
		die_usage("-o, -n and -A exclude each other");
	a->mode = m;
	a->path = path;
}

static void parse_args(int argc, char **argv, struct recv_args *a)
{
	static const struct option longopts[] = {
		{"verbose", no_argument, NULL, 'v'},
		{"quiet", no_argument, NULL, 'q'},
		{"resumable", no_argument, NULL, 's'},
		{"output", required_argument, NULL, 'o'},
		{"dry-run", no_argument, NULL, 'n'},
		{"abort", required_argument, NULL, 'A'},
		{"json", optional_argument, NULL, OPT_JSON},
		{"no-create", no_argument, NULL, OPT_NO_CREATE},
		{"wait", optional_argument, NULL, OPT_WAIT},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(a, 0, sizeof(*a));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":vqso:nA:h", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'v': a->verbose = 1; break;
		case 'q': util_quiet = 1; break;
		case 's': a->resumable = 1; break;
		case 'o': set_mode(a, MODE_OUTPUT, optarg); break;
		case 'n': set_mode(a, MODE_CHECK, NULL); break;
		case 'A': set_mode(a, MODE_ABORT, optarg); break;
		case OPT_JSON: a->json = 1; a->json_path = optarg; break;
		case OPT_NO_CREATE: a->no_create = 1; break;
		case OPT_WAIT: a->wait = parse_wait(optarg); break;
		case 'h':
		case OPT_HELP: fputs(usage_text, stdout); exit(0);
		case OPT_VERSION: print_tool_version("ddrecv");
		default: die_bad_option(NULL, c, argv);
		}
	}
	if (a->json && a->mode == MODE_ABORT)
		die_usage("--json does not go with -A");
	if (a->json_path && a->mode == MODE_CHECK)
		die_usage("-n writes its JSON on stdout: --json takes no FILE "
			  "with -n");
	if (a->resumable && a->mode != MODE_STORE)
		die_usage("-s applies to a receive into a store only");
	if (a->wait && a->mode != MODE_STORE && a->mode != MODE_ABORT)
		die_usage("--wait applies to a store only");
	if (a->no_create && a->mode != MODE_STORE)
		die_usage("--no-create applies to a receive into a store only");
	if (a->mode == MODE_STORE) {
		if (optind >= argc)
			die_usage("missing STORE (or -o, -n, -A)");
		a->path = argv[optind++];
	}
	if (optind < argc)
		die_usage("unexpected argument '%.300s'", argv[optind]);
}

static void refuse_terminal(void)
{
	if (isatty(STDIN_FILENO))
		die("refusing to read a binary stream from a terminal "
		    "(pipe ddsend into ddrecv, or redirect stdin)");
}

/* ---- -n -----------------------------------------------------------------*/

static void print_text(const dd_stream_info *i)
{
	char hex[65], hs[32];

	printf("stream format:  version %" PRIu32 ", %s\n", i->format_version,
	       i->base[0] ? "incremental" : "full");
	printf("name:           %s\n", i->name);
	if (i->base[0]) {
		printf("base:           %s\n", i->base);
		printf("base digest:    %s\n",
		       hex_encode(hex, i->base_digest, 32));
	}
	printf("block size:     %" PRIu32 "\n", i->block_size);
	printf("size:           %" PRIu64 " bytes (%s)\n", i->size,
	       human_size(hs, sizeof(hs), i->size));
	printf("content digest: %s\n", hex_encode(hex, i->digest, 32));
	printf("resume from:    block %" PRIu64 "\n", i->resume_from);
	printf("records:\n");
	printf("  DATA  %12" PRIu64 " records %16" PRIu64 " payload bytes\n",
	       i->data_records, i->data_bytes);
	printf("  REF   %12" PRIu64 " records\n", i->ref_records);
	printf("  ZERO  %12" PRIu64 " records %16" PRIu64 " blocks\n",
	       i->zero_records, i->zero_blocks);
	printf("stream bytes:   %" PRIu64 " (%s)\n", i->stream_bytes,
	       human_size(hs, sizeof(hs), i->stream_bytes));
}

/* The stream's description as JSON members, the object left open for the
 * caller's own members and "}". */
static void json_info(FILE *f, const dd_stream_info *i)
{
	char hex[65];

	fprintf(f, "{\"format_version\": %" PRIu32 ", \"incremental\": %s, "
		"\"name\": ", i->format_version, i->base[0] ? "true" : "false");
	json_string(f, i->name);
	fprintf(f, ", \"base\": ");
	json_string(f, i->base);
	fprintf(f, ", \"base_digest\": \"%s\"",
		hex_encode(hex, i->base_digest, 32));
	fprintf(f, ", \"block_size\": %" PRIu32 ", \"size\": %" PRIu64,
		i->block_size, i->size);
	fprintf(f, ", \"digest\": \"%s\"", hex_encode(hex, i->digest, 32));
	fprintf(f, ", \"resume_from\": %" PRIu64, i->resume_from);
	fprintf(f, ", \"data_records\": %" PRIu64 ", \"data_bytes\": %"
		PRIu64, i->data_records, i->data_bytes);
	fprintf(f, ", \"ref_records\": %" PRIu64, i->ref_records);
	fprintf(f, ", \"zero_records\": %" PRIu64 ", \"zero_blocks\": %"
		PRIu64, i->zero_records, i->zero_blocks);
	fprintf(f, ", \"stream_bytes\": %" PRIu64, i->stream_bytes);
}

static void print_json(const dd_stream_info *i)
{
	json_info(stdout, i);
	fputs("}\n", stdout);
}

/* --json after a receive: the stream, where it went, how long it took. */
static void recv_summary(const struct recv_args *a, const dd_stream_info *i,
			 const char *key, const char *where, int created,
			 double secs)
{
	FILE *f;

	if (!a->json)
		return;
	f = summary_open(a->json_path);
	json_info(f, i);
	fprintf(f, ", \"%s\": ", key);
	json_string(f, where);
	if (created >= 0)
		fprintf(f, ", \"created\": %s", created ? "true" : "false");
	fprintf(f, ", \"seconds\": %.3f}\n", secs);
	summary_close(f, a->json_path);
}

static int recv_check(const struct recv_args *a)
{
	dd_recv_opts opts = DD_RECV_OPTS_INIT;
	dd_stream_info info;
	struct progress pg;
	int in = STDIN_FILENO, rc;

	progress_init(&pg, "ddrecv", 0, a->verbose);
	opts.progress = progress_lib_cb;
	opts.progress_ctx = &pg;
	rc = dd_stream_check(&opts, dd_fd_read, &in, &info);
	progress_finish(&pg);
	if (rc)
		die("%s", best_errmsg(NULL, rc));
	if (a->json)
		print_json(&info);
	else
		print_text(&info);
	if (fflush(stdout) != 0)
		die("write to stdout: %s", strerror(errno));
	return 0;
}

/* ---- -o -----------------------------------------------------------------*/

static int recv_output(const struct recv_args *a)
{
	dd_recv_opts opts = DD_RECV_OPTS_INIT;
	struct progress pg;
	struct outfile of;
	dd_stream_info info;
	double t0 = now_seconds();
	int in = STDIN_FILENO, rc;

	/* Read and write: a REF block is copied from the output itself.  A
	 * regular file is rebuilt under a temporary name and renamed at the
	 * end, so an interrupted receive never leaves a whole-looking file
	 * (a device is written in place) */
	if (outfile_open(&of, a->path, O_RDWR) != 0)
		die("cannot open '%.300s': %s", a->path, strerror(errno));
	progress_init(&pg, "ddrecv", 0, a->verbose);
	opts.progress = progress_lib_cb;
	opts.progress_ctx = &pg;
	rc = dd_recv_fd(of.fd, &opts, dd_fd_read, &in, &info);
	progress_finish(&pg);
	if (rc) {
		outfile_abort(&of);
		die("%s", best_errmsg(NULL, rc));
	}
	if (outfile_commit(&of) != 0)
		die("'%.300s': %s", a->path, strerror(errno));
	recv_summary(a, &info, "output", a->path, -1, now_seconds() - t0);
	return 0;
}

/* ---- into a store ---------------------------------------------------------*/

static char store_msg[1024];

static _Noreturn void die_store(dd_store *store, int rc)
{
	snprintf(store_msg, sizeof(store_msg), "%s",
		 best_errmsg(dd_store_errmsg(store), rc));
	dd_store_close(store);
	die("%s", store_msg);
}

/* --wait as dd_open_opts: -1 waits forever, N > 0 at most N ms */
static int try_open_store(dd_store **store, const char *path, int wait)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;

	oo.wait_for_lock = wait != 0;
	oo.lock_timeout_ms = wait > 0 ? (unsigned)wait : 0;
	return dd_store_open(store, path, &oo);
}

static dd_store *open_store(const char *path, int wait)
{
	dd_store *store;
	int rc = try_open_store(&store, path, wait);

	if (rc)
		die("%s", best_errmsg(dd_store_errmsg(NULL), rc));
	return store;
}

/* The stream's first bytes, read before the store is opened, handed to
 * dd_recv again before the rest of stdin. */
struct replay {
	uint8_t head[DD_STREAM_HEADER_MAX];
	size_t len, pos;
	int fd;
};

static int replay_read(void *ctx, void *buf, size_t len, size_t *got)
{
	struct replay *r = ctx;
	size_t n = r->len - r->pos;

	if (n == 0)
		return dd_fd_read(&r->fd, buf, len, got);
	n = n < len ? n : len;
	memcpy(buf, r->head + r->pos, n);
	r->pos += n;
	*got = n;
	return 0;
}

/* A store this run created is removed again when the receive fails and
 * keeps nothing, as `zfs recv` leaves no new dataset behind. */
static const char *created_root;
static int created_dir;   /* the directory itself is ours too */

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	if (ftw->level == 0 && !created_dir)
		return 0;
	return remove(path) == 0 ? 0 : -1;
}

static void remove_created(void)
{
	if (created_root &&
	    nftw(created_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		warnmsg("could not remove the store '%.300s' this receive "
			"created: %s", created_root, strerror(errno));
	created_root = NULL;
}

/* Opens the target store; one that does not exist is created with the
 * stream's block size (its header is read first, into *rp) unless
 * --no-create.  Sets *created. */
static dd_store *open_or_create(const struct recv_args *a, const char *path,
				struct replay *rp, int *created)
{
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_stream_info hdr;
	char open_msg[1024];
	struct stat st;
	dd_store *store;
	ssize_t n;
	int rc = try_open_store(&store, path, a->wait);

	*created = 0;
	if (rc == 0)
		return store;
	if (rc != DD_ENOENT || a->no_create)
		die("%s", best_errmsg(dd_store_errmsg(NULL), rc));
	snprintf(open_msg, sizeof(open_msg), "%s",
		 best_errmsg(dd_store_errmsg(NULL), rc));
	n = read_full(rp->fd, rp->head, sizeof(rp->head));
	if (n < 0)
		die("read stream: %s", strerror(errno));
	rp->len = (size_t)n;
	rc = dd_stream_header(rp->head, rp->len, &hdr);
	if (rc)
		die("%s", best_errmsg(NULL, rc));
	co.chunker = hdr.chunker;
	co.block_size = hdr.block_size;
	created_dir = stat(path, &st) != 0;
	rc = dd_store_create(&store, path, &co, NULL);
	if (rc == DD_EEXIST)  /* something else is there: say what open saw */
		die("%s", open_msg);
	if (rc)
		die("%s", best_errmsg(dd_store_errmsg(NULL), rc));
	created_root = path;
	*created = 1;
	if (a->verbose && !util_quiet)
		warnmsg("created store '%.300s' (%s, block size %" PRIu32 ")",
			path, chunker_name(hdr.chunker), hdr.block_size);
	return store;
}

static int recv_store(const struct recv_args *a)
{
	dd_recv_opts opts = DD_RECV_OPTS_INIT;
	static struct replay rp;
	struct progress pg;
	dd_store *store;
	char *sname = NULL, *snap = NULL;
	dd_stream_info info = {0};
	double t0 = now_seconds();
	int created, rc;

	if (strchr(a->path, '@'))
		split_snapref_or_die(a->path, &sname, &snap);
	rp.fd = STDIN_FILENO;
	store = open_or_create(a, sname ? sname : a->path, &rp, &created);
	opts.name = snap;
	opts.resumable = a->resumable;
	progress_init(&pg, "ddrecv", 0, a->verbose);
	opts.progress = progress_lib_cb;
	opts.progress_ctx = &pg;
	rc = dd_recv(store, &opts, replay_read, &rp, &info);
	progress_finish(&pg);
	/* the token of what this receive kept, not of an older partial */
	if (rc && a->resumable && info.resume_token[0]) {
		warnmsg("%s", best_errmsg(dd_store_errmsg(store), rc));
		warnmsg("resume token: %s", info.resume_token);
		dd_store_close(store);
		exit(1);
	}
	if (rc) {
		snprintf(store_msg, sizeof(store_msg), "%s",
			 best_errmsg(dd_store_errmsg(store), rc));
		dd_store_close(store);
		remove_created();
		die("%s", store_msg);
	}
	recv_summary(a, &info, "store", sname ? sname : a->path, created,
		     now_seconds() - t0);
	dd_store_close(store);
	free(sname);
	free(snap);
	return 0;
}

static int recv_abort(const struct recv_args *a)
{
	dd_store *store = open_store(a->path, a->wait);
	int rc = dd_recv_abort_partial(store);

	if (rc)
		die_store(store, rc);
	dd_store_close(store);
	return 0;
}

int main(int argc, char **argv)
{
	struct recv_args a;

	util_set_prog("ddrecv");
	parse_args(argc, argv, &a);
	switch (a.mode) {
	case MODE_ABORT:
		return recv_abort(&a);
	case MODE_CHECK:
		refuse_terminal();
		return recv_check(&a);
	case MODE_OUTPUT:
		refuse_terminal();
		return recv_output(&a);
	default:
		refuse_terminal();
		return recv_store(&a);
	}
}
