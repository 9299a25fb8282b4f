/* The few CUDA driver types cufile.h uses, so the bindings can be generated without the CUDA
 * toolkit. CUresult's values beyond success do not matter to the generated code: cuFile reports
 * a CUDA error as a plain integer field. */
#ifndef H5GDS_MINIMAL_CUDA_H
#define H5GDS_MINIMAL_CUDA_H
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
typedef struct CUstream_st *CUstream;
#endif
