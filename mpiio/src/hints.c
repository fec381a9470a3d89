/* Site-wide default hints. ROMIO reads default hints from the file named by $ROMIO_HINTS
 * (lines of "key value"), and sites set it to give every program their striping or
 * collective-buffering defaults. The shim honours the same file for Tessera files: a process
 * reads it once, at its first Tessera open, and every open puts its hints under the ones the
 * program passes to MPI_File_open, which win (as in ROMIO). Later MPI_File_set_info and
 * MPI_File_set_view hints override both.
 *
 * The file: one hint a line, a key and a value separated by blanks; blank lines and lines
 * starting with '#' are skipped. A line that is not a key and a value (a key alone, a third
 * word, a key longer than MPI_MAX_INFO_KEY, a value of TSR_HINT_BYTES_MAX bytes or more, a NUL
 * byte) is skipped and reported; a later line for the same key wins. A file larger than
 * TSR_SITE_HINTS_FILE_BYTES_MAX, or one that cannot be read, gives no hints, and only the
 * first TSR_SITE_HINTS_MAX hints are taken. Problems go to stderr from the process of rank 0
 * in MPI_COMM_WORLD (from every process with $TESSERA_MPIIO_VERBOSE): the open itself goes
 * on, as it would without the file. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

struct tsr_site_hint {
    char key[MPI_MAX_INFO_KEY + 1];
    char value[TSR_HINT_BYTES_MAX];
};

static struct tsr_site_hint tsr_site[TSR_SITE_HINTS_MAX];
static int tsr_site_count;
static pthread_once_t tsr_site_once = PTHREAD_ONCE_INIT;

static void tsr_site_problem(const char *format, ...) __attribute__((format(printf, 1, 2)));

static void tsr_site_problem(const char *format, ...) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && !getenv("TESSERA_MPIIO_VERBOSE"))
        return;
    va_list args;
    va_start(args, format);
    fprintf(stderr, "tessera: ROMIO_HINTS ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
}

static int tsr_blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* One line, [start, end) without its newline. */
static void tsr_site_line(const char *name, int number, const char *start, const char *end) {
    if (memchr(start, '\0', (size_t)(end - start)) != NULL) {
        tsr_site_problem("%s line %d: a NUL byte: skipped", name, number);
        return;
    }
    const char *p = start;
    while (p < end && tsr_blank(*p))
        p++;
    if (p == end || *p == '#')
        return;
    const char *key = p;
    while (p < end && !tsr_blank(*p))
        p++;
    size_t key_bytes = (size_t)(p - key);
    while (p < end && tsr_blank(*p))
        p++;
    const char *value = p;
    while (p < end && !tsr_blank(*p))
        p++;
    size_t value_bytes = (size_t)(p - value);
    while (p < end && tsr_blank(*p))
        p++;
    if (value_bytes == 0) {
        tsr_site_problem("%s line %d: key %.*s has no value: skipped", name, number,
                         (int)key_bytes, key);
        return;
    }
    if (p != end) {
        tsr_site_problem("%s line %d: more than a key and a value: skipped", name, number);
        return;
    }
    if (key_bytes > MPI_MAX_INFO_KEY) {
        tsr_site_problem("%s line %d: a key of %zu bytes, longer than MPI_MAX_INFO_KEY (%d): "
                         "skipped", name, number, key_bytes, MPI_MAX_INFO_KEY);
        return;
    }
    if (value_bytes >= TSR_HINT_BYTES_MAX) {
        tsr_site_problem("%s line %d: a value of %zu bytes, the limit is %d "
                         "(TSR_HINT_BYTES_MAX): skipped", name, number, value_bytes,
                         TSR_HINT_BYTES_MAX - 1);
        return;
    }
    struct tsr_site_hint *slot = NULL;
    for (int i = 0; i < tsr_site_count && slot == NULL; i++)
        if (strlen(tsr_site[i].key) == key_bytes && memcmp(tsr_site[i].key, key, key_bytes) == 0)
            slot = &tsr_site[i]; /* a later line for the same key wins */
    if (slot == NULL) {
        if (tsr_site_count == TSR_SITE_HINTS_MAX) {
            tsr_site_problem("%s line %d: more than %d hints (TSR_SITE_HINTS_MAX): skipped",
                             name, number, TSR_SITE_HINTS_MAX);
            return;
        }
        slot = &tsr_site[tsr_site_count++];
        memcpy(slot->key, key, key_bytes);
        slot->key[key_bytes] = '\0';
    }
    memcpy(slot->value, value, value_bytes);
    slot->value[value_bytes] = '\0';
}

/* Reads $ROMIO_HINTS into tsr_site (once per process). */
static void tsr_site_load(void) {
    const char *name = getenv("ROMIO_HINTS");
    if (name == NULL || name[0] == '\0')
        return;
    FILE *file = fopen(name, "rb");
    if (file == NULL) {
        tsr_site_problem("%s cannot be read (%s): no site hints", name, strerror(errno));
        return;
    }
    char *text = malloc(TSR_SITE_HINTS_FILE_BYTES_MAX + 1);
    if (text == NULL) {
        fclose(file);
        tsr_site_problem("%s: no memory to read it: no site hints", name);
        return;
    }
    size_t bytes = fread(text, 1, TSR_SITE_HINTS_FILE_BYTES_MAX + 1, file);
    int failed = ferror(file);
    fclose(file);
    if (failed)
        tsr_site_problem("%s cannot be read: no site hints", name);
    else if (bytes > TSR_SITE_HINTS_FILE_BYTES_MAX)
        tsr_site_problem("%s is larger than %d bytes (TSR_SITE_HINTS_FILE_BYTES_MAX): no site "
                         "hints", name, TSR_SITE_HINTS_FILE_BYTES_MAX);
    else {
        const char *start = text, *end = text + bytes;
        for (int number = 1; start < end; number++) {
            const char *newline = memchr(start, '\n', (size_t)(end - start));
            const char *stop = newline ? newline : end;
            tsr_site_line(name, number, start, stop);
            start = newline ? newline + 1 : end;
        }
    }
    free(text);
}

/* `*merged` (the caller frees it): the program's hints `given`, and under them every site
 * hint whose key the program did not set. */
int tsr_site_hints(MPI_Info given, MPI_Info *merged) {
    pthread_once(&tsr_site_once, tsr_site_load);
    int rc = given == MPI_INFO_NULL ? PMPI_Info_create(merged) : PMPI_Info_dup(given, merged);
    if (rc != MPI_SUCCESS) {
        *merged = MPI_INFO_NULL;
        return tsr_error(MPI_ERR_NO_MEM, "tessera: open: cannot copy the hints: the site's "
                                         "hints ($ROMIO_HINTS) are not applied");
    }
    for (int i = 0; i < tsr_site_count; i++) {
        int length = 0, flag = 0;
        PMPI_Info_get_valuelen(*merged, tsr_site[i].key, &length, &flag);
        if (!flag)
            PMPI_Info_set(*merged, tsr_site[i].key, tsr_site[i].value);
    }
    return MPI_SUCCESS;
}
