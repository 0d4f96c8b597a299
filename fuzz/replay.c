/*
 * replay.c -- main() of the replay programs (fuzz/CMakeLists.txt): runs
 * LLVMFuzzerTestOneInput on every file of the corpus directories (or the
 * files) named on the command line, so that ctest replays each harness's
 * seed corpus, crashing inputs included, in every build.
 *
 * Each input gets DD_FUZZ_INPUT_SECONDS (fuzz/run gives libFuzzer 20 s):
 * an input that runs longer -- a decoder spinning on what a few bytes
 * claim, format/stream.md §3.1 -- fails the replay, naming the file.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DD_FUZZ_INPUT_SECONDS 10

static char replay_current[4096];

static void replay_timeout(int sig)
{
	static const char msg[] = "input ran past its time limit: ";

	(void)sig;
	/* async-signal-safe: write(2) and _exit only */
	(void)!write(2, msg, sizeof(msg) - 1);
	(void)!write(2, replay_current, strlen(replay_current));
	(void)!write(2, "\n", 1);
	_exit(1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 ||
	    !(buf = malloc((size_t)n + 1)) ||
	    fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	snprintf(replay_current, sizeof(replay_current), "%s", path);
	alarm(DD_FUZZ_INPUT_SECONDS);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	alarm(0);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned files = 0;

	signal(SIGALRM, replay_timeout);

	for (int i = 1; i < argc; i++) {
		DIR *dir = opendir(argv[i]);
		struct dirent *e;

		if (!dir) {
			if (replay_file(argv[i]) != 0) {
				fprintf(stderr, "cannot read %s\n", argv[i]);
				return 1;
			}
			files++;
			continue;
		}
		while ((e = readdir(dir)) != NULL) {
			char path[4096];

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i],
				 e->d_name);
			if (replay_file(path) != 0) {
				fprintf(stderr, "cannot read %s\n", path);
				closedir(dir);
				return 1;
			}
			files++;
		}
		closedir(dir);
	}
	printf("replayed %u inputs\n", files);
	return files ? 0 : 1;
}
