/* The rest of the file interface: sizes, preallocate, group, access mode, hints, the view's
 * round trip, atomicity, sync, MPI_MODE_DELETE_ON_CLOSE, and a file outside Tessera going
 * to the MPI's own MPI-IO untouched. */
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank();
    char name[512], oracle[512];
    test_names("misc", name, oracle, sizeof name);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "tessera_method", "list");
    MPI_Info_set(info, "striping_unit", "4096");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    MPI_Info got;
    char value[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    CHECK_MPI(MPI_File_get_info(fh, &got));
    MPI_Info_get(got, "tessera_method", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(flag && strcmp(value, "list") == 0, "tessera_method hint reads back as %s",
          flag ? value : "(unset)");
    MPI_Info_get(got, "striping_unit", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(flag && strcmp(value, "4096") == 0, "striping_unit reads back as %s",
          flag ? value : "(unset)");
    MPI_Info_free(&got);
    MPI_Info_set(info, "tessera_method", "multiple");
    CHECK_MPI(MPI_File_set_info(fh, info));
    CHECK_MPI(MPI_File_get_info(fh, &got));
    MPI_Info_get(got, "tessera_method", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(flag && strcmp(value, "multiple") == 0, "set_info did not change the method");
    MPI_Info_free(&got);

    int amode = 0;
    CHECK_MPI(MPI_File_get_amode(fh, &amode));
    CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_RDWR), "amode %#x", amode);
    MPI_Group group, world;
    int comparison;
    CHECK_MPI(MPI_File_get_group(fh, &group));
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_compare(group, world, &comparison);
    CHECK(comparison == MPI_IDENT, "the file's group is not the world's");
    MPI_Group_free(&group);
    MPI_Group_free(&world);

    int bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = rank * 256 + i;
    CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)(rank * sizeof bytes), bytes, 256, MPI_INT,
                                    MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_sync(fh));
    MPI_Offset size = 0;
    CHECK_MPI(MPI_File_get_size(fh, &size));
    CHECK(size == 4 * (MPI_Offset)sizeof bytes, "size %lld after 4 blocks", (long long)size);
    CHECK_MPI(MPI_File_set_size(fh, 1000));
    CHECK_MPI(MPI_File_get_size(fh, &size));
    CHECK(size == 1000, "size %lld after set_size(1000)", (long long)size);
    CHECK_MPI(MPI_File_preallocate(fh, 500));
    CHECK_MPI(MPI_File_get_size(fh, &size));
    CHECK(size == 1000, "preallocate(500) changed the size to %lld", (long long)size);
    CHECK_MPI(MPI_File_preallocate(fh, 5000));
    CHECK_MPI(MPI_File_get_size(fh, &size));
    CHECK(size == 5000, "preallocate(5000) gave size %lld", (long long)size);
    int back[256];
    CHECK_MPI(MPI_File_read_at(fh, 4000, back, 256, MPI_INT, MPI_STATUS_IGNORE));
    for (int i = 0; i < 250; i++)
        CHECK(back[i] == 0, "grown bytes read as %d", back[i]);
    PASS("misc: hints (tessera_method, striping_unit) in get_info and set_info, amode, group, "
         "get_size, set_size, preallocate, sync");

    MPI_Datatype vector, etype, filetype;
    MPI_Type_vector(3, 2, 5, MPI_INT, &vector);
    MPI_Type_commit(&vector);
    CHECK_MPI(MPI_File_set_view(fh, 24, MPI_INT, vector, "native", MPI_INFO_NULL));
    MPI_Offset displacement;
    char datarep[MPI_MAX_DATAREP_STRING];
    CHECK_MPI(MPI_File_get_view(fh, &displacement, &etype, &filetype, datarep));
    CHECK(displacement == 24 && etype == MPI_INT && strcmp(datarep, "native") == 0,
          "view reads back as %lld, %s", (long long)displacement, datarep);
    int integers, addresses, datatypes, combiner;
    MPI_Type_get_envelope(filetype, &integers, &addresses, &datatypes, &combiner);
    CHECK(combiner == MPI_COMBINER_DUP || combiner == MPI_COMBINER_VECTOR,
          "the view's file type came back with combiner %d", combiner);
    MPI_Type_free(&filetype);
    MPI_Type_free(&vector);
    CHECK_MPI(MPI_File_set_atomicity(fh, 1));
    CHECK_MPI(MPI_File_get_atomicity(fh, &flag));
    CHECK(flag == 1, "atomicity reads back as %d", flag);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("misc: get_view returns the view; set/get_atomicity");

    /* Delete on close. */
    char temporary[512];
    test_names("misc-temporary", temporary, NULL, sizeof temporary);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, temporary,
                            MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_write_at(fh, rank, "x", 1, MPI_CHAR, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_close(&fh));
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, temporary, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
                MPI_ERR_NO_SUCH_FILE);
    PASS("misc: MPI_MODE_DELETE_ON_CLOSE removes the file");

    /* A file outside Tessera is the MPI's own business. */
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)(rank * sizeof bytes), bytes, 256, MPI_INT,
                                    MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_close(&fh));
    if (rank == 0) {
        FILE *local = fopen(oracle, "rb");
        CHECK(local != NULL, "the local file %s was not made by the MPI", oracle);
        fseek(local, 0, SEEK_END);
        CHECK(ftell(local) == 4 * (long)sizeof bytes, "local file has %ld bytes", ftell(local));
        fclose(local);
    }
    PASS("misc: files outside Tessera go to the MPI's own MPI-IO");
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
