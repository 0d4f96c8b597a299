/*
 * util.h -- helpers shared by the commands dedup, ddsend and ddrecv.
 *
 * Commands may exit (die, die_usage); the library never does.  Everything
 * here uses libc and include/dedup.h only.  Messages go to stderr as one
 * line "PROG: message"; stdout carries data and requested output only.
 */
#ifndef DD_CMD_UTIL_H
#define DD_CMD_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Exit status for usage errors (bad option, missing or extra argument). */
#define EXIT_USAGE 2

/* The program name used in messages ("dedup"); set once by main. */
extern const char *util_prog;
void util_set_prog(const char *argv0);

/* Prints "PROG: message" (one line; embedded newlines become spaces) on
 * stderr and exits 1. */
_Noreturn void die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* As die, but appends " (try 'PROG --help')" and exits EXIT_USAGE. */
_Noreturn void die_usage(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* Prints "PROG: message" on stderr and returns. */
void warnmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A library message, or the name of rc when the message is empty. */
const char *lib_msg(const char *msg, int rc);

/*
 * Parses a size: decimal digits and an optional binary suffix K KiB k M MiB
 * m G GiB g T TiB t (all powers of 1024).  Rejects empty input, signs,
 * whitespace, other characters, trailing junk and values above UINT64_MAX.
 * Returns 0 and sets *out, or -1.
 */
int parse_size(const char *s, uint64_t *out);

/* --wait[=SECONDS]: -1 (no argument: wait for ever) or the limit in
 * milliseconds (> 0); die_usage for anything but a positive number of
 * seconds up to a day. */
int parse_wait(const char *arg);

/*
 * Splits "STORE@NAME" at the last '@'.  *store and *name are malloc'd.
 * Returns 0, or -1 with a static reason in *why (no '@', empty store, empty
 * or invalid name).
 */
int split_snapref(const char *arg, char **store, char **name,
		  const char **why);

/* split_snapref or die_usage / die with a clear line. */
void split_snapref_or_die(const char *arg, char **store, char **name);

/* Formats bytes as "1.5 GiB" / "512 B" into buf; returns buf. */
char *human_size(char *buf, size_t len, uint64_t bytes);

/* Compact 5-character form as zdb prints it ("2.00K", "25.0M", "256M"). */
char *nicenum(char *buf, size_t len, uint64_t n);

/* Writes s as a JSON string literal, quotes included.  Invalid UTF-8
 * bytes become U+FFFD so the output is always valid JSON. */
void json_string(FILE *f, const char *s);

/* Writes "key": v then sep; a NaN or infinite v is written as null. */
void json_double(FILE *f, const char *key, double v, const char *sep);

/* Lower-case hex of n bytes into out (2n+1 bytes). */
char *hex_encode(char *out, const uint8_t *p, size_t n);

/* "2024-05-01T12:00:00Z" into buf (at least 21 bytes); returns buf. */
char *iso8601_utc(char *buf, size_t len, int64_t t);

/* Seconds from a monotonic clock. */
double now_seconds(void);

/* read() until len bytes or end of file; retries EINTR.  Returns the count
 * (short only at end of file) or -1 with errno set. */
ssize_t read_full(int fd, void *buf, size_t len);

/* write() all len bytes; retries EINTR and short writes.  0 or -1. */
int write_all(int fd, const void *buf, size_t len);

/*
 * A progress meter on stderr: bytes done, rate (MiB/s), percentage and ETA
 * when the total is known.  On a terminal it redraws one line with '\r' at
 * most four times a second; into a file or pipe (a log, with -v) it writes
 * a whole line every PROGRESS_LOG_SECONDS instead.  progress_finish draws
 * the final state and ends the line.  Disabled meters print nothing.
 */
#define PROGRESS_LOG_SECONDS 5.0

struct progress {
	int enabled;
	int tty;              /* stderr is a terminal: redraw in place */
	int drawn;
	uint64_t total;       /* 0 = unknown */
	uint64_t done;
	double start;
	double last_draw;
	size_t last_width;
	const char *label;
};

/* -q: no progress and no summaries, whatever else asks for them (errors
 * still go to stderr). */
extern int util_quiet;

/* enabled: draw when stderr is a terminal or force is set (-v), unless
 * util_quiet. */
void progress_init(struct progress *p, const char *label, uint64_t total,
		   int force);
void progress_update(struct progress *p, uint64_t done);
void progress_finish(struct progress *p);

/* A dd_progress_fn (include/dedup.h) over a struct progress passed as ctx:
 * takes the total the library reports and redraws.  Never cancels. */
int progress_lib_cb(void *ctx, uint64_t done, uint64_t total);

/* Where ddsend's and ddrecv's --json[=FILE] summary goes: stderr (path
 * NULL), so that the stream on stdin or stdout stays clean, or FILE
 * (created or truncated; "-" is stdout).  Dies when FILE cannot be
 * opened.  summary_close flushes and closes it (not stderr or stdout),
 * dying on a write error. */
FILE *summary_open(const char *path);
void summary_close(FILE *f, const char *path);

/* The usage of getopt-based commands: one line for an option getopt
 * refused (opterr must be 0), as "unknown option '-x'" or "option '-i'
 * needs an argument", after "SUBCMD: " when subcmd is not NULL (dedup's
 * subcommands); exits EXIT_USAGE. */
_Noreturn void die_bad_option(const char *subcmd, int c, char **argv);

/*
 * Parses a comma-separated list of sizes ("4K,16K,131072") with parse_size
 * into out (at most max entries); *n gets the count.  Returns 0, or -1 with
 * *bad pointing into s at the item that failed (empty items fail; more
 * than max items fail at the first extra one).
 */
int parse_size_list(const char *s, uint64_t *out, size_t max, size_t *n,
		    const char **bad);

/*
 * Parses "none", "zstd" or "zstd:LEVEL" (LEVEL 1..19): *codec gets 0 for
 * none, 1 for zstd (enum dd_compress), *level the level (0 = default).
 * Returns 0; -1 when s is none of the three forms; -2 when it is
 * "zstd:" and digits but the level is not 1..19 (a message can then name
 * the level).  Sets nothing on failure.
 */
int parse_compress_spec(const char *s, int *codec, int *level);

/* The inverse: "none", "zstd:LEVEL" (level 0 is 1) or "unknown(N)". */
char *compress_spec_name(char *buf, size_t len, int codec, int level);

/* True for a store block size: a power of two in [DD_BLOCK_SIZE_MIN,
 * DD_BLOCK_SIZE_MAX]. */
int block_size_valid(uint64_t v);

/* "fixed" or "fastcdc": the enum dd_chunker, or -1 for anything else. */
int parse_chunker(const char *s);
/* The inverse: "fixed", "fastcdc" or "unknown". */
const char *chunker_name(int chunker);
/* True for a size of that chunker: block_size_valid for fixed, a power
 * of two in [DD_FASTCDC_AVG_MIN, DD_FASTCDC_AVG_MAX] for fastcdc. */
int chunker_size_valid(int chunker, uint64_t v);

/* The most specific message for a failed call: the handle's, else the
 * thread's (dd_last_errmsg), else the code's name. */
const char *best_errmsg(const char *handle_msg, int rc);

/* An output file that looks whole only once it is: a regular file (or a
 * path that does not exist yet) is written under a temporary name beside
 * it, ".NAME.ddtmp.PID", renamed over PATH by outfile_commit; a device or
 * a FIFO is written in place (it cannot be renamed).  A failure removes
 * the temporary file and never PATH, which keeps what it held.  One left
 * by a process that was killed is removed by the next outfile_open of
 * the same PATH, once no process of its PID runs. */
struct outfile {
	int fd;
	const char *path;
	char *tmp;          /* NULL: written in place */
	int regular;        /* holes allowed, size set with ftruncate */
};
/* flags: O_WRONLY or O_RDWR.  0, or -1 with errno. */
int outfile_open(struct outfile *of, const char *path, int flags);
/* fsync, close, rename.  0, or -1 with errno (the temporary file gone). */
int outfile_commit(struct outfile *of);
/* Closes and removes the temporary file; safe to call twice. */
void outfile_abort(struct outfile *of);

/* Prints "PROG (libdedup) X.Y.Z" (and the library's version when it
 * differs from the header's) and exits 0. */
_Noreturn void print_tool_version(const char *prog);

#endif /* DD_CMD_UTIL_H */
