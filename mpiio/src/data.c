/* Every read and write form of MPI-IO on a Tessera file.
 *
 * Each MPI_File_{read,write}* function is one line: it finds its file (or hands the call to
 * PMPI) and calls tsr_access with where the access starts (an explicit offset, the
 * individual pointer, the shared pointer, or the shared pointer in rank order), whether it
 * is collective, and how it completes. tsr_access then
 *   - sends collective forms through tsr_collective, the single entry point of collective
 *     I/O: tessera_file_write_all/read_all with the file's communicator as callbacks
 *     (two_phase, server_directed or independent, by the tessera_coll hint);
 *   - sends the rest through tsr_independent, which turns the pointer into an offset and
 *     calls tsr_transfer, which hands (offset in etypes, buffer, count, memory type) to
 *     tessera_file_write/read: the file's view and method (a hint) decide the requests;
 *   - completes the call: a status for blocking forms; for nonblocking forms a generalized
 *     request that is already complete; for split collectives, the status kept for _end.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* A staging buffer of at least `bytes`: the file's kept one if it is large enough. */
static void *tsr_staging_get(struct tsr_file *f, size_t bytes) {
    if (f->staging != NULL && f->staging_bytes >= bytes) {
        void *buffer = f->staging;
        f->staging = NULL;
        return buffer;
    }
    return malloc(bytes);
}

/* Gives a staging buffer of `bytes` back: kept for the next access if it is the largest so far
 * within TSR_STAGING_KEEP_BYTES_MAX, freed otherwise. */
static void tsr_staging_put(struct tsr_file *f, void *buffer, size_t bytes) {
    if (buffer == NULL)
        return;
    if (bytes <= TSR_STAGING_KEEP_BYTES_MAX && (f->staging == NULL || bytes > f->staging_bytes)) {
        free(f->staging);
        f->staging = buffer;
        f->staging_bytes = bytes;
        return;
    }
    free(buffer);
}

/* Checks an access and converts its memory type: on success `*memtype` is the Tessera type
 * (NULL for plain bytes), `*elements` the count to hand the C API and `*total` the bytes in
 * memory. In a data representation other than native, `*staging` is a buffer of the access's
 * bytes as they lie in the file (the memory encoded into it for a write; for a read, to decode
 * from after it), handed to the C API as plain bytes; the caller frees it. */
static int tsr_prepare(struct tsr_file *f, int write, MPI_Offset offset, MPI_Count count,
                       MPI_Datatype type, const void *buffer, const TesseraDatatype **memtype,
                       uint64_t *elements, MPI_Count *total, void **staging, const char *op) {
    *memtype = NULL;
    *elements = 0;
    *total = 0;
    *staging = NULL;
    if (write && (f->amode & MPI_MODE_RDONLY))
        return tsr_error(MPI_ERR_READ_ONLY, "tessera: %s %s: the file is open read-only", op,
                         f->path);
    if (!write && (f->amode & MPI_MODE_WRONLY))
        return tsr_error(MPI_ERR_ACCESS, "tessera: %s %s: the file is open write-only", op,
                         f->path);
    if (count < 0)
        return tsr_error(MPI_ERR_COUNT, "tessera: %s %s: negative count %lld", op, f->path,
                         (long long)count);
    if (offset < 0)
        return tsr_error(MPI_ERR_ARG, "tessera: %s %s: negative offset %lld", op, f->path,
                         (long long)offset);
    if (type == MPI_DATATYPE_NULL)
        return tsr_error(MPI_ERR_TYPE, "tessera: %s %s: MPI_DATATYPE_NULL", op, f->path);
    MPI_Count type_bytes = 0;
    PMPI_Type_size_x(type, &type_bytes);
    MPI_Count bytes = type_bytes * count, file_bytes = bytes;
    if (f->datarep != NULL) {
        int rc = tsr_datarep_file_bytes(f->datarep, count, type, &file_bytes);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    if (file_bytes % f->etype_bytes != 0)
        return tsr_error(MPI_ERR_ARG,
                         "tessera: %s %s: %lld bytes are not a whole number of etypes of %lld "
                         "bytes", op, f->path, (long long)file_bytes, (long long)f->etype_bytes);
    if (file_bytes == 0)
        return MPI_SUCCESS;
    if (f->empty_view)
        return tsr_error(MPI_ERR_ARG, "tessera: %s %s: the view's file type selects no bytes, "
                         "so no data can be %s through it (%lld bytes asked)", op, f->path,
                         write ? "written" : "read", (long long)file_bytes);
    if (f->datarep != NULL) {
        *staging = tsr_staging_get(f, (size_t)file_bytes);
        if (*staging == NULL)
            return tsr_error(MPI_ERR_NO_MEM, "tessera: %s %s: no memory to stage %lld bytes in "
                             "data representation %s", op, f->path, (long long)file_bytes,
                             f->datarep_name);
        int rc = write ? tsr_datarep_encode(f->datarep, buffer, count, type, *staging,
                                            file_bytes)
                       : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) {
            tsr_staging_put(f, *staging, (size_t)file_bytes);
            *staging = NULL;
            return rc;
        }
        *elements = (uint64_t)file_bytes;
        *total = bytes;
        return MPI_SUCCESS;
    }
    MPI_Count plain = 0;
    if (tsr_type_is_contiguous(type, &plain)) {
        *elements = (uint64_t)bytes; /* plain bytes: no memory type */
    } else {
        int rc = tsr_type(type, memtype);
        if (rc != MPI_SUCCESS)
            return rc;
        *elements = (uint64_t)count;
    }
    *total = bytes;
    return MPI_SUCCESS;
}

/* After a read in a non-native representation: the staged file bytes into memory. */
static int tsr_unstage(struct tsr_file *f, void *staging, uint64_t file_bytes, void *buffer,
                       MPI_Count count, MPI_Datatype type) {
    return tsr_datarep_decode(f->datarep, staging, (MPI_Count)file_bytes, buffer, count, type);
}

int tsr_transfer(struct tsr_file *f, int write, MPI_Offset offset, void *buffer,
                 MPI_Count count, MPI_Datatype type, MPI_Count *bytes, const char *op) {
    *bytes = 0;
    const TesseraDatatype *memtype = NULL;
    uint64_t elements = 0;
    MPI_Count total = 0;
    void *staging = NULL;
    int rc = tsr_prepare(f, write, offset, count, type, buffer, &memtype, &elements, &total,
                         &staging, op);
    if (rc != MPI_SUCCESS || total == 0)
        return rc;
    void *memory = staging ? staging : buffer;
    /* romio_ds_read/write=disable, or a file open without read rights: no data sieving, so
     * the sieve method goes as list. */
    const char *method = NULL;
    int unsieve = (write ? f->ds_write_disabled || f->write_only_rights : f->ds_read_disabled) &&
                  tessera_file_method(f->file, 1, &method) == TESSERA_OK &&
                  strcmp(method, "sieve") == 0;
    if (unsieve)
        tessera_file_set_method(f->file, "list");
    int code = write ? tessera_file_write(f->file, (uint64_t)offset, memory, elements, memtype,
                                          NULL)
                     : tessera_file_read(f->file, (uint64_t)offset, memory, elements, memtype,
                                         NULL);
    if (unsieve)
        tessera_file_set_method(f->file, "sieve");
    if (code == TESSERA_OK && staging && !write)
        rc = tsr_unstage(f, staging, elements, buffer, count, type);
    tsr_staging_put(f, staging, (size_t)elements);
    if (code != TESSERA_OK)
        return tsr_tessera_error(code, op, f->path);
    if (rc != MPI_SUCCESS)
        return rc;
    *bytes = total;
    return MPI_SUCCESS;
}

/* Etypes in `count` instances of `type` (the caller checked divisibility in tsr_transfer). */
static MPI_Offset tsr_etypes(struct tsr_file *f, MPI_Count count, MPI_Datatype type) {
    MPI_Count type_bytes = 0;
    if (type == MPI_DATATYPE_NULL || count < 0)
        return 0; /* refused by tsr_prepare */
    if (f->datarep != NULL) {
        MPI_Count file_bytes = 0;
        if (tsr_datarep_file_bytes(f->datarep, count, type, &file_bytes) != MPI_SUCCESS)
            return 0; /* refused by tsr_prepare */
        return (MPI_Offset)(file_bytes / f->etype_bytes);
    }
    PMPI_Type_size_x(type, &type_bytes);
    return (MPI_Offset)(type_bytes * count / f->etype_bytes);
}

static int tsr_independent(struct tsr_file *f, int write, enum tsr_position position,
                           MPI_Offset offset, void *buffer, MPI_Count count, MPI_Datatype type,
                           MPI_Count *bytes, const char *op) {
    switch (position) {
    case TSR_AT:
        return tsr_transfer(f, write, offset, buffer, count, type, bytes, op);
    case TSR_INDIVIDUAL: {
        int rc = tsr_transfer(f, write, f->pointer, buffer, count, type, bytes, op);
        if (rc == MPI_SUCCESS)
            f->pointer += tsr_etypes(f, count, type);
        return rc;
    }
    case TSR_SHARED: {
        TesseraSharedPointer *shared = NULL;
        int rc = tsr_shared_pointer(f, &shared);
        if (rc != MPI_SUCCESS)
            return rc;
        uint64_t before = 0;
        int code = tessera_shared_pointer_fetch_add(shared, (uint64_t)tsr_etypes(f, count, type),
                                                    &before);
        if (code != TESSERA_OK)
            return tsr_tessera_error(code, "shared file pointer of", f->path);
        return tsr_transfer(f, write, f->shared_base + (MPI_Offset)before, buffer, count, type,
                            bytes, op);
    }
    case TSR_ORDERED:
        break;
    }
    return tsr_error(MPI_ERR_INTERN, "tessera: %s: ordered access reached the independent path",
                     op);
}

/* The offset of this process's part of an ordered access: the shared pointer advances by
 * everyone's etypes, process 0 first. */
static int tsr_ordered_offset(struct tsr_file *f, MPI_Offset etypes, MPI_Offset *offset) {
    long long mine = etypes, before = 0, total = 0;
    MPI_Request request;
    int rc = tsr_wait(PMPI_Iexscan(&mine, &before, 1, MPI_LONG_LONG, MPI_SUM, f->comm,
                                   &request), &request);
    if (rc == MPI_SUCCESS)
        rc = tsr_wait(PMPI_Iallreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, f->comm,
                                      &request), &request);
    if (rc != MPI_SUCCESS)
        return rc;
    if (f->rank == 0)
        before = 0;
    struct {
        long long base;
        int rc;
    } outcome = {0, MPI_SUCCESS};
    if (f->rank == 0) {
        TesseraSharedPointer *shared = NULL;
        outcome.rc = tsr_shared_pointer(f, &shared);
        uint64_t value = 0;
        if (outcome.rc == MPI_SUCCESS &&
            tessera_shared_pointer_fetch_add(shared, (uint64_t)total, &value) != TESSERA_OK)
            outcome.rc = tsr_tessera_error(TESSERA_ERR_IO, "shared file pointer of", f->path);
        outcome.base = (long long)value;
    }
    rc = tsr_wait(PMPI_Ibcast(&outcome, sizeof outcome, MPI_BYTE, 0, f->comm, &request),
                  &request);
    if (rc != MPI_SUCCESS)
        return rc;
    if (outcome.rc != MPI_SUCCESS)
        return f->rank == 0 ? outcome.rc
                            : tsr_error(MPI_ERR_IO, "tessera: ordered access to %s: the shared "
                                        "pointer failed on process 0", f->path);
    *offset = f->shared_base + (MPI_Offset)(outcome.base + before);
    return MPI_SUCCESS;
}

/* The file's communicator as the C API's callbacks (MPI counts are int: the C API refuses
 * larger messages before calling; these check again). */
/* An empty buffer from Rust is a dangling pointer, (void *)1 for bytes: Open MPI's
 * MPI_IN_PLACE. Nothing moves through an empty buffer, so it is replaced by an address of
 * our own, distinct for sending and receiving (a send buffer that is the receive buffer is
 * refused too). */
static char tsr_empty_send, tsr_empty_recv;

static int tsr_comm_allgather(void *ctx, const void *send, uint64_t bytes, void *recv) {
    struct tsr_file *f = ctx;
    if (bytes > INT_MAX)
        return 1;
    if (bytes == 0) {
        send = &tsr_empty_send;
        recv = &tsr_empty_recv;
    }
    MPI_Request request;
    int rc = PMPI_Iallgather((void *)send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                             f->comm, &request);
    return tsr_wait(rc, &request) == MPI_SUCCESS ? 0 : 1;
}

static int tsr_comm_alltoallv(void *ctx, const void *send, const uint64_t *send_counts,
                              const uint64_t *send_displs, void *recv,
                              const uint64_t *recv_counts, const uint64_t *recv_displs) {
    struct tsr_file *f = ctx;
    int n = f->size;
    int *ints = malloc(4 * (size_t)n * sizeof *ints);
    if (ints == NULL)
        return 2;
    const uint64_t *given[4] = {send_counts, send_displs, recv_counts, recv_displs};
    uint64_t sent = 0, received = 0;
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < n; r++) {
            if (given[k][r] > INT_MAX) {
                free(ints);
                return 1;
            }
            ints[k * n + r] = (int)given[k][r];
        }
    for (int r = 0; r < n; r++) {
        sent += send_counts[r];
        received += recv_counts[r];
    }
    if (sent == 0)
        send = &tsr_empty_send;
    if (received == 0)
        recv = &tsr_empty_recv;
    MPI_Request request;
    int rc = PMPI_Ialltoallv((void *)send, ints, ints + n, MPI_BYTE, recv, ints + 2 * n,
                             ints + 3 * n, MPI_BYTE, f->comm, &request);
    rc = tsr_wait(rc, &request);
    free(ints);
    return rc == MPI_SUCCESS ? 0 : 1;
}

static int tsr_comm_barrier(void *ctx) {
    struct tsr_file *f = ctx;
    MPI_Request request;
    return tsr_wait(PMPI_Ibarrier(f->comm, &request), &request) == MPI_SUCCESS ? 0 : 1;
}

/* THE COLLECTIVE HOOK. Every collective data access arrives here: read_all/write_all,
 * read_at_all/write_at_all, their split (_begin) and nonblocking (i..._all) forms, and
 * read_ordered/write_ordered. Every process of the file's communicator calls it in the same
 * order. The access goes to tessera_file_write_all/read_all with the file's communicator as
 * callbacks and the collective hints (tessera_coll: two_phase, server_directed (the default)
 * or independent; cb_buffer_size; cb_nodes); romio_cb_read/write=disable makes it
 * independent, then a barrier. A process whose own arguments are wrong still takes part,
 * with nothing to move, so that no other process waits for it, and returns its error. */
static int tsr_collective(struct tsr_file *f, int write, enum tsr_position position,
                          MPI_Offset offset, void *buffer, MPI_Count count, MPI_Datatype type,
                          MPI_Count *bytes, const char *op) {
    int rc = MPI_SUCCESS;
    *bytes = 0;
    if (position == TSR_ORDERED) {
        rc = tsr_ordered_offset(f, tsr_etypes(f, count, type), &offset);
        if (rc != MPI_SUCCESS)
            return rc; /* process 0's outcome was broadcast: every process fails alike */
        position = TSR_AT;
    }
    if (write ? f->cb_write_disabled : f->cb_read_disabled) {
        rc = tsr_independent(f, write, position, offset, buffer, count, type, bytes, op);
        MPI_Request request;
        int waited = tsr_wait(PMPI_Ibarrier(f->comm, &request), &request);
        return rc != MPI_SUCCESS ? rc : waited;
    }
    MPI_Offset at = position == TSR_INDIVIDUAL ? f->pointer : offset;
    const TesseraDatatype *memtype = NULL;
    uint64_t elements = 0;
    MPI_Count total = 0;
    void *staging = NULL;
    rc = tsr_prepare(f, write, at, count, type, buffer, &memtype, &elements, &total, &staging,
                     op);
    if (rc != MPI_SUCCESS) {
        at = 0;
        elements = 0;
        memtype = NULL;
        total = 0;
    }
    TesseraCommunicator comm = {f, (uint32_t)f->rank, (uint32_t)f->size, tsr_comm_allgather,
                                tsr_comm_alltoallv, tsr_comm_barrier};
    TesseraCollectiveOptions options = {f->coll_method[0] ? f->coll_method : NULL,
                                        f->cb_buffer_size, f->cb_nodes, 0,
                                        write ? f->cb_write_enabled : f->cb_read_enabled};
    void *memory = total == 0 ? NULL : staging ? staging : buffer;
    int code = write ? tessera_file_write_all(f->file, &comm, &options, (uint64_t)at, memory,
                                              elements, memtype, NULL)
                     : tessera_file_read_all(f->file, &comm, &options, (uint64_t)at, memory,
                                             elements, memtype, NULL);
    if (rc == MPI_SUCCESS && code == TESSERA_OK && staging && !write)
        rc = tsr_unstage(f, staging, elements, buffer, count, type);
    tsr_staging_put(f, staging, (size_t)elements);
    if (rc != MPI_SUCCESS)
        return rc;
    if (code != TESSERA_OK)
        return tsr_tessera_error(code, op, f->path);
    *bytes = total;
    if (position == TSR_INDIVIDUAL)
        f->pointer += tsr_etypes(f, count, type);
    return MPI_SUCCESS;
}

static int tsr_query(void *extra, MPI_Status *status) {
    tsr_status(status, *(MPI_Count *)extra);
    return MPI_SUCCESS;
}

static int tsr_free_request(void *extra) {
    free(extra);
    return MPI_SUCCESS;
}

static int tsr_cancel(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

/* A generalized request that is complete already and reports `bytes`. */
static int tsr_completed_request(MPI_Count bytes, MPI_Request *request) {
    MPI_Count *extra = malloc(sizeof *extra);
    if (extra == NULL)
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory for a request");
    *extra = bytes;
    int rc = PMPI_Grequest_start(tsr_query, tsr_free_request, tsr_cancel, extra, request);
    if (rc != MPI_SUCCESS) {
        free(extra);
        return rc;
    }
    return PMPI_Grequest_complete(*request);
}

static int tsr_access(struct tsr_file *f, int write, int collective,
                      enum tsr_position position, MPI_Offset offset, const void *buffer,
                      MPI_Count count, MPI_Datatype type, MPI_Status *status,
                      MPI_Request *request, enum tsr_completion completion, const char *op) {
    if (request)
        *request = MPI_REQUEST_NULL;
    MPI_Count bytes = 0;
    if (completion == TSR_SPLIT_BEGIN && f->split_active) {
        /* Erroneous, but the other processes are in the collective: take part with nothing
         * to move, then fail. */
        tsr_collective(f, write, position == TSR_INDIVIDUAL ? TSR_AT : position, 0,
                       (void *)buffer, 0, MPI_BYTE, &bytes, op);
        return tsr_raise(f, tsr_error(MPI_ERR_OTHER, "tessera: %s %s: a split collective is "
                                      "already active on this file", op, f->path));
    }
    int rc = collective || position == TSR_ORDERED
                 ? tsr_collective(f, write, position, offset, (void *)buffer, count, type,
                                  &bytes, op)
                 : tsr_independent(f, write, position, offset, (void *)buffer, count, type,
                                   &bytes, op);
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    switch (completion) {
    case TSR_BLOCKING:
        tsr_status(status, bytes);
        break;
    case TSR_NONBLOCKING:
        rc = tsr_completed_request(bytes, request);
        break;
    case TSR_SPLIT_BEGIN:
        f->split_active = 1;
        f->split_bytes = bytes;
        break;
    }
    return rc == MPI_SUCCESS ? rc : tsr_raise(f, rc);
}

static int tsr_split_end(struct tsr_file *f, MPI_Status *status, const char *op) {
    if (!f->split_active)
        return tsr_raise(f, tsr_error(MPI_ERR_OTHER, "tessera: %s %s: no split collective is "
                                      "active on this file", op, f->path));
    f->split_active = 0;
    tsr_status(status, f->split_bytes);
    return MPI_SUCCESS;
}

/* The entry points, by shape: each PMPI_ function, and its MPI_ name as an alias of it. W: 1 for
 * writes. C: 1 for collective. */
#define TSR_AT_BLOCKING(NAME, BUF, COUNT, W, C)                                             \
    int PMPI_##NAME(MPI_File fh, MPI_Offset offset, BUF buf, COUNT count, MPI_Datatype type, \
                   MPI_Status *status) {                                                    \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, offset, buf, count, type, status);                    \
        return tsr_access(f, W, C, TSR_AT, offset, buf, count, type, status, NULL,          \
                          TSR_BLOCKING, "MPI_" #NAME);                                      \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_POINTER_BLOCKING(NAME, BUF, COUNT, W, C, POSITION)                              \
    int PMPI_##NAME(MPI_File fh, BUF buf, COUNT count, MPI_Datatype type,                   \
                   MPI_Status *status) {                                                    \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, buf, count, type, status);                            \
        return tsr_access(f, W, C, POSITION, 0, buf, count, type, status, NULL,             \
                          TSR_BLOCKING, "MPI_" #NAME);                                      \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_AT_NONBLOCKING(NAME, BUF, COUNT, W, C)                                          \
    int PMPI_##NAME(MPI_File fh, MPI_Offset offset, BUF buf, COUNT count, MPI_Datatype type, \
                   MPI_Request *request) {                                                  \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, offset, buf, count, type, request);                   \
        return tsr_access(f, W, C, TSR_AT, offset, buf, count, type, NULL, request,         \
                          TSR_NONBLOCKING, "MPI_" #NAME);                                   \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_POINTER_NONBLOCKING(NAME, BUF, COUNT, W, C, POSITION)                           \
    int PMPI_##NAME(MPI_File fh, BUF buf, COUNT count, MPI_Datatype type,                   \
                   MPI_Request *request) {                                                  \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, buf, count, type, request);                           \
        return tsr_access(f, W, C, POSITION, 0, buf, count, type, NULL, request,            \
                          TSR_NONBLOCKING, "MPI_" #NAME);                                   \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_AT_BEGIN(NAME, BUF, COUNT, W)                                                   \
    int PMPI_##NAME(MPI_File fh, MPI_Offset offset, BUF buf, COUNT count, MPI_Datatype type) { \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, offset, buf, count, type);                            \
        return tsr_access(f, W, 1, TSR_AT, offset, buf, count, type, NULL, NULL,            \
                          TSR_SPLIT_BEGIN, "MPI_" #NAME);                                   \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_POINTER_BEGIN(NAME, BUF, COUNT, W, POSITION)                                    \
    int PMPI_##NAME(MPI_File fh, BUF buf, COUNT count, MPI_Datatype type) {                 \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, buf, count, type);                                    \
        return tsr_access(f, W, 1, POSITION, 0, buf, count, type, NULL, NULL,               \
                          TSR_SPLIT_BEGIN, "MPI_" #NAME);                                   \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)
#define TSR_END(NAME, BUF)                                                                  \
    int PMPI_##NAME(MPI_File fh, BUF buf, MPI_Status *status) {                             \
        struct tsr_file *f = tsr_lookup(fh);                                                \
        if (f == NULL)                                                                      \
            return TSR_NEXT(NAME, fh, buf, status);                                         \
        return tsr_split_end(f, status, "MPI_" #NAME);                                      \
    }                                                                                       \
    TSR_MPI_ALIAS(NAME)

/* One set per count type: int (MPI-3) and MPI_Count (the _c forms of MPI-4). */
#define TSR_ALL_FORMS(SUFFIX, COUNT)                                                        \
    TSR_AT_BLOCKING(File_read_at##SUFFIX, void *, COUNT, 0, 0)                              \
    TSR_AT_BLOCKING(File_write_at##SUFFIX, const void *, COUNT, 1, 0)                       \
    TSR_AT_BLOCKING(File_read_at_all##SUFFIX, void *, COUNT, 0, 1)                          \
    TSR_AT_BLOCKING(File_write_at_all##SUFFIX, const void *, COUNT, 1, 1)                   \
    TSR_POINTER_BLOCKING(File_read##SUFFIX, void *, COUNT, 0, 0, TSR_INDIVIDUAL)            \
    TSR_POINTER_BLOCKING(File_write##SUFFIX, const void *, COUNT, 1, 0, TSR_INDIVIDUAL)     \
    TSR_POINTER_BLOCKING(File_read_all##SUFFIX, void *, COUNT, 0, 1, TSR_INDIVIDUAL)        \
    TSR_POINTER_BLOCKING(File_write_all##SUFFIX, const void *, COUNT, 1, 1, TSR_INDIVIDUAL) \
    TSR_POINTER_BLOCKING(File_read_shared##SUFFIX, void *, COUNT, 0, 0, TSR_SHARED)         \
    TSR_POINTER_BLOCKING(File_write_shared##SUFFIX, const void *, COUNT, 1, 0, TSR_SHARED)  \
    TSR_POINTER_BLOCKING(File_read_ordered##SUFFIX, void *, COUNT, 0, 1, TSR_ORDERED)       \
    TSR_POINTER_BLOCKING(File_write_ordered##SUFFIX, const void *, COUNT, 1, 1, TSR_ORDERED) \
    TSR_AT_NONBLOCKING(File_iread_at##SUFFIX, void *, COUNT, 0, 0)                          \
    TSR_AT_NONBLOCKING(File_iwrite_at##SUFFIX, const void *, COUNT, 1, 0)                   \
    TSR_AT_NONBLOCKING(File_iread_at_all##SUFFIX, void *, COUNT, 0, 1)                      \
    TSR_AT_NONBLOCKING(File_iwrite_at_all##SUFFIX, const void *, COUNT, 1, 1)               \
    TSR_POINTER_NONBLOCKING(File_iread##SUFFIX, void *, COUNT, 0, 0, TSR_INDIVIDUAL)        \
    TSR_POINTER_NONBLOCKING(File_iwrite##SUFFIX, const void *, COUNT, 1, 0, TSR_INDIVIDUAL) \
    TSR_POINTER_NONBLOCKING(File_iread_all##SUFFIX, void *, COUNT, 0, 1, TSR_INDIVIDUAL)    \
    TSR_POINTER_NONBLOCKING(File_iwrite_all##SUFFIX, const void *, COUNT, 1, 1, TSR_INDIVIDUAL) \
    TSR_POINTER_NONBLOCKING(File_iread_shared##SUFFIX, void *, COUNT, 0, 0, TSR_SHARED)     \
    TSR_POINTER_NONBLOCKING(File_iwrite_shared##SUFFIX, const void *, COUNT, 1, 0, TSR_SHARED) \
    TSR_AT_BEGIN(File_read_at_all_begin##SUFFIX, void *, COUNT, 0)                          \
    TSR_AT_BEGIN(File_write_at_all_begin##SUFFIX, const void *, COUNT, 1)                   \
    TSR_POINTER_BEGIN(File_read_all_begin##SUFFIX, void *, COUNT, 0, TSR_INDIVIDUAL)        \
    TSR_POINTER_BEGIN(File_write_all_begin##SUFFIX, const void *, COUNT, 1, TSR_INDIVIDUAL) \
    TSR_POINTER_BEGIN(File_read_ordered_begin##SUFFIX, void *, COUNT, 0, TSR_ORDERED)       \
    TSR_POINTER_BEGIN(File_write_ordered_begin##SUFFIX, const void *, COUNT, 1, TSR_ORDERED)

TSR_ALL_FORMS(, int)
#if MPI_VERSION >= 4
TSR_ALL_FORMS(_c, MPI_Count)
#endif

TSR_END(File_read_at_all_end, void *)
TSR_END(File_write_at_all_end, const void *)
TSR_END(File_read_all_end, void *)
TSR_END(File_write_all_end, const void *)
TSR_END(File_read_ordered_end, void *)
TSR_END(File_write_ordered_end, const void *)
