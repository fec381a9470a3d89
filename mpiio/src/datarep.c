/* Data representations of Tessera files: how the data of a view lies in the file.
 *
 * - native: the bytes as they are in memory.
 * - internal: the same as native here. MPI lets an implementation choose; the shim has no
 *   format that would serve better, so the two are one (get_view reports the name given).
 * - external32 (MPI-3.1 13.5.2): every basic element big-endian, with the standard's sizes
 *   whatever the machine (MPI_LONG and MPI_UNSIGNED_LONG 4 bytes, MPI_WCHAR 2, MPI_LONG_DOUBLE
 *   16 as IEEE binary128, MPI_AINT/MPI_OFFSET/MPI_COUNT 8, ...; tsr_external32_table).
 *   Converted here, on the client, element by element: the MPI's own MPI_Pack_external is not
 *   used because Open MPI's gives native sizes (MPI_LONG 8, MPI_WCHAR 4) and MPICH's has no
 *   size for the pair types.
 * - a representation registered with MPI_Register_datarep: the program's conversion
 *   functions and file extents.
 *
 * An access in a representation other than native goes through a staging buffer that holds
 * its data as it lies in the file, in the order of the type signature: a write encodes the
 * memory into it and writes it as plain bytes through the view; a read reads it and decodes
 * it. The view's etype and file type are rebuilt with the representation's sizes
 * (tsr_type_in_datarep, below), so, as MPI asks (13.5.1), their byte displacements are taken
 * as given and their counts scale with the file sizes of the elements. */
#define _GNU_SOURCE
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

enum tsr_datarep_kind { TSR_DATAREP_EXTERNAL32, TSR_DATAREP_USER };

struct tsr_datarep {
    char name[MPI_MAX_DATAREP_STRING + 1];
    enum tsr_datarep_kind kind;
    MPI_Datarep_conversion_function *read_conversion, *write_conversion;
    MPI_Datarep_extent_function *file_extent;
    void *extra_state;
    /* File extents the program's function gave, per basic type (asked once each). */
    struct {
        MPI_Datatype type;
        MPI_Aint bytes;
    } extents[TSR_DATAREP_EXTENTS_MAX];
    int extent_count;
};

static struct tsr_datarep tsr_external32 = {.name = "external32", .kind = TSR_DATAREP_EXTERNAL32};
static pthread_mutex_t tsr_datarep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tsr_datarep *tsr_registered[TSR_DATAREPS_MAX];
static int tsr_registered_count;

/* How a basic element is converted to external32. */
enum tsr_kind {
    TSR_KIND_BYTES,       /* copied */
    TSR_KIND_SIGNED,      /* two's complement integer, narrowed or widened with a range check */
    TSR_KIND_UNSIGNED,    /* unsigned integer, likewise */
    TSR_KIND_FLOAT,       /* IEEE float of the same size: byte order only */
    TSR_KIND_LONG_DOUBLE, /* C long double: x87 extended in memory, binary128 in the file */
    TSR_KIND_BOOL         /* 0 or 1 */
};

/* One basic type's external32 form: `parts` elements of `file_bytes` each (2 for complex
 * types and the pairs of one type, 1 otherwise). */
struct tsr_external32_type {
    MPI_Datatype type;
    int parts;
    int file_bytes;
    enum tsr_kind kind;
};

/* The table of MPI-3.1 13.5.2 (Table 13.2). Types an MPI leaves undefined are skipped where
 * it gives them no size. */
static const struct tsr_external32_type *tsr_external32_table(int *count) {
    static struct tsr_external32_type table[64];
    static int used = -1;
    if (used >= 0) {
        *count = used;
        return table;
    }
    const struct tsr_external32_type all[] = {
        {MPI_PACKED, 1, 1, TSR_KIND_BYTES},
        {MPI_BYTE, 1, 1, TSR_KIND_BYTES},
        {MPI_CHAR, 1, 1, TSR_KIND_BYTES},
        {MPI_UNSIGNED_CHAR, 1, 1, TSR_KIND_BYTES},
        {MPI_SIGNED_CHAR, 1, 1, TSR_KIND_BYTES},
        {MPI_WCHAR, 1, 2, TSR_KIND_UNSIGNED},
        {MPI_SHORT, 1, 2, TSR_KIND_SIGNED},
        {MPI_UNSIGNED_SHORT, 1, 2, TSR_KIND_UNSIGNED},
        {MPI_INT, 1, 4, TSR_KIND_SIGNED},
        {MPI_UNSIGNED, 1, 4, TSR_KIND_UNSIGNED},
        {MPI_LONG, 1, 4, TSR_KIND_SIGNED},
        {MPI_UNSIGNED_LONG, 1, 4, TSR_KIND_UNSIGNED},
        {MPI_LONG_LONG_INT, 1, 8, TSR_KIND_SIGNED},
        {MPI_UNSIGNED_LONG_LONG, 1, 8, TSR_KIND_UNSIGNED},
        {MPI_FLOAT, 1, 4, TSR_KIND_FLOAT},
        {MPI_DOUBLE, 1, 8, TSR_KIND_FLOAT},
        {MPI_LONG_DOUBLE, 1, 16, TSR_KIND_LONG_DOUBLE},
        {MPI_C_BOOL, 1, 1, TSR_KIND_BOOL},
        {MPI_INT8_T, 1, 1, TSR_KIND_SIGNED},
        {MPI_INT16_T, 1, 2, TSR_KIND_SIGNED},
        {MPI_INT32_T, 1, 4, TSR_KIND_SIGNED},
        {MPI_INT64_T, 1, 8, TSR_KIND_SIGNED},
        {MPI_UINT8_T, 1, 1, TSR_KIND_UNSIGNED},
        {MPI_UINT16_T, 1, 2, TSR_KIND_UNSIGNED},
        {MPI_UINT32_T, 1, 4, TSR_KIND_UNSIGNED},
        {MPI_UINT64_T, 1, 8, TSR_KIND_UNSIGNED},
        {MPI_AINT, 1, 8, TSR_KIND_SIGNED},
        {MPI_OFFSET, 1, 8, TSR_KIND_SIGNED},
        {MPI_COUNT, 1, 8, TSR_KIND_SIGNED},
        {MPI_C_FLOAT_COMPLEX, 2, 4, TSR_KIND_FLOAT},
        {MPI_C_DOUBLE_COMPLEX, 2, 8, TSR_KIND_FLOAT},
        {MPI_C_LONG_DOUBLE_COMPLEX, 2, 16, TSR_KIND_LONG_DOUBLE},
        {MPI_2INT, 2, 4, TSR_KIND_SIGNED},
        {MPI_CHARACTER, 1, 1, TSR_KIND_BYTES},
        {MPI_LOGICAL, 1, 4, TSR_KIND_SIGNED},
        {MPI_INTEGER, 1, 4, TSR_KIND_SIGNED},
        {MPI_REAL, 1, 4, TSR_KIND_FLOAT},
        {MPI_DOUBLE_PRECISION, 1, 8, TSR_KIND_FLOAT},
        {MPI_COMPLEX, 2, 4, TSR_KIND_FLOAT},
        {MPI_DOUBLE_COMPLEX, 2, 8, TSR_KIND_FLOAT},
        {MPI_2INTEGER, 2, 4, TSR_KIND_SIGNED},
        {MPI_2REAL, 2, 4, TSR_KIND_FLOAT},
        {MPI_2DOUBLE_PRECISION, 2, 8, TSR_KIND_FLOAT},
        {MPI_INTEGER1, 1, 1, TSR_KIND_SIGNED},
        {MPI_INTEGER2, 1, 2, TSR_KIND_SIGNED},
        {MPI_INTEGER4, 1, 4, TSR_KIND_SIGNED},
        {MPI_INTEGER8, 1, 8, TSR_KIND_SIGNED},
        {MPI_REAL4, 1, 4, TSR_KIND_FLOAT},
        {MPI_REAL8, 1, 8, TSR_KIND_FLOAT},
        {MPI_REAL16, 1, 16, TSR_KIND_FLOAT},
        {MPI_COMPLEX8, 2, 4, TSR_KIND_FLOAT},
        {MPI_COMPLEX16, 2, 8, TSR_KIND_FLOAT},
        {MPI_COMPLEX32, 2, 16, TSR_KIND_FLOAT},
    };
    used = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && used < 64; i++) {
        MPI_Count size = 0;
        if (all[i].type == MPI_DATATYPE_NULL || PMPI_Type_size_x(all[i].type, &size) != MPI_SUCCESS ||
            size <= 0)
            continue;
        table[used++] = all[i];
    }
    *count = used;
    return table;
}

static const struct tsr_external32_type *tsr_external32_of(MPI_Datatype type) {
    static const struct tsr_external32_type *last;
    if (last && last->type == type)
        return last;
    int count = 0;
    const struct tsr_external32_type *table = tsr_external32_table(&count);
    for (int i = 0; i < count; i++)
        if (table[i].type == type)
            return last = &table[i];
    return NULL;
}

static const char *tsr_type_name(MPI_Datatype type) {
    static char name[MPI_MAX_OBJECT_NAME + 1];
    int length = 0;
    name[0] = '\0';
    PMPI_Type_get_name(type, name, &length);
    return name[0] ? name : "(unnamed)";
}

/* The value type of a pair type (MPI_FLOAT_INT, ...), or MPI_DATATYPE_NULL. Each is stored
 * as its value, then the int. */
static MPI_Datatype tsr_pair_value(MPI_Datatype type) {
    if (type == MPI_FLOAT_INT)
        return MPI_FLOAT;
    if (type == MPI_DOUBLE_INT)
        return MPI_DOUBLE;
    if (type == MPI_LONG_INT)
        return MPI_LONG;
    if (type == MPI_SHORT_INT)
        return MPI_SHORT;
    if (type == MPI_LONG_DOUBLE_INT)
        return MPI_LONG_DOUBLE;
    return MPI_DATATYPE_NULL;
}

/* ---- The type signature ---------------------------------------------------------------- */

/* Called for each run of `count` basic elements of `type` in signature order. */
typedef int (*tsr_visit)(void *state, MPI_Datatype type, MPI_Count count);

static int tsr_is_basic(int combiner) {
#ifdef MPI_COMBINER_F90_REAL
    if (combiner == MPI_COMBINER_F90_REAL || combiner == MPI_COMBINER_F90_COMPLEX ||
        combiner == MPI_COMBINER_F90_INTEGER)
        return 1;
#endif
    return combiner == MPI_COMBINER_NAMED;
}

static int tsr_visit_basic(MPI_Datatype type, MPI_Count count, tsr_visit visit, void *state) {
    MPI_Datatype value = tsr_pair_value(type);
    if (value == MPI_DATATYPE_NULL)
        return visit(state, type, count);
    for (MPI_Count i = 0; i < count; i++) {
        int rc = visit(state, value, 1);
        if (rc == MPI_SUCCESS)
            rc = visit(state, MPI_INT, 1);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

/* Visits the signature of `count` instances of `type`: the basic elements in typemap order.
 * A type of one child repeats the child's signature size/child-size times; a struct runs
 * through its blocks. Basic types of no bytes (MPI_LB, MPI_UB) are left out. */
static int tsr_signature(MPI_Datatype type, MPI_Count count, tsr_visit visit, void *state,
                         int depth) {
    if (count == 0)
        return MPI_SUCCESS;
    if (depth > TSR_TYPE_DEPTH_MAX)
        return tsr_error(MPI_ERR_TYPE, "tessera: a datatype nested more than %d deep "
                                       "(TSR_TYPE_DEPTH_MAX)", TSR_TYPE_DEPTH_MAX);
    int integers, addresses, datatypes, combiner;
    if (PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner) != MPI_SUCCESS)
        return tsr_error(MPI_ERR_TYPE, "tessera: not a datatype");
    if (tsr_is_basic(combiner)) {
        MPI_Count size = 0;
        PMPI_Type_size_x(type, &size);
        return size == 0 ? MPI_SUCCESS : tsr_visit_basic(type, count, visit, state);
    }
    int *ints = malloc(sizeof(int) * (size_t)(integers + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(addresses + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(datatypes + 1));
    int *basic = malloc(sizeof(int) * (size_t)(datatypes + 1));
    int rc = MPI_SUCCESS;
    if (!ints || !addrs || !types || !basic) {
        free(ints), free(addrs), free(types), free(basic);
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory to take a datatype apart");
    }
    PMPI_Type_get_contents(type, integers, addresses, datatypes, ints, addrs, types);
    for (int i = 0; i < datatypes; i++) {
        int ni, na, nd, child_combiner;
        PMPI_Type_get_envelope(types[i], &ni, &na, &nd, &child_combiner);
        basic[i] = tsr_is_basic(child_combiner);
    }
    int is_struct = combiner == MPI_COMBINER_STRUCT;
#ifdef MPICH
    is_struct = is_struct || combiner == MPI_COMBINER_STRUCT_INTEGER;
#endif
    if (is_struct) {
        for (MPI_Count c = 0; c < count && rc == MPI_SUCCESS; c++)
            for (int i = 0; i < ints[0] && rc == MPI_SUCCESS; i++) {
                MPI_Count size = 0;
                PMPI_Type_size_x(types[i], &size);
                if (ints[1 + i] == 0 || size == 0)
                    continue;
                rc = basic[i] ? tsr_visit_basic(types[i], ints[1 + i], visit, state)
                              : tsr_signature(types[i], ints[1 + i], visit, state, depth + 1);
            }
    } else if (datatypes >= 1) {
        MPI_Count size = 0, child_size = 0;
        PMPI_Type_size_x(type, &size);
        PMPI_Type_size_x(types[0], &child_size);
        MPI_Count repeats = child_size > 0 ? size / child_size : 0;
        if (repeats > 0)
            rc = basic[0] ? tsr_visit_basic(types[0], count * repeats, visit, state)
                          : tsr_signature(types[0], count * repeats, visit, state, depth + 1);
    }
    for (int i = 0; i < datatypes; i++)
        if (!basic[i])
            PMPI_Type_free(&types[i]);
    free(ints), free(addrs), free(types), free(basic);
    return rc;
}

/* ---- File sizes ------------------------------------------------------------------------ */

/* The file bytes of one basic element of `type` in `rep`. */
static int tsr_basic_file_bytes(const struct tsr_datarep *rep, MPI_Datatype type,
                                MPI_Count *bytes) {
    if (rep->kind == TSR_DATAREP_EXTERNAL32) {
        const struct tsr_external32_type *e = tsr_external32_of(type);
        if (e == NULL)
            return tsr_error(MPI_ERR_TYPE, "tessera: datatype %s has no external32 form (MPI "
                                           "defines one for the predefined types of its table "
                                           "13.2)", tsr_type_name(type));
        *bytes = (MPI_Count)e->parts * e->file_bytes;
        return MPI_SUCCESS;
    }
    struct tsr_datarep *user = (struct tsr_datarep *)rep;
    pthread_mutex_lock(&tsr_datarep_lock);
    for (int i = 0; i < user->extent_count; i++)
        if (user->extents[i].type == type) {
            *bytes = user->extents[i].bytes;
            pthread_mutex_unlock(&tsr_datarep_lock);
            return MPI_SUCCESS;
        }
    pthread_mutex_unlock(&tsr_datarep_lock);
    MPI_Aint extent = 0;
    int code = user->file_extent(type, &extent, user->extra_state);
    if (code != MPI_SUCCESS || extent < 0)
        return tsr_error(MPI_ERR_CONVERSION, "tessera: the file extent function of data "
                                             "representation %s failed for %s (returned %d, "
                                             "extent %lld)", user->name, tsr_type_name(type),
                         code, (long long)extent);
    pthread_mutex_lock(&tsr_datarep_lock);
    if (user->extent_count < TSR_DATAREP_EXTENTS_MAX) {
        user->extents[user->extent_count].type = type;
        user->extents[user->extent_count].bytes = extent;
        user->extent_count++;
    }
    pthread_mutex_unlock(&tsr_datarep_lock);
    *bytes = extent;
    return MPI_SUCCESS;
}

struct tsr_size_state {
    const struct tsr_datarep *rep;
    MPI_Count bytes;
};

static int tsr_add_size(void *state, MPI_Datatype type, MPI_Count count) {
    struct tsr_size_state *s = state;
    MPI_Count each = 0;
    int rc = tsr_basic_file_bytes(s->rep, type, &each);
    if (rc == MPI_SUCCESS)
        s->bytes += each * count;
    return rc;
}

int tsr_datarep_file_bytes(const struct tsr_datarep *rep, MPI_Count count, MPI_Datatype type,
                           MPI_Count *bytes) {
    struct tsr_size_state state = {rep, 0};
    int rc = tsr_signature(type, count, tsr_add_size, &state, 0);
    *bytes = state.bytes;
    return rc;
}

/* ---- external32 conversion ------------------------------------------------------------- */

static uint64_t tsr_load_big(const unsigned char *p, int bytes) {
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = value << 8 | p[i];
    return value;
}

static void tsr_store_big(unsigned char *p, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)value;
        value >>= 8;
    }
}

/* Native integers of 1, 2, 4 or 8 bytes in host order. */
static uint64_t tsr_load_native(const unsigned char *p, int bytes, int is_signed) {
    switch (bytes) {
    case 1: {
        uint8_t v;
        memcpy(&v, p, 1);
        return is_signed ? (uint64_t)(int64_t)(int8_t)v : v;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return is_signed ? (uint64_t)(int64_t)(int16_t)v : v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return is_signed ? (uint64_t)(int64_t)(int32_t)v : v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static void tsr_store_native(unsigned char *p, uint64_t value, int bytes) {
    uint8_t v1 = (uint8_t)value;
    uint16_t v2 = (uint16_t)value;
    uint32_t v4 = (uint32_t)value;
    switch (bytes) {
    case 1:
        memcpy(p, &v1, 1);
        break;
    case 2:
        memcpy(p, &v2, 2);
        break;
    case 4:
        memcpy(p, &v4, 4);
        break;
    default:
        memcpy(p, &value, 8);
        break;
    }
}

/* Does `value` (sign-extended if signed) fit in `bytes` bytes? */
static int tsr_fits(uint64_t value, int bytes, int is_signed) {
    if (bytes >= 8)
        return 1;
    int bits = bytes * 8;
    if (!is_signed)
        return value >> bits == 0;
    int64_t v = (int64_t)value, limit = (int64_t)1 << (bits - 1);
    return v >= -limit && v < limit;
}

/* Reverses `count` elements of `bytes` bytes from `source` into `target` (host order to big
 * endian or back); the common sizes in a loop the compiler turns into bswap. */
static void tsr_swap(unsigned char *target, const unsigned char *source, MPI_Count count,
                     int bytes) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    memcpy(target, source, (size_t)(count * bytes));
#else
    switch (bytes) {
    case 1:
        memcpy(target, source, (size_t)count);
        return;
    case 2:
        for (MPI_Count i = 0; i < count; i++) {
            uint16_t v;
            memcpy(&v, source + 2 * i, 2);
            v = __builtin_bswap16(v);
            memcpy(target + 2 * i, &v, 2);
        }
        return;
    case 4:
        for (MPI_Count i = 0; i < count; i++) {
            uint32_t v;
            memcpy(&v, source + 4 * i, 4);
            v = __builtin_bswap32(v);
            memcpy(target + 4 * i, &v, 4);
        }
        return;
    case 8:
        for (MPI_Count i = 0; i < count; i++) {
            uint64_t v;
            memcpy(&v, source + 8 * i, 8);
            v = __builtin_bswap64(v);
            memcpy(target + 8 * i, &v, 8);
        }
        return;
    default:
        for (MPI_Count i = 0; i < count; i++)
            for (int b = 0; b < bytes; b++)
                target[i * bytes + b] = source[i * bytes + bytes - 1 - b];
    }
#endif
}

/* C long double <-> binary128. On x86 the long double is the x87 80-bit format (64-bit
 * significand with an explicit integer bit, the same 15-bit exponent as binary128) in 16
 * bytes; binary128 has a 112-bit fraction, so the 63 fraction bits move to its top and
 * reading drops the 49 bits below them (truncation). A long double that already is binary128
 * is only byte-swapped. */
#if LDBL_MANT_DIG == 64
#define TSR_LONG_DOUBLE_X87 1
#else
#define TSR_LONG_DOUBLE_X87 0
#endif

static void tsr_x87_to_binary128(unsigned char *target, const unsigned char *source) {
    uint64_t significand;
    uint16_t sign_exponent;
    memcpy(&significand, source, 8);
    memcpy(&sign_exponent, source + 8, 2);
    uint64_t fraction = significand & 0x7fffffffffffffffULL;
    tsr_store_big(target, (uint64_t)sign_exponent << 48 | fraction >> 15, 8);
    tsr_store_big(target + 8, fraction << 49, 8);
}

static void tsr_binary128_to_x87(unsigned char *target, const unsigned char *source) {
    uint64_t high = tsr_load_big(source, 8), low = tsr_load_big(source + 8, 8);
    uint16_t sign_exponent = (uint16_t)(high >> 48);
    uint64_t fraction = (high & 0xffffffffffffULL) << 15 | low >> 49;
    uint64_t significand = fraction | ((sign_exponent & 0x7fff) != 0 ? 1ULL << 63 : 0);
    memset(target, 0, 16);
    memcpy(target, &significand, 8);
    memcpy(target + 8, &sign_exponent, 2);
}

struct tsr_convert_state {
    const unsigned char *source;
    unsigned char *target;
    int encode; /* 1: native to external32; 0: back */
};

/* Converts `count` elements of basic type `type`, advancing both streams. */
static int tsr_convert_run(void *state, MPI_Datatype type, MPI_Count count) {
    struct tsr_convert_state *s = state;
    const struct tsr_external32_type *e = tsr_external32_of(type);
    if (e == NULL)
        return tsr_error(MPI_ERR_TYPE, "tessera: datatype %s has no external32 form",
                         tsr_type_name(type));
    MPI_Count size = 0;
    PMPI_Type_size_x(type, &size);
    int native = (int)(size / e->parts), file = e->file_bytes;
    MPI_Count parts = count * e->parts;
    int in = s->encode ? native : file, out = s->encode ? file : native;
    const unsigned char *source = s->source;
    unsigned char *target = s->target;
    switch (e->kind) {
    case TSR_KIND_BYTES:
        if (native != file)
            goto unsupported;
        memcpy(target, source, (size_t)(parts * native));
        break;
    case TSR_KIND_BOOL:
        for (MPI_Count i = 0; i < parts; i++) {
            int set = 0;
            for (int b = 0; b < in; b++)
                set |= source[i * in + b] != 0;
            memset(target + i * out, 0, (size_t)out);
            if (s->encode)
                target[i * out + out - 1] = (unsigned char)set;
            else
                tsr_store_native(target + i * out, (uint64_t)set, out);
        }
        break;
    case TSR_KIND_FLOAT:
        if (native != file)
            goto unsupported;
        tsr_swap(target, source, parts, native);
        break;
    case TSR_KIND_LONG_DOUBLE:
        if (native == 16 && !TSR_LONG_DOUBLE_X87) {
            tsr_swap(target, source, parts, 16);
            break;
        }
        if (native != 16 || !TSR_LONG_DOUBLE_X87)
            goto unsupported;
        for (MPI_Count i = 0; i < parts; i++) {
            if (s->encode)
                tsr_x87_to_binary128(target + 16 * i, source + 16 * i);
            else
                tsr_binary128_to_x87(target + 16 * i, source + 16 * i);
        }
        break;
    case TSR_KIND_SIGNED:
    case TSR_KIND_UNSIGNED: {
        int is_signed = e->kind == TSR_KIND_SIGNED;
        if (native == file) {
            tsr_swap(target, source, parts, native);
            break;
        }
        if (native > 8 || file > 8)
            goto unsupported;
        for (MPI_Count i = 0; i < parts; i++) {
            uint64_t value;
            if (s->encode) {
                value = tsr_load_native(source + i * in, in, is_signed);
            } else {
                value = tsr_load_big(source + i * in, in);
                if (is_signed && in < 8 && (value >> (in * 8 - 1)) & 1)
                    value |= ~0ULL << (in * 8); /* sign-extend */
            }
            if (!tsr_fits(value, out, is_signed))
                return tsr_error(MPI_ERR_CONVERSION,
                                 "tessera: external32: a %s value %s%llu does not fit in %d "
                                 "bytes", tsr_type_name(type),
                                 is_signed && (int64_t)value < 0 ? "-" : "",
                                 is_signed && (int64_t)value < 0
                                     ? (unsigned long long)(-(int64_t)value)
                                     : (unsigned long long)value,
                                 out);
            if (s->encode)
                tsr_store_big(target + i * out, value, out);
            else
                tsr_store_native(target + i * out, value, out);
        }
        break;
    }
    }
    s->source += parts * in;
    s->target += parts * out;
    return MPI_SUCCESS;
unsupported:
    return tsr_error(MPI_ERR_TYPE, "tessera: external32: %s of %d bytes here cannot be "
                                   "converted to its %d-byte external32 form",
                     tsr_type_name(type), native, file);
}

/* ---- Staging --------------------------------------------------------------------------- */

/* Does `type` hold its data as one block from its start (so a buffer of it is its own packed
 * stream)? Predefined types other than the pairs. */
static int tsr_packed_already(MPI_Datatype type) {
    int integers, addresses, datatypes, combiner;
    PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner);
    MPI_Count size = 0, lb = 0, extent = 0;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    return combiner == MPI_COMBINER_NAMED && lb == 0 && extent == size;
}

/* Packs (or unpacks) `count` instances of `type` at `memory` to (from) the native stream
 * `packed`, in pieces MPI's int counts can hold. */
static int tsr_pack(int pack, void *memory, MPI_Count count, MPI_Datatype type,
                    unsigned char *packed) {
    MPI_Count size = 0, lb = 0, extent = 0;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    if (size == 0)
        return MPI_SUCCESS;
    if (size > INT_MAX)
        return tsr_error(MPI_ERR_TYPE, "tessera: a datatype of %lld bytes is too large to "
                                       "convert (at most %d)", (long long)size, INT_MAX);
    MPI_Count chunk = TSR_PACK_BYTES_MAX / size;
    if (chunk < 1)
        chunk = 1;
    for (MPI_Count done = 0; done < count; done += chunk) {
        MPI_Count n = count - done < chunk ? count - done : chunk;
        char *at = (char *)memory + done * extent;
        int position = 0, rc;
        if (pack)
            rc = PMPI_Pack(at, (int)n, type, packed + done * size, (int)(n * size), &position,
                           MPI_COMM_SELF);
        else
            rc = PMPI_Unpack(packed + done * size, (int)(n * size), &position, at, (int)n, type,
                             MPI_COMM_SELF);
        if (rc != MPI_SUCCESS)
            return tsr_error(MPI_ERR_TYPE, "tessera: MPI_%s of the memory datatype failed",
                             pack ? "Pack" : "Unpack");
    }
    return MPI_SUCCESS;
}

/* Calls a registered conversion function over `count` instances, in int-sized pieces. */
static int tsr_user_convert(const struct tsr_datarep *rep, int write, void *memory,
                            MPI_Count count, MPI_Datatype type, unsigned char *file) {
    MPI_Datarep_conversion_function *convert = write ? rep->write_conversion
                                                     : rep->read_conversion;
    MPI_Count each = 0;
    int rc = tsr_datarep_file_bytes(rep, 1, type, &each);
    for (MPI_Count done = 0; rc == MPI_SUCCESS && done < count;) {
        int n = count - done < INT_MAX ? (int)(count - done) : INT_MAX;
        int code = convert(memory, type, n, file + done * each, (MPI_Offset)done,
                           rep->extra_state);
        if (code != MPI_SUCCESS)
            return tsr_error(MPI_ERR_CONVERSION, "tessera: the %s conversion function of data "
                                                 "representation %s returned %d",
                             write ? "write" : "read", rep->name, code);
        done += n;
    }
    return rc;
}

int tsr_datarep_encode(const struct tsr_datarep *rep, const void *memory, MPI_Count count,
                       MPI_Datatype type, void *file, MPI_Count file_bytes) {
    MPI_Count size = 0;
    PMPI_Type_size_x(type, &size);
    if (rep->kind == TSR_DATAREP_USER) {
        if (rep->write_conversion != MPI_CONVERSION_FN_NULL)
            return tsr_user_convert(rep, 1, (void *)memory, count, type, file);
        if (size * count != file_bytes)
            return tsr_error(MPI_ERR_CONVERSION, "tessera: data representation %s has no "
                             "write conversion function, but its file extents differ from "
                             "the native sizes", rep->name);
        return tsr_pack(1, (void *)memory, count, type, file);
    }
    const unsigned char *stream = memory;
    unsigned char *packed = NULL;
    if (!tsr_packed_already(type)) {
        packed = malloc((size_t)(size * count) + 1);
        if (packed == NULL)
            return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory to convert %lld bytes",
                             (long long)(size * count));
        int rc = tsr_pack(1, (void *)memory, count, type, packed);
        if (rc != MPI_SUCCESS) {
            free(packed);
            return rc;
        }
        stream = packed;
    }
    struct tsr_convert_state state = {stream, file, 1};
    int rc = tsr_signature(type, count, tsr_convert_run, &state, 0);
    free(packed);
    return rc;
}

int tsr_datarep_decode(const struct tsr_datarep *rep, const void *file, MPI_Count file_bytes,
                       void *memory, MPI_Count count, MPI_Datatype type) {
    MPI_Count size = 0;
    PMPI_Type_size_x(type, &size);
    if (rep->kind == TSR_DATAREP_USER) {
        if (rep->read_conversion != MPI_CONVERSION_FN_NULL)
            return tsr_user_convert(rep, 0, memory, count, type, (unsigned char *)file);
        if (size * count != file_bytes)
            return tsr_error(MPI_ERR_CONVERSION, "tessera: data representation %s has no "
                             "read conversion function, but its file extents differ from "
                             "the native sizes", rep->name);
        return tsr_pack(0, memory, count, type, (unsigned char *)file);
    }
    int direct = tsr_packed_already(type);
    unsigned char *stream = direct ? memory : malloc((size_t)(size * count) + 1);
    if (stream == NULL)
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory to convert %lld bytes",
                         (long long)(size * count));
    struct tsr_convert_state state = {file, stream, 0};
    int rc = tsr_signature(type, count, tsr_convert_run, &state, 0);
    if (rc == MPI_SUCCESS && !direct)
        rc = tsr_pack(0, memory, count, type, stream);
    if (!direct)
        free(stream);
    return rc;
}

/* ---- Names and registration ------------------------------------------------------------ */

int tsr_datarep_lookup(const char *name, const struct tsr_datarep **out) {
    *out = NULL;
    if (name != NULL && (strcmp(name, "native") == 0 || strcmp(name, "internal") == 0))
        return MPI_SUCCESS;
    if (name != NULL && strcmp(name, "external32") == 0) {
        *out = &tsr_external32;
        return MPI_SUCCESS;
    }
    pthread_mutex_lock(&tsr_datarep_lock);
    for (int i = 0; name != NULL && i < tsr_registered_count; i++)
        if (strcmp(tsr_registered[i]->name, name) == 0)
            *out = tsr_registered[i];
    pthread_mutex_unlock(&tsr_datarep_lock);
    if (*out != NULL)
        return MPI_SUCCESS;
    return tsr_error(MPI_ERR_UNSUPPORTED_DATAREP,
                     "tessera: data representation \"%s\" is not supported (native, internal, "
                     "external32 and those registered with MPI_Register_datarep are)",
                     name ? name : "(null)");
}

const char *tsr_datarep_name(const struct tsr_datarep *rep) { return rep->name; }

/* Registers a data representation for Tessera files, and with the MPI for its own files
 * (where the MPI refuses, as MPICH's ROMIO and Open MPI's ompio do, Tessera files still have
 * it). A name registered before, or one of the three predefined ones, is MPI_ERR_DUP_DATAREP.
 * Errors go to the handler of MPI_FILE_NULL, as for open. */
int PMPI_Register_datarep(const char *datarep, MPI_Datarep_conversion_function *read_conversion_fn,
                          MPI_Datarep_conversion_function *write_conversion_fn,
                          MPI_Datarep_extent_function *dtype_file_extent_fn, void *extra_state) {
    if (datarep == NULL || datarep[0] == '\0' || strlen(datarep) > MPI_MAX_DATAREP_STRING)
        return tsr_raise_default(tsr_error(MPI_ERR_ARG, "tessera: MPI_Register_datarep: the "
                                           "name is empty or longer than "
                                           "MPI_MAX_DATAREP_STRING (%d)",
                                           MPI_MAX_DATAREP_STRING));
    if (dtype_file_extent_fn == NULL)
        return tsr_raise_default(tsr_error(MPI_ERR_ARG, "tessera: MPI_Register_datarep %s: no "
                                           "file extent function", datarep));
    int duplicate = strcmp(datarep, "native") == 0 || strcmp(datarep, "internal") == 0 ||
                    strcmp(datarep, "external32") == 0;
    pthread_mutex_lock(&tsr_datarep_lock);
    for (int i = 0; i < tsr_registered_count; i++)
        duplicate = duplicate || strcmp(tsr_registered[i]->name, datarep) == 0;
    int full = tsr_registered_count == TSR_DATAREPS_MAX;
    pthread_mutex_unlock(&tsr_datarep_lock);
    if (duplicate)
        return tsr_raise_default(tsr_error(MPI_ERR_DUP_DATAREP, "tessera: "
                                           "MPI_Register_datarep: data representation %s is "
                                           "registered already", datarep));
    if (full)
        return tsr_raise_default(tsr_error(MPI_ERR_NO_MEM, "tessera: MPI_Register_datarep %s: "
                                           "more than %d data representations "
                                           "(TSR_DATAREPS_MAX)", datarep, TSR_DATAREPS_MAX));
    struct tsr_datarep *rep = calloc(1, sizeof *rep);
    if (rep == NULL)
        return tsr_raise_default(tsr_error(MPI_ERR_NO_MEM, "tessera: MPI_Register_datarep %s: "
                                           "no memory", datarep));
    snprintf(rep->name, sizeof rep->name, "%s", datarep);
    rep->kind = TSR_DATAREP_USER;
    rep->read_conversion = read_conversion_fn;
    rep->write_conversion = write_conversion_fn;
    rep->file_extent = dtype_file_extent_fn;
    rep->extra_state = extra_state;
    /* The MPI's own files get it where the MPI can; its refusal is not the program's error.
     * Its errors are returned, not raised, meanwhile. */
    MPI_Errhandler saved = MPI_ERRHANDLER_NULL;
    PMPI_File_get_errhandler(MPI_FILE_NULL, &saved);
    PMPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    TSR_NEXT(Register_datarep, datarep, read_conversion_fn, write_conversion_fn,
             dtype_file_extent_fn, extra_state);
    PMPI_File_set_errhandler(MPI_FILE_NULL, saved);
    pthread_mutex_lock(&tsr_datarep_lock);
    tsr_registered[tsr_registered_count++] = rep;
    pthread_mutex_unlock(&tsr_datarep_lock);
    return MPI_SUCCESS;
}

/* The extent of a datatype in the file: in a representation other than native, that of the
 * type rebuilt with the representation's sizes. */
static int tsr_type_extent(MPI_File fh, MPI_Datatype datatype, MPI_Aint *extent,
                           int *served) {
    struct tsr_file *f = tsr_lookup(fh);
    *served = f != NULL && f->datarep != NULL;
    if (!*served)
        return MPI_SUCCESS;
    TesseraDatatype *tree = NULL;
    int rc = tsr_type_in_datarep(f->datarep, datatype, &tree);
    if (rc != MPI_SUCCESS)
        return tsr_raise(f, rc);
    TesseraTypeInfo info;
    tessera_type_info(tree, &info);
    tessera_type_free(tree);
    *extent = (MPI_Aint)info.extent;
    return MPI_SUCCESS;
}

int PMPI_File_get_type_extent(MPI_File fh, MPI_Datatype datatype, MPI_Aint *extent) {
    int served = 0;
    int rc = tsr_type_extent(fh, datatype, extent, &served);
    return served ? rc : TSR_NEXT(File_get_type_extent, fh, datatype, extent);
}

#if MPI_VERSION >= 4
int PMPI_File_get_type_extent_c(MPI_File fh, MPI_Datatype datatype, MPI_Count *extent) {
    int served = 0;
    MPI_Aint bytes = 0;
    int rc = tsr_type_extent(fh, datatype, &bytes, &served);
    if (!served)
        return TSR_NEXT(File_get_type_extent_c, fh, datatype, extent);
    *extent = bytes;
    return rc;
}
TSR_MPI_ALIAS(File_get_type_extent_c)
#endif

TSR_MPI_ALIAS(Register_datarep)
TSR_MPI_ALIAS(File_get_type_extent)

/* The tree of `type` as its data lies in the file in representation `rep` (a new tree the
 * caller frees): each basic type becomes a block of its file bytes and the constructors are
 * applied as given, so displacements counted in children scale with the file sizes and byte
 * displacements, strides and resized bounds are taken as they are (MPI-3.1 13.5.1). Nothing is
 * cached: views and get_type_extent build these, not data accesses. */
int tsr_type_in_datarep(const struct tsr_datarep *rep, MPI_Datatype type,
                        TesseraDatatype **out) {
    *out = NULL;
    if (type == MPI_DATATYPE_NULL)
        return tsr_error(MPI_ERR_TYPE, "tessera: MPI_DATATYPE_NULL given as a datatype");
    int integers, addresses, datatypes, combiner;
    if (PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner) != MPI_SUCCESS)
        return tsr_error(MPI_ERR_TYPE, "tessera: not a datatype");
    MPI_Count file_bytes = 0;
    int mpi_rc = tsr_datarep_file_bytes(rep, 1, type, &file_bytes);
    if (mpi_rc != MPI_SUCCESS)
        return mpi_rc;
    int basic = combiner == MPI_COMBINER_NAMED;
#ifdef MPI_COMBINER_F90_REAL
    basic = basic || combiner == MPI_COMBINER_F90_REAL || combiner == MPI_COMBINER_F90_COMPLEX ||
            combiner == MPI_COMBINER_F90_INTEGER;
#endif
    if (basic) {
        int rc = tessera_type_bytes((uint64_t)file_bytes, out);
        return rc == TESSERA_OK ? MPI_SUCCESS : tsr_type_failed(rc, "named");
    }
    int *ints = malloc(sizeof(int) * (size_t)(integers + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(addresses + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(datatypes + 1));
    TesseraDatatype **children = calloc((size_t)(datatypes + 1), sizeof(TesseraDatatype *));
    if (!ints || !addrs || !types || !children) {
        free(ints), free(addrs), free(types), free(children);
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory to take a datatype apart");
    }
    mpi_rc = PMPI_Type_get_contents(type, integers, addresses, datatypes, ints, addrs, types);
    for (int i = 0; mpi_rc == MPI_SUCCESS && i < datatypes; i++)
        mpi_rc = tsr_type_in_datarep(rep, types[i], &children[i]);
    if (mpi_rc == MPI_SUCCESS)
        mpi_rc = tsr_convert_derived(combiner, ints, addrs,
                                     (const TesseraDatatype **)children, datatypes, out);
    for (int i = 0; i < datatypes; i++) {
        tessera_type_free(children[i]); /* the new tree keeps its share */
        if (!tsr_is_named(types[i]))
            PMPI_Type_free(&types[i]);
    }
    free(ints), free(addrs), free(types), free(children);
    if (mpi_rc != MPI_SUCCESS)
        return mpi_rc;
    TesseraTypeInfo info;
    tessera_type_info(*out, &info);
    if ((MPI_Count)info.size != file_bytes) {
        tessera_type_free(*out);
        *out = NULL;
        return tsr_error(MPI_ERR_TYPE, "tessera: datatype combiner %d converted to %llu file "
                                       "bytes in %s, its signature has %lld",
                         combiner, (unsigned long long)info.size, tsr_datarep_name(rep),
                         (long long)file_bytes);
    }
    return MPI_SUCCESS;
}
