/* File pointers and completion forms: the individual pointer (read/write, seek with SET,
 * CUR and END, get_position, get_byte_offset), the shared pointer (write_shared from every
 * process: each block lands once; get_position_shared; seek_shared, also before the first
 * shared access), ordered access (blocks in rank order), nonblocking forms completed with
 * MPI_Wait, split collectives, and MPI_MODE_APPEND. Everything is read back and checked. */
#include "common.h"

#define BLOCK 16

static void fill(int *block, int rank, int salt) {
    for (int i = 0; i < BLOCK; i++)
        block[i] = rank * 1000 + salt * 100 + i;
}

static void individual(void) {
    int rank = test_rank();
    char name[512];
    test_names("pointers-individual", name, NULL, sizeof name);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    /* Each rank's view: its own BLOCK ints of every 4*BLOCK, after a 64-byte header. */
    MPI_Datatype vector, filetype;
    CHECK_MPI(MPI_Type_vector(1, BLOCK, 4 * BLOCK, MPI_INT, &vector));
    CHECK_MPI(MPI_Type_create_resized(vector, 0, 4 * BLOCK * (MPI_Aint)sizeof(int), &filetype));
    CHECK_MPI(MPI_Type_commit(&filetype));
    MPI_Offset displacement = 64 + (MPI_Offset)(rank * BLOCK * sizeof(int));
    CHECK_MPI(MPI_File_set_view(fh, displacement, MPI_INT, filetype, "native", MPI_INFO_NULL));
    int a[BLOCK], b[BLOCK], back[2 * BLOCK];
    fill(a, rank, 1);
    fill(b, rank, 2);
    MPI_Status status;
    CHECK_MPI(MPI_File_write(fh, a, BLOCK, MPI_INT, &status));
    CHECK_MPI(MPI_File_write_all(fh, b, BLOCK, MPI_INT, &status));
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position(fh, &position));
    CHECK(position == 2 * BLOCK, "position %lld after two blocks", (long long)position);
    MPI_Offset byte = -1;
    CHECK_MPI(MPI_File_get_byte_offset(fh, BLOCK + 3, &byte));
    CHECK(byte == displacement + (MPI_Offset)((4 * BLOCK + 3) * sizeof(int)),
          "byte offset %lld", (long long)byte);
    CHECK_MPI(MPI_File_seek(fh, 0, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_read(fh, back, 2 * BLOCK, MPI_INT, &status));
    int count = -1;
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == 2 * BLOCK, "read status counts %d ints", count);
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == a[i] && back[BLOCK + i] == b[i], "int %d read back wrong", i);
    CHECK_MPI(MPI_File_seek(fh, -BLOCK, MPI_SEEK_CUR));
    CHECK_MPI(MPI_File_get_position(fh, &position));
    CHECK(position == BLOCK, "position %lld after seeking back", (long long)position);
    MPI_Barrier(MPI_COMM_WORLD);
    /* The file ends after rank 3's second block: in every rank's view that is 2 blocks. */
    CHECK_MPI(MPI_File_seek(fh, 0, MPI_SEEK_END));
    CHECK_MPI(MPI_File_get_position(fh, &position));
    CHECK(position == 2 * BLOCK, "end of file at view offset %lld, expected %d",
          (long long)position, 2 * BLOCK);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Type_free(&vector);
    MPI_Type_free(&filetype);
    PASS("pointers: individual pointer, seek SET/CUR/END, get_position, get_byte_offset");
}

static void shared_and_ordered(void) {
    int rank = test_rank();
    char name[512];
    test_names("pointers-shared", name, NULL, sizeof name);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int mine[BLOCK];
    fill(mine, rank, 3);
    MPI_Status status;
    CHECK_MPI(MPI_File_write_shared(fh, mine, BLOCK, MPI_INT, &status));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position_shared(fh, &position));
    CHECK(position == 4 * BLOCK, "shared position %lld after 4 blocks", (long long)position);
    int all[4 * BLOCK];
    CHECK_MPI(MPI_File_read_at(fh, 0, all, 4 * BLOCK, MPI_INT, &status));
    int seen[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        int owner = all[k * BLOCK] / 1000;
        CHECK(owner >= 0 && owner < 4, "block %d starts with %d", k, all[k * BLOCK]);
        seen[owner]++;
        for (int i = 0; i < BLOCK; i++)
            CHECK(all[k * BLOCK + i] == owner * 1000 + 300 + i, "block %d int %d is %d", k, i,
                  all[k * BLOCK + i]);
    }
    for (int r = 0; r < 4; r++)
        CHECK(seen[r] == 1, "rank %d's block landed %d times", r, seen[r]);
    /* Ordered: after the four shared blocks, in rank order. */
    fill(mine, rank, 4);
    CHECK_MPI(MPI_File_write_ordered(fh, mine, BLOCK, MPI_INT, &status));
    CHECK_MPI(MPI_File_get_position_shared(fh, &position));
    CHECK(position == 8 * BLOCK, "shared position %lld after ordered", (long long)position);
    CHECK_MPI(MPI_File_read_at(fh, 4 * BLOCK, all, 4 * BLOCK, MPI_INT, &status));
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < BLOCK; i++)
            CHECK(all[k * BLOCK + i] == k * 1000 + 400 + i, "ordered block %d int %d is %d", k,
                  i, all[k * BLOCK + i]);
    /* Seek the shared pointer back and read the ordered blocks in order. */
    CHECK_MPI(MPI_File_seek_shared(fh, 4 * BLOCK, MPI_SEEK_SET));
    int back[BLOCK];
    CHECK_MPI(MPI_File_read_ordered(fh, back, BLOCK, MPI_INT, &status));
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == rank * 1000 + 400 + i, "read_ordered int %d is %d", i, back[i]);
    /* Split ordered. */
    CHECK_MPI(MPI_File_seek_shared(fh, 4 * BLOCK, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_read_ordered_begin(fh, back, BLOCK, MPI_INT));
    CHECK_MPI(MPI_File_read_ordered_end(fh, back, &status));
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == rank * 1000 + 400 + i, "split read_ordered int %d is %d", i, back[i]);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("pointers: write_shared lands each block once; write_ordered in rank order; "
         "seek_shared, read_ordered, split ordered");
}

/* seek_shared before any shared access (no side file made yet): the first write_ordered
 * must start at the position sought, not at 0. */
static void seek_shared_first(void) {
    int rank = test_rank();
    char name[512];
    test_names("pointers-seek-first", name, NULL, sizeof name);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    /* The default view: the etype is a byte. */
    const MPI_Offset block_bytes = BLOCK * (MPI_Offset)sizeof(int);
    CHECK_MPI(MPI_File_seek_shared(fh, 3 * block_bytes, MPI_SEEK_SET));
    int mine[BLOCK];
    fill(mine, rank, 5);
    MPI_Status status;
    CHECK_MPI(MPI_File_write_ordered(fh, mine, BLOCK, MPI_INT, &status));
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position_shared(fh, &position));
    CHECK(position == 7 * block_bytes, "shared position %lld after seek_shared to %lld and "
          "ordered writes of %lld bytes", (long long)position, (long long)(3 * block_bytes),
          (long long)(4 * block_bytes));
    MPI_Offset bytes = -1;
    CHECK_MPI(MPI_File_get_size(fh, &bytes));
    CHECK(bytes == 7 * block_bytes, "size %lld, expected %lld", (long long)bytes,
          (long long)(7 * block_bytes));
    int all[4 * BLOCK];
    CHECK_MPI(MPI_File_read_at(fh, 3 * block_bytes, all, 4 * BLOCK, MPI_INT, &status));
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < BLOCK; i++)
            CHECK(all[k * BLOCK + i] == k * 1000 + 500 + i, "ordered block %d int %d is %d", k,
                  i, all[k * BLOCK + i]);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("pointers: seek_shared before the first shared access, then write_ordered there");
}

static void nonblocking_and_split(void) {
    int rank = test_rank();
    char name[512];
    test_names("pointers-nonblocking", name, NULL, sizeof name);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    int a[BLOCK], back[BLOCK];
    fill(a, rank, 5);
    MPI_Offset at = (MPI_Offset)(rank * BLOCK * sizeof(int));
    MPI_Request request;
    MPI_Status status;
    int count = -1;
    CHECK_MPI(MPI_File_iwrite_at(fh, at, a, BLOCK, MPI_INT, &request));
    CHECK_MPI(MPI_Wait(&request, &status));
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == BLOCK, "iwrite_at status counts %d", count);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_iread_at_all(fh, at, back, BLOCK, MPI_INT, &request));
    CHECK_MPI(MPI_Wait(&request, &status));
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == BLOCK, "iread_at_all status counts %d", count);
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == a[i], "iread_at_all int %d is %d", i, back[i]);
    /* Split collective with an explicit offset, then with the individual pointer. */
    fill(a, rank, 6);
    CHECK_MPI(MPI_File_write_at_all_begin(fh, at, a, BLOCK, MPI_INT));
    CHECK_MPI(MPI_File_write_at_all_end(fh, a, &status));
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == BLOCK, "write_at_all_end status counts %d", count);
    CHECK_MPI(MPI_File_seek(fh, at, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_read_all_begin(fh, back, BLOCK, MPI_INT));
    CHECK_MPI(MPI_File_read_all_end(fh, back, &status));
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == a[i], "split read_all int %d is %d", i, back[i]);
    /* iwrite / iread with the individual pointer, and iwrite_shared. */
    CHECK_MPI(MPI_File_seek(fh, at, MPI_SEEK_SET));
    fill(a, rank, 7);
    CHECK_MPI(MPI_File_iwrite(fh, a, BLOCK, MPI_INT, &request));
    CHECK_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_seek(fh, at, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_iread(fh, back, BLOCK, MPI_INT, &request));
    CHECK_MPI(MPI_Wait(&request, &status));
    for (int i = 0; i < BLOCK; i++)
        CHECK(back[i] == a[i], "iread int %d is %d", i, back[i]);
    CHECK_MPI(MPI_File_close(&fh));
    PASS("pointers: iwrite_at/iread_at_all/iwrite/iread with MPI_Wait statuses; split "
         "write_at_all and read_all");
}

static void append(void) {
    int rank = test_rank();
    char name[512];
    test_names("pointers-append", name, NULL, sizeof name);
    MPI_File fh;
    if (rank == 0) {
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                                MPI_INFO_NULL, &fh));
        char header[100];
        memset(header, 'h', sizeof header);
        CHECK_MPI(MPI_File_write_at(fh, 0, header, 100, MPI_CHAR, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_close(&fh));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_WRONLY | MPI_MODE_APPEND,
                            MPI_INFO_NULL, &fh));
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position(fh, &position));
    CHECK(position == 100, "APPEND starts the pointer at %lld, not the end", (long long)position);
    CHECK_MPI(MPI_File_get_position_shared(fh, &position));
    CHECK(position == 100, "APPEND starts the shared pointer at %lld", (long long)position);
    char tail = (char)('a' + rank);
    CHECK_MPI(MPI_File_write_ordered(fh, &tail, 1, MPI_CHAR, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Offset size = 0;
        unsigned char *bytes = read_whole(name, &size);
        CHECK(size == 104, "appended file has %lld bytes", (long long)size);
        CHECK(memcmp(bytes + 100, "abcd", 4) == 0, "appended bytes are %.4s", bytes + 100);
        free(bytes);
    }
    PASS("pointers: MPI_MODE_APPEND starts both pointers at the end");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size == 4, "run with 4 processes, not %d", size);
    individual();
    shared_and_ordered();
    seek_shared_first();
    nonblocking_and_split();
    append();
    MPI_Finalize();
    return 0;
}
