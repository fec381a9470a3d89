/* Helpers shared by the MPI-IO test programs: checks that abort the job with a message, and
 * the file names each run uses. The programs know nothing of Tessera beyond the file names
 * they are given: $TSR_TEST_PREFIX (a Tessera name, e.g. "tessera:/mpich") and
 * $TSR_ORACLE_DIR (a local directory served by the MPI's own MPI-IO, used as the reference
 * the Tessera files must equal byte for byte). */
#ifndef TSR_TEST_COMMON_H
#define TSR_TEST_COMMON_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_rank(void) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

#define CHECK(condition, ...)                                                              \
    do {                                                                                   \
        if (!(condition)) {                                                                \
            fprintf(stderr, "rank %d: %s:%d: failed: %s: ", test_rank(), __FILE__,          \
                    __LINE__, #condition);                                                 \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

/* The shim's latest message (docs/MPIIO.md, Errors), when the shim is loaded: MPICH's
 * MPI_Error_string gives only the class's text, which does not say what failed. */
extern const char *tessera_mpiio_last_error(void) __attribute__((weak));

static const char *error_text(int code) {
    static char text[MPI_MAX_ERROR_STRING + 1024];
    int length = 0;
    MPI_Error_string(code, text, &length);
    if (tessera_mpiio_last_error != NULL && code != MPI_SUCCESS) {
        const char *last = tessera_mpiio_last_error();
        if (last != NULL && last[0] != '\0' && strstr(text, last) == NULL)
            snprintf(text + strlen(text), sizeof text - strlen(text), " (the shim's latest "
                     "message: %s)", last);
    }
    return text;
}

#define CHECK_MPI(call)                                                                    \
    do {                                                                                   \
        int code_ = (call);                                                                \
        CHECK(code_ == MPI_SUCCESS, "%s returned %d: %s", #call, code_, error_text(code_)); \
    } while (0)

static inline int error_class_of(int code) {
    int error_class = -1;
    MPI_Error_class(code, &error_class);
    return error_class;
}

#define CHECK_CLASS(call, expected)                                                        \
    do {                                                                                   \
        int code_ = (call);                                                                \
        CHECK(error_class_of(code_) == (expected), "%s gave class %d (%s), expected %s",   \
              #call, error_class_of(code_), error_text(code_), #expected);                 \
    } while (0)

/* A Tessera name and a reference (oracle) name for `name`. */
static inline void test_names(const char *name, char *tessera, char *oracle, size_t bytes) {
    const char *prefix = getenv("TSR_TEST_PREFIX");
    const char *dir = getenv("TSR_ORACLE_DIR");
    CHECK(prefix && dir, "set TSR_TEST_PREFIX and TSR_ORACLE_DIR");
    snprintf(tessera, bytes, "%s-%s", prefix, name);
    if (oracle)
        snprintf(oracle, bytes, "%s/%s", dir, name);
}

/* Reads the whole of a file (contiguous, default view) on one process. */
static inline unsigned char *read_whole(const char *name, MPI_Offset *size) {
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_get_size(fh, size));
    unsigned char *bytes = calloc((size_t)*size + 1, 1);
    MPI_Status status;
    CHECK_MPI(MPI_File_read_at(fh, 0, bytes, (int)*size, MPI_BYTE, &status));
    CHECK_MPI(MPI_File_close(&fh));
    return bytes;
}

/* Process 0 checks a Tessera file against the reference: the ints at the `written` file
 * positions (int indices, gathered from every process) must be equal, and every other int of
 * the Tessera file must be 0 (never written). Bytes no process wrote are not compared with
 * the reference: a reference MPI-IO that sieves writes may store whatever its buffer held
 * there (ROMIO does, past the end of the file). */
static inline void check_same_files(const char *tessera, const char *oracle, const long long *written,
                             int written_count) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        MPI_Offset tessera_size = 0, oracle_size = 0;
        unsigned char *a = read_whole(tessera, &tessera_size);
        unsigned char *b = read_whole(oracle, &oracle_size);
        long long ints = tessera_size / (MPI_Offset)sizeof(int);
        char *mask = calloc((size_t)ints + 1, 1);
        for (int k = 0; k < written_count; k++) {
            CHECK(written[k] >= 0 && written[k] < ints, "%s: int %lld was written but the file "
                  "has %lld ints", tessera, written[k], ints);
            CHECK(written[k] < oracle_size / (MPI_Offset)sizeof(int),
                  "%s: int %lld was written but lies past the end of the reference", oracle,
                  written[k]);
            mask[written[k]] = 1;
        }
        for (long long i = 0; i < ints; i++) {
            int x, y;
            memcpy(&x, a + i * sizeof(int), sizeof x);
            if (!mask[i]) {
                CHECK(x == 0, "%s int %lld is %d, but no process wrote it", tessera, i, x);
                continue;
            }
            memcpy(&y, b + i * sizeof(int), sizeof y);
            CHECK(x == y, "%s int %lld is %d, the reference has %d", tessera, i, x, y);
        }
        free(mask);
        free(a);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

#define PASS(...)                                                                          \
    do {                                                                                   \
        MPI_Barrier(MPI_COMM_WORLD);                                                       \
        if (test_rank() == 0) {                                                            \
            printf("ok ");                                                                 \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            fflush(stdout);                                                                \
        }                                                                                  \
    } while (0)

#endif
