/* MPI datatypes into Tessera datatype trees.
 *
 * A derived type is taken apart with MPI_Type_get_envelope / MPI_Type_get_contents and
 * rebuilt with the Tessera constructor of the same combiner, its children converted first.
 * Every combiner has one (named, dup, contiguous, vector, hvector, indexed, hindexed,
 * indexed_block, hindexed_block, struct, subarray, darray, resized, the Fortran f90 types).
 * Each result is checked against MPI's own view of the type: the sizes must agree, and where
 * MPI's lower bound or extent differ (alignment padding MPI adds to a struct) the tree is
 * resized to MPI's. The result is cached on the MPI type as an attribute, freed when the
 * program frees the type; predefined types live in a small table for the life of the
 * process. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static int tsr_keyval = MPI_KEYVAL_INVALID;

static struct {
    MPI_Datatype type;
    TesseraDatatype *tree;
} tsr_named[TSR_NAMED_TYPES_MAX];
static int tsr_named_count;

static int tsr_free_attribute(MPI_Datatype type, int keyval, void *value, void *extra) {
    (void)type;
    (void)keyval;
    (void)extra;
    tessera_type_free((TesseraDatatype *)value);
    return MPI_SUCCESS;
}

int tsr_type_failed(int tessera_code, const char *what) {
    return tsr_error(tessera_code == TESSERA_ERR_LIMIT_EXCEEDED ? MPI_ERR_ARG : MPI_ERR_TYPE,
                     "tessera: cannot convert the %s datatype: %s", what, tessera_last_error());
}

/* A pair type (value and int), as MPI lays out struct { T value; int index; }. */
#define TSR_PAIR(T, out)                                                                   \
    do {                                                                                   \
        struct pair { T value; int index; };                                               \
        TesseraDatatype *value_type = NULL, *int_type = NULL;                              \
        int rc = tessera_type_bytes(sizeof(T), &value_type);                               \
        if (rc == TESSERA_OK)                                                              \
            rc = tessera_type_bytes(sizeof(int), &int_type);                               \
        if (rc == TESSERA_OK) {                                                            \
            uint64_t blocklens[2] = {1, 1};                                                \
            int64_t displacements[2] = {offsetof(struct pair, value),                      \
                                        offsetof(struct pair, index)};                     \
            const TesseraDatatype *types[2] = {value_type, int_type};                      \
            rc = tessera_type_struct(2, blocklens, displacements, types, out);             \
        }                                                                                  \
        tessera_type_free(value_type);                                                     \
        tessera_type_free(int_type);                                                       \
        if (rc != TESSERA_OK)                                                              \
            return tsr_type_failed(rc, "pair");                                            \
    } while (0)

static int tsr_convert_named(MPI_Datatype type, TesseraDatatype **out) {
    MPI_Count size = 0, lb = 0, extent = 0;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    if (lb == 0 && extent == size) {
        int rc = tessera_type_bytes((uint64_t)size, out);
        return rc == TESSERA_OK ? MPI_SUCCESS : tsr_type_failed(rc, "named");
    }
    if (type == MPI_FLOAT_INT)
        TSR_PAIR(float, out);
    else if (type == MPI_DOUBLE_INT)
        TSR_PAIR(double, out);
    else if (type == MPI_LONG_INT)
        TSR_PAIR(long, out);
    else if (type == MPI_SHORT_INT)
        TSR_PAIR(short, out);
    else if (type == MPI_LONG_DOUBLE_INT)
        TSR_PAIR(long double, out);
    else if (size == 0) {
        /* MPI_LB / MPI_UB of old MPIs: no data, bounds set below. */
        int rc = tessera_type_bytes(0, out);
        return rc == TESSERA_OK ? MPI_SUCCESS : tsr_type_failed(rc, "named");
    } else
        return tsr_error(MPI_ERR_TYPE,
                         "tessera: a predefined datatype of %lld bytes with lower bound %lld "
                         "and extent %lld is not supported",
                         (long long)size, (long long)lb, (long long)extent);
    return MPI_SUCCESS;
}

int tsr_is_named(MPI_Datatype type) {
    int integers, addresses, datatypes, combiner;
    PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner);
    return combiner == MPI_COMBINER_NAMED;
}

static int tsr_counts(const int *values, int count, uint64_t **out) {
    *out = malloc(sizeof(uint64_t) * (size_t)(count > 0 ? count : 1));
    if (*out == NULL)
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory for a datatype of %d blocks", count);
    for (int i = 0; i < count; i++) {
        if (values[i] < 0)
            return tsr_error(MPI_ERR_TYPE, "tessera: datatype block length %d is negative",
                             values[i]);
        (*out)[i] = (uint64_t)values[i];
    }
    return MPI_SUCCESS;
}

static int tsr_offsets(const int *ints, const MPI_Aint *addresses, int count, int64_t **out) {
    *out = malloc(sizeof(int64_t) * (size_t)(count > 0 ? count : 1));
    if (*out == NULL)
        return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory for a datatype of %d blocks", count);
    for (int i = 0; i < count; i++)
        (*out)[i] = ints ? (int64_t)ints[i] : (int64_t)addresses[i];
    return MPI_SUCCESS;
}

static int tsr_order(int order) {
    return order == MPI_ORDER_FORTRAN ? TESSERA_ORDER_FORTRAN : TESSERA_ORDER_C;
}

/* Builds the tree of one derived type from its contents. */
int tsr_convert_derived(int combiner, const int *ints, const MPI_Aint *addresses,
                        const TesseraDatatype **children, int child_count,
                        TesseraDatatype **out) {
    int rc = TESSERA_OK, mpi_rc = MPI_SUCCESS;
    uint64_t *lengths = NULL, *a = NULL, *b = NULL, *c = NULL;
    int64_t *offsets = NULL;
    int n;
    switch (combiner) {
    case MPI_COMBINER_DUP:
        rc = tessera_type_contiguous(1, children[0], out);
        break;
    case MPI_COMBINER_CONTIGUOUS:
        rc = tessera_type_contiguous((uint64_t)ints[0], children[0], out);
        break;
    case MPI_COMBINER_VECTOR:
        rc = tessera_type_vector((uint64_t)ints[0], (uint64_t)ints[1], ints[2], children[0], out);
        break;
#ifdef MPICH
    case MPI_COMBINER_HVECTOR_INTEGER:
#endif
    case MPI_COMBINER_HVECTOR:
        rc = tessera_type_hvector((uint64_t)ints[0], (uint64_t)ints[1], (int64_t)addresses[0],
                                  children[0], out);
        break;
    case MPI_COMBINER_INDEXED:
        n = ints[0];
        if ((mpi_rc = tsr_counts(ints + 1, n, &lengths)) == MPI_SUCCESS &&
            (mpi_rc = tsr_offsets(ints + 1 + n, NULL, n, &offsets)) == MPI_SUCCESS)
            rc = tessera_type_indexed((size_t)n, lengths, offsets, children[0], out);
        break;
#ifdef MPICH
    case MPI_COMBINER_HINDEXED_INTEGER:
#endif
    case MPI_COMBINER_HINDEXED:
        n = ints[0];
        if ((mpi_rc = tsr_counts(ints + 1, n, &lengths)) == MPI_SUCCESS &&
            (mpi_rc = tsr_offsets(NULL, addresses, n, &offsets)) == MPI_SUCCESS)
            rc = tessera_type_hindexed((size_t)n, lengths, offsets, children[0], out);
        break;
    case MPI_COMBINER_INDEXED_BLOCK:
        n = ints[0];
        if ((mpi_rc = tsr_offsets(ints + 2, NULL, n, &offsets)) == MPI_SUCCESS)
            rc = tessera_type_indexed_block((size_t)n, (uint64_t)ints[1], offsets, children[0],
                                            out);
        break;
    case MPI_COMBINER_HINDEXED_BLOCK:
        n = ints[0];
        if ((mpi_rc = tsr_offsets(NULL, addresses, n, &offsets)) == MPI_SUCCESS)
            rc = tessera_type_hindexed_block((size_t)n, (uint64_t)ints[1], offsets, children[0],
                                             out);
        break;
#ifdef MPICH
    case MPI_COMBINER_STRUCT_INTEGER:
#endif
    case MPI_COMBINER_STRUCT:
        n = ints[0];
        if (n != child_count)
            return tsr_error(MPI_ERR_TYPE, "tessera: a struct of %d blocks with %d types", n,
                             child_count);
        if ((mpi_rc = tsr_counts(ints + 1, n, &lengths)) == MPI_SUCCESS &&
            (mpi_rc = tsr_offsets(NULL, addresses, n, &offsets)) == MPI_SUCCESS)
            rc = tessera_type_struct((size_t)n, lengths, offsets, children, out);
        break;
    case MPI_COMBINER_SUBARRAY:
        n = ints[0];
        if ((mpi_rc = tsr_counts(ints + 1, n, &a)) == MPI_SUCCESS &&
            (mpi_rc = tsr_counts(ints + 1 + n, n, &b)) == MPI_SUCCESS &&
            (mpi_rc = tsr_counts(ints + 1 + 2 * n, n, &c)) == MPI_SUCCESS)
            rc = tessera_type_subarray((size_t)n, a, b, c, tsr_order(ints[1 + 3 * n]),
                                       children[0], out);
        break;
    case MPI_COMBINER_DARRAY: {
        n = ints[2];
        const int *gsizes = ints + 3, *distribs = ints + 3 + n, *dargs = ints + 3 + 2 * n,
                  *psizes = ints + 3 + 3 * n;
        int kinds[32];
        uint64_t block[32];
        if (n < 1 || n > 32)
            return tsr_error(MPI_ERR_TYPE, "tessera: a darray of %d dimensions", n);
        for (int d = 0; d < n; d++) {
            kinds[d] = distribs[d] == MPI_DISTRIBUTE_BLOCK    ? TESSERA_DISTRIBUTE_BLOCK
                       : distribs[d] == MPI_DISTRIBUTE_CYCLIC ? TESSERA_DISTRIBUTE_CYCLIC
                                                              : TESSERA_DISTRIBUTE_NONE;
            block[d] = dargs[d] == MPI_DISTRIBUTE_DFLT_DARG || dargs[d] < 0 ? 0
                                                                             : (uint64_t)dargs[d];
        }
        if ((mpi_rc = tsr_counts(gsizes, n, &a)) == MPI_SUCCESS &&
            (mpi_rc = tsr_counts(psizes, n, &b)) == MPI_SUCCESS)
            rc = tessera_type_darray((uint64_t)ints[0], (uint64_t)ints[1], (size_t)n, a, kinds,
                                     block, b, tsr_order(ints[3 + 4 * n]), children[0], out);
        break;
    }
    case MPI_COMBINER_RESIZED:
        rc = tessera_type_resized((int64_t)addresses[0], (int64_t)addresses[1], children[0], out);
        break;
    default:
        return tsr_error(MPI_ERR_TYPE, "tessera: datatype combiner %d is not supported",
                         combiner);
    }
    free(lengths);
    free(offsets);
    free(a);
    free(b);
    free(c);
    if (mpi_rc != MPI_SUCCESS)
        return mpi_rc;
    return rc == TESSERA_OK ? MPI_SUCCESS : tsr_type_failed(rc, "derived");
}

/* Converts `type` into a new tree (the caller frees it). */
static int tsr_convert(MPI_Datatype type, TesseraDatatype **out) {
    int integers, addresses, datatypes, combiner;
    int mpi_rc = PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner);
    if (mpi_rc != MPI_SUCCESS)
        return tsr_error(MPI_ERR_TYPE, "tessera: not a datatype");
    if (combiner == MPI_COMBINER_NAMED)
        mpi_rc = tsr_convert_named(type, out);
#ifdef MPI_COMBINER_F90_REAL
    else if (combiner == MPI_COMBINER_F90_REAL || combiner == MPI_COMBINER_F90_COMPLEX ||
             combiner == MPI_COMBINER_F90_INTEGER)
        mpi_rc = tsr_convert_named(type, out);
#endif
    else {
        int *ints = malloc(sizeof(int) * (size_t)(integers + 1));
        MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(addresses + 1));
        MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(datatypes + 1));
        const TesseraDatatype **children =
            malloc(sizeof(TesseraDatatype *) * (size_t)(datatypes + 1));
        if (!ints || !addrs || !types || !children) {
            free(ints), free(addrs), free(types), free(children);
            return tsr_error(MPI_ERR_NO_MEM, "tessera: no memory to take a datatype apart");
        }
        mpi_rc = PMPI_Type_get_contents(type, integers, addresses, datatypes, ints, addrs, types);
        int converted = 0;
        for (; mpi_rc == MPI_SUCCESS && converted < datatypes; converted++)
            mpi_rc = tsr_type(types[converted], &children[converted]);
        if (mpi_rc == MPI_SUCCESS)
            mpi_rc = tsr_convert_derived(combiner, ints, addrs, children, datatypes, out);
        /* get_contents handed out new references to derived children. */
        for (int i = 0; i < datatypes; i++)
            if (!tsr_is_named(types[i]))
                PMPI_Type_free(&types[i]);
        free(ints), free(addrs), free(types), free(children);
    }
    if (mpi_rc != MPI_SUCCESS)
        return mpi_rc;
    /* Hold the tree to MPI's own size and bounds. */
    MPI_Count size = 0, lb = 0, extent = 0;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    TesseraTypeInfo info;
    tessera_type_info(*out, &info);
    if ((MPI_Count)info.size != size) {
        tessera_type_free(*out);
        *out = NULL;
        return tsr_error(MPI_ERR_TYPE,
                         "tessera: datatype combiner %d converted to %llu bytes, MPI says %lld",
                         combiner, (unsigned long long)info.size, (long long)size);
    }
    if ((MPI_Count)info.lb != lb || (MPI_Count)info.extent != extent) {
        TesseraDatatype *resized = NULL;
        int rc = tessera_type_resized(lb, extent, *out, &resized);
        tessera_type_free(*out);
        *out = resized;
        if (rc != TESSERA_OK)
            return tsr_type_failed(rc, "resized");
    }
    return MPI_SUCCESS;
}

/* The tree of `type`, cached: the pointer stays valid while the MPI type lives. */
int tsr_type(MPI_Datatype type, const TesseraDatatype **out) {
    if (type == MPI_DATATYPE_NULL)
        return tsr_error(MPI_ERR_TYPE, "tessera: MPI_DATATYPE_NULL given as a datatype");
    if (tsr_is_named(type)) {
        for (int i = 0; i < tsr_named_count; i++)
            if (tsr_named[i].type == type) {
                *out = tsr_named[i].tree;
                return MPI_SUCCESS;
            }
        TesseraDatatype *tree = NULL;
        int rc = tsr_convert(type, &tree);
        if (rc != MPI_SUCCESS)
            return rc;
        if (tsr_named_count == TSR_NAMED_TYPES_MAX) {
            tessera_type_free(tree);
            return tsr_error(MPI_ERR_INTERN, "tessera: more than %d predefined datatypes "
                                             "(TSR_NAMED_TYPES_MAX)", TSR_NAMED_TYPES_MAX);
        }
        tsr_named[tsr_named_count].type = type;
        tsr_named[tsr_named_count].tree = tree;
        tsr_named_count++;
        *out = tree;
        return MPI_SUCCESS;
    }
    if (tsr_keyval == MPI_KEYVAL_INVALID)
        PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, tsr_free_attribute, &tsr_keyval, NULL);
    void *cached = NULL;
    int found = 0;
    PMPI_Type_get_attr(type, tsr_keyval, &cached, &found);
    if (found) {
        *out = cached;
        return MPI_SUCCESS;
    }
    TesseraDatatype *tree = NULL;
    int rc = tsr_convert(type, &tree);
    if (rc != MPI_SUCCESS)
        return rc;
    PMPI_Type_set_attr(type, tsr_keyval, tree);
    *out = tree;
    return MPI_SUCCESS;
}

/* Is `type` a predefined type of plain bytes (so a buffer of it needs no tree)? Derived
 * types are never taken for plain: one without holes may still hold its bytes out of order. */
int tsr_type_is_contiguous(MPI_Datatype type, MPI_Count *bytes) {
    MPI_Count size = 0, lb = 0, extent = 0;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    *bytes = size;
    return tsr_is_named(type) && lb == 0 && extent == size;
}

