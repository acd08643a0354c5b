#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
void* pillar_mget(void* db, void* ro, size_t n, const char* keys, size_t keylen, void** data, size_t* sizes, int* st, char** err);
void* pillar_mget_multi(size_t ndb, void** dbs, const size_t* counts, void* ro, const char* keys, size_t keylen, void** data, size_t* sizes, int* st, char** errs);
void pillar_mget_free(void* h);
extern int pillar_mget_single_get;
#ifdef __cplusplus
}
#endif
