/* Views and data representations, each against the MPI's own MPI-IO on a local file:
 * - a process whose file type selects no bytes takes part in set_view and in collective
 *   accesses like the others (this hung: set_view returned early on that process);
 * - MPI_DISPLACEMENT_CURRENT on a file opened with MPI_MODE_SEQUENTIAL;
 * - file types and etypes whose typemaps are negative, decreasing or overlapping are refused;
 * - external32: big-endian with the standard's sizes, byte for byte with the MPI's own where
 *   it converts; round trips of ints, doubles, a struct and a derived file type;
 * - MPI_Register_datarep: the program's conversion and extent functions, duplicates, errors;
 * - the cost of external32 on a 64 MiB write.
 * A hang fails the test by alarm() rather than by the runner's timeout. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "common.h"

#define INTS_PER_RANK 8

/* The shim's last message (it is preloaded), or "" without it. */
static const char *shim_message(void) {
    const char *(*last)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT,
                                                             "tessera_mpiio_last_error");
    return last ? last() : "";
}

static void open_both(const char *tessera, const char *oracle, int amode, MPI_File fh[2]) {
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, amode, MPI_INFO_NULL, &fh[0]));
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, oracle, amode, MPI_INFO_NULL, &fh[1]));
    for (int i = 0; i < 2; i++)
        CHECK_MPI(MPI_File_set_errhandler(fh[i], MPI_ERRORS_RETURN));
}

static void remove_both(const char *tessera, const char *oracle) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        MPI_File_delete(tessera, MPI_INFO_NULL);
        MPI_File_delete(oracle, MPI_INFO_NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every other process gets a file type that selects nothing (an empty indexed block resized
 * to 8 ints); the others a block of INTS_PER_RANK ints at their rank. Collective writes and
 * reads go through both. */
static void empty_file_types(int rank, int size) {
    char tessera[512], oracle[512];
    test_names("views-empty", tessera, oracle, sizeof tessera);
    MPI_File fh[2];
    open_both(tessera, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR, fh);
    int empty = rank % 2 == 1;
    MPI_Datatype nothing, selected, filetype;
    int no_displacements[1] = {0};
    CHECK_MPI(MPI_Type_create_indexed_block(0, 1, no_displacements, MPI_INT, &nothing));
    CHECK_MPI(MPI_Type_create_resized(nothing, 0, 8 * sizeof(int), &selected));
    MPI_Type_free(&nothing);
    if (!empty) {
        MPI_Type_free(&selected);
        int displacement = rank * INTS_PER_RANK;
        CHECK_MPI(MPI_Type_create_indexed_block(1, INTS_PER_RANK, &displacement, MPI_INT,
                                                &nothing));
        CHECK_MPI(MPI_Type_create_resized(nothing, 0, (MPI_Aint)(size * INTS_PER_RANK *
                                                                 sizeof(int)), &selected));
        MPI_Type_free(&nothing);
    }
    filetype = selected;
    CHECK_MPI(MPI_Type_commit(&filetype));
    int data[INTS_PER_RANK], back[INTS_PER_RANK];
    for (int i = 0; i < INTS_PER_RANK; i++)
        data[i] = 1000 * (rank + 1) + i;
    for (int k = 0; k < 2; k++) {
        CHECK_MPI(MPI_File_set_view(fh[k], 0, MPI_INT, filetype, "native", MPI_INFO_NULL));
        MPI_Status status;
        CHECK_MPI(MPI_File_write_all(fh[k], data, empty ? 0 : INTS_PER_RANK, MPI_INT, &status));
        int count = -1;
        MPI_Get_count(&status, MPI_INT, &count);
        CHECK(count == (empty ? 0 : INTS_PER_RANK), "write_all counted %d", count);
        CHECK_MPI(MPI_File_read_at_all(fh[k], 0, back, empty ? 0 : INTS_PER_RANK, MPI_INT,
                                       &status));
        for (int i = 0; !empty && i < INTS_PER_RANK; i++)
            CHECK(back[i] == data[i], "file %d int %d is %d, wrote %d", k, i, back[i], data[i]);
        MPI_Offset offset = -1;
        CHECK_MPI(MPI_File_get_position(fh[k], &offset));
        CHECK(offset == (empty ? 0 : INTS_PER_RANK), "the pointer is at %lld", (long long)offset);
    }
    /* Data through a view that selects nothing cannot be placed: Tessera says so. */
    if (empty)
        CHECK_CLASS(MPI_File_write_at(fh[0], 0, data, 1, MPI_INT, MPI_STATUS_IGNORE),
                    MPI_ERR_ARG);
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_close(&fh[k]));
    long long written[INTS_PER_RANK * 64];
    int mine = 0;
    if (!empty)
        for (int i = 0; i < INTS_PER_RANK; i++)
            written[mine++] = rank * INTS_PER_RANK + i;
    int counts[64], displs[64], total = 0;
    MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) {
        displs[r] = total;
        total += counts[r];
    }
    long long all[INTS_PER_RANK * 64];
    MPI_Allgatherv(written, mine, MPI_LONG_LONG, all, counts, displs, MPI_LONG_LONG,
                   MPI_COMM_WORLD);
    check_same_files(tessera, oracle, all, total);
    MPI_Type_free(&filetype);
    remove_both(tessera, oracle);
    PASS("views: processes whose file type selects no bytes take part in set_view, "
         "write_all and read_at_all (no hang); the data equal the MPI's own");
}

/* MPI_DISPLACEMENT_CURRENT: the shared pointer's byte, on a sequential file. */
static void displacement_current(int rank, int size) {
    char tessera[512], oracle[512];
    test_names("views-current", tessera, oracle, sizeof tessera);
    MPI_File fh[2];
    open_both(tessera, oracle, MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_SEQUENTIAL, fh);
    int data[3] = {rank, rank + 100, rank + 200};
    MPI_Offset disp[2];
    for (int k = 0; k < 2; k++) {
        CHECK_MPI(MPI_File_write_ordered(fh[k], data, 3, MPI_INT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_set_view(fh[k], MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native",
                                    MPI_INFO_NULL));
        MPI_Datatype etype, filetype;
        char rep[MPI_MAX_DATAREP_STRING];
        CHECK_MPI(MPI_File_get_view(fh[k], &disp[k], &etype, &filetype, rep));
        CHECK(strcmp(rep, "native") == 0, "datarep %s", rep);
        /* Through the new view, the shared pointer starts at its displacement. */
        int more = 7000 + rank;
        CHECK_MPI(MPI_File_write_ordered(fh[k], &more, 1, MPI_INT, MPI_STATUS_IGNORE));
    }
    CHECK(disp[0] == (MPI_Offset)(3 * size * sizeof(int)) && disp[0] == disp[1],
          "MPI_DISPLACEMENT_CURRENT gave %lld, the MPI's own %lld, expected %lld",
          (long long)disp[0], (long long)disp[1], (long long)(3 * size * sizeof(int)));
    /* A sequential file takes only MPI_DISPLACEMENT_CURRENT (MPI-3.1 13.3). */
    CHECK_CLASS(MPI_File_set_view(fh[0], 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL),
                MPI_ERR_ARG);
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_close(&fh[k]));
    long long written[4 * 64];
    for (int i = 0; i < 4 * size; i++)
        written[i] = i;
    check_same_files(tessera, oracle, written, 4 * size);
    remove_both(tessera, oracle);
    /* Any other file refuses it, as the MPI's own does. */
    open_both(tessera, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR, fh);
    CHECK_CLASS(MPI_File_set_view(fh[0], MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native",
                                  MPI_INFO_NULL), MPI_ERR_ARG);
    int oracle_code = MPI_File_set_view(fh[1], MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT,
                                        "native", MPI_INFO_NULL);
    CHECK(oracle_code != MPI_SUCCESS, "the MPI's own accepted MPI_DISPLACEMENT_CURRENT");
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_close(&fh[k]));
    remove_both(tessera, oracle);
    PASS("views: MPI_DISPLACEMENT_CURRENT on a sequential file is the shared pointer's byte "
         "(%lld, as the MPI's own); refused elsewhere (MPI_ERR_ARG; the MPI's own: class %d)",
         (long long)disp[0], error_class_of(oracle_code));
}

/* A type of two blocks of `lengths` ints at int displacements `at`. */
static MPI_Datatype two_blocks(int first, int second, int length) {
    int lengths[2] = {length, length}, at[2] = {first, second};
    MPI_Datatype type;
    CHECK_MPI(MPI_Type_indexed(2, lengths, at, MPI_INT, &type));
    CHECK_MPI(MPI_Type_commit(&type));
    return type;
}

static void illegal_types(int rank) {
    char tessera[512], oracle[512];
    test_names("views-illegal", tessera, oracle, sizeof tessera);
    MPI_File fh[2];
    open_both(tessera, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR, fh);
    struct {
        const char *what;
        MPI_Datatype etype, filetype;
    } cases[4];
    MPI_Datatype negative = two_blocks(-1, 2, 1), decreasing = two_blocks(3, 1, 1),
                 overlapping = two_blocks(0, 1, 2);
    /* An etype whose entries decrease: two ints, the second before the first. */
    int lengths[2] = {1, 1};
    MPI_Aint at[2] = {4, 0};
    MPI_Datatype ints[2] = {MPI_INT, MPI_INT}, backwards;
    CHECK_MPI(MPI_Type_create_struct(2, lengths, at, ints, &backwards));
    CHECK_MPI(MPI_Type_commit(&backwards));
    /* Tiles that overlap (2 ints resized to an extent of 1 int) are accepted, as by both
     * MPIs: PnetCDF sets such file types and accesses one instance. */
    MPI_Datatype pair, short_extent;
    CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &pair));
    CHECK_MPI(MPI_Type_create_resized(pair, 0, sizeof(int), &short_extent));
    CHECK_MPI(MPI_Type_commit(&short_extent));
    cases[0].what = "a negative displacement";
    cases[0].etype = MPI_INT, cases[0].filetype = negative;
    cases[1].what = "decreasing displacements";
    cases[1].etype = MPI_INT, cases[1].filetype = decreasing;
    cases[2].what = "overlapping blocks";
    cases[2].etype = MPI_INT, cases[2].filetype = overlapping;
    cases[3].what = "a decreasing etype";
    cases[3].etype = backwards, cases[3].filetype = backwards;
    char oracle_classes[256] = "";
    for (int c = 0; c < 4; c++) {
        CHECK_CLASS(MPI_File_set_view(fh[0], 0, cases[c].etype, cases[c].filetype, "native",
                                      MPI_INFO_NULL), MPI_ERR_TYPE);
        /* A fresh handle of the MPI's own each time: MPICH's ROMIO crashes on a set_view
         * after a refused one. */
        CHECK_MPI(MPI_File_close(&fh[1]));
        CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR,
                                MPI_INFO_NULL, &fh[1]));
        CHECK_MPI(MPI_File_set_errhandler(fh[1], MPI_ERRORS_RETURN));
        int code = MPI_File_set_view(fh[1], 0, cases[c].etype, cases[c].filetype, "native",
                                     MPI_INFO_NULL);
        size_t used = strlen(oracle_classes);
        snprintf(oracle_classes + used, sizeof oracle_classes - used, "%s%s %d",
                 c ? ", " : "", cases[c].what, error_class_of(code));
    }
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_INT, short_extent, "native", MPI_INFO_NULL));
    CHECK_MPI(MPI_File_set_view(fh[1], 0, MPI_INT, short_extent, "native", MPI_INFO_NULL));
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_set_view(fh[k], 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    /* The view before the refusals still holds: the default one. */
    int value = 42 + rank, back = 0;
    CHECK_MPI(MPI_File_write_at(fh[0], rank * sizeof(int), &value, 1, MPI_INT,
                                MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_read_at(fh[0], rank * sizeof(int), &back, 1, MPI_INT,
                               MPI_STATUS_IGNORE));
    CHECK(back == value, "read %d after the refused views, wrote %d", back, value);
    /* One process's illegal view fails set_view on every process, without a hang, and no
     * process keeps a new view. */
    MPI_Datatype mine = rank == 1 ? decreasing : MPI_INT;
    int code = MPI_File_set_view(fh[0], 4, MPI_INT, mine, "native", MPI_INFO_NULL);
    CHECK(code != MPI_SUCCESS, "set_view succeeded though process 1's file type is illegal");
    if (rank == 1)
        CHECK(error_class_of(code) == MPI_ERR_TYPE, "class %d", error_class_of(code));
    MPI_Offset disp = -1;
    MPI_Datatype etype, filetype;
    char rep[MPI_MAX_DATAREP_STRING];
    CHECK_MPI(MPI_File_get_view(fh[0], &disp, &etype, &filetype, rep));
    CHECK(disp == 0, "a refused view left displacement %lld", (long long)disp);
    /* Overlap is allowed in a file open read-only (MPI-3.1 13.3). */
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_close(&fh[k]));
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh[0]));
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_INT, overlapping, "native", MPI_INFO_NULL));
    int four[4];
    CHECK_MPI(MPI_File_read_at(fh[0], 0, four, 4, MPI_INT, MPI_STATUS_IGNORE));
    CHECK(four[0] == 42 && four[1] == 43 && four[2] == 43, "overlapping read gave %d %d %d",
          four[0], four[1], four[2]);
    CHECK_MPI(MPI_File_close(&fh[0]));
    MPI_Type_free(&negative), MPI_Type_free(&decreasing), MPI_Type_free(&overlapping);
    MPI_Type_free(&backwards), MPI_Type_free(&pair), MPI_Type_free(&short_extent);
    remove_both(tessera, oracle);
    PASS("views: illegal typemaps are refused with MPI_ERR_TYPE (the MPI's own gives, by "
         "class, 0 for accepted: %s); one process's illegal view fails set_view on all, none "
         "keeps it; overlap is allowed read-only, overlapping tiles (as by the MPI's own)",
         oracle_classes);
}

/* ---- external32 ---------------------------------------------------------------------- */

static int big_endian_is(const unsigned char *bytes, const unsigned char *expected, int n) {
    return memcmp(bytes, expected, (size_t)n) == 0;
}

static void external32(int rank, int size) {
    char tessera[512], oracle[512];
    test_names("views-e32", tessera, oracle, sizeof tessera);
    MPI_File fh[2];
    open_both(tessera, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR, fh);
    /* Process 0 writes one of each kind at explicit external32 offsets (etype MPI_BYTE);
     * set_view is collective, so every process sets the views. */
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_BYTE, MPI_BYTE, "external32", MPI_INFO_NULL));
    long double q = 1.0L;
    unsigned long long u = 0x0102030405060708ULL;
    if (rank == 0) {
        char rep[MPI_MAX_DATAREP_STRING];
        MPI_Offset disp;
        MPI_Datatype e, t;
        CHECK_MPI(MPI_File_get_view(fh[0], &disp, &e, &t, rep));
        CHECK(strcmp(rep, "external32") == 0, "get_view says %s", rep);
        MPI_Aint extent = 0;
        CHECK_MPI(MPI_File_get_type_extent(fh[0], MPI_LONG, &extent));
        CHECK(extent == 4, "the file extent of MPI_LONG in external32 is %ld", (long)extent);
        int i = 1;
        long l = -2;
        double d = 1.0;
        short s = 0x1234;
        CHECK_MPI(MPI_File_write_at(fh[0], 0, &i, 1, MPI_INT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_write_at(fh[0], 4, &l, 1, MPI_LONG, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_write_at(fh[0], 8, &d, 1, MPI_DOUBLE, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_write_at(fh[0], 16, &q, 1, MPI_LONG_DOUBLE, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_write_at(fh[0], 32, &s, 1, MPI_SHORT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_write_at(fh[0], 34, &u, 1, MPI_UNSIGNED_LONG_LONG,
                                    MPI_STATUS_IGNORE));
        /* A long that does not fit in external32's 4 bytes is a conversion error. */
        long huge = 1L << 40;
        CHECK_CLASS(MPI_File_write_at(fh[0], 42, &huge, 1, MPI_LONG, MPI_STATUS_IGNORE),
                    MPI_ERR_CONVERSION);
    }
    /* The raw bytes, through a native view. */
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    if (rank == 0) {
        unsigned char raw[42];
        CHECK_MPI(MPI_File_read_at(fh[0], 0, raw, 42, MPI_BYTE, MPI_STATUS_IGNORE));
        const unsigned char want_i[4] = {0, 0, 0, 1}, want_l[4] = {0xff, 0xff, 0xff, 0xfe},
                            want_d[8] = {0x3f, 0xf0, 0, 0, 0, 0, 0, 0},
                            want_q[16] = {0x3f, 0xff}, want_s[2] = {0x12, 0x34},
                            want_u[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        CHECK(big_endian_is(raw, want_i, 4), "int 1 is %02x%02x%02x%02x", raw[0], raw[1],
              raw[2], raw[3]);
        CHECK(big_endian_is(raw + 4, want_l, 4), "long -2 is not ff ff ff fe in 4 bytes");
        CHECK(big_endian_is(raw + 8, want_d, 8), "double 1.0 is not 3ff0000000000000");
        CHECK(big_endian_is(raw + 16, want_q, 16), "long double 1.0 is not binary128 3fff0..0");
        CHECK(big_endian_is(raw + 32, want_s, 2), "short 0x1234 is not 12 34");
        CHECK(big_endian_is(raw + 34, want_u, 8), "unsigned long long is not big-endian");
    }
    /* And back through external32. */
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_BYTE, MPI_BYTE, "external32", MPI_INFO_NULL));
    if (rank == 0) {
        int i2 = 0;
        long l2 = 0;
        double d2 = 0;
        long double q2 = 0;
        short s2 = 0;
        unsigned long long u2 = 0;
        CHECK_MPI(MPI_File_read_at(fh[0], 0, &i2, 1, MPI_INT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_read_at(fh[0], 4, &l2, 1, MPI_LONG, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_read_at(fh[0], 8, &d2, 1, MPI_DOUBLE, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_read_at(fh[0], 16, &q2, 1, MPI_LONG_DOUBLE, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_read_at(fh[0], 32, &s2, 1, MPI_SHORT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_read_at(fh[0], 34, &u2, 1, MPI_UNSIGNED_LONG_LONG,
                                   MPI_STATUS_IGNORE));
        CHECK(i2 == 1 && l2 == -2 && d2 == 1.0 && q2 == 1.0L && s2 == 0x1234 && u2 == u,
              "external32 round trip: %d %ld %g %Lg %d %llx", i2, l2, d2, q2, s2, u2);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* A struct in memory (int, double with padding) through a vector file type of int and
     * double blocks, collectively: each process's records interleave in the file. */
    struct record {
        int id;
        double value;
    } records[4], back[4];
    int lengths[2] = {1, 1};
    MPI_Aint at[2] = {offsetof(struct record, id), offsetof(struct record, value)};
    MPI_Datatype fields[2] = {MPI_INT, MPI_DOUBLE}, memory;
    CHECK_MPI(MPI_Type_create_struct(2, lengths, at, fields, &memory));
    CHECK_MPI(MPI_Type_commit(&memory));
    /* In the file a record is 12 bytes (4 + 8, no padding); the file type places this
     * process's records every `size` records: a contiguous etype-of-bytes view of 12-byte
     * blocks, built from the portable types so that MPI scales it to external32 itself. */
    MPI_Datatype file_record, strided, filetype;
    MPI_Aint file_at[2] = {0, 4};
    CHECK_MPI(MPI_Type_create_struct(2, lengths, file_at, fields, &file_record));
    CHECK_MPI(MPI_Type_create_resized(file_record, 0, 12, &strided));
    CHECK_MPI(MPI_Type_vector(4, 1, size, strided, &filetype));
    CHECK_MPI(MPI_Type_commit(&filetype));
    for (int i = 0; i < 4; i++) {
        records[i].id = rank * 10 + i;
        records[i].value = rank + i / 8.0;
    }
    CHECK_MPI(MPI_File_set_view(fh[0], 64 + rank * 12, MPI_BYTE, filetype, "external32",
                                MPI_INFO_NULL));
    CHECK_MPI(MPI_File_write_all(fh[0], records, 4, memory, MPI_STATUS_IGNORE));
    MPI_Status status;
    CHECK_MPI(MPI_File_read_at_all(fh[0], 0, back, 4, memory, &status));
    int count = -1;
    MPI_Get_count(&status, memory, &count);
    CHECK(count == 4, "read %d records", count);
    for (int i = 0; i < 4; i++)
        CHECK(back[i].id == records[i].id && back[i].value == records[i].value,
              "record %d came back as %d %g", i, back[i].id, back[i].value);
    MPI_Offset pointer = -1;
    CHECK_MPI(MPI_File_get_position(fh[0], &pointer));
    CHECK(pointer == 48, "the pointer moved %lld external32 bytes, not 48", (long long)pointer);
    /* Raw: record i of this process at 64 + (i * size + rank) * 12, big-endian. */
    CHECK_MPI(MPI_File_set_view(fh[0], 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    for (int i = 0; i < 4; i++) {
        unsigned char raw[12];
        CHECK_MPI(MPI_File_read_at(fh[0], 64 + (i * size + rank) * 12, raw, 12, MPI_BYTE,
                                   MPI_STATUS_IGNORE));
        int id = raw[0] << 24 | raw[1] << 16 | raw[2] << 8 | raw[3];
        uint64_t bits = 0;
        for (int b = 0; b < 8; b++)
            bits = bits << 8 | raw[4 + b];
        double value;
        memcpy(&value, &bits, 8);
        CHECK(id == records[i].id && value == records[i].value,
              "raw record %d is %d %g", i, id, value);
    }
    /* Byte for byte with the MPI's own external32 where it converts: ints and doubles through
     * a vector view. */
    int ints[INTS_PER_RANK];
    double doubles[INTS_PER_RANK];
    for (int i = 0; i < INTS_PER_RANK; i++) {
        ints[i] = rank * 1000 + i - 3;
        doubles[i] = rank + i * 0.25;
    }
    MPI_Datatype int_view, double_view;
    CHECK_MPI(MPI_Type_vector(INTS_PER_RANK, 1, size, MPI_INT, &int_view));
    CHECK_MPI(MPI_Type_vector(INTS_PER_RANK, 1, size, MPI_DOUBLE, &double_view));
    CHECK_MPI(MPI_Type_commit(&int_view));
    CHECK_MPI(MPI_Type_commit(&double_view));
    int oracle_converts = 1;
    for (int k = 0; k < 2; k++) {
        int code = MPI_File_set_view(fh[k], 1024 + rank * sizeof(int), MPI_INT, int_view,
                                     "external32", MPI_INFO_NULL);
        if (k == 1 && code != MPI_SUCCESS) {
            oracle_converts = 0;
            break;
        }
        CHECK_MPI(code);
        CHECK_MPI(MPI_File_write_all(fh[k], ints, INTS_PER_RANK, MPI_INT, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_set_view(fh[k], 2048 + rank * sizeof(double), MPI_DOUBLE,
                                    double_view, "external32", MPI_INFO_NULL));
        CHECK_MPI(MPI_File_write_all(fh[k], doubles, INTS_PER_RANK, MPI_DOUBLE,
                                     MPI_STATUS_IGNORE));
    }
    for (int k = 0; k < 2; k++)
        CHECK_MPI(MPI_File_close(&fh[k]));
    const char *verdict = "not compared: the MPI's own refuses external32";
    if (rank == 0 && oracle_converts) {
        MPI_Offset tsize = 0, osize = 0;
        unsigned char *t = read_whole(tessera, &tsize), *o = read_whole(oracle, &osize);
        size_t ints_bytes = (size_t)(INTS_PER_RANK * size) * 4,
               doubles_bytes = (size_t)(INTS_PER_RANK * size) * 8;
        CHECK(tsize >= (MPI_Offset)(2048 + doubles_bytes) &&
                  osize >= (MPI_Offset)(2048 + doubles_bytes),
              "files of %lld and %lld bytes", (long long)tsize, (long long)osize);
        /* The first int of the MPI's own file, big-endian or not. */
        int first = o[1024] << 24 | o[1025] << 16 | o[1026] << 8 | o[1027];
        if (first == -3) {
            CHECK(memcmp(t + 1024, o + 1024, ints_bytes) == 0, "the external32 ints differ "
                  "from the MPI's own");
            CHECK(memcmp(t + 2048, o + 2048, doubles_bytes) == 0, "the external32 doubles "
                  "differ from the MPI's own");
            verdict = "byte for byte equal to the MPI's own";
        } else {
            verdict = "not compared: the MPI's own external32 is not big-endian";
        }
        free(t);
        free(o);
    }
    if (rank == 0) {
        /* Also our own reading: int 0 of process 0 at 1024, big-endian. */
        MPI_Offset tsize = 0;
        unsigned char *t = read_whole(tessera, &tsize);
        CHECK(t[1024] == 0xff && t[1027] == 0xfd, "int -3 is %02x..%02x", t[1024], t[1027]);
        free(t);
    }
    MPI_Type_free(&memory), MPI_Type_free(&file_record), MPI_Type_free(&strided);
    MPI_Type_free(&filetype), MPI_Type_free(&int_view), MPI_Type_free(&double_view);
    remove_both(tessera, oracle);
    PASS("views: external32 is big-endian with the standard's sizes (long 4 bytes, long "
         "double binary128), round-trips int, long, double, long double, short, unsigned long "
         "long, a struct through a derived file type collectively; a long out of range is "
         "MPI_ERR_CONVERSION; ints and doubles through vector views %s", verdict);
}

/* ---- MPI_Register_datarep ------------------------------------------------------------ */

/* "wide-le": every int is 8 bytes, little-endian, in the file. */
static int wide_calls;

static int wide_extent(MPI_Datatype type, MPI_Aint *extent, void *state) {
    (void)state;
    if (type != MPI_INT)
        return MPI_ERR_TYPE;
    *extent = 8;
    return MPI_SUCCESS;
}

static int wide_write(void *user, MPI_Datatype type, int count, void *file,
                      MPI_Offset position, void *state) {
    (void)state;
    if (type != MPI_INT)
        return MPI_ERR_TYPE;
    wide_calls++;
    const int *values = (const int *)user + position;
    for (int i = 0; i < count; i++) {
        int64_t wide = values[i];
        memcpy((char *)file + 8 * i, &wide, 8);
    }
    return MPI_SUCCESS;
}

static int wide_read(void *user, MPI_Datatype type, int count, void *file, MPI_Offset position,
                     void *state) {
    (void)state;
    if (type != MPI_INT)
        return MPI_ERR_TYPE;
    wide_calls++;
    int *values = (int *)user + position;
    for (int i = 0; i < count; i++) {
        int64_t wide;
        memcpy(&wide, (char *)file + 8 * i, 8);
        values[i] = (int)wide;
    }
    return MPI_SUCCESS;
}

static int failing_write(void *user, MPI_Datatype type, int count, void *file,
                         MPI_Offset position, void *state) {
    (void)user, (void)type, (void)count, (void)file, (void)position, (void)state;
    return MPI_ERR_OTHER;
}

static void registered(int rank, int size) {
    char tessera[512];
    test_names("views-datarep", tessera, NULL, sizeof tessera);
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Register_datarep("wide-le", wide_read, wide_write, wide_extent, NULL));
    CHECK_CLASS(MPI_Register_datarep("wide-le", wide_read, wide_write, wide_extent, NULL),
                MPI_ERR_DUP_DATAREP);
    CHECK_CLASS(MPI_Register_datarep("external32", wide_read, wide_write, wide_extent, NULL),
                MPI_ERR_DUP_DATAREP);
    CHECK_MPI(MPI_Register_datarep("failing", wide_read, failing_write, wide_extent, NULL));
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    MPI_Datatype view;
    CHECK_MPI(MPI_Type_vector(INTS_PER_RANK, 1, size, MPI_INT, &view));
    CHECK_MPI(MPI_Type_commit(&view));
    CHECK_MPI(MPI_File_set_view(fh, rank * 8, MPI_INT, view, "wide-le", MPI_INFO_NULL));
    MPI_Aint extent = 0;
    CHECK_MPI(MPI_File_get_type_extent(fh, view, &extent));
    CHECK(extent == (MPI_Aint)((INTS_PER_RANK - 1) * size + 1) * 8, "the file extent of the "
          "view is %ld", (long)extent);
    int ints[INTS_PER_RANK], back[INTS_PER_RANK];
    for (int i = 0; i < INTS_PER_RANK; i++)
        ints[i] = -(rank * 100 + i);
    wide_calls = 0;
    CHECK_MPI(MPI_File_write_all(fh, ints, INTS_PER_RANK, MPI_INT, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_read_at_all(fh, 0, back, INTS_PER_RANK, MPI_INT, MPI_STATUS_IGNORE));
    CHECK(wide_calls >= 2, "the conversion functions ran %d times", wide_calls);
    for (int i = 0; i < INTS_PER_RANK; i++)
        CHECK(back[i] == ints[i], "int %d came back as %d, wrote %d", i, back[i], ints[i]);
    /* Raw: 8 bytes per int, little-endian, sign-extended. */
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    int64_t raw = 0;
    CHECK_MPI(MPI_File_read_at(fh, (MPI_Offset)(size + rank) * 8, &raw, 8, MPI_BYTE,
                               MPI_STATUS_IGNORE));
    CHECK(raw == ints[1], "raw int 1 is %lld", (long long)raw);
    /* A conversion function's failure, an extent function's refusal, an unknown name. */
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "failing", MPI_INFO_NULL));
    CHECK_CLASS(MPI_File_write_at(fh, 0, ints, 1, MPI_INT, MPI_STATUS_IGNORE),
                MPI_ERR_CONVERSION);
    CHECK_CLASS(MPI_File_set_view(fh, 0, MPI_DOUBLE, MPI_DOUBLE, "wide-le", MPI_INFO_NULL),
                MPI_ERR_CONVERSION);
    CHECK_CLASS(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "no-such-rep", MPI_INFO_NULL),
                MPI_ERR_UNSUPPORTED_DATAREP);
    CHECK(strstr(shim_message(), "no-such-rep") != NULL, "the message does not name the "
          "representation: %s", shim_message());
    /* internal is native here, and get_view says internal. */
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "internal", MPI_INFO_NULL));
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_Offset disp = -1;
    MPI_Datatype etype, filetype;
    CHECK_MPI(MPI_File_get_view(fh, &disp, &etype, &filetype, rep));
    CHECK(strcmp(rep, "internal") == 0, "get_view says %s", rep);
    int internal_value = 0x01020304 + rank;
    CHECK_MPI(MPI_File_write_at(fh, 64 + rank, &internal_value, 1, MPI_INT, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    int native_value = 0;
    CHECK_MPI(MPI_File_read_at(fh, (64 + rank) * (MPI_Offset)sizeof(int), &native_value, 4,
                               MPI_BYTE, MPI_STATUS_IGNORE));
    CHECK(native_value == internal_value, "internal wrote %#x, native reads %#x",
          internal_value, native_value);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Type_free(&view);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(tessera, MPI_INFO_NULL));
    PASS("views: MPI_Register_datarep: the program's conversions on write and read and its "
         "extents (8-byte ints in the file); MPI_ERR_DUP_DATAREP on a second registration; "
         "MPI_ERR_CONVERSION from a failing function; an unknown name is "
         "MPI_ERR_UNSUPPORTED_DATAREP naming it; internal is native");
}

/* ---- Collective calls with one process's arguments wrong ----------------------------- */

/* A process whose own arguments are wrong still makes the collective calls of set_size,
 * preallocate and a split collective, so the others do not wait for it; every process of
 * set_size and preallocate returns an error (no process truncates). */
static void wrong_on_one_process(int rank) {
    char tessera[512];
    test_names("views-one-wrong", tessera, NULL, sizeof tessera);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_File_set_size(fh, 4096));
    int code = MPI_File_set_size(fh, rank == 1 ? -1 : 100);
    CHECK(code != MPI_SUCCESS, "set_size succeeded though process 1 gave -1");
    CHECK(error_class_of(code) == MPI_ERR_ARG, "set_size gave class %d", error_class_of(code));
    code = MPI_File_preallocate(fh, rank == 2 ? -5 : 8192);
    CHECK(code != MPI_SUCCESS && error_class_of(code) == MPI_ERR_ARG,
          "preallocate gave class %d", error_class_of(code));
    MPI_Offset size = 0;
    CHECK_MPI(MPI_File_get_size(fh, &size));
    CHECK(size == 4096, "a refused set_size or preallocate left %lld bytes", (long long)size);
    /* Process 0 begins a split collective and leaves it open; the next begin is erroneous
     * there but the others' collective completes. */
    int value = rank, back = -1;
    if (rank == 0)
        CHECK_MPI(MPI_File_write_at_all_begin(fh, 0, &value, 1, MPI_INT));
    else {
        CHECK_MPI(MPI_File_write_at_all_begin(fh, 0, &value, 0, MPI_INT));
        CHECK_MPI(MPI_File_write_at_all_end(fh, &value, MPI_STATUS_IGNORE));
    }
    code = MPI_File_read_at_all_begin(fh, 0, &back, 1, MPI_INT);
    if (rank == 0) {
        CHECK(error_class_of(code) == MPI_ERR_OTHER, "a second begin gave class %d",
              error_class_of(code));
        CHECK_MPI(MPI_File_write_at_all_end(fh, &value, MPI_STATUS_IGNORE));
    } else {
        CHECK_MPI(code);
        CHECK_MPI(MPI_File_read_at_all_end(fh, &back, MPI_STATUS_IGNORE));
        CHECK(back == 0, "read %d where process 0 wrote 0", back);
    }
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(tessera, MPI_INFO_NULL));
    PASS("views: set_size and preallocate with a wrong size on one process fail on every "
         "process without a hang, nothing truncated; a split collective begun twice on one "
         "process fails there while the others' completes");
}

/* ---- Cost of external32 -------------------------------------------------------------- */

static void conversion_cost(int rank) {
    char tessera[512];
    test_names("views-cost", tessera, NULL, sizeof tessera);
    const size_t doubles = (64u << 20) / sizeof(double);
    double rates[2][2];
    if (rank == 0) {
        double *data = malloc(doubles * sizeof(double)), *back = malloc(doubles * sizeof(double));
        CHECK(data && back, "no memory");
        for (size_t i = 0; i < doubles; i++)
            data[i] = (double)i * 0.5;
        const char *reps[2] = {"native", "external32"};
        for (int r = 0; r < 2; r++) {
            MPI_File fh;
            CHECK_MPI(MPI_File_open(MPI_COMM_SELF, tessera, MPI_MODE_CREATE | MPI_MODE_RDWR,
                                    MPI_INFO_NULL, &fh));
            CHECK_MPI(MPI_File_set_view(fh, 0, MPI_DOUBLE, MPI_DOUBLE, reps[r], MPI_INFO_NULL));
            double start = MPI_Wtime();
            CHECK_MPI(MPI_File_write_at(fh, 0, data, (int)doubles, MPI_DOUBLE,
                                        MPI_STATUS_IGNORE));
            double middle = MPI_Wtime();
            memset(back, 0, doubles * sizeof(double));
            CHECK_MPI(MPI_File_read_at(fh, 0, back, (int)doubles, MPI_DOUBLE,
                                       MPI_STATUS_IGNORE));
            double end = MPI_Wtime();
            CHECK(memcmp(back, data, doubles * sizeof(double)) == 0, "%s read back differs",
                  reps[r]);
            rates[r][0] = 64.0 * 1.048576 / (middle - start);
            rates[r][1] = 64.0 * 1.048576 / (end - middle);
            CHECK_MPI(MPI_File_close(&fh));
            CHECK_MPI(MPI_File_delete(tessera, MPI_INFO_NULL));
        }
        free(data);
        free(back);
    }
    PASS("views: 64 MiB of doubles, write_at/read_at by one process: native %.0f / %.0f MB/s, "
         "external32 %.0f / %.0f MB/s", rank == 0 ? rates[0][0] : 0, rank == 0 ? rates[0][1] : 0,
         rank == 0 ? rates[1][0] : 0, rank == 0 ? rates[1][1] : 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    alarm(300); /* a hang is a failure, not a wait for the runner's timeout */
    int rank = test_rank(), size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 64, "at most 64 processes");
    empty_file_types(rank, size);
    displacement_current(rank, size);
    illegal_types(rank);
    external32(rank, size);
    registered(rank, size);
    wrong_on_one_process(rank);
    conversion_cost(rank);
    MPI_Finalize();
    return 0;
}
