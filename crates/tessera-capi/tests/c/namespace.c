/* The C API's namespace calls against a real cluster: version, mkdir, create, write,
 * opendir/readdir/closedir over more entries than one mds page holds, rename (to a new name
 * and over an existing file), chmod, chown, stat, the errors of each (and an errno), and the
 * removal of everything made. Every check compares data or counts; the first failure exits 1.
 *
 * Usage: namespace CLUSTER_FILE (or with $TESSERA_CLUSTER set and no argument). Run by
 * scripts/install-check.sh against the installed library. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

/* More than READDIR_ENTRIES_MAX (1024), so the listing takes two pages from the mds. */
#define FILES 1100
#define DATA_BYTES 5000

static TesseraClient *client;

static void fail(const char *what, int rc) {
    fprintf(stderr, "FAIL %s: rc %d: %s\n", what, rc, tessera_last_error());
    exit(1);
}

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "FAIL %s\n", what);
        exit(1);
    }
}

static void expect(int rc, int wanted, const char *what) {
    if (rc != wanted) {
        fprintf(stderr, "FAIL %s: rc %d, expected %d: %s\n", what, rc, wanted,
                tessera_last_error());
        exit(1);
    }
    if (wanted != TESSERA_OK && tessera_last_error()[0] == '\0') {
        fprintf(stderr, "FAIL %s: rc %d with no message\n", what, rc);
        exit(1);
    }
}

/* Lists `path`: the names in order into `names` (at most `max`), the number of directories
 * into `*directories`; returns the number of entries. */
static int list(const char *path, char (*names)[TESSERA_DIR_NAME_BYTES], int max,
                int *directories) {
    TesseraDir *dir = NULL;
    int rc = tessera_opendir(client, path, &dir);
    if (rc != TESSERA_OK) fail("tessera_opendir", rc);
    const TesseraDirEntry *entry;
    int count = 0;
    *directories = 0;
    while ((rc = tessera_readdir(dir, &entry)) == TESSERA_OK && entry != NULL) {
        check(count < max, "more entries than made");
        check(strlen(entry->name) > 0 && strlen(entry->name) < TESSERA_DIR_NAME_BYTES,
              "entry name length");
        check(entry->handle != 0, "entry handle");
        if (count > 0) check(strcmp(names[count - 1], entry->name) < 0, "names in order");
        memcpy(names[count], entry->name, TESSERA_DIR_NAME_BYTES);
        *directories += entry->is_directory != 0;
        count++;
    }
    if (rc != TESSERA_OK) fail("tessera_readdir", rc);
    /* At the end it stays at the end. */
    expect(tessera_readdir(dir, &entry), TESSERA_OK, "tessera_readdir past the end");
    check(entry == NULL, "no entry past the end");
    tessera_closedir(dir);
    return count;
}

static int listed(char (*names)[TESSERA_DIR_NAME_BYTES], int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", TESSERA_VERSION_MAJOR, TESSERA_VERSION_MINOR,
             TESSERA_VERSION_PATCH);
    check(strcmp(tessera_version(), expected) == 0, "tessera_version() matches the header");
    printf("ok version %s\n", tessera_version());

    int rc = tessera_connect(argc > 1 ? argv[1] : NULL, &client);
    if (rc != TESSERA_OK) fail("tessera_connect", rc);

    /* Room for the top directory, a slash and the longest name. */
    char top[64], path[64 + TESSERA_DIR_NAME_BYTES], other[64 + TESSERA_DIR_NAME_BYTES];
    snprintf(top, sizeof top, "/capi-namespace-%ld", (long)getpid());
    if ((rc = tessera_mkdir(client, top, 0755)) != TESSERA_OK) fail("tessera_mkdir", rc);
    snprintf(path, sizeof path, "%s/sub", top);
    if ((rc = tessera_mkdir(client, path, 0755)) != TESSERA_OK) fail("tessera_mkdir sub", rc);

    static unsigned char data[DATA_BYTES];
    for (int i = 0; i < DATA_BYTES; i++) data[i] = (unsigned char)(i * 7 + 3);
    TesseraCreateOptions hinted;
    if ((rc = tessera_create_options_init(&hinted)) != TESSERA_OK) fail("options_init", rc);
    check(hinted.cache_unit_bytes == 0, "the mds chooses the cache unit by default");
    hinted.cache_unit_bytes = 4096;
    for (int i = 0; i < FILES; i++) {
        TesseraFile *file = NULL;
        snprintf(path, sizeof path, "%s/f%04d", top, i);
        /* The second file with a cache unit hint; the others without options. */
        rc = tessera_create(client, path, i == 1 ? &hinted : NULL, &file);
        if (rc != TESSERA_OK) fail("tessera_create", rc);
        if (i == 0 && (rc = tessera_file_write(file, 0, data, DATA_BYTES, NULL, NULL)) != TESSERA_OK)
            fail("tessera_file_write", rc);
        if ((rc = tessera_close(file)) != TESSERA_OK) fail("tessera_close", rc);
    }

    /* A cache unit that is not a power of two from 4096 to 65536 is refused by name. */
    TesseraFile *refused = NULL;
    hinted.cache_unit_bytes = 12288;
    snprintf(path, sizeof path, "%s/bad-unit", top);
    expect(tessera_create(client, path, &hinted, &refused), TESSERA_ERR_INVALID_ARGUMENT,
           "create with a cache unit of 12288 bytes");
    check(strstr(tessera_last_error(), "12288 bytes") != NULL &&
              strstr(tessera_last_error(), "4096 to 65536") != NULL,
          "the error names the cache unit and the range");
    printf("ok create: a cache unit hint of 4096 taken, 12288 refused (%s)\n",
           tessera_last_error());

    static char names[FILES + 8][TESSERA_DIR_NAME_BYTES];
    int directories;
    int count = list(top, names, FILES + 8, &directories);
    check(count == FILES + 1, "every file and the subdirectory listed, once");
    check(directories == 1, "one directory listed");
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof path, "f%04d", i);
        check(strcmp(names[i], path) == 0, "the files in name order");
    }
    check(strcmp(names[FILES], "sub") == 0, "the subdirectory last");
    printf("ok readdir: %d entries over two pages, in name order\n", count);

    /* An empty directory lists nothing. */
    snprintf(path, sizeof path, "%s/sub", top);
    check(list(path, names, FILES + 8, &directories) == 0, "an empty directory lists nothing");

    /* Rename to a new name: the data goes along, the old name is gone. */
    snprintf(path, sizeof path, "%s/f0000", top);
    snprintf(other, sizeof other, "%s/renamed", top);
    if ((rc = tessera_rename(client, path, other)) != TESSERA_OK) fail("tessera_rename", rc);
    TesseraStat stat;
    if ((rc = tessera_stat(client, other, &stat)) != TESSERA_OK) fail("tessera_stat renamed", rc);
    check(stat.size == DATA_BYTES && !stat.is_directory, "the renamed file keeps its size");
    TesseraFile *file = NULL;
    if ((rc = tessera_open(client, other, TESSERA_MODE_READ_ONLY, &file)) != TESSERA_OK)
        fail("tessera_open renamed", rc);
    static unsigned char back[DATA_BYTES];
    if ((rc = tessera_file_read(file, 0, back, DATA_BYTES, NULL, NULL)) != TESSERA_OK)
        fail("tessera_file_read", rc);
    check(memcmp(back, data, DATA_BYTES) == 0, "the renamed file keeps its bytes");
    tessera_close(file);
    expect(tessera_stat(client, path, &stat), TESSERA_ERR_NOT_FOUND, "stat of the old name");
    check(tessera_last_errno() == ENOENT && tessera_errno(TESSERA_ERR_NOT_FOUND) == ENOENT,
          "a missing name's errno is ENOENT");

    /* Rename over an existing file replaces it. */
    snprintf(path, sizeof path, "%s/f0001", top);
    snprintf(other, sizeof other, "%s/f0002", top);
    if ((rc = tessera_rename(client, path, other)) != TESSERA_OK) fail("tessera_rename over", rc);
    count = list(top, names, FILES + 8, &directories);
    check(count == FILES, "one name fewer after the rename over a file");
    check(listed(names, count, "renamed") && !listed(names, count, "f0000") &&
              !listed(names, count, "f0001") && listed(names, count, "f0002"),
          "the listing shows the renames");
    printf("ok rename: to a new name and over a file, data and listing checked\n");

    /* Errors. */
    snprintf(path, sizeof path, "%s/renamed", top);
    TesseraDir *dir = NULL;
    expect(tessera_opendir(client, path, &dir), TESSERA_ERR_NOT_DIRECTORY, "opendir of a file");
    check(dir == NULL, "no handle from a failed opendir");
    snprintf(other, sizeof other, "%s/missing", top);
    expect(tessera_opendir(client, other, &dir), TESSERA_ERR_NOT_FOUND, "opendir of a missing path");
    expect(tessera_opendir(client, NULL, &dir), TESSERA_ERR_INVALID_ARGUMENT, "opendir of NULL");
    expect(tessera_opendir(client, top, NULL), TESSERA_ERR_INVALID_ARGUMENT, "opendir into NULL");
    const TesseraDirEntry *entry;
    expect(tessera_readdir(NULL, &entry), TESSERA_ERR_INVALID_ARGUMENT, "readdir of NULL");
    expect(tessera_rename(client, other, path), TESSERA_ERR_NOT_FOUND, "rename of a missing name");
    expect(tessera_rename(client, path, NULL), TESSERA_ERR_INVALID_ARGUMENT, "rename to NULL");
    expect(tessera_chmod(client, other, 0600), TESSERA_ERR_NOT_FOUND, "chmod of a missing name");
    tessera_closedir(NULL);
    printf("ok errors: not a directory, not found, null arguments\n");

    /* chmod and chown. */
    if ((rc = tessera_chmod(client, path, 0640)) != TESSERA_OK) fail("tessera_chmod", rc);
    if ((rc = tessera_stat(client, path, &stat)) != TESSERA_OK) fail("tessera_stat", rc);
    check((stat.mode & 07777) == 0640, "chmod sets the mode");
    if (geteuid() == 0) {
        if ((rc = tessera_chown(client, path, 1234, 5678)) != TESSERA_OK) fail("tessera_chown", rc);
        if ((rc = tessera_stat(client, path, &stat)) != TESSERA_OK) fail("tessera_stat", rc);
        check(stat.uid == 1234 && stat.gid == 5678, "chown sets owner and group");
    }
    uint32_t uid = stat.uid;
    if ((rc = tessera_chown(client, path, TESSERA_ID_UNCHANGED, (uint32_t)getegid())) != TESSERA_OK)
        fail("tessera_chown of the group", rc);
    if ((rc = tessera_stat(client, path, &stat)) != TESSERA_OK) fail("tessera_stat", rc);
    check(stat.uid == uid && stat.gid == (uint32_t)getegid(), "TESSERA_ID_UNCHANGED keeps the owner");
    printf("ok chmod and chown%s\n", geteuid() == 0 ? " (owner and group)" : " (group)");

    /* Remove everything: the directory is gone, and a non-empty one is refused first. */
    expect(tessera_rmdir(client, top), TESSERA_ERR_NOT_EMPTY, "rmdir of a non-empty directory");
    count = list(top, names, FILES + 8, &directories);
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", top, names[i]);
        rc = strcmp(names[i], "sub") == 0 ? tessera_rmdir(client, path) : tessera_delete(client, path);
        if (rc != TESSERA_OK) fail("removing an entry", rc);
    }
    if ((rc = tessera_rmdir(client, top)) != TESSERA_OK) fail("tessera_rmdir", rc);
    expect(tessera_opendir(client, top, &dir), TESSERA_ERR_NOT_FOUND, "opendir of a removed directory");
    printf("ok cleanup: %d entries and the directory removed\n", count);

    tessera_client_free(client);
    return 0;
}
