/* H5FDgds.h for h5gds's libhdf5_vfd_gds.so.1: the public API of vfd-gds, the HDF Group's
 * GPUDirect Storage virtual file driver (releases 1.0.2 and later), declared from its signatures so
 * that a program written for vfd-gds builds unchanged against h5gds's compatibility library
 * (-lhdf5_vfd_gds). Written for h5gds; see docs/legate-and-vfd-gds.md. */
#ifndef H5GDS_H5FDGDS_H
#define H5GDS_H5FDGDS_H

#include <hdf5.h>

/* The driver's registered name and class value, shared by vfd-gds and h5gds. */
#define H5FD_GDS_NAME "gds"
#define H5FD_GDS_VALUE ((H5FD_class_value_t)(512))

/* The driver's id in this program's HDF5 (registered on first use). */
#define H5FD_GDS (H5FD_gds_init())

/* vfd-gds's defaults for H5Pset_fapl_gds's sizes, under the names of 1.0.2 and of later
 * releases: memory alignment, file block size, copy buffer size. */
#define H5FD_GDS_MBOUNDARY_DEF 4096
#define H5FD_GDS_FBSIZE_DEF 4096
#define H5FD_GDS_CBSIZE_DEF (16 * 1024 * 1024)
#ifndef MBOUNDARY_DEF
#define MBOUNDARY_DEF H5FD_GDS_MBOUNDARY_DEF
#endif
#ifndef FBSIZE_DEF
#define FBSIZE_DEF H5FD_GDS_FBSIZE_DEF
#endif
#ifndef CBSIZE_DEF
#define CBSIZE_DEF H5FD_GDS_CBSIZE_DEF
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the driver in the calling program's HDF5 (once) and returns its id; negative on
 * failure. */
hid_t H5FD_gds_init(void);

/* Selects the driver on a file access property list. A size of 0 takes the default above; the
 * copy buffer size must be a multiple of the block size and, in h5gds, sets the staged path's
 * bounce buffer size (4 KiB to 1 GiB). Negative on failure, the list unchanged. */
herr_t H5Pset_fapl_gds(hid_t fapl_id, size_t alignment, size_t block_size, size_t cbuf_size);

/* The sizes a file access property list using the driver carries (the defaults where none were
 * given); null pointers are skipped. Negative if the list does not use the driver. */
herr_t H5Pget_fapl_gds(hid_t fapl_id, size_t *boundary /*out*/, size_t *block_size /*out*/,
                       size_t *cbuf_size /*out*/);

#ifdef __cplusplus
}
#endif

#endif
