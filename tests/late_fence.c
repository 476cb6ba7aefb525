/* LD_PRELOAD shim for tests/test_multihost.py: on PMIx rank 0, every PMIx fence's release reaches
 * the caller one second late, as it does in a process that a busy machine leaves waiting for the
 * CPU. Rank 0 then still waits inside MPI_Init for the modex while the other ranks go on: only a
 * fence that holds every rank back keeps them from sending to it before it can receive.
 * Built by the test: gcc -shared -fPIC -o late_fence.so late_fence.c -ldl -lpthread */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*op_cb_t)(int status, void *cbdata);  /* pmix_op_cbfunc_t */
typedef int (*fence_nb_t)(const void *procs, size_t nprocs, const void *info, size_t ninfo,
                          op_cb_t cbfunc, void *cbdata);

struct release {
    op_cb_t cbfunc;
    void *cbdata;
    int status;
};

static void *deliver_later(void *arg) {
    struct release *r = arg;
    sleep(1);
    r->cbfunc(r->status, r->cbdata);
    free(r);
    return NULL;
}

static void late(int status, void *arg) {
    struct release *r = arg;
    r->status = status;
    pthread_t thread;
    pthread_create(&thread, NULL, deliver_later, r);
    pthread_detach(thread);
}

/* OpenMPI's libpmix: next in the search order, or (under a Python that opened libmpi with
 * RTLD_LOCAL, as mpi4py does) found by its name among the libraries already loaded. */
static fence_nb_t real_fence_nb(void) {
    fence_nb_t found = (fence_nb_t)dlsym(RTLD_NEXT, "PMIx_Fence_nb");
    if (found == NULL) {
        void *pmix = dlopen("libpmix.so.2", RTLD_NOW | RTLD_NOLOAD);
        if (pmix != NULL) found = (fence_nb_t)dlsym(pmix, "PMIx_Fence_nb");
    }
    if (found == NULL) abort();
    return found;
}

int PMIx_Fence_nb(const void *procs, size_t nprocs, const void *info, size_t ninfo,
                  op_cb_t cbfunc, void *cbdata) {
    static fence_nb_t real;
    if (real == NULL) real = real_fence_nb();
    const char *rank = getenv("PMIX_RANK");
    if (cbfunc == NULL || rank == NULL || strcmp(rank, "0") != 0)
        return real(procs, nprocs, info, ninfo, cbfunc, cbdata);
    struct release *r = malloc(sizeof *r);
    *r = (struct release){cbfunc, cbdata, 0};
    int rc = real(procs, nprocs, info, ninfo, late, r);
    if (rc != 0) free(r); /* refused at once: no release will come */
    return rc;
}
