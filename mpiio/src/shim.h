/* libtessera_mpiio: MPI-IO on Tessera through PMPI interposition.
 *
 * The library defines PMPI_File_* and serves the files it recognises (names starting with
 * "tessera:", or lying under a directory listed in $TESSERA_MPIIO_PATHS) through the Tessera
 * C API (crates/tessera-capi); every other file goes to the real MPI-IO: the MPI library's own
 * PMPI_File_*, found with dlsym(RTLD_NEXT) (TSR_NEXT). Each MPI_File_* it defines is an alias
 * of its PMPI_File_* (as MPI libraries define them), so programs calling either name, the
 * MPI's Fortran bindings (Open MPI's call PMPI_File_*), and a profiling layer stacked in front
 * (its MPI_File_* calling PMPI_File_*) all reach Tessera.
 *
 * The handle a program holds for a Tessera file is a real MPI_File: the library opens
 * /dev/null on MPI_COMM_SELF through PMPI and keeps a table from that handle to its own
 * state (struct tsr_file). So the real MPI never sees a handle it did not make, the calls the
 * library does not define (MPI_File_set_errhandler, get_errhandler, call_errhandler, c2f,
 * f2c, get_type_extent) work on it unchanged, and errors can be raised through the error
 * handler the program attached to it.
 *
 * Files: core.c (the table, path routing, the cluster connection, a file's shared pointer,
 * errors, the MPI's own functions), types.c (MPI datatypes into Tessera datatype trees,
 * cached per type), file.c (open, close, delete, size, info, view, pointers, sync,
 * atomicity), data.c (every read and write form, the collective hook, nonblocking and split
 * forms, shared and ordered pointers), hints.c (site-wide default hints from $ROMIO_HINTS),
 * datarep.c (data representations: external32, registered ones, MPI_Register_datarep, types
 * rebuilt in a representation's sizes), posix.c (the POSIX calls on Tessera names).
 * No two files use each other: core.c uses none of the others; types.c, hints.c and posix.c
 * use core.c; datarep.c uses types.c; data.c and file.c use those below them, not each
 * other (hints.c's fopen of $ROMIO_HINTS goes through posix.c's, which passes it on).
 */
#ifndef TESSERA_MPIIO_SHIM_H
#define TESSERA_MPIIO_SHIM_H

#include <mpi.h>
#include <stdint.h>

#include "route.h"
#include "tessera.h"

/* Most Tessera files one process may have open at once through the shim. */
#define TSR_OPEN_FILES_MAX 1024
/* Longest error message kept (MPI's own strings are shorter; the rest is cut). */
#define TSR_MESSAGE_BYTES_MAX 1024
/* Longest hint value the shim reads. */
#define TSR_HINT_BYTES_MAX 256
/* Longest wait, in seconds, for the file's other processes in one exchange of a collective
 * access (they may be doing I/O that long: far above any single request's timeout). */
#define TSR_COLLECTIVE_WAIT_S_MAX 3600
/* Such a wait tests the request this many times between sched_yield calls, then sleeps this
 * many microseconds between tests (data.c, tsr_wait). */
#define TSR_WAIT_YIELDS_MAX 64
#define TSR_WAIT_SLEEP_US 20
/* Most named (predefined) datatypes cached. */
#define TSR_NAMED_TYPES_MAX 256
/* Most data representations MPI_Register_datarep may add (datarep.c). */
#define TSR_DATAREPS_MAX 64
/* Most basic types whose file extent is remembered per registered representation. */
#define TSR_DATAREP_EXTENTS_MAX 64
/* Deepest datatype nesting the signature walk follows (datarep.c). */
#define TSR_TYPE_DEPTH_MAX 64
/* Largest staging buffer (of a non-native data representation) a file keeps between
 * accesses; larger ones are freed after each (a fresh buffer's first touch costs more than
 * the byte swapping itself). */
#define TSR_STAGING_KEEP_BYTES_MAX (64u << 20)
/* Most bytes packed per MPI_Pack call while converting (MPI's counts are int). */
#define TSR_PACK_BYTES_MAX (1 << 30)

/* A data representation other than native (datarep.c); NULL stands for native. */
struct tsr_datarep;

/* Most hints read from the file named by $ROMIO_HINTS, and its largest size. */
#define TSR_SITE_HINTS_MAX 256
#define TSR_SITE_HINTS_FILE_BYTES_MAX (64 << 10)

/* The MPI library's own PMPI_NAME, the next definition after this library's
 * (dlsym(RTLD_NEXT)), called with the arguments that follow: found on first use and cached
 * per call site. If the MPI does not define it (the shim loaded after the MPI library), the
 * call fails with MPI_ERR_INTERN and a message naming it. */
int tsr_missing_symbol(const char *name);
#define TSR_NEXT(NAME, ...)                                                                 \
    __extension__({                                                                         \
        static void *tsr_slot_;                                                             \
        __typeof__(&PMPI_##NAME) tsr_next_ =                                                \
            (__typeof__(&PMPI_##NAME))tsr_next_symbol(&tsr_slot_, "PMPI_" #NAME);           \
        tsr_next_ ? tsr_next_(__VA_ARGS__) : tsr_missing_symbol("PMPI_" #NAME);             \
    })

/* Defines MPI_NAME as another name of the shim's PMPI_NAME (in the file defining it). */
#define TSR_MPI_ALIAS(NAME)                                                                 \
    extern __typeof__(PMPI_##NAME) MPI_##NAME __attribute__((alias("PMPI_" #NAME)));

/* Where a data access starts. */
enum tsr_position {
    TSR_AT,         /* an explicit offset (_at forms) */
    TSR_INDIVIDUAL, /* the process's own file pointer */
    TSR_SHARED,     /* the shared file pointer, in the order the calls reach it */
    TSR_ORDERED     /* the shared file pointer, in rank order (collective) */
};

/* How a data access completes. */
enum tsr_completion {
    TSR_BLOCKING,
    TSR_NONBLOCKING, /* completes in the call; a generalized request reports it */
    TSR_SPLIT_BEGIN  /* completes in the call; the matching _end reports it */
};

struct tsr_file {
    MPI_File handle;        /* the PMPI handle (of /dev/null) the program holds */
    TesseraFile *file;
    MPI_Comm comm;          /* a duplicate of the communicator the file was opened on */
    int rank, size;
    int amode;
    char path[TSR_PATH_BYTES_MAX]; /* the Tessera path */
    uint64_t handle_id;     /* the Tessera file handle */
    MPI_Info hints;         /* the hints set so far (open, set_info, set_view) */
    /* The view. */
    MPI_Offset displacement;
    MPI_Datatype etype, filetype; /* our own references (duplicates of derived types) */
    MPI_Count etype_bytes;
    MPI_Offset pointer;     /* the individual file pointer, in etypes */
    int atomic;
    /* The shared file pointer: a side file named after the handle and an id that the
     * opening processes agreed on, opened on first use. Its value counts etypes from
     * shared_base. */
    char shared_name[64];
    TesseraSharedPointer *shared;
    MPI_Offset shared_base;
    /* An active split collective. */
    int split_active;
    MPI_Count split_bytes;
    uint64_t stripe_unit_bytes;
    uint32_t server_count;
    /* Collective I/O, from the hints (zero: the default). */
    char coll_method[24];   /* tessera_coll: two_phase, server_directed, independent */
    uint64_t cb_buffer_size;
    uint32_t cb_nodes;
    int cb_read_disabled, cb_write_disabled; /* romio_cb_read/write=disable: independent */
    int cb_read_enabled, cb_write_enabled;   /* =enable: the method even if nothing interleaves */
    int ds_read_disabled, ds_write_disabled; /* romio_ds_read/write=disable: no sieve method */
    /* Opened with write rights alone (MPI_MODE_WRONLY on a file the program may not read):
     * writes cannot sieve, which reads. */
    int write_only_rights;
    /* The view's data representation: NULL for native and internal (the memory's bytes),
     * its name as given to set_view ("" before any). */
    const struct tsr_datarep *datarep;
    char datarep_name[MPI_MAX_DATAREP_STRING + 1];
    /* The view's etype and file type rebuilt with a non-native representation's sizes (the
     * file owns them; NULL for native). */
    TesseraDatatype *owned_etree, *owned_ftree;
    int empty_view; /* the file type selects no bytes: only empty accesses are possible */
    /* The staging buffer kept for the next access (at most TSR_STAGING_KEEP_BYTES_MAX). */
    void *staging;
    size_t staging_bytes;
};

/* core.c */
/* Completes a nonblocking collective that `started` reports, giving the processor away
 * while the other processes are not there yet (bounded by TSR_COLLECTIVE_WAIT_S_MAX). */
int tsr_wait(int started, MPI_Request *request);
const char *tessera_mpiio_last_error(void);
int tessera_mpiio_cache_stats(TesseraCacheStats *out);
int tessera_mpiio_write_back_stats(TesseraWriteBackStats *out);
TesseraClient *tsr_client(int *mpi_error);
/* tsr_client, the connection made (if this call makes it) with the client cache that the
 * hints tessera_client_cache and tessera_client_demote of `info` ask for. */
TesseraClient *tsr_client_with(MPI_Info info, int *mpi_error);
struct tsr_file *tsr_lookup(MPI_File handle);
int tsr_register(struct tsr_file *file);
void tsr_unregister(struct tsr_file *file);
int tsr_error(int error_class, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
int tsr_tessera_error(int tessera_code, const char *what, const char *path);
int tsr_raise(struct tsr_file *file, int code);
int tsr_raise_default(int code);
int tsr_hint(MPI_Info info, const char *key, char *value, int value_bytes);
/* The file's shared file pointer, its side file opened on first use. */
int tsr_shared_pointer(struct tsr_file *file, TesseraSharedPointer **out);

/* hints.c */
int tsr_site_hints(MPI_Info given, MPI_Info *merged);
void tsr_status(MPI_Status *status, MPI_Count bytes);

/* types.c */
int tsr_type(MPI_Datatype type, const TesseraDatatype **out);
int tsr_type_is_contiguous(MPI_Datatype type, MPI_Count *bytes);
/* The pieces datarep.c rebuilds a type from in another representation: an MPI error for a
 * failed Tessera constructor, whether a type is predefined, and one combiner applied to
 * converted children. */
int tsr_type_failed(int tessera_code, const char *what);
int tsr_is_named(MPI_Datatype type);
int tsr_convert_derived(int combiner, const int *ints, const MPI_Aint *addresses,
                        const TesseraDatatype **children, int child_count,
                        TesseraDatatype **out);

/* datarep.c */
int tsr_type_in_datarep(const struct tsr_datarep *rep, MPI_Datatype type,
                        TesseraDatatype **out);
int tsr_datarep_lookup(const char *name, const struct tsr_datarep **out);
const char *tsr_datarep_name(const struct tsr_datarep *rep);
int tsr_datarep_file_bytes(const struct tsr_datarep *rep, MPI_Count count, MPI_Datatype type,
                           MPI_Count *bytes);
int tsr_datarep_encode(const struct tsr_datarep *rep, const void *memory, MPI_Count count,
                       MPI_Datatype type, void *file, MPI_Count file_bytes);
int tsr_datarep_decode(const struct tsr_datarep *rep, const void *file, MPI_Count file_bytes,
                       void *memory, MPI_Count count, MPI_Datatype type);

/* file.c */
int tsr_apply_hints(struct tsr_file *file, MPI_Info info);

/* data.c */
int tsr_transfer(struct tsr_file *file, int write, MPI_Offset offset, void *buffer,
                 MPI_Count count, MPI_Datatype type, MPI_Count *bytes, const char *op);

#endif
