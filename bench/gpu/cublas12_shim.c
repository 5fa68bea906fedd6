/* libcublas.so.12 for a host that has only CUDA 13's cuBLAS: forwards the cuBLAS calls faiss-gpu-cu12 makes.
 *
 * faiss-gpu-cu12 (the `gpu` extra) links libcublas.so.12, while the CUDA 13 images we benchmark on ship
 * libcublas.so.13 only and carry no room for CUDA 12's 600 MB cuBLAS. The eight functions faiss uses
 * (`nm -D --undefined-only libfaiss*.so | grep cublas`) kept their signatures in cuBLAS 13, so each entry point
 * here jumps straight to the same symbol in libcublas.so.13 (an x86-64 tail jump keeps every argument as is).
 *
 *   cc -shared -fPIC -O2 -o libcublas.so.12 -Wl,-soname,libcublas.so.12 \
 *      -Wl,--version-script=bench/gpu/cublas12.map bench/gpu/cublas12_shim.c -ldl
 *
 * Used only by bench/gpu_build.sh; production GPU images install the CUDA 12 libraries (docker/Dockerfile.cuda).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define FORWARDED(X) X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasGemmEx) X(cublasGemmStridedBatchedEx) \
    X(cublasGetMathMode) X(cublasSetMathMode) X(cublasSetStream_v2) X(cublasSgemmEx)

#define POINTER(name) __attribute__((visibility("hidden"))) void *real_##name;
FORWARDED(POINTER)

#define TRAMPOLINE(name) __asm__(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n" \
                                 "  jmp *real_" #name "(%rip)\n.size " #name ",.-" #name "\n");
FORWARDED(TRAMPOLINE)

__attribute__((constructor)) static void resolve(void) {
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "cublas12 shim: %s\n", dlerror());
        abort();
    }
#define RESOLVE(name) if (!(real_##name = dlsym(lib, #name))) { fprintf(stderr, "cublas12 shim: no " #name "\n"); abort(); }
    FORWARDED(RESOLVE)
}
