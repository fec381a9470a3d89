/* The smallest program against an installed Tessera: the header's version numbers and the
 * library's version string agree. scripts/install-check.sh builds it with
 * `pkg-config --cflags --libs tessera`, once against libtessera.so and once against
 * libtessera.a, from the installed prefix only. */
#include <stdio.h>
#include <string.h>

#include <tessera.h>

int main(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", TESSERA_VERSION_MAJOR, TESSERA_VERSION_MINOR,
             TESSERA_VERSION_PATCH);
    const char *version = tessera_version();
    if (version == NULL || strcmp(version, expected) != 0) {
        fprintf(stderr, "tessera_version() is \"%s\", the header says %s\n",
                version ? version : "(null)", expected);
        return 1;
    }
    printf("ok tessera_version() = %s\n", version);
    return 0;
}
