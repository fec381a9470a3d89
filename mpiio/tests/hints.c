/* Hints as ROMIO has them: site-wide defaults from the file named by $ROMIO_HINTS (run.sh
 * writes one, with bad lines among the good, and passes it through the launcher's
 * environment), hints given to MPI_File_open overriding it, and MPI_File_get_info reporting
 * the keys programs look for with ROMIO's conventions: romio_cb_read/write and
 * romio_ds_read/write "automatic" unless set, a value set to "enable" read back as "enable"
 * (and "ENABLE" as "ENABLE", as ROMIO does), romio_no_indep_rw, ind_rd/wr_buffer_size,
 * cb_buffer_size, cb_nodes, and striping_unit and striping_factor as the file's real layout
 * (run.sh creates the file "hints-existing" with a stripe of 32768 bytes over 3 servers, and
 * compares what process 0 prints for the two new files with `tessera stat`). Under an MPI whose
 * own MPI-IO is ROMIO (MPICH), a local file opened the same way must report the same values
 * for ROMIO's keys. Usage: hints (4 processes). */
#include "common.h"

static int get(MPI_Info info, const char *key, char *value) {
    int flag = 0;
    MPI_Info_get(info, key, MPI_MAX_INFO_VAL, value, &flag);
    if (!flag)
        strcpy(value, "(unset)");
    return flag;
}

/* Every key of `pairs` (key, value, ..., NULL) must read back from the file as given. */
static void expect(MPI_File fh, const char *label, const char *const *pairs) {
    MPI_Info info;
    char value[MPI_MAX_INFO_VAL + 1];
    CHECK_MPI(MPI_File_get_info(fh, &info));
    for (int i = 0; pairs[i] != NULL; i += 2) {
        get(info, pairs[i], value);
        CHECK(strcmp(value, pairs[i + 1]) == 0, "%s: get_info %s=%s, expected %s", label,
              pairs[i], value, pairs[i + 1]);
    }
    MPI_Info_free(&info);
}

/* The keys ROMIO reports for every file. */
static const char *const romio_keys[] = {"romio_cb_read",      "romio_cb_write",
                                         "romio_ds_read",      "romio_ds_write",
                                         "romio_no_indep_rw",  "cb_buffer_size",
                                         "ind_rd_buffer_size", "ind_wr_buffer_size", NULL};

/* Under ROMIO, a local file opened with `info`, then given `later` with set_info, must
 * report the same values of ROMIO's keys as the Tessera file `fh`; returns 0 when the MPI's
 * own MPI-IO is not ROMIO. */
static int compare_with_romio(MPI_File fh, const char *oracle, MPI_Info info, MPI_Info later) {
    MPI_File local;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR, info,
                            &local));
    if (later != MPI_INFO_NULL)
        CHECK_MPI(MPI_File_set_info(local, later));
    MPI_Info theirs, ours;
    CHECK_MPI(MPI_File_get_info(local, &theirs));
    CHECK_MPI(MPI_File_get_info(fh, &ours));
    char a[MPI_MAX_INFO_VAL + 1], b[MPI_MAX_INFO_VAL + 1];
    /* ROMIO reports its switches whatever the hints; Open MPI's OMPIO only echoes hints. */
    int romio = get(theirs, "romio_ds_write", a) && get(theirs, "romio_cb_alltoall", a);
    for (int i = 0; romio && romio_keys[i] != NULL; i++) {
        get(theirs, romio_keys[i], a);
        get(ours, romio_keys[i], b);
        CHECK(strcmp(a, b) == 0, "%s: ROMIO reports %s=%s on a local file, the shim %s",
              oracle, romio_keys[i], a, b);
    }
    MPI_Info_free(&theirs);
    MPI_Info_free(&ours);
    CHECK_MPI(MPI_File_close(&local));
    return romio;
}

/* Process 0 prints "layout NAME UNIT FACTOR" as get_info reports them, for run.sh to compare
 * with the layout `tessera stat` shows. */
static void print_layout(MPI_File fh, const char *name) {
    MPI_Info info;
    char unit[MPI_MAX_INFO_VAL + 1], factor[MPI_MAX_INFO_VAL + 1];
    CHECK_MPI(MPI_File_get_info(fh, &info));
    get(info, "striping_unit", unit);
    get(info, "striping_factor", factor);
    MPI_Info_free(&info);
    CHECK(atoi(unit) >= 1 && atoi(factor) >= 1, "%s: striping_unit=%s striping_factor=%s",
          name, unit, factor);
    if (test_rank() == 0)
        printf("layout %s %s %s\n", name, unit, factor);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(getenv("ROMIO_HINTS") != NULL, "run with ROMIO_HINTS set (run.sh writes the file)");
    char name[512], oracle[512], given_name[512], existing[512];
    test_names("hints", name, oracle, sizeof name);
    test_names("hints-given", given_name, NULL, sizeof given_name);
    test_names("hints-existing", existing, NULL, sizeof existing);

    /* The site's hints alone; the keys not in the site file have ROMIO's defaults. */
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    const char *const site[] = {"striping_unit", "131072", "cb_buffer_size", "8192",
                                "cb_nodes", "3", "romio_cb_write", "enable",
                                "romio_ds_read", "disable", "romio_cb_read", "automatic",
                                "romio_ds_write", "automatic", "romio_no_indep_rw", "false",
                                "tessera_coll", "two_phase", "site_only_key", "site_value",
                                "ind_rd_buffer_size", "4194304", "ind_wr_buffer_size",
                                "524288", NULL};
    expect(fh, "site hints", site);
    print_layout(fh, name);
    MPI_Info info;
    /* Collective I/O under the site's two_phase with an 8 KiB buffer and 3 aggregators. */
    int block[2048], back[2048];
    for (int i = 0; i < 2048; i++)
        block[i] = rank * 10000 + i;
    CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)rank * sizeof block, block, 2048, MPI_INT,
                                    MPI_STATUS_IGNORE));
    int other = (rank + 1) % size;
    CHECK_MPI(MPI_File_read_at_all(fh, (MPI_Offset)other * sizeof back, back, 2048, MPI_INT,
                                   MPI_STATUS_IGNORE));
    for (int i = 0; i < 2048; i++)
        CHECK(back[i] == other * 10000 + i, "int %d of process %d's block is %d", i, other,
              back[i]);
    int romio = compare_with_romio(fh, oracle, MPI_INFO_NULL, MPI_INFO_NULL);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("ROMIO_HINTS: the site's hints in effect and reported, bad lines skipped, ROMIO's "
         "defaults for the rest%s", romio ? "; the same as ROMIO's on a local file" : "");

    /* The program's hints override the site's; values read back as ROMIO spells them. */
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "65536");
    MPI_Info_set(info, "striping_factor", "2");
    MPI_Info_set(info, "cb_buffer_size", "4096");
    MPI_Info_set(info, "romio_cb_write", "disable");
    MPI_Info_set(info, "romio_cb_read", "ENABLE");
    MPI_Info_set(info, "ind_rd_buffer_size", "1048576");
    MPI_Info_set(info, "tessera_cache_unit", "16384"); /* the create carries it to the iods */
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, given_name, MPI_MODE_CREATE | MPI_MODE_RDWR, info,
                            &fh));
    const char *const given[] = {"striping_unit", "65536", "striping_factor", "2",
                                 "cb_buffer_size", "4096", "romio_cb_write", "disable",
                                 "romio_cb_read", "ENABLE", "romio_no_indep_rw", "false",
                                 "ind_rd_buffer_size", "1048576", "ind_wr_buffer_size",
                                 "524288", "romio_ds_read", "disable", "romio_ds_write",
                                 "automatic", "tessera_coll", "two_phase", "cb_nodes", "3",
                                 "tessera_cache_unit", "16384", NULL};
    expect(fh, "open hints over site hints", given);
    print_layout(fh, given_name);
    CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)rank * sizeof block, block, 2048, MPI_INT,
                                    MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_read_at_all(fh, (MPI_Offset)other * sizeof back, back, 2048, MPI_INT,
                                   MPI_STATUS_IGNORE));
    for (int i = 0; i < 2048; i++)
        CHECK(back[i] == other * 10000 + i, "int %d of process %d's block is %d", i, other,
              back[i]);
    /* set_info: enable reads back enable; a value ROMIO does not take is ignored. */
    MPI_Info later;
    MPI_Info_create(&later);
    MPI_Info_set(later, "romio_ds_write", "enable");
    MPI_Info_set(later, "romio_ds_read", "sometimes");
    MPI_Info_set(later, "romio_no_indep_rw", "perhaps");
    CHECK_MPI(MPI_File_set_info(fh, later));
    const char *const after[] = {"romio_ds_write", "enable", "romio_ds_read", "disable",
                                 "romio_no_indep_rw", "false", NULL};
    expect(fh, "set_info", after);
    MPI_Info_free(&later);
    MPI_Info_create(&later); /* what ROMIO takes of the same set_info */
    MPI_Info_set(later, "romio_ds_write", "enable");
    romio = compare_with_romio(fh, oracle, info, later) && romio;
    MPI_Info_free(&later);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Info_free(&info);
    PASS("hints given to MPI_File_open override ROMIO_HINTS; enable reads back enable; bad "
         "values ignored%s", romio ? "; the same as ROMIO's on a local file" : "");

    /* An existing file reports its real layout, whatever the hints say. (ROMIO makes
     * romio_no_indep_rw=true force collective buffering on, since only its aggregators open
     * the file then; Tessera serves independent accesses either way and reports the
     * switches as set.) */
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "4096");
    MPI_Info_set(info, "striping_factor", "1");
    MPI_Info_set(info, "romio_no_indep_rw", "TRUE");
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, existing, MPI_MODE_RDWR, info, &fh));
    MPI_Info_free(&info);
    const char *const real[] = {"striping_unit", "32768", "striping_factor", "3",
                                "romio_no_indep_rw", "TRUE", NULL};
    expect(fh, "an existing file", real);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("striping_unit and striping_factor of an existing file are its layout's; "
         "romio_no_indep_rw=TRUE reads back TRUE");
    MPI_Finalize();
    return 0;
}
