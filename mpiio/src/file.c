/* Opening, closing and deleting Tessera files, and the per-file state MPI-IO keeps: size,
 * hints, the view, the individual and shared file pointers, sync and atomicity.
 *
 * Open is collective: process 0 creates or looks up the file (so an exclusive create has one
 * winner and every process sees the same outcome), broadcasts the result and a random id for
 * the shared file pointer, then every other process opens it; the processes agree that all
 * opens worked before any returns a handle. Each process then opens /dev/null on
 * MPI_COMM_SELF through PMPI to get the handle it gives the program (see shim.h). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

#define TSR_ALL_MODES                                                                      \
    (MPI_MODE_RDONLY | MPI_MODE_RDWR | MPI_MODE_WRONLY | MPI_MODE_CREATE | MPI_MODE_EXCL |  \
     MPI_MODE_DELETE_ON_CLOSE | MPI_MODE_UNIQUE_OPEN | MPI_MODE_SEQUENTIAL | MPI_MODE_APPEND)

static int tsr_check_amode(int amode, const char *filename) {
    int access = (amode & MPI_MODE_RDONLY ? 1 : 0) + (amode & MPI_MODE_RDWR ? 1 : 0) +
                 (amode & MPI_MODE_WRONLY ? 1 : 0);
    const char *problem = NULL;
    if (amode & ~TSR_ALL_MODES)
        problem = "unknown mode bits";
    else if (access != 1)
        problem = "exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR, MPI_MODE_WRONLY is required";
    else if ((amode & MPI_MODE_RDONLY) && (amode & (MPI_MODE_CREATE | MPI_MODE_EXCL)))
        problem = "MPI_MODE_RDONLY cannot be combined with MPI_MODE_CREATE or MPI_MODE_EXCL";
    else if ((amode & MPI_MODE_RDWR) && (amode & MPI_MODE_SEQUENTIAL))
        problem = "MPI_MODE_RDWR cannot be combined with MPI_MODE_SEQUENTIAL";
    if (problem == NULL)
        return MPI_SUCCESS;
    return tsr_error(MPI_ERR_AMODE, "tessera: open %s: mode %#x: %s", filename, amode, problem);
}

/* What process 0 tells the others after its create or lookup. */
struct tsr_open_outcome {
    int tessera_code;
    int error_class;
    int rights; /* the TESSERA_MODE_* process 0 opened with: the others open with the same */
    uint64_t id;
    uint64_t size;
    /* The write group of this open's processes (non-zero): with the client cache's
     * write-back, their write leases on the file do not conflict (MPI orders their writes). */
    uint64_t write_group;
    char message[TSR_MESSAGE_BYTES_MAX];
};

static void tsr_free_file(struct tsr_file *f) {
    if (f->file)
        tessera_close(f->file);
    if (f->shared)
        tessera_shared_pointer_free(f->shared);
    if (f->hints != MPI_INFO_NULL)
        PMPI_Info_free(&f->hints);
    if (f->comm != MPI_COMM_NULL)
        PMPI_Comm_free(&f->comm);
    free(f);
}

/* Forgets the view's types (our references to them). */
static void tsr_drop_view_types(struct tsr_file *f) {
    int integers, addresses, datatypes, combiner;
    MPI_Datatype *types[2] = {&f->etype, &f->filetype};
    for (int i = 0; i < 2; i++) {
        if (*types[i] == MPI_DATATYPE_NULL)
            continue;
        PMPI_Type_get_envelope(*types[i], &integers, &addresses, &datatypes, &combiner);
        if (combiner != MPI_COMBINER_NAMED)
            PMPI_Type_free(types[i]);
        *types[i] = MPI_DATATYPE_NULL;
    }
    tessera_type_free(f->owned_etree);
    tessera_type_free(f->owned_ftree);
    f->owned_etree = f->owned_ftree = NULL;
    free(f->staging);
    f->staging = NULL;
    f->staging_bytes = 0;
}

/* Agrees on the outcome of a collective call whose processes may each fail on their own
 * arguments. Every process calls it with its own result, whatever happened, so no process
 * skips a collective call that another makes. Returns `rc` on a process that failed itself;
 * on the others, an error of the class of the lowest failing process, naming it; if none
 * failed, an MPI_ERR_ARG where one of the `n` values MPI asks to be equal on every process
 * (`names[i]`) differs, else MPI_SUCCESS. */
#define TSR_AGREE_VALUES_MAX 4
static int tsr_agree(struct tsr_file *f, int rc, const char *what, int n,
                     const long long *values, const char *const *names) {
    long long mine[1 + 2 * TSR_AGREE_VALUES_MAX], all[1 + 2 * TSR_AGREE_VALUES_MAX];
    mine[0] = rc != MPI_SUCCESS ? f->rank : f->size;
    for (int i = 0; i < n; i++) {
        /* The minimum of v and of -v: the lowest and the highest value in one reduction. */
        mine[1 + 2 * i] = rc == MPI_SUCCESS ? values[i] : LLONG_MAX;
        mine[2 + 2 * i] = rc == MPI_SUCCESS ? -values[i] : LLONG_MAX;
    }
    MPI_Request request;
    int reduced = tsr_wait(PMPI_Iallreduce(mine, all, 1 + 2 * n, MPI_LONG_LONG, MPI_MIN,
                                           f->comm, &request), &request);
    if (reduced != MPI_SUCCESS)
        return rc != MPI_SUCCESS ? rc : reduced;
    if (all[0] < f->size) {
        struct {
            int error_class;
            char message[TSR_MESSAGE_BYTES_MAX];
        } outcome;
        memset(&outcome, 0, sizeof outcome);
        if (f->rank == all[0]) {
            PMPI_Error_class(rc, &outcome.error_class);
            snprintf(outcome.message, sizeof outcome.message, "%s", tessera_mpiio_last_error());
        }
        PMPI_Bcast(&outcome, sizeof outcome, MPI_BYTE, (int)all[0], f->comm);
        if (rc != MPI_SUCCESS)
            return rc;
        return tsr_error(outcome.error_class, "tessera: %s %s failed on process %lld: %s", what,
                         f->path, all[0], outcome.message);
    }
    for (int i = 0; i < n; i++)
        if (all[1 + 2 * i] != -all[2 + 2 * i])
            return tsr_error(MPI_ERR_ARG, "tessera: %s %s: the processes gave different %s "
                             "(%lld to %lld); MPI asks for the same on every process", what,
                             f->path, names[i], all[1 + 2 * i], -all[2 + 2 * i]);
    return MPI_SUCCESS;
}

static int tsr_hint_u64(MPI_Info info, const char *key, uint64_t *value) {
    char text[TSR_HINT_BYTES_MAX];
    if (!tsr_hint(info, key, text, sizeof text))
        return 0;
    char *end = NULL;
    unsigned long long parsed = strtoull(text, &end, 10);
    if (end == text || *end != '\0')
        return 0;
    *value = parsed;
    return 1;
}

/* ROMIO's switches, as get_info reports them: "automatic" until set. */
static const char *const tsr_romio_switches[] = {"romio_cb_read", "romio_cb_write",
                                                 "romio_ds_read", "romio_ds_write"};

/* Whether a hint's value is one ROMIO takes: for ROMIO's switches enable, disable or
 * automatic, for romio_no_indep_rw true or false, each in lower or upper case (kept and
 * reported as given, as ROMIO does); any value of any other key. */
static int tsr_romio_value_ok(const char *key, const char *value) {
    static const char *const switch_values[] = {"enable",  "disable", "automatic", "ENABLE",
                                                "DISABLE", "AUTOMATIC", NULL};
    static const char *const flag_values[] = {"true", "false", "TRUE", "FALSE", NULL};
    const char *const *allowed = NULL;
    for (size_t i = 0; i < sizeof tsr_romio_switches / sizeof tsr_romio_switches[0]; i++)
        if (strcmp(key, tsr_romio_switches[i]) == 0)
            allowed = switch_values;
    if (strcmp(key, "romio_no_indep_rw") == 0)
        allowed = flag_values;
    if (allowed == NULL)
        return 1;
    for (int i = 0; allowed[i] != NULL; i++)
        if (strcmp(value, allowed[i]) == 0)
            return 1;
    return 0;
}

int tsr_apply_hints(struct tsr_file *f, MPI_Info info) {
    if (info == MPI_INFO_NULL)
        return MPI_SUCCESS;
    int keys = 0;
    PMPI_Info_get_nkeys(info, &keys);
    for (int i = 0; i < keys; i++) {
        char key[MPI_MAX_INFO_KEY + 1], value[TSR_HINT_BYTES_MAX];
        PMPI_Info_get_nthkey(info, i, key);
        if (!tsr_hint(info, key, value, sizeof value))
            continue;
        if (tsr_romio_value_ok(key, value))
            PMPI_Info_set(f->hints, key, value);
        else if (strcmp(key, "romio_no_indep_rw") == 0)
            tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint %s=%s ignored: not true or false", key,
                      value); /* the switches are reported below */
    }
    char value[TSR_HINT_BYTES_MAX];
    /* Hints that cannot be honoured are ignored, as MPI asks; $TESSERA_MPIIO_VERBOSE says so. */
    if (tsr_hint(info, "tessera_method", value, sizeof value) &&
        tessera_file_set_method(f->file, value) != TESSERA_OK)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_method=%s ignored: %s", value,
                  tessera_last_error());
    if (tsr_hint(info, "tessera_transfer", value, sizeof value) &&
        tessera_file_set_transfer_mode(f->file, value) != TESSERA_OK)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_transfer=%s ignored: %s", value,
                  tessera_last_error());
    if (tsr_hint(info, "tessera_storage", value, sizeof value) &&
        tessera_file_set_storage_plan(f->file, value) != TESSERA_OK)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_storage=%s ignored: %s", value,
                  tessera_last_error());
    if (tsr_hint(info, "tessera_coll", value, sizeof value)) {
        TesseraCollectiveOptions options = {value, 0, 0, 0, 0};
        if (strlen(value) < sizeof f->coll_method &&
            tessera_collective_options_check(&options) == TESSERA_OK)
            snprintf(f->coll_method, sizeof f->coll_method, "%s", value);
        else
            tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_coll=%s ignored: %s", value,
                      tessera_last_error());
    }
    uint64_t number = 0;
    if (tsr_hint_u64(info, "cb_buffer_size", &number) && number > 0)
        f->cb_buffer_size = number;
    if (tsr_hint_u64(info, "cb_nodes", &number) && number > 0 && number <= (uint64_t)f->size)
        f->cb_nodes = (uint32_t)number;
    /* ROMIO's switches: "disable" turns the feature off, "enable" and "automatic" on; for
     * collective buffering "automatic" lets accesses that do not interleave go alone. */
    int unused = 0;
    struct {
        const char *key;
        int *disabled, *enabled;
    } switches[] = {{"romio_cb_read", &f->cb_read_disabled, &f->cb_read_enabled},
                    {"romio_cb_write", &f->cb_write_disabled, &f->cb_write_enabled},
                    {"romio_ds_read", &f->ds_read_disabled, &unused},
                    {"romio_ds_write", &f->ds_write_disabled, &unused}};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) {
        if (!tsr_hint(info, switches[i].key, value, sizeof value))
            continue;
        if (tsr_romio_value_ok(switches[i].key, value)) {
            *switches[i].disabled = strcasecmp(value, "disable") == 0;
            *switches[i].enabled = strcasecmp(value, "enable") == 0;
        } else
            tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint %s=%s ignored: not enable, disable or "
                      "automatic", switches[i].key, value);
    }
    uint64_t read_bytes = 0, write_bytes = 0;
    tsr_hint_u64(info, "ind_rd_buffer_size", &read_bytes);
    tsr_hint_u64(info, "ind_wr_buffer_size", &write_bytes);
    if ((read_bytes || write_bytes) &&
        tessera_file_set_sieve_buffers(f->file, read_bytes, write_bytes) != TESSERA_OK)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: sieve buffer hints ignored: %s",
                  tessera_last_error());
    return MPI_SUCCESS;
}

/* Opens the existing file `path` on process 0 with the rights `amode` needs: read for
 * MPI_MODE_RDONLY, read and write otherwise, since the sieve method reads what it writes
 * around. A write-only open that may not read falls back to write rights alone (the file then
 * never uses the sieve method for writes; see tsr_transfer), so that a program is refused
 * only what its own mode asks for. `*rights` is the TESSERA_MODE_* the file was opened with
 * (the other processes open with the same). */
static int tsr_open_rights(TesseraClient *client, const char *path, int amode, int *rights,
                           TesseraFile **out) {
    *rights = (amode & MPI_MODE_RDONLY) ? TESSERA_MODE_READ_ONLY : TESSERA_MODE_READ_WRITE;
    int code = tessera_open(client, path, *rights, out);
    if (code == TESSERA_ERR_PERMISSION_DENIED && (amode & MPI_MODE_WRONLY)) {
        *rights = TESSERA_MODE_WRITE_ONLY;
        code = tessera_open(client, path, *rights, out);
    }
    return code;
}

static int tsr_open(MPI_Comm comm, const char *filename, const char *path, int amode,
                    MPI_Info info, MPI_File *fh) {
    *fh = MPI_FILE_NULL;
    int rc = tsr_check_amode(amode, filename);
    TesseraClient *client = rc == MPI_SUCCESS ? tsr_client_with(info, &rc) : NULL;
    /* The open's collective calls below are made only if every process can make them: a
     * process that cannot reach the cluster would otherwise leave the others waiting. */
    int failed_here = client == NULL, failed_anywhere = 0;
    PMPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, comm);
    if (failed_here)
        return tsr_raise_default(rc);
    if (failed_anywhere)
        return tsr_raise_default(tsr_error(MPI_ERR_IO, "tessera: open %s failed on another "
                                           "process (mode or cluster)", filename));
    struct tsr_file *f = calloc(1, sizeof *f);
    if (f == NULL)
        return tsr_raise_default(tsr_error(MPI_ERR_NO_MEM, "tessera: open %s: no memory", path));
    f->comm = MPI_COMM_NULL;
    f->hints = MPI_INFO_NULL;
    f->etype = MPI_BYTE;
    f->filetype = MPI_BYTE;
    f->etype_bytes = 1;
    f->amode = amode;
    snprintf(f->path, sizeof f->path, "%s", path);
    PMPI_Comm_dup(comm, &f->comm);
    PMPI_Comm_rank(f->comm, &f->rank);
    PMPI_Comm_size(f->comm, &f->size);
    PMPI_Info_create(&f->hints);

    struct tsr_open_outcome outcome;
    memset(&outcome, 0, sizeof outcome);
    if (f->rank == 0) {
        int code;
        if (amode & MPI_MODE_CREATE) {
            TesseraCreateOptions options;
            tessera_create_options_init(&options);
            options.exclusive = (amode & MPI_MODE_EXCL) != 0;
            uint64_t value;
            if (tsr_hint_u64(info, "striping_unit", &value) && value > 0)
                options.stripe_unit_bytes = value;
            if (tsr_hint_u64(info, "striping_factor", &value) && value > 0 && value < 65536)
                options.server_count = (uint32_t)value;
            /* The unit of the iods' unified caches for the file (limits::CACHE_UNIT_BYTES_*);
             * a bad value is ignored, as MPI asks of hints, and said so. */
            if (tsr_hint_u64(info, "tessera_cache_unit", &value)) {
                if (value >= 4096 && value <= 65536 && (value & (value - 1)) == 0)
                    options.cache_unit_bytes = (uint32_t)value;
                else
                    tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_cache_unit=%llu ignored: "
                              "not a power of two from 4096 to 65536 bytes",
                              (unsigned long long)value);
            }
            code = tessera_create(client, path, &options, &f->file);
            outcome.rights = TESSERA_MODE_READ_WRITE; /* a create opens read-write */
        } else {
            code = tsr_open_rights(client, path, amode, &outcome.rights, &f->file);
        }
        TesseraStat stat;
        if (code == TESSERA_OK && (code = tessera_file_stat(f->file, &stat)) == TESSERA_OK) {
            outcome.size = stat.size;
            outcome.id = stat.handle;
        }
        outcome.tessera_code = code;
        if (code != TESSERA_OK) {
            int error = tsr_tessera_error(code, "open", path);
            PMPI_Error_class(error, &outcome.error_class);
            snprintf(outcome.message, sizeof outcome.message, "%s", tessera_mpiio_last_error());
        }
        /* Leftovers: side files of this file's earlier opens that no live process holds
         * (their processes died before close). Housekeeping: a failure does not fail the
         * open. */
        if (code == TESSERA_OK) {
            char prefix[24];
            uint64_t removed = 0;
            snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)outcome.id);
            if (tessera_shared_pointer_sweep(client, prefix, &removed) != TESSERA_OK &&
                getenv("TESSERA_MPIIO_VERBOSE"))
                fprintf(stderr, "tessera: open %s: shared pointer leftovers not swept: %s\n",
                        path, tessera_last_error());
            else if (removed > 0 && getenv("TESSERA_MPIIO_VERBOSE"))
                fprintf(stderr, "tessera: open %s: removed %llu shared pointer leftovers\n",
                        path, (unsigned long long)removed);
        }
        /* The shared pointer's name: the handle and a random id of this open. */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        uint64_t id = ((uint64_t)now.tv_nsec << 20) ^ (uint64_t)now.tv_sec ^
                      ((uint64_t)getpid() << 40) ^ (uint64_t)rand();
        snprintf(f->shared_name, sizeof f->shared_name, "%016llx-%016llx",
                 (unsigned long long)outcome.id, (unsigned long long)id);
        outcome.write_group = id | 1;
    }
    PMPI_Bcast(&outcome, sizeof outcome, MPI_BYTE, 0, f->comm);
    PMPI_Bcast(f->shared_name, sizeof f->shared_name, MPI_CHAR, 0, f->comm);
    int failed = 0;
    if (outcome.tessera_code != TESSERA_OK) {
        rc = tsr_error(outcome.error_class, "%s", outcome.message);
        failed = 1;
    } else if (f->rank != 0) {
        int code = tessera_open(client, path, outcome.rights, &f->file);
        if (code != TESSERA_OK) {
            rc = tsr_tessera_error(code, "open", path);
            failed = 1;
        }
    }
    int any_failed = failed;
    PMPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, f->comm);
    if (any_failed && !failed)
        rc = tsr_error(MPI_ERR_IO, "tessera: open %s failed on another process", path);
    if (!any_failed) {
        f->write_only_rights = outcome.rights == TESSERA_MODE_WRITE_ONLY;
        f->handle_id = outcome.id;
        f->shared_base = (amode & MPI_MODE_APPEND) ? (MPI_Offset)outcome.size : 0;
        f->pointer = (amode & MPI_MODE_APPEND) ? (MPI_Offset)outcome.size : 0;
        TesseraStat stat;
        if (tessera_file_stat(f->file, &stat) == TESSERA_OK) {
            f->stripe_unit_bytes = stat.stripe_unit_bytes;
            f->server_count = stat.server_count;
        }
        tsr_apply_hints(f, info);
        /* Without write-back this changes nothing; a failure only keeps this process's
         * writes out of the group (they then revoke the others' leases). */
        if (tessera_file_set_write_group(f->file, outcome.write_group) != TESSERA_OK &&
            getenv("TESSERA_MPIIO_VERBOSE"))
            fprintf(stderr, "tessera: open %s: no write group: %s\n", path, tessera_last_error());
        if (TSR_NEXT(File_open, MPI_COMM_SELF, "/dev/null", MPI_MODE_RDWR, MPI_INFO_NULL,
                     &f->handle) != MPI_SUCCESS)
            rc = tsr_error(MPI_ERR_IO, "tessera: open %s: cannot open /dev/null for the handle",
                           path);
        else if ((rc = tsr_register(f)) != MPI_SUCCESS)
            TSR_NEXT(File_close, &f->handle);
    }
    if (any_failed || rc != MPI_SUCCESS) {
        tsr_free_file(f);
        *fh = MPI_FILE_NULL;
        return tsr_raise_default(rc);
    }
    *fh = f->handle;
    return MPI_SUCCESS;
}

int PMPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info,
                   MPI_File *fh) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route(filename, path, sizeof path))
        return TSR_NEXT(File_open, comm, filename, amode, info, fh);
    /* The site's default hints ($ROMIO_HINTS) under the program's own. Should they not merge
     * on some process, it opens with the program's alone rather than leave the collective
     * open the others make. */
    MPI_Info hints = MPI_INFO_NULL;
    int merged = tsr_site_hints(info, &hints) == MPI_SUCCESS;
    int rc = tsr_open(comm, filename, path, amode, merged ? hints : info, fh);
    if (merged)
        PMPI_Info_free(&hints);
    return rc;
}

int PMPI_File_close(MPI_File *fh) {
    struct tsr_file *f = fh ? tsr_lookup(*fh) : NULL;
    if (f == NULL)
        return TSR_NEXT(File_close, fh);
    int rc = MPI_SUCCESS;
    int code = tessera_close(f->file);
    f->file = NULL;
    if (code != TESSERA_OK)
        rc = tsr_tessera_error(code, "close", f->path);
    /* Everyone has closed; whoever used the shared pointer says so, and process 0 removes
     * its side file and, for MPI_MODE_DELETE_ON_CLOSE, the file. */
    int used = f->shared != NULL, any_used = 0;
    /* This process's hold on the side file ends first (tessera_shared_pointer_free). */
    tessera_shared_pointer_free(f->shared);
    f->shared = NULL;
    PMPI_Allreduce(&used, &any_used, 1, MPI_INT, MPI_MAX, f->comm);
    if (f->rank == 0) {
        TesseraClient *client = tsr_client(&rc);
        if (client && any_used)
            tessera_shared_pointer_remove(client, f->shared_name);
        if (client && (f->amode & MPI_MODE_DELETE_ON_CLOSE)) {
            code = tessera_delete(client, f->path);
            if (code != TESSERA_OK && rc == MPI_SUCCESS)
                rc = tsr_tessera_error(code, "delete on close", f->path);
        }
    }
    tsr_drop_view_types(f);
    if (rc != MPI_SUCCESS)
        tsr_raise(f, rc);
    tsr_unregister(f);
    TSR_NEXT(File_close, &f->handle);
    tsr_free_file(f);
    *fh = MPI_FILE_NULL;
    return rc;
}

int PMPI_File_delete(const char *filename, MPI_Info info) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route(filename, path, sizeof path))
        return TSR_NEXT(File_delete, filename, info);
    int rc = MPI_SUCCESS;
    TesseraClient *client = tsr_client(&rc);
    if (client == NULL)
        return tsr_raise_default(rc);
    int code = tessera_delete(client, path);
    if (code != TESSERA_OK)
        return tsr_raise_default(tsr_tessera_error(code, "delete", path));
    return MPI_SUCCESS;
}

/* Runs `code` of process 0 and gives every process its outcome (collective calls whose work
 * is done once). */
static int tsr_on_root(struct tsr_file *f, int tessera_code, const char *what) {
    struct {
        int code;
        char message[TSR_MESSAGE_BYTES_MAX];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    outcome.code = tessera_code;
    if (f->rank == 0 && tessera_code != TESSERA_OK)
        snprintf(outcome.message, sizeof outcome.message, "%s", tessera_last_error());
    PMPI_Bcast(&outcome, sizeof outcome, MPI_BYTE, 0, f->comm);
    if (outcome.code == TESSERA_OK)
        return MPI_SUCCESS;
    int error_class = MPI_ERR_IO;
    PMPI_Error_class(tsr_tessera_error(outcome.code, what, f->path), &error_class);
    return tsr_raise(f, tsr_error(error_class, "tessera: %s %s: %s", what, f->path,
                                  outcome.message));
}

/* The checks of set_size and preallocate (`op`), agreed by every process: the size must be
 * non-negative, the file writable, and the size the same everywhere. */
static int tsr_agree_size(struct tsr_file *f, MPI_Offset size, const char *op) {
    int rc = MPI_SUCCESS;
    if (size < 0)
        rc = tsr_error(MPI_ERR_ARG, "tessera: %s %s: negative size %lld", op, f->path,
                       (long long)size);
    else if (f->amode & MPI_MODE_RDONLY)
        rc = tsr_error(MPI_ERR_READ_ONLY, "tessera: %s %s: read-only", op, f->path);
    long long sizes[1] = {size};
    const char *names[1] = {"sizes"};
    return tsr_agree(f, rc, op, 1, sizes, names);
}

int PMPI_File_set_size(MPI_File fh, MPI_Offset size) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_set_size, fh, size);
    /* Also the barrier: every write acknowledged before it is in before the truncation. */
    int rc = tsr_agree_size(f, size, "set_size");
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    int code = f->rank == 0 ? tessera_file_set_size(f->file, (uint64_t)size) : TESSERA_OK;
    return tsr_on_root(f, code, "set_size");
}

int PMPI_File_preallocate(MPI_File fh, MPI_Offset size) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_preallocate, fh, size);
    int rc = tsr_agree_size(f, size, "preallocate");
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    int code = TESSERA_OK;
    if (f->rank == 0) {
        /* Tessera allocates on write; preallocating only grows the size. */
        TesseraStat stat;
        code = tessera_file_stat(f->file, &stat);
        if (code == TESSERA_OK && stat.size < (uint64_t)size)
            code = tessera_file_set_size(f->file, (uint64_t)size);
    }
    return tsr_on_root(f, code, "preallocate");
}

int PMPI_File_get_size(MPI_File fh, MPI_Offset *size) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_size, fh, size);
    TesseraStat stat;
    int code = tessera_file_stat(f->file, &stat);
    if (code != TESSERA_OK)
        return tsr_raise(f, tsr_tessera_error(code, "get_size", f->path));
    *size = (MPI_Offset)stat.size;
    return MPI_SUCCESS;
}

int PMPI_File_get_group(MPI_File fh, MPI_Group *group) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_group, fh, group);
    return PMPI_Comm_group(f->comm, group);
}

int PMPI_File_get_amode(MPI_File fh, int *amode) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_amode, fh, amode);
    *amode = f->amode;
    return MPI_SUCCESS;
}

int PMPI_File_set_info(MPI_File fh, MPI_Info info) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_set_info, fh, info);
    return tsr_apply_hints(f, info);
}

int PMPI_File_get_info(MPI_File fh, MPI_Info *info) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_info, fh, info);
    PMPI_Info_dup(f->hints, info);
    const char *method = "auto";
    tessera_file_method(f->file, 0, &method);
    PMPI_Info_set(*info, "tessera_method", (char *)method);
    char value[32];
    if (f->stripe_unit_bytes) {
        snprintf(value, sizeof value, "%llu", (unsigned long long)f->stripe_unit_bytes);
        PMPI_Info_set(*info, "striping_unit", value);
    }
    snprintf(value, sizeof value, "%u", f->server_count);
    PMPI_Info_set(*info, "striping_factor", value);
    /* Collective I/O as it is in effect. */
    PMPI_Info_set(*info, "tessera_coll",
                  f->coll_method[0] ? f->coll_method : (char *)"server_directed");
    snprintf(value, sizeof value, "%llu",
             (unsigned long long)(f->cb_buffer_size ? f->cb_buffer_size : 16u << 20));
    PMPI_Info_set(*info, "cb_buffer_size", value);
    unsigned nodes = f->cb_nodes;
    if (nodes == 0)
        nodes = (unsigned)f->size < f->server_count || f->server_count == 0 ? (unsigned)f->size
                                                                             : f->server_count;
    snprintf(value, sizeof value, "%u", nodes);
    PMPI_Info_set(*info, "cb_nodes", value);
    /* ROMIO's switches as set (enable, disable, automatic: tsr_apply_hints keeps only
     * those), "automatic" when not set; romio_no_indep_rw likewise, "false" when not set (Tessera
     * serves independent accesses either way). */
    int flag = 0, length = 0;
    for (size_t i = 0; i < sizeof tsr_romio_switches / sizeof tsr_romio_switches[0]; i++) {
        PMPI_Info_get_valuelen(*info, tsr_romio_switches[i], &length, &flag);
        if (!flag)
            PMPI_Info_set(*info, tsr_romio_switches[i], "automatic");
    }
    PMPI_Info_get_valuelen(*info, "romio_no_indep_rw", &length, &flag);
    if (!flag)
        PMPI_Info_set(*info, "romio_no_indep_rw", "false");
    /* The buffers the sieve method uses. */
    uint64_t read_bytes = 0, write_bytes = 0;
    if (tessera_file_sieve_buffers(f->file, &read_bytes, &write_bytes) == TESSERA_OK) {
        snprintf(value, sizeof value, "%llu", (unsigned long long)read_bytes);
        PMPI_Info_set(*info, "ind_rd_buffer_size", value);
        snprintf(value, sizeof value, "%llu", (unsigned long long)write_bytes);
        PMPI_Info_set(*info, "ind_wr_buffer_size", value);
    }
    return MPI_SUCCESS;
}

/* Resets the shared pointer to `value` etypes (collective): process 0 stores it relative to
 * shared_base if anyone has made the side file; otherwise the side file, made at the first
 * shared access, will hold 0, so `value` becomes the base. */
static int tsr_reset_shared(struct tsr_file *f, MPI_Offset value) {
    int used = f->shared != NULL, any_used = 0;
    PMPI_Allreduce(&used, &any_used, 1, MPI_INT, MPI_MAX, f->comm);
    if (!any_used) {
        f->shared_base = value;
        PMPI_Barrier(f->comm);
        return MPI_SUCCESS;
    }
    int code = TESSERA_OK;
    if (f->rank == 0 && any_used) {
        TesseraSharedPointer *shared = NULL;
        int rc = tsr_shared_pointer(f, &shared);
        if (rc != MPI_SUCCESS)
            code = TESSERA_ERR_IO;
        else
            code = tessera_shared_pointer_store(shared, (uint64_t)(value - f->shared_base));
    }
    int rc = tsr_on_root(f, code, "shared file pointer of");
    PMPI_Barrier(f->comm);
    return rc;
}

/* A view being set, before every process has agreed to it. */
struct tsr_view {
    MPI_Offset displacement;
    const struct tsr_datarep *datarep; /* NULL: native or internal */
    const TesseraDatatype *etree, *ftree;
    TesseraDatatype *owned_etree, *owned_ftree; /* built for a non-native representation */
    MPI_Count etype_bytes;                      /* as it lies in the file */
    int empty;                                  /* the file type selects no bytes */
};

/* Checks the order of a view type's typemap (MPI-3.1 13.3: non-negative, monotonically
 * non-decreasing displacements; no overlapping regions in a file open for writing). One
 * instance: the tiling is not checked, as neither MPI does, because libraries rely on it
 * (PnetCDF sets file types whose extent is smaller than their data and accesses one instance). */
static int tsr_check_typemap(struct tsr_file *f, const TesseraDatatype *tree, const char *which,
                             uint64_t instances) {
    int order = TESSERA_TYPEMAP_ORDERED;
    int64_t offset = 0;
    int code = tessera_type_typemap_order(tree, instances, &order, &offset);
    if (code != TESSERA_OK)
        return tsr_error(MPI_ERR_TYPE, "tessera: set_view %s: the %s cannot be checked: %s",
                         f->path, which, tessera_last_error());
    const char *problem = NULL;
    if (order == TESSERA_TYPEMAP_NEGATIVE)
        problem = "an entry at a negative displacement";
    else if (order == TESSERA_TYPEMAP_DECREASING)
        problem = "an entry before the one preceding it (displacements must not decrease)";
    else if (order == TESSERA_TYPEMAP_OVERLAPPING && !(f->amode & MPI_MODE_RDONLY))
        problem = "overlapping entries, in a file open for writing";
    if (problem == NULL)
        return MPI_SUCCESS;
    return tsr_error(MPI_ERR_TYPE, "tessera: set_view %s: the %s's typemap has %s, at byte "
                                   "%lld (MPI asks for non-negative, monotonically "
                                   "non-decreasing, non-overlapping displacements)",
                     f->path, which, problem, (long long)offset);
}

/* Checks a view on this process alone: nothing here is collective. */
static int tsr_view_check(struct tsr_file *f, MPI_Offset disp, MPI_Datatype etype,
                          MPI_Datatype filetype, const char *datarep, struct tsr_view *v) {
    memset(v, 0, sizeof *v);
    v->displacement = disp;
    int rc = tsr_datarep_lookup(datarep, &v->datarep);
    if (rc != MPI_SUCCESS) {
        char reason[TSR_MESSAGE_BYTES_MAX];
        snprintf(reason, sizeof reason, "%s", tessera_mpiio_last_error());
        return tsr_error(MPI_ERR_UNSUPPORTED_DATAREP, "tessera: set_view %s: %s", f->path,
                         reason);
    }
    /* MPI-3.1 13.3: a file opened with MPI_MODE_SEQUENTIAL takes MPI_DISPLACEMENT_CURRENT
     * (the shared pointer's byte), and MPI_DISPLACEMENT_CURRENT is invalid for any other. */
    int sequential = (f->amode & MPI_MODE_SEQUENTIAL) != 0;
    if (disp == MPI_DISPLACEMENT_CURRENT && !sequential)
        return tsr_error(MPI_ERR_ARG, "tessera: set_view %s: MPI_DISPLACEMENT_CURRENT is valid "
                                      "only for a file opened with MPI_MODE_SEQUENTIAL", f->path);
    if (disp != MPI_DISPLACEMENT_CURRENT && sequential)
        return tsr_error(MPI_ERR_ARG, "tessera: set_view %s: a file opened with "
                                      "MPI_MODE_SEQUENTIAL takes MPI_DISPLACEMENT_CURRENT as its "
                                      "displacement, not %lld", f->path, (long long)disp);
    if (disp != MPI_DISPLACEMENT_CURRENT && disp < 0)
        return tsr_error(MPI_ERR_ARG, "tessera: set_view %s: negative displacement %lld",
                         f->path, (long long)disp);
    if (etype == MPI_DATATYPE_NULL || filetype == MPI_DATATYPE_NULL)
        return tsr_error(MPI_ERR_TYPE, "tessera: set_view %s: MPI_DATATYPE_NULL as the %s",
                         f->path, etype == MPI_DATATYPE_NULL ? "etype" : "file type");
    if (v->datarep == NULL) {
        rc = tsr_type(etype, &v->etree);
        if (rc == MPI_SUCCESS)
            rc = tsr_type(filetype, &v->ftree);
    } else {
        rc = tsr_type_in_datarep(v->datarep, etype, &v->owned_etree);
        if (rc == MPI_SUCCESS)
            rc = tsr_type_in_datarep(v->datarep, filetype, &v->owned_ftree);
        v->etree = v->owned_etree;
        v->ftree = v->owned_ftree;
    }
    if (rc != MPI_SUCCESS)
        return rc;
    TesseraTypeInfo einfo, finfo;
    tessera_type_info(v->etree, &einfo);
    tessera_type_info(v->ftree, &finfo);
    v->etype_bytes = (MPI_Count)einfo.size;
    v->empty = finfo.size == 0;
    if (einfo.size == 0)
        return tsr_error(MPI_ERR_ARG, "tessera: set_view %s: the etype has no bytes, so it "
                                      "cannot be the unit of offsets", f->path);
    if (finfo.size % einfo.size != 0)
        return tsr_error(MPI_ERR_ARG, "tessera: set_view %s: the file type's %llu bytes are not "
                                      "a whole number of etypes of %llu bytes", f->path,
                         (unsigned long long)finfo.size, (unsigned long long)einfo.size);
    rc = tsr_check_typemap(f, v->etree, "etype", 1);
    if (rc == MPI_SUCCESS && !v->empty)
        rc = tsr_check_typemap(f, v->ftree, "file type", 1);
    return rc;
}

/* The byte the shared pointer is at, for MPI_DISPLACEMENT_CURRENT (collective: process 0
 * reads the pointer and tells the others). */
static int tsr_shared_byte(struct tsr_file *f, MPI_Offset *byte) {
    int used = f->shared != NULL, any_used = 0;
    PMPI_Allreduce(&used, &any_used, 1, MPI_INT, MPI_MAX, f->comm);
    struct {
        long long byte;
        int failed;
        char message[TSR_MESSAGE_BYTES_MAX];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    if (f->rank == 0) {
        uint64_t value = 0, at = 0;
        int rc = MPI_SUCCESS;
        TesseraSharedPointer *shared = NULL;
        if (any_used && (rc = tsr_shared_pointer(f, &shared)) == MPI_SUCCESS) {
            int code = tessera_shared_pointer_load(shared, &value);
            if (code != TESSERA_OK)
                rc = tsr_tessera_error(code, "shared file pointer of", f->path);
        }
        MPI_Offset etypes = f->shared_base + (MPI_Offset)value;
        if (rc == MPI_SUCCESS && f->empty_view)
            at = (uint64_t)f->displacement;
        else if (rc == MPI_SUCCESS) {
            int code = tessera_file_byte_offset(f->file, (uint64_t)etypes, &at);
            if (code != TESSERA_OK)
                rc = tsr_tessera_error(code, "byte of the shared file pointer of", f->path);
        }
        outcome.byte = (long long)at;
        outcome.failed = rc != MPI_SUCCESS;
        if (outcome.failed)
            snprintf(outcome.message, sizeof outcome.message, "%s", tessera_mpiio_last_error());
    }
    PMPI_Bcast(&outcome, sizeof outcome, MPI_BYTE, 0, f->comm);
    if (outcome.failed)
        return tsr_error(MPI_ERR_IO, "tessera: set_view %s: MPI_DISPLACEMENT_CURRENT: %s",
                         f->path, outcome.message);
    *byte = (MPI_Offset)outcome.byte;
    return MPI_SUCCESS;
}

/* Puts the view of the file as it is (our own references to its types) back on the Tessera
 * side, after a view this process installed was refused by another process. */
static void tsr_view_restore(struct tsr_file *f) {
    const TesseraDatatype *etree = f->owned_etree, *ftree = f->owned_ftree;
    if (f->datarep == NULL && (tsr_type(f->etype, &etree) != MPI_SUCCESS ||
                               tsr_type(f->filetype, &ftree) != MPI_SUCCESS))
        return;
    tessera_file_set_view(f->file, (uint64_t)f->displacement, etree,
                          f->empty_view ? etree : ftree);
}

/* Collective. Every process makes the same collective calls whatever its arguments: it checks
 * its view alone, reads the shared pointer with the others where MPI_DISPLACEMENT_CURRENT
 * needs it, installs the view, and then all agree; if any process failed, none keeps the new
 * view and every process returns an error (its own, or one naming the process that failed). */
int PMPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                       const char *datarep, MPI_Info info) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_set_view, fh, disp, etype, filetype, datarep, info);
    struct tsr_view v;
    int rc = tsr_view_check(f, disp, etype, filetype, datarep, &v);
    if (f->amode & MPI_MODE_SEQUENTIAL) {
        MPI_Offset byte = 0;
        int shared_rc = tsr_shared_byte(f, &byte);
        if (rc == MPI_SUCCESS)
            rc = shared_rc;
        v.displacement = byte;
    }
    int installed = 0;
    if (rc == MPI_SUCCESS) {
        /* A file type that selects no bytes: this process accesses nothing through the view;
         * the Tessera side gets a contiguous view of etypes, never reached. */
        int code = tessera_file_set_view(f->file, (uint64_t)v.displacement, v.etree,
                                         v.empty ? v.etree : v.ftree);
        if (code != TESSERA_OK)
            rc = tsr_tessera_error(code, "set_view", f->path);
        installed = code == TESSERA_OK;
    }
    /* The etype and the data representation must be the same on every process (13.3). */
    unsigned long long hash = 1469598103934665603ULL;
    for (const char *c = v.datarep ? tsr_datarep_name(v.datarep) : "native"; *c; c++)
        hash = (hash ^ (unsigned char)*c) * 1099511628211ULL;
    long long same[2] = {(long long)v.etype_bytes, (long long)(hash >> 2)};
    const char *names[2] = {"etype sizes", "data representations"};
    rc = tsr_agree(f, rc, "set_view", 2, same, names);
    if (rc != MPI_SUCCESS) {
        if (installed)
            tsr_view_restore(f);
        tessera_type_free(v.owned_etree);
        tessera_type_free(v.owned_ftree);
        return tsr_raise(f, rc);
    }
    tsr_drop_view_types(f);
    MPI_Datatype *mine[2] = {&f->etype, &f->filetype};
    MPI_Datatype given[2] = {etype, filetype};
    for (int i = 0; i < 2; i++) {
        int integers, addresses, datatypes, combiner;
        PMPI_Type_get_envelope(given[i], &integers, &addresses, &datatypes, &combiner);
        if (combiner == MPI_COMBINER_NAMED)
            *mine[i] = given[i];
        else
            PMPI_Type_dup(given[i], mine[i]);
    }
    f->displacement = v.displacement;
    f->etype_bytes = v.etype_bytes;
    f->datarep = v.datarep;
    snprintf(f->datarep_name, sizeof f->datarep_name, "%s", datarep);
    f->owned_etree = v.owned_etree;
    f->owned_ftree = v.owned_ftree;
    f->empty_view = v.empty;
    f->pointer = 0;
    f->shared_base = 0;
    tsr_apply_hints(f, info);
    return tsr_reset_shared(f, 0);
}

int PMPI_File_get_view(MPI_File fh, MPI_Offset *disp, MPI_Datatype *etype,
                      MPI_Datatype *filetype, char *datarep) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_view, fh, disp, etype, filetype, datarep);
    *disp = f->displacement;
    MPI_Datatype mine[2] = {f->etype, f->filetype};
    MPI_Datatype *out[2] = {etype, filetype};
    for (int i = 0; i < 2; i++) {
        int integers, addresses, datatypes, combiner;
        PMPI_Type_get_envelope(mine[i], &integers, &addresses, &datatypes, &combiner);
        if (combiner == MPI_COMBINER_NAMED)
            *out[i] = mine[i];
        else
            PMPI_Type_dup(mine[i], out[i]);
    }
    strcpy(datarep, f->datarep_name[0] ? f->datarep_name : "native");
    return MPI_SUCCESS;
}

/* The view offset, in etypes, of the end of the file. */
static int tsr_end_of_file(struct tsr_file *f, MPI_Offset *offset) {
    if (f->empty_view) {
        *offset = 0; /* no etype lies anywhere */
        return MPI_SUCCESS;
    }
    TesseraStat stat;
    int code = tessera_file_stat(f->file, &stat);
    uint64_t etypes = 0;
    if (code == TESSERA_OK)
        code = tessera_file_offset_of_byte(f->file, stat.size, &etypes);
    if (code != TESSERA_OK)
        return tsr_tessera_error(code, "end of file of", f->path);
    *offset = (MPI_Offset)etypes;
    return MPI_SUCCESS;
}

static int tsr_seek_target(struct tsr_file *f, MPI_Offset current, MPI_Offset offset,
                           int whence, MPI_Offset *target) {
    MPI_Offset base = 0;
    if (whence == MPI_SEEK_SET)
        base = 0;
    else if (whence == MPI_SEEK_CUR)
        base = current;
    else if (whence == MPI_SEEK_END) {
        int rc = tsr_end_of_file(f, &base);
        if (rc != MPI_SUCCESS)
            return rc;
    } else
        return tsr_error(MPI_ERR_ARG, "tessera: seek %s: whence %d is not MPI_SEEK_SET, "
                                      "_CUR or _END", f->path, whence);
    if (base + offset < 0)
        return tsr_error(MPI_ERR_ARG, "tessera: seek %s: the pointer would be negative (%lld)",
                         f->path, (long long)(base + offset));
    *target = base + offset;
    return MPI_SUCCESS;
}

int PMPI_File_seek(MPI_File fh, MPI_Offset offset, int whence) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_seek, fh, offset, whence);
    MPI_Offset target;
    int rc = tsr_seek_target(f, f->pointer, offset, whence, &target);
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    f->pointer = target;
    return MPI_SUCCESS;
}

int PMPI_File_get_position(MPI_File fh, MPI_Offset *offset) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_position, fh, offset);
    *offset = f->pointer;
    return MPI_SUCCESS;
}

int PMPI_File_get_byte_offset(MPI_File fh, MPI_Offset offset, MPI_Offset *disp) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_byte_offset, fh, offset, disp);
    if (offset < 0)
        return tsr_raise(f, tsr_error(MPI_ERR_ARG, "tessera: get_byte_offset %s: negative "
                                                   "offset", f->path));
    if (f->empty_view) {
        *disp = f->displacement; /* the view holds no byte: every offset is at its start */
        return MPI_SUCCESS;
    }
    uint64_t byte = 0;
    int code = tessera_file_byte_offset(f->file, (uint64_t)offset, &byte);
    if (code != TESSERA_OK)
        return tsr_raise(f, tsr_tessera_error(code, "get_byte_offset", f->path));
    *disp = (MPI_Offset)byte;
    return MPI_SUCCESS;
}

int PMPI_File_seek_shared(MPI_File fh, MPI_Offset offset, int whence) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_seek_shared, fh, offset, whence);
    MPI_Offset current = f->shared_base, target = 0;
    int rc = MPI_SUCCESS;
    if (whence == MPI_SEEK_CUR && f->rank == 0) {
        TesseraSharedPointer *shared = NULL;
        uint64_t value = 0;
        rc = tsr_shared_pointer(f, &shared);
        if (rc == MPI_SUCCESS && tessera_shared_pointer_load(shared, &value) != TESSERA_OK)
            rc = tsr_tessera_error(TESSERA_ERR_IO, "shared file pointer of", f->path);
        current += (MPI_Offset)value;
    }
    if (rc == MPI_SUCCESS && f->rank == 0)
        rc = tsr_seek_target(f, current, offset, whence, &target);
    int failed = rc != MPI_SUCCESS;
    PMPI_Bcast(&failed, 1, MPI_INT, 0, f->comm);
    if (failed)
        return tsr_raise(f, f->rank == 0 ? rc
                                         : tsr_error(MPI_ERR_IO, "tessera: seek_shared %s "
                                                     "failed on process 0", f->path));
    PMPI_Bcast(&target, 1, MPI_OFFSET, 0, f->comm);
    /* From base 0, tsr_reset_shared stores the target itself (or, while no side file
     * exists, makes it the base). */
    f->shared_base = 0;
    return tsr_reset_shared(f, target);
}

int PMPI_File_get_position_shared(MPI_File fh, MPI_Offset *offset) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_position_shared, fh, offset);
    TesseraSharedPointer *shared = NULL;
    int rc = tsr_shared_pointer(f, &shared);
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    uint64_t value = 0;
    int code = tessera_shared_pointer_load(shared, &value);
    if (code != TESSERA_OK)
        return tsr_raise(f, tsr_tessera_error(code, "shared file pointer of", f->path));
    *offset = f->shared_base + (MPI_Offset)value;
    return MPI_SUCCESS;
}

int PMPI_File_sync(MPI_File fh) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_sync, fh);
    /* What each process buffered (the client cache's write-back) reaches the servers before
     * the barrier: then every write acknowledged before it is on the servers, for the other
     * processes to read (sync-barrier-sync), and one sync covers all. */
    int flushed = tessera_file_flush(f->file);
    int flush_failed = flushed != TESSERA_OK, any_failed = 0;
    PMPI_Allreduce(&flush_failed, &any_failed, 1, MPI_INT, MPI_MAX, f->comm);
    if (any_failed)
        return tsr_raise(f, flush_failed ? tsr_tessera_error(flushed, "sync (flush)", f->path)
                                         : tsr_error(MPI_ERR_IO, "tessera: sync %s: a flush "
                                                     "failed on another process", f->path));
    int code = f->rank == 0 ? tessera_file_sync(f->file) : TESSERA_OK;
    return tsr_on_root(f, code, "sync");
}

int PMPI_File_set_atomicity(MPI_File fh, int flag) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_set_atomicity, fh, flag);
    int code = tessera_file_set_atomic(f->file, flag != 0);
    int rc = code == TESSERA_OK ? MPI_SUCCESS
                                : tsr_tessera_error(code, "set_atomicity", f->path);
    /* Also the barrier after which every process is in the new mode. */
    long long flags[1] = {flag != 0};
    const char *names[1] = {"flags"};
    rc = tsr_agree(f, rc, "set_atomicity", 1, flags, names);
    if (rc != MPI_SUCCESS) {
        tessera_file_set_atomic(f->file, f->atomic); /* back to the mode all processes share */
        return tsr_raise(f, rc);
    }
    f->atomic = flag != 0;
    return MPI_SUCCESS;
}

int PMPI_File_get_atomicity(MPI_File fh, int *flag) {
    struct tsr_file *f = tsr_lookup(fh);
    if (f == NULL)
        return TSR_NEXT(File_get_atomicity, fh, flag);
    *flag = f->atomic;
    return MPI_SUCCESS;
}

/* The MPI_ names of the entry points above (see shim.h). */
TSR_MPI_ALIAS(File_open)
TSR_MPI_ALIAS(File_close)
TSR_MPI_ALIAS(File_delete)
TSR_MPI_ALIAS(File_set_size)
TSR_MPI_ALIAS(File_preallocate)
TSR_MPI_ALIAS(File_get_size)
TSR_MPI_ALIAS(File_get_group)
TSR_MPI_ALIAS(File_get_amode)
TSR_MPI_ALIAS(File_set_info)
TSR_MPI_ALIAS(File_get_info)
TSR_MPI_ALIAS(File_set_view)
TSR_MPI_ALIAS(File_get_view)
TSR_MPI_ALIAS(File_seek)
TSR_MPI_ALIAS(File_get_position)
TSR_MPI_ALIAS(File_get_byte_offset)
TSR_MPI_ALIAS(File_seek_shared)
TSR_MPI_ALIAS(File_get_position_shared)
TSR_MPI_ALIAS(File_sync)
TSR_MPI_ALIAS(File_set_atomicity)
TSR_MPI_ALIAS(File_get_atomicity)
