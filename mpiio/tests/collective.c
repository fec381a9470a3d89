/* Collective I/O through the shim: the ECIO pattern (seed 004: interleaved ints, blocks of
 * B ints round-robin over the processes) written with write_all through the individual
 * pointer and read back with read_at_all, under every tessera_coll value and the ROMIO
 * hints (cb_buffer_size, cb_nodes, romio_cb_read/write=disable), with a process that moves
 * nothing; process 0 checks the whole file against a model. get_info reports the collective
 * hints in effect; a bad tessera_coll value is ignored. A process whose collective call has a
 * bad argument gets its error while the others complete (no hang). */
#include "common.h"

#define INTS 5000 /* ints each process writes */
#define BLOCK 3   /* ints per block */
#define DISPLACEMENT 24

static int value(int rank, int k, int salt) { return rank * 1000003 + k * 7 + salt; }

static void one_case(const char *label, const char *keys[], const char *values[], int pairs,
                     int salt, int idle_rank) {
    int rank = test_rank(), size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[128], tessera[512];
    snprintf(name, sizeof name, "coll-%s", label);
    test_names(name, tessera, NULL, sizeof tessera);
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 0; i < pairs; i++)
        MPI_Info_set(info, (char *)keys[i], (char *)values[i]);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    /* Rank r owns block r of every `size` blocks. */
    MPI_Datatype block, filetype;
    int length = BLOCK;
    MPI_Aint at = (MPI_Aint)rank * BLOCK * (MPI_Aint)sizeof(int);
    CHECK_MPI(MPI_Type_create_hindexed(1, &length, &at, MPI_INT, &block));
    CHECK_MPI(MPI_Type_create_resized(block, 0, (MPI_Aint)size * BLOCK * sizeof(int), &filetype));
    CHECK_MPI(MPI_Type_commit(&filetype));
    CHECK_MPI(MPI_File_set_view(fh, DISPLACEMENT, MPI_INT, filetype, "native", info));
    int *data = malloc(INTS * sizeof(int)), *back = malloc(INTS * sizeof(int));
    for (int k = 0; k < INTS; k++)
        data[k] = value(rank, k, salt);
    int mine = rank == idle_rank ? 0 : INTS;
    MPI_Status status;
    CHECK_MPI(MPI_File_write_all(fh, data, mine, MPI_INT, &status));
    int count = -1;
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == mine, "%s: write_all counted %d ints, expected %d", label, count, mine);
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position(fh, &position));
    CHECK(position == mine, "%s: the pointer is at %lld, expected %d", label,
          (long long)position, mine);
    for (int k = 0; k < INTS; k++)
        back[k] = -1;
    CHECK_MPI(MPI_File_read_at_all(fh, 0, back, mine, MPI_INT, &status));
    for (int k = 0; k < mine; k++)
        CHECK(back[k] == data[k], "%s: int %d read back as %d, wrote %d", label, k, back[k],
              data[k]);
    /* The hints in effect. */
    MPI_Info got;
    CHECK_MPI(MPI_File_get_info(fh, &got));
    char text[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    MPI_Info_get(got, "tessera_coll", MPI_MAX_INFO_VAL, text, &flag);
    const char *expected = "server_directed";
    for (int i = 0; i < pairs; i++)
        if (strcmp(keys[i], "tessera_coll") == 0 && strcmp(values[i], "bogus") != 0)
            expected = values[i];
    CHECK(flag && strcmp(text, expected) == 0, "%s: get_info tessera_coll=%s, expected %s",
          label, flag ? text : "(unset)", expected);
    MPI_Info_get(got, "cb_buffer_size", MPI_MAX_INFO_VAL, text, &flag);
    CHECK(flag && atoll(text) > 0, "%s: get_info has no cb_buffer_size", label);
    MPI_Info_get(got, "cb_nodes", MPI_MAX_INFO_VAL, text, &flag);
    CHECK(flag && atoi(text) > 0, "%s: get_info has no cb_nodes", label);
    MPI_Info_free(&got);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Offset bytes = 0;
        unsigned char *file = read_whole(tessera, &bytes);
        long long blocks = INTS / BLOCK + 1;
        for (int r = 0; r < size; r++) {
            int written = r == idle_rank ? 0 : INTS;
            for (int k = 0; k < written; k++) {
                long long slot = (k / BLOCK) * (long long)size * BLOCK + r * BLOCK + k % BLOCK;
                long long byte = DISPLACEMENT + slot * (long long)sizeof(int);
                CHECK(byte + 4 <= bytes, "%s: the file has %lld bytes, rank %d's int %d is at %lld",
                      label, (long long)bytes, r, k, byte);
                int found;
                memcpy(&found, file + byte, sizeof found);
                CHECK(found == value(r, k, salt), "%s: rank %d's int %d is %d in the file, not %d",
                      label, r, k, found, value(r, k, salt));
            }
        }
        (void)blocks;
        for (long long byte = 0; byte < DISPLACEMENT && byte < bytes; byte++)
            CHECK(file[byte] == 0, "%s: displacement byte %lld is %d", label, byte, file[byte]);
        free(file);
    }
    free(data);
    free(back);
    MPI_Type_free(&block);
    MPI_Type_free(&filetype);
    MPI_Info_free(&info);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size == 4, "run with 4 processes, not %d", size);
    const char *colls[3] = {"server_directed", "two_phase", "independent"};
    int salt = 1;
    for (int c = 0; c < 3; c++) {
        const char *keys[1] = {"tessera_coll"}, *values[1] = {colls[c]};
        char label[64];
        snprintf(label, sizeof label, "%s", colls[c]);
        one_case(label, keys, values, 1, salt++, -1);
        snprintf(label, sizeof label, "%s-idle", colls[c]);
        one_case(label, keys, values, 1, salt++, 2);
        PASS("collective %s: interleaved ints, write_all + read_at_all, a process moving nothing",
             colls[c]);
    }
    {
        const char *keys[3] = {"tessera_coll", "cb_buffer_size", "cb_nodes"};
        const char *values[3] = {"two_phase", "4096", "3"};
        one_case("two_phase-small", keys, values, 3, salt++, -1);
        PASS("collective two_phase with cb_buffer_size=4096 cb_nodes=3");
    }
    {
        const char *keys[2] = {"romio_cb_write", "romio_cb_read"};
        const char *values[2] = {"disable", "disable"};
        one_case("cb-disabled", keys, values, 2, salt++, -1);
        const char *bad_keys[1] = {"tessera_coll"}, *bad_values[1] = {"bogus"};
        one_case("bogus", bad_keys, bad_values, 1, salt++, -1);
        PASS("romio_cb_read/write=disable; tessera_coll=bogus ignored");
    }
    {
        /* One process passes a negative count: it gets MPI_ERR_COUNT, the others finish. */
        char tessera[512];
        test_names("coll-bad-count", tessera, NULL, sizeof tessera);
        MPI_File fh;
        CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, tessera, MPI_MODE_CREATE | MPI_MODE_RDWR,
                                MPI_INFO_NULL, &fh));
        CHECK_MPI(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
        int data[16] = {0};
        MPI_Status status;
        int rank = test_rank();
        if (rank == 1)
            CHECK_CLASS(MPI_File_write_at_all(fh, 0, data, -1, MPI_INT, &status), MPI_ERR_COUNT);
        else
            CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)rank * 64, data, 16, MPI_INT, &status));
        CHECK_MPI(MPI_File_close(&fh));
        PASS("a bad count on one process fails there only, without a hang");
    }
    MPI_Finalize();
    return 0;
}
