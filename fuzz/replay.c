/*
 * replay.c -- main() of the replay programs (fuzz/CMakeLists.txt): runs
 * LLVMFuzzerTestOneInput on every file of the corpus directories (or the
 * files) named on the command line, so that ctest replays each harness's
 * seed corpus, crashing inputs included, in every build.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned files = 0;

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
