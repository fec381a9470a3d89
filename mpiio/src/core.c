/* The shim's process-wide state: the table from MPI_File handles to Tessera files, which
 * names are Tessera's, the one cluster connection, and errors.
 *
 * Errors leave as MPI error codes whose class is the MPI class the failure maps to
 * (tsr_tessera_error). Where the MPI library keeps a string added to a dynamic code
 * (Open MPI), each class gets one dynamic code whose string is replaced by the latest
 * message, so MPI_Error_string shows Tessera's message; where it does not (MPICH 4.0 mixes
 * dynamic codes of predefined classes with its error stacks), the class itself is returned.
 * The message is printed to stderr when $TESSERA_MPIIO_VERBOSE is set or before an
 * MPI_ERRORS_ARE_FATAL handler aborts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

static pthread_mutex_t tsr_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tsr_file *tsr_files[TSR_OPEN_FILES_MAX];
static TesseraClient *tsr_cluster;

/* The latest message of this thread, for stderr and for tessera_mpiio_last_error(): one per
 * thread, so that another thread's error neither replaces nor tears it while it is read. */
static _Thread_local char tsr_message[TSR_MESSAGE_BYTES_MAX];

/* One dynamic code per error class (index: class), and whether strings set on them stick. */
#define TSR_CLASSES_MAX 128
static int tsr_class_codes[TSR_CLASSES_MAX];
static int tsr_dynamic_codes = -1; /* -1: not probed yet; 0: no; 1: yes */

/* The call TSR_NEXT could not make: the message goes to stderr whatever the verbosity, since
 * no file the MPI serves itself can work in this process. */
int tsr_missing_symbol(const char *name) {
    int code = tsr_error(MPI_ERR_INTERN,
                         "tessera: the MPI library defines no %s after libtessera_mpiio.so "
                         "(dlsym(RTLD_NEXT) found none): load the shim before the MPI library "
                         "(LD_PRELOAD, or link it before -lmpi)", name);
    if (!getenv("TESSERA_MPIIO_VERBOSE"))
        fprintf(stderr, "%s\n", tessera_mpiio_last_error());
    return code;
}

/* The client cache counters of this process's connection (all zeros without a cache, or
 * before the first open): what the tessera_client_cache hint did. */
/* The process's connection to the cluster, or NULL before the first open. */
static TesseraClient *tsr_connected(void) {
    pthread_mutex_lock(&tsr_lock);
    TesseraClient *client = tsr_cluster;
    pthread_mutex_unlock(&tsr_lock);
    return client;
}

int tessera_mpiio_cache_stats(TesseraCacheStats *out) {
    TesseraClient *client = tsr_connected();
    if (client == NULL) {
        memset(out, 0, sizeof *out);
        return TESSERA_OK;
    }
    return tessera_client_cache_stats(client, out);
}

/* The write-back counters of this process's connection (all zeros without write-back, or
 * before the first open): what the tessera_write_back hint did. */
int tessera_mpiio_write_back_stats(TesseraWriteBackStats *out) {
    TesseraClient *client = tsr_connected();
    if (client == NULL) {
        memset(out, 0, sizeof *out);
        return TESSERA_OK;
    }
    return tessera_client_write_back_stats(client, out);
}

/* The message of the last error the shim raised on the calling thread ("" if none). The text
 * is the thread's own: it stays as it is until that thread's next error. */
const char *tessera_mpiio_last_error(void) { return tsr_message; }

TesseraClient *tsr_client(int *mpi_error) { return tsr_client_with(MPI_INFO_NULL, mpi_error); }

/* The client cache the process's connection was made with (hints tessera_client_cache and
 * tessera_client_demote of the open that made it; none otherwise). */
static uint64_t tsr_cache_bytes;
static int tsr_cache_demote;
static int tsr_cache_write_back;

/* The cache of a connection made for hint tessera_write_back alone. */
#define TSR_WRITE_BACK_CACHE_BYTES_DEFAULT (64ull << 20)

/* Hint tessera_write_back of `info`: 1 for enable (or true), 0 for disable (or false) or
 * unset; another value is ignored, and said so. */
static int tsr_write_back_hint(MPI_Info info) {
    char text[TSR_HINT_BYTES_MAX];
    if (info == MPI_INFO_NULL || !tsr_hint(info, "tessera_write_back", text, sizeof text))
        return 0;
    if (strcmp(text, "enable") == 0 || strcmp(text, "true") == 0)
        return 1;
    if (strcmp(text, "disable") != 0 && strcmp(text, "false") != 0)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_write_back=%s ignored: give enable "
                  "or disable", text);
    return 0;
}

/* The client cache hints of `info`: 1 if tessera_client_cache is set (to bytes, decimal),
 * with the demote mode of tessera_client_demote (off, eager or buffered; off when unset). A
 * bad value is ignored, and said so. */
static int tsr_cache_hints(MPI_Info info, uint64_t *bytes, int *demote) {
    char text[TSR_HINT_BYTES_MAX];
    if (info == MPI_INFO_NULL || !tsr_hint(info, "tessera_client_cache", text, sizeof text))
        return 0;
    char *end = NULL;
    unsigned long long parsed = strtoull(text, &end, 10);
    if (end == text || *end != '\0') {
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_client_cache=%s ignored: not a "
                  "number of bytes", text);
        return 0;
    }
    *bytes = parsed;
    *demote = TESSERA_DEMOTE_OFF;
    if (tsr_hint(info, "tessera_client_demote", text, sizeof text)) {
        if (strcmp(text, "eager") == 0)
            *demote = TESSERA_DEMOTE_EAGER;
        else if (strcmp(text, "buffered") == 0)
            *demote = TESSERA_DEMOTE_BUFFERED;
        else if (strcmp(text, "off") != 0)
            tsr_error(MPI_ERR_INFO_VALUE, "tessera: hint tessera_client_demote=%s ignored: "
                      "give off, eager or buffered", text);
    }
    return 1;
}

TesseraClient *tsr_client_with(MPI_Info info, int *mpi_error) {
    uint64_t cache_bytes = 0;
    int demote = TESSERA_DEMOTE_OFF;
    int cached = tsr_cache_hints(info, &cache_bytes, &demote);
    int write_back = tsr_write_back_hint(info);
    if (write_back && (!cached || cache_bytes == 0)) {
        /* Buffered writes live in the client cache: one of a default size. */
        cached = 1;
        cache_bytes = TSR_WRITE_BACK_CACHE_BYTES_DEFAULT;
    }
    int connect_failed = 0, mismatch = 0;
    pthread_mutex_lock(&tsr_lock);
    if (tsr_cluster == NULL) {
        TesseraClient *client = NULL;
        int code = write_back ? tessera_connect_with_write_back(NULL, cache_bytes, demote, &client)
                   : cached   ? tessera_connect_with_cache(NULL, cache_bytes, demote, &client)
                              : tessera_connect(NULL, &client);
        if (code == TESSERA_OK) {
            tsr_cluster = client;
            tsr_cache_bytes = cached ? cache_bytes : 0;
            tsr_cache_demote = cached ? demote : TESSERA_DEMOTE_OFF;
            tsr_cache_write_back = write_back;
        } else {
            connect_failed = 1;
        }
    } else if (cached && (cache_bytes != tsr_cache_bytes || demote != tsr_cache_demote ||
                          write_back != tsr_cache_write_back)) {
        mismatch = 1;
    }
    TesseraClient *client = tsr_cluster;
    pthread_mutex_unlock(&tsr_lock);
    /* One connection per process: its cache is chosen by the open that makes it. */
    if (mismatch)
        tsr_error(MPI_ERR_INFO_VALUE, "tessera: hints tessera_client_cache=%llu, "
                  "tessera_write_back=%s ignored: this process's connection was made by an "
                  "earlier open with a cache of %llu bytes, write-back %s",
                  (unsigned long long)cache_bytes, write_back ? "enable" : "disable",
                  (unsigned long long)tsr_cache_bytes,
                  tsr_cache_write_back ? "enabled" : "disabled");
    /* tsr_error takes the lock itself. */
    if (connect_failed)
        *mpi_error = tsr_error(MPI_ERR_IO, "tessera: cannot reach the cluster: %s",
                               tessera_last_error());
    return client;
}

/* Opens the shared file pointer's side file on first use. */
int tsr_shared_pointer(struct tsr_file *f, TesseraSharedPointer **out) {
    if (f->shared == NULL) {
        int rc = MPI_SUCCESS;
        TesseraClient *client = tsr_client(&rc);
        if (client == NULL)
            return rc;
        int code = tessera_shared_pointer_open(client, f->shared_name, &f->shared);
        if (code != TESSERA_OK)
            return tsr_tessera_error(code, "shared file pointer of", f->path);
    }
    *out = f->shared;
    return MPI_SUCCESS;
}

struct tsr_file *tsr_lookup(MPI_File handle) {
    if (handle == MPI_FILE_NULL)
        return NULL;
    struct tsr_file *found = NULL;
    pthread_mutex_lock(&tsr_lock);
    for (int i = 0; i < TSR_OPEN_FILES_MAX; i++)
        if (tsr_files[i] != NULL && tsr_files[i]->handle == handle) {
            found = tsr_files[i];
            break;
        }
    pthread_mutex_unlock(&tsr_lock);
    return found;
}

int tsr_register(struct tsr_file *file) {
    int registered = 0;
    pthread_mutex_lock(&tsr_lock);
    for (int i = 0; i < TSR_OPEN_FILES_MAX && !registered; i++)
        if (tsr_files[i] == NULL) {
            tsr_files[i] = file;
            registered = 1;
        }
    pthread_mutex_unlock(&tsr_lock);
    if (registered)
        return MPI_SUCCESS;
    return tsr_error(MPI_ERR_NO_MEM,
                     "tessera: %s: more than %d Tessera files open (TSR_OPEN_FILES_MAX)",
                     file->path, TSR_OPEN_FILES_MAX);
}

void tsr_unregister(struct tsr_file *file) {
    pthread_mutex_lock(&tsr_lock);
    for (int i = 0; i < TSR_OPEN_FILES_MAX; i++)
        if (tsr_files[i] == file)
            tsr_files[i] = NULL;
    pthread_mutex_unlock(&tsr_lock);
}

/* Does this MPI keep strings added to a dynamic code of a predefined class? */
static int tsr_probe_dynamic_codes(void) {
    int code;
    if (PMPI_Add_error_code(MPI_ERR_OTHER, &code) != MPI_SUCCESS)
        return 0;
    tsr_class_codes[MPI_ERR_OTHER] = code;
    const char *probe = "tessera probe";
    if (PMPI_Add_error_string(code, (char *)probe) != MPI_SUCCESS)
        return 0;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0, error_class = -1;
    PMPI_Error_string(code, text, &length);
    PMPI_Error_class(code, &error_class);
    return strcmp(text, probe) == 0 && error_class == MPI_ERR_OTHER;
}

int tsr_error(int error_class, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(tsr_message, sizeof tsr_message, format, args);
    va_end(args);
    if (getenv("TESSERA_MPIIO_VERBOSE"))
        fprintf(stderr, "%s\n", tsr_message);
    /* The lock keeps the class codes; the message is this thread's alone. */
    pthread_mutex_lock(&tsr_lock);
    int code = error_class;
    int initialized = 0;
    PMPI_Initialized(&initialized);
    if (initialized && error_class > 0 && error_class < TSR_CLASSES_MAX) {
        if (tsr_dynamic_codes < 0)
            tsr_dynamic_codes = tsr_probe_dynamic_codes();
        if (tsr_dynamic_codes) {
            if (tsr_class_codes[error_class] == 0 &&
                PMPI_Add_error_code(error_class, &tsr_class_codes[error_class]) != MPI_SUCCESS)
                tsr_class_codes[error_class] = 0;
            if (tsr_class_codes[error_class] != 0) {
                char text[MPI_MAX_ERROR_STRING];
                size_t length = strlen(tsr_message);
                if (length >= sizeof text)
                    length = sizeof text - 1; /* MPI keeps strings this long at most */
                memcpy(text, tsr_message, length);
                text[length] = '\0';
                PMPI_Add_error_string(tsr_class_codes[error_class], text);
                code = tsr_class_codes[error_class];
            }
        }
    }
    pthread_mutex_unlock(&tsr_lock);
    return code;
}

int tsr_tessera_error(int tessera_code, const char *what, const char *path) {
    int error_class;
    switch (tessera_code) {
    case TESSERA_ERR_NOT_FOUND:
        error_class = MPI_ERR_NO_SUCH_FILE;
        break;
    case TESSERA_ERR_EXISTS:
        error_class = MPI_ERR_FILE_EXISTS;
        break;
    case TESSERA_ERR_NOT_DIRECTORY:
    case TESSERA_ERR_IS_DIRECTORY:
    case TESSERA_ERR_UNKNOWN_HANDLE:
        error_class = MPI_ERR_BAD_FILE;
        break;
    case TESSERA_ERR_NOT_EMPTY:
        error_class = MPI_ERR_FILE_IN_USE;
        break;
    case TESSERA_ERR_INVALID_ARGUMENT:
    case TESSERA_ERR_LIMIT_EXCEEDED:
        error_class = MPI_ERR_ARG;
        break;
    case TESSERA_ERR_PERMISSION_DENIED:
        error_class = MPI_ERR_ACCESS;
        break;
    case TESSERA_ERR_NO_SPACE:
        error_class = MPI_ERR_NO_SPACE;
        break;
    default:
        error_class = MPI_ERR_IO;
        break;
    }
    return tsr_error(error_class, "tessera: %s %s: %s", what, path, tessera_last_error());
}

/* Prints the message and aborts when `handler` is MPI_ERRORS_ARE_FATAL. */
static void tsr_fatal_check(MPI_Errhandler handler, int code) {
    if (handler == MPI_ERRORS_ARE_FATAL) {
        fprintf(stderr, "%s\n", tsr_message);
        PMPI_Abort(MPI_COMM_WORLD, code);
    }
}

/* Hands `code` to the error handler of `file` (the one the program attached to its handle)
 * and returns it. */
int tsr_raise(struct tsr_file *file, int code) {
    if (code == MPI_SUCCESS)
        return code;
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    PMPI_File_get_errhandler(file->handle, &handler);
    tsr_fatal_check(handler, code);
    if (handler != MPI_ERRORS_RETURN)
        PMPI_File_call_errhandler(file->handle, code);
    /* The handle from MPI_File_get_errhandler is not freed: MPICH's ROMIO hands out no
     * reference with it (freeing it breaks the program's own), and Open MPI's costs only a
     * count. */
    return code;
}

/* As tsr_raise for calls without a file (open, delete): MPI_FILE_NULL's error handler. A
 * program-defined one is called on a scratch handle of /dev/null, which inherits it. */
int tsr_raise_default(int code) {
    if (code == MPI_SUCCESS)
        return code;
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    PMPI_File_get_errhandler(MPI_FILE_NULL, &handler);
    tsr_fatal_check(handler, code);
    if (handler != MPI_ERRORS_RETURN && handler != MPI_ERRHANDLER_NULL) {
        MPI_File scratch;
        if (TSR_NEXT(File_open, MPI_COMM_SELF, "/dev/null", MPI_MODE_RDONLY, MPI_INFO_NULL,
                     &scratch) == MPI_SUCCESS) {
            PMPI_File_call_errhandler(scratch, code);
            TSR_NEXT(File_close, &scratch);
        }
    }
    /* The handle from MPI_File_get_errhandler is not freed: MPICH's ROMIO hands out no
     * reference with it (freeing it breaks the program's own), and Open MPI's costs only a
     * count. */
    return code;
}

/* Reads hint `key` into `value`; returns 1 if it is set. */
int tsr_hint(MPI_Info info, const char *key, char *value, int value_bytes) {
    int flag = 0;
    if (info == MPI_INFO_NULL)
        return 0;
    PMPI_Info_get(info, (char *)key, value_bytes - 1, value, &flag);
    if (flag)
        value[value_bytes - 1] = '\0';
    return flag;
}

void tsr_status(MPI_Status *status, MPI_Count bytes) {
    if (status == MPI_STATUS_IGNORE)
        return;
    PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    status->MPI_ERROR = MPI_SUCCESS;
}

/* Completes the nonblocking collective `request` that `started` reports, giving the processor
 * away between tests: first by sched_yield, then, after TSR_WAIT_YIELDS_MAX tests, by sleeping
 * TSR_WAIT_SLEEP_US between them. MPI's blocking collectives spin (MPICH over UCX does): with
 * the processes of a job and Tessera's servers sharing a node's cores, a process that waits in
 * a collective for the others takes the processor from the servers doing its peers' I/O (a
 * collective write under MPICH with 4 processes on 2 cores ran at a third of the independent
 * one), and sched_yield alone still hands most of it back to the waiting processes. A wait
 * longer than TSR_COLLECTIVE_WAIT_S_MAX fails (the request is left behind: MPI cannot cancel
 * a collective, and the communicator is unusable after). */
int tsr_wait(int started, MPI_Request *request) {
    if (started != MPI_SUCCESS)
        return started;
    double deadline = PMPI_Wtime() + TSR_COLLECTIVE_WAIT_S_MAX;
    for (unsigned long tests = 1;; tests++) {
        int done = 0;
        int rc = PMPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (tests < TSR_WAIT_YIELDS_MAX) {
            sched_yield();
            continue;
        }
        if (tests % 1024 == 0 && PMPI_Wtime() > deadline)
            return tsr_error(MPI_ERR_OTHER, "tessera: a collective exchange of the file's "
                             "processes took over %d s (TSR_COLLECTIVE_WAIT_S_MAX)",
                             TSR_COLLECTIVE_WAIT_S_MAX);
        struct timespec pause = {0, TSR_WAIT_SLEEP_US * 1000};
        nanosleep(&pause, NULL);
    }
}
